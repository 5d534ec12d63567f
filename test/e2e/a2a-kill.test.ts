// A2A across a kill -9 (API.md §17.4, SPEC §19): two agentd processes on one PostgreSQL database; an
// A2A task streams from one of them through @a2a-js/sdk's client while the driving process is
// SIGKILLed mid-tool. The survivor takes the session over, repairs and continues the turn — one task —
// and a SubscribeToTask on the survivor, opened before the kill and again after it, yields exactly the
// updates of the task read whole at the end: none lost, none repeated.

import crypto from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Role, TaskState, type Message, type StreamResponse } from '@a2a-js/sdk'
import { ClientFactory, ClientFactoryOptions, DefaultAgentCardResolver, JsonRpcTransportFactory, type Client } from '@a2a-js/sdk/client'
import { httpTool, startCluster, type Cluster } from './helpers-processes.js'

const LEASE_TTL_MS = 1500

const msg = (text: string, contextId: string): Message => ({ messageId: crypto.randomUUID(), contextId, taskId: '', role: Role.ROLE_USER, parts: [{ content: { $case: 'text', value: text }, metadata: undefined, filename: '', mediaType: '' }], metadata: undefined, extensions: [], referenceTaskIds: [] })
const collect = async (g: AsyncGenerator<StreamResponse>, into: StreamResponse[] = []) => {
  try {
    for await (const u of g) into.push(u)
  } catch {
    // the process serving the stream was killed
  }
  return into
}

describe('A2A task across kill -9 and takeover (pg)', () => {
  let c: Cluster
  beforeAll(async () => {
    c = await startCluster({ processes: 2, env: { AGENTD_LEASE_TTL_MS: String(LEASE_TTL_MS), AGENTD_IDLE_RELEASE_MS: '300', AGENTD_SHUTDOWN_GRACE_MS: '1000' } })
  }, 90000)
  afterAll(async () => {
    await c?.close()
  }, 60000)

  const client = (i: number): Promise<Client> => {
    const fetchImpl: typeof fetch = (input, init) => {
      const headers = new Headers(init?.headers)
      headers.set('authorization', `Bearer ${c.key}`)
      return fetch(input, { ...init, headers })
    }
    const f = new ClientFactory(ClientFactoryOptions.createFrom(ClientFactoryOptions.default, { transports: [new JsonRpcTransportFactory({ fetchImpl })], cardResolver: new DefaultAgentCardResolver({ fetchImpl }) }))
    return f.createFromUrl(`${c.procs[i].url}/v1/a2a/support/`)
  }

  it('the task streams, its driver is killed mid-tool, the survivor continues it; resubscriptions on the survivor lose and repeat nothing', async () => {
    const key = `a2a-${Date.now()}`
    const marker = `[[m:a2a-kill-${process.pid}-${Date.now()}]]`
    const agent = await c.api(0, 'POST', '/v1/agents', { id: 'support', name: 'Support', model: 'mock/scripted', system: `You are a test agent ${marker}`, tools: [httpTool(c.tools, 'slow', 'hold', key)] })
    expect(agent.status, agent.text).toBe(201)
    c.llm.script(marker, { chunks: ['let me ', 'check'], toolCalls: [{ id: 'call_s1', name: 'slow', arguments: {} }] })
    c.llm.fallback(marker, { chunks: ['after ', 'the ', 'crash'] })
    const session = await c.api(0, 'POST', '/v1/sessions', { id: `a2a-kill-${Date.now()}`, agent: 'support' })
    expect(session.status, session.text).toBe(201)
    const ctx = session.body.id as string

    // the stream is served by process 0; which process drives the session is the lease's choice
    const first: StreamResponse[] = []
    const streaming = collect((await client(0)).sendMessageStream({ tenant: '', message: msg('check my order', ctx), configuration: undefined, metadata: undefined }), first)
    await c.tools.waitForCalls('hold', 1, key)
    const holder = await c.waitForHolder(ctx)
    const survivor = 1 - holder
    const id = (first[0].payload as any).value.id as string
    expect(id).toMatch(new RegExp(`^${ctx}:i[0-9]+$`))
    // a subscriber on the survivor before the kill: the replay so far, then live across the takeover
    const before = collect((await client(survivor)).resubscribeTask({ tenant: '', id }))

    c.procs[holder].child.kill('SIGKILL')
    await c.procs[holder].exited
    c.tools.release(key)

    const log = await c.waitFor(survivor, ctx, (e) => e.type === 'turn/end' && e.data.reason.kind === 'completed', LEASE_TTL_MS + 20000, 50)
    expect(log.filter((e) => e.type === 'turn/start').map((e) => e.data)).toEqual([{ turn: 1 }, { turn: 2, continues: 1 }])
    const whole = await collect((await client(survivor)).resubscribeTask({ tenant: '', id }))
    const after = await collect((await client(survivor)).resubscribeTask({ tenant: '', id }))
    const live = await before
    await streaming

    const line = (u: StreamResponse) => {
      const p = u.payload as any
      return p.$case === 'artifactUpdate' ? `artifact ${p.value.artifact.parts[0].content.value}${p.value.lastChunk ? ' last' : ''}` : `${p.$case} ${TaskState[p.value.status.state]}`
    }
    expect(whole.map(line)).toEqual(['task TASK_STATE_WORKING', 'artifact let me ', 'artifact check', 'artifact  last', 'artifact after ', 'artifact the ', 'artifact crash', 'artifact  last', 'statusUpdate TASK_STATE_COMPLETED'])
    expect(live).toEqual(whole)
    expect(after).toEqual(whole)
    // what the killed process streamed before it died is a prefix of the whole, none of it repeated
    expect(first.length).toBeGreaterThan(0)
    expect(first).toEqual(whole.slice(0, first.length))
    const task = await (await client(survivor)).getTask({ tenant: '', id, historyLength: undefined })
    expect(task.status!.state).toBe(TaskState.TASK_STATE_COMPLETED)
    expect(c.tools.calls('hold', key)).toHaveLength(1)
  }, 120000)
})
