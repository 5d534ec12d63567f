// An AG-UI run survives a kill -9 of the process that drives it (API.md §17 intro, §17.3): two agentd
// processes on one PostgreSQL database; a client reads the first frames of a run, the driving process
// is SIGKILLed mid-answer, another process takes the session over and continues the turn (SPEC §19),
// and the same POST with Last-Event-ID to the surviving process resumes the run after the last frame
// the client saw: it re-opens the message it is inside, AG-UI's verifier accepts it, and it ends with
// the continued answer (the cut model call's deltas were never stored; the continuation answers whole).

import type { BaseEvent } from '@ag-ui/core'
import { EventSchemas } from '@ag-ui/core/schemas'
import { verifyEvents } from '@ag-ui/client'
import { from, lastValueFrom, toArray } from 'rxjs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startCluster, type Cluster } from './helpers-processes.js'

const never = new Promise<void>(() => {})

describe('an AG-UI run across a kill -9 and a takeover', () => {
  let c: Cluster
  beforeAll(async () => {
    c = await startCluster({ processes: 2, env: { AGENTD_LEASE_TTL_MS: '1500' } })
    await c.ensureUp()
  }, 120000)
  afterAll(async () => {
    await c?.close()
  })

  it('resumes with Last-Event-ID on another process and ends with the continued answer', async () => {
    const marker = `[[m:agui-kill-${process.pid}]]`
    const made = await c.api(0, 'POST', '/v1/agents', { id: 'copilot', name: 'Copilot', model: 'mock/scripted', system: `You are a test agent ${marker}` })
    expect(made.status, made.text).toBe(201)
    // the first model call is cut by the kill; the continuation's call answers whole
    c.llm.script(marker, { chunks: ['one ', 'two ', 'three'], holdAfter: 2, gate: never }, { chunks: ['one ', 'two ', 'three'] })
    const threadId = `agui-kill-${Date.now()}`
    const body = JSON.stringify({ threadId, runId: 'run-1', messages: [{ id: 'u-1', role: 'user', content: 'count to three' }] })
    const post = (i: number, headers: Record<string, string> = {}) => fetch(`${c.procs[i].url}/v1/ag-ui/copilot`, { method: 'POST', headers: { authorization: `Bearer ${c.key}`, 'content-type': 'application/json', ...headers }, body })

    const first = await post(0)
    const reader = first.body!.getReader()
    let text = ''
    while (!text.includes('"delta":"two "')) {
      const r = await reader.read()
      if (r.done) throw new Error(`the run ended early: ${text}`)
      text += new TextDecoder().decode(r.value)
    }
    const seen = text.split('\n\n').filter((b) => b.startsWith('id: '))
    const lastId = Number(/^id: (\d+)/.exec(seen.at(-1)!)![1])
    expect(seen.map((b) => JSON.parse(b.slice(b.indexOf('data: ') + 6)).type)).toEqual(['RUN_STARTED', 'TEXT_MESSAGE_START', 'TEXT_MESSAGE_CONTENT', 'TEXT_MESSAGE_CONTENT'])

    // kill -9 whichever process drives the session; the other takes it over
    const holder = await c.waitForHolder(threadId)
    const other = 1 - holder
    c.procs[holder].child.kill('SIGKILL')
    await c.procs[holder].exited
    void reader.cancel().catch(() => {})

    const resumed = await post(other, { 'last-event-id': String(lastId) })
    expect(resumed.status).toBe(200)
    const frames = (await resumed.text())
      .split('\n\n')
      .filter((b) => b.startsWith('id: '))
      .map((b) => ({ id: Number(/^id: (\d+)/.exec(b)![1]), event: JSON.parse(b.slice(b.indexOf('data: ') + 6)) }))
    // what the client was inside comes first, under the id it resumed from; then only later ids
    expect(frames.slice(0, 2).map((f) => [f.id, f.event.type])).toEqual([
      [lastId, 'RUN_STARTED'],
      [lastId, 'TEXT_MESSAGE_START'],
    ])
    expect(frames.slice(2).every((f) => f.id > lastId)).toBe(true)
    const verified = await lastValueFrom(from(frames.map((f) => EventSchemas.parse(f.event) as BaseEvent)).pipe(verifyEvents(), toArray()))
    expect(verified.at(-1)).toMatchObject({ type: 'RUN_FINISHED', threadId, runId: 'run-1', outcome: { type: 'success' } })
    // the cut call's deltas were sent live but never stored (docs/protocols.md), so the frames after the
    // resume point are those of the log as the surviving process folds it: the rest of the answer when
    // the continuation's frames line up with the ones the client saw, else the continuation's answer
    // whole, in the message the resumed stream re-opened (the verifier above checked every content
    // has its start in this stream)
    const contents = verified.filter((e: any) => e.type === 'TEXT_MESSAGE_CONTENT') as any[]
    expect(['three', 'one two three']).toContain(contents.map((e) => e.delta).join(''))
    // the turn was continued, not started again: one turn, ended completed
    const log = await c.events(other, threadId)
    expect(log.filter((e) => e.type === 'turn/end').map((e) => e.data.reason.kind)).toEqual(['interrupted', 'completed'])
    expect(log.filter((e) => e.type === 'user/message')).toHaveLength(1)
  }, 90000)
})
