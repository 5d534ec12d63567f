// @agentd/client across a real crash: a real agentd process on PostgreSQL and on PGlite, killed with
// SIGKILL mid-answer and started again on the same port and data. The SDK's stream must yield every
// durable seq exactly once and in order across the restart, then crash repair's closers (SPEC §13.1),
// then — on a server with SPEC §19 — the continuation's answer; a send whose reply was lost is retried
// through the restart under its idempotency key and stored once.

import crypto from 'node:crypto'
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { AgentdClient, type RetryEvent, type SessionEvent, type StreamFrame } from '../../clients/typescript/src/index.js'
import { APP_DB_KINDS } from '../helpers/db.js'
import { expectValidLog } from '../helpers/invariants.js'
import { until } from '../helpers/wait.js'
import { CONTINUATION_EXPECTED, startAgentdProcess, startForwarder, type AgentdProcess } from './helpers-sdk.js'

const LEASE_TTL_MS = 1500
const durable = (frames: StreamFrame[]) => frames.flatMap((f) => (f.event === 'session/event' ? [f.data] : []))
const chunks = (frames: StreamFrame[]) => frames.flatMap((f) => (f.event === 'agent/assistant-stream' && f.data.kind === 'chunk' ? [f.data] : []))
const streamedText = (frames: StreamFrame[], attemptId?: string) =>
  chunks(frames)
    .filter((c) => !attemptId || c.attemptId === attemptId)
    .map((c) => (c.chunk.type === 'text-delta' ? c.chunk.text : ''))
    .join('')
const idemMessageId = (key: string) => `idem-${crypto.createHash('sha256').update(key).digest('hex').slice(0, 32)}`
const brief = (log: SessionEvent[]) => log.map((e) => `${e.seq}:${e.type}${e.type === 'turn/end' ? JSON.stringify((e.data as { reason: unknown }).reason) : ''}`).join(' ')

describe.each(APP_DB_KINDS)('@agentd/client across kill -9 of agentd on %s', (kind) => {
  let a: AgentdProcess
  let client: AgentdClient

  beforeAll(async () => {
    a = await startAgentdProcess({ kind, env: { AGENTD_LEASE_TTL_MS: String(LEASE_TTL_MS) } })
    client = new AgentdClient({ baseUrl: a.url, apiKey: a.key })
  }, 90000)
  beforeEach(async () => {
    if (!a.alive) await a.start()
  }, 60000)
  afterAll(async () => {
    await a?.close()
  }, 60000)

  it('the stream yields every durable seq exactly once, in order, across a kill -9 mid-answer and a restart; then the repair closers, then the continuation when the server has SPEC §19', async () => {
    const marker = `[[m:sdk-${kind}-${crypto.randomBytes(4).toString('hex')}]]`
    const s = await client.sessions.create({ system: `You are a test agent ${marker}` })
    // the first answer holds after two deltas until the process dies; a continuation gets the second,
    // late enough that the stream has reconnected (its backoff is at most 5 s) to see it live
    a.llm.script(marker, { chunks: ['Hel', 'lo ', 'wor', 'ld'], holdAfter: 2, gate: new Promise(() => {}) }, { chunks: ['continued ', 'answer'], delayMs: 6000 })
    const frames: StreamFrame[] = []
    const stream = client.stream(s.id)
    const reading = (async () => {
      for await (const f of stream) frames.push(f)
    })()
    await until('the stream to be live', () => frames.some((f) => f.event === 'agent/status'))
    await client.followup(s.id, 'say hello world')
    await until('two deltas on the stream', () => streamedText(frames) === 'Hello ', 20000)
    const firstAttempt = chunks(frames)[0]!.attemptId

    const beforeKill = frames.length
    await a.kill9()
    await until('the stream to notice the loss', () => frames.slice(beforeKill).some((f) => f.event === 'client/reconnecting'), 20000)
    await a.start()
    await until('the repaired turn end on the stream', () => durable(frames).some((e) => e.type === 'turn/end'), 30000)

    // settled: the session idle and the stream caught up with its head
    await until(
      'the session to settle and the stream to catch up',
      async () => {
        const now = await client.sessions.get(s.id)
        const got = durable(frames)
        const open = got.filter((e) => e.type === 'turn/start').length - got.filter((e) => e.type === 'turn/end').length
        return now.status === 'idle' && stream.lastSeq === now.headSeq && open === 0
      },
      30000,
      50,
    )
    const log: SessionEvent[] = []
    for await (const e of client.allEvents(s.id)) log.push(e)
    expectValidLog(log as never)

    // every durable seq exactly once, in order, and exactly the stored events
    const got = durable(frames)
    expect(got.map((e) => e.seq)).toEqual(log.map((_, i) => i))
    expect(got).toEqual(log)
    expect(stream.connections).toBeGreaterThanOrEqual(2)
    // no chunk twice, whatever the reconnects and snapshots
    const keys = chunks(frames).map((c) => `${c.attemptId}#${c.index}`)
    expect(new Set(keys).size).toBe(keys.length)
    expect(a.llm.requests(marker)[0]!.closedEarly, 'the first answer died with the process').toBe(true)

    // crash repair (SPEC §13.1, §13.2): the open step and turn closed, then the end-seed marker
    const end1 = log.findIndex((e) => e.type === 'turn/end' && (e.data as { turn: number }).turn === 1)
    expect(log.slice(end1 - 1, end1 + 2).map((e) => [e.type, e.data]), brief(log)).toEqual([
      ['step/end', { turn: 1, step: 1 }],
      ['turn/end', { turn: 1, reason: { kind: 'interrupted' } }],
      ['session/end-seed', {}],
    ])
    expect(log.slice(0, end1 - 1).some((e) => e.type === 'assistant/message'), 'the lost attempt left no trace').toBe(false)

    const continuation = log.find((e) => e.type === 'turn/start' && (e.data as { continues?: number }).continues === 1)
    if (continuation) {
      // SPEC §19: the continuation turn carries the answer on, and the stream shows it
      const turn = (continuation.data as { turn: number }).turn
      const end = log.find((e) => e.type === 'turn/end' && (e.data as { turn: number }).turn === turn)
      expect(end?.data, brief(log)).toEqual({ turn, reason: { kind: 'completed' } })
      const answer = log.find((e) => e.type === 'assistant/message' && e.seq > continuation.seq)
      expect((answer?.data as { message: { content: Array<{ text?: string }> } }).message.content.map((b) => b.text ?? '').join('')).toBe('continued answer')
      const second = chunks(frames).find((c) => c.attemptId !== firstAttempt)
      expect(second, 'the continuation streamed live').toBeDefined()
      expect(streamedText(frames, second!.attemptId)).toBe('continued answer')
    } else {
      // only while the server has no SPEC §19: the log ends with the repair, nothing after it
      expect(CONTINUATION_EXPECTED, `no turn/start {continues: 1} after the crash: ${brief(log)}`).toBe(false)
      expect(log.slice(end1 + 2).map((e) => e.type), brief(log)).toEqual([])
      expect(a.llm.requests(marker)).toHaveLength(1)
    }

    stream.close()
    await reading
  }, 120000)

  it('a send whose reply was lost is retried through a kill -9 and restart, and stored once under the same messageId', async () => {
    const s = await client.sessions.create({ model: 'faux/echo' })
    const fwd = await startForwarder(a.port)
    try {
      const retries: RetryEvent[] = []
      const viaFwd = new AgentdClient({ baseUrl: `http://127.0.0.1:${fwd.port}`, apiKey: a.key, retry: { maxAttempts: 40, maxDelayMs: 1000 }, onRetry: (r) => retries.push(r) })
      const lost = fwd.loseNextReply()
      const sent = viaFwd.followup(s.id, 'hello across a restart', { idempotencyKey: 'restart-1' })
      await lost // the server stored the message and answered; the answer never reached the client
      await a.kill9()
      await until('retries against the dead server', () => retries.length >= 2, 20000)
      await a.start()
      const accepted = await sent
      expect(accepted.messageId).toBe(idemMessageId('restart-1'))
      // while dead: no connection; while starting (the port is bound before the store is ready): 503 unavailable
      const kinds = retries.map((r) => `${r.error.status} ${r.error.code}`)
      expect(kinds.every((k) => k === '0 network-error' || k === '503 unavailable'), kinds.join(', ')).toBe(true)
      expect(kinds).toContain('0 network-error')

      const log: SessionEvent[] = []
      for await (const e of client.allEvents(s.id)) log.push(e)
      const inserts = log.filter((e) => e.type === 'agent/inbox/spliced' && (e.data as { inserted: Array<{ id: string }> }).inserted.some((m) => m.id === accepted.messageId))
      expect(inserts.map((e) => e.seq), 'stored once, at the seq the retry was answered with').toEqual([accepted.seq])
      expect(log.filter((e) => e.type === 'user/message' && (e.data as { id: string }).id === accepted.messageId).length).toBeLessThanOrEqual(1)
    } finally {
      await fwd.close()
    }
  }, 120000)

  it('run() across a kill -9 mid-answer resolves once the session settles: interrupted today, at the continuation\'s end with SPEC §19', async () => {
    const marker = `[[m:sdk-run-${kind}-${crypto.randomBytes(4).toString('hex')}]]`
    const s = await client.sessions.create({ system: `You are a test agent ${marker}` })
    a.llm.script(marker, { chunks: ['one ', 'two ', 'three'], holdAfter: 2, gate: new Promise(() => {}) }, { chunks: ['carried ', 'on'] })
    const running = client.run(s.id, 'count', { id: 'run-crash-1' })
    await a.llm.waitForRequest(marker, 1, 20000) // the model answers two deltas, then holds: mid-answer
    await a.kill9()
    await a.start()
    const r = await running
    expect(r.messageId).toBe('run-crash-1')
    expect(r.admitted).toBe(true)
    if (r.turns.length > 1) {
      expect(r).toMatchObject({ turns: [1, 2], turn: 2, reason: { kind: 'completed' } })
      expect(r.messages.filter((m) => m.role === 'assistant').map((m) => m.content.map((b) => (b as { text?: string }).text ?? '').join(''))).toEqual(['carried on'])
    } else {
      expect(CONTINUATION_EXPECTED, 'run() resolved without a continuation turn').toBe(false)
      expect(r).toMatchObject({ turns: [1], turn: 1, reason: { kind: 'interrupted' } })
      expect(r.events.at(-1)).toMatchObject({ type: 'turn/end', data: { turn: 1, reason: { kind: 'interrupted' } } })
      expect(r.messages.map((m) => m.role)).toEqual(['system', 'user'])
    }
  }, 120000)
})
