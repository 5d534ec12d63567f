// API.md §17 intro / §17.1 across a real kill -9: a Responses response whose driver is SIGKILLed in
// the middle of its model call is taken over by a second agentd process, continued (SPEC §19) and
// finished as ONE response; afterwards its stream read from the survivor and from the restarted
// process, uninterrupted and resumed at random sequence_numbers, is the same bytes everywhere.

import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startCluster, type Cluster } from './helpers-processes.js'

const LEASE_TTL_MS = 1500
const never = new Promise<void>(() => {})

describe('Responses after kill -9 and a takeover (PostgreSQL, two processes)', () => {
  let c: Cluster
  beforeAll(async () => {
    c = await startCluster({ processes: 2, env: { AGENTD_LEASE_TTL_MS: String(LEASE_TTL_MS), AGENTD_IDLE_RELEASE_MS: '300', AGENTD_SHUTDOWN_GRACE_MS: '1000' } })
  }, 90000)
  afterAll(async () => {
    await c?.close()
  }, 60000)

  const read = async (i: number, id: string, after?: number) => {
    const r = await fetch(`${c.procs[i].url}/v1/responses/${id}?stream=true${after === undefined ? '' : `&starting_after=${after}`}`, { headers: { authorization: `Bearer ${c.key}` } })
    expect(r.status).toBe(200)
    return r.text()
  }

  it('one response across the crash; every process replays it byte for byte at any N', async () => {
    const s = await c.createSession(0)
    // the first call hangs after two deltas (its process is killed there); the continuation answers
    c.llm.script(s.marker, { chunks: ['lost ', 'words ', 'never'], holdAfter: 2, gate: never }, { chunks: ['after ', 'the ', 'crash'] })
    const created = await c.api(0, 'POST', '/v1/responses', { model: 'mock/scripted', conversation: s.id, input: 'survive this', background: true })
    expect(created.status, created.text).toBe(200)
    const id = created.body.id as string
    await c.llm.waitForRequest(s.marker, 1)
    const holder = await c.waitForHolder(s.id)
    c.procs[holder].child.kill('SIGKILL')
    await c.procs[holder].exited
    const survivor = 1 - holder
    // the survivor takes the session over, repairs the turn and continues it
    let done: any
    const deadline = Date.now() + 30000
    for (;;) {
      done = (await c.api(survivor, 'GET', `/v1/responses/${id}`)).body
      if (done.status !== 'in_progress' && done.status !== 'queued') break
      if (Date.now() > deadline) throw new Error(`response still ${done.status}`)
      await new Promise((r) => setTimeout(r, 100))
    }
    expect(done.status).toBe('completed')
    expect(done.output.map((o: any) => [o.type, o.content[0]?.text])).toEqual([['message', 'after the crash']])
    const log = await c.events(survivor, s.id)
    expect(log.filter((e) => e.type === 'turn/start').map((e) => e.data)).toEqual([{ turn: 1 }, { turn: 2, continues: 1 }])

    const whole = await read(survivor, id)
    const frames = whole.split('\n\n').filter(Boolean).map((f) => `${f}\n\n`)
    expect(frames.at(-1)).toBe('data: [DONE]\n\n')
    expect(JSON.parse(frames[0].slice(frames[0].indexOf('data: ') + 6)).type).toBe('response.created')
    await c.start(holder)
    expect(await read(holder, id)).toBe(whole)
    const count = frames.length - 1
    const ns = [-1, count - 1, ...Array.from({ length: 6 }, () => Math.floor(Math.random() * count))]
    for (const n of ns) {
      const expected = frames.slice(n + 1).join('')
      expect(await read(survivor, id, n), `survivor, starting_after=${n}`).toBe(expected)
      expect(await read(holder, id, n), `restarted, starting_after=${n}`).toBe(expected)
    }
  }, 90000)

  it('a blocking create on a process that does not drive the session answers when the span ends there', async () => {
    const s = await c.createSession(0)
    c.llm.script(s.marker, { chunks: ['first'] }, { chunks: ['second ', 'answer'], delayMs: 200 })
    const first = await c.api(0, 'POST', '/v1/responses', { model: 'mock/scripted', conversation: s.id, input: 'one' })
    expect(first.status, first.text).toBe(200)
    expect(first.body.output[0].content[0].text).toBe('first')
    // ask the other process while the driver still holds the session (idle release is 300 ms)
    const holder = await c.holder(s.id)
    const other = holder === 0 ? 1 : 0
    const second = await c.api(other, 'POST', '/v1/responses', { model: 'mock/scripted', previous_response_id: first.body.id, input: 'two' })
    expect(second.status, second.text).toBe(200)
    expect([second.body.status, second.body.output[0].content[0].text, second.body.previous_response_id]).toEqual(['completed', 'second answer', first.body.id])
  }, 60000)
})
