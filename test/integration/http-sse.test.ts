// API.md §6 Server-Sent Events over a real socket on one database (docs/testing.md): resume with Last-Event-ID and
// ?after=, frame shapes and order on connect, the live frames of a turn (SPEC §9.2, §18.11), and the
// late subscriber's snapshot.

import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import { openSse, startTestApp, type SseFrame, type TestApp } from '../helpers/app.js'
import { expectValidLog } from '../helpers/invariants.js'
import { gate } from '../helpers/scripted.js'
import { expand } from '../helpers/events.js'

type Sse = Awaited<ReturnType<typeof openSse>>

const durable = (frames: SseFrame[]) => frames.filter((f) => f.event === 'session/event')
const streamFrames = (frames: SseFrame[], kind?: string) => frames.filter((f) => f.event === 'agent/assistant-stream' && (!kind || f.json.kind === kind))

/** Every frame: only session/event frames carry an id, equal to the event's seq. */
function expectIds(frames: SseFrame[]) {
  for (const f of frames) {
    if (f.comment !== undefined && f.event === undefined) continue
    if (f.event === 'session/event') expect(f.id, JSON.stringify(f)).toBe(String(f.json.seq))
    else expect(f.id, `${f.event} must not carry an id`).toBeUndefined()
    expect(f.json, `${f.event} data is JSON`).toBeDefined()
  }
}

describe.each(APP_DB_KINDS)('SSE on %s', (kind) => {
  let t: TestApp
  let auth: Record<string, string>
  const open: Sse[] = []
  const sse = async (id: string, query = '', headers: Record<string, string> = {}) => {
    const s = await openSse(`${t.url}/v1/sessions/${id}/stream${query}`, { ...auth, ...headers })
    open.push(s)
    expect(s.status).toBe(200)
    return s
  }
  beforeAll(async () => {
    t = await startTestApp({ kind })
    auth = { authorization: `Bearer ${t.key}` }
  })
  afterAll(async () => {
    for (const s of open) s.close()
    await t?.close()
  })

  /** An idle session with one completed turn: 11 events. */
  const withTurn = async () => {
    const s = await t.createSession()
    t.models.script(s.id, { text: ['done'] })
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })
    await t.waitForTurnEnd(s.id, 1)
    return { s, log: await t.waitIdle(s.id) }
  }

  it('on connect: the backlog, then stream/ready {headSeq}, then agent/status; only session/event frames carry id = seq', async () => {
    const { s, log } = await withTurn()
    const c = await sse(s.id)
    await c.waitFor((f) => f.event === 'agent/status')
    const n = log.length
    expect(c.frames.slice(0, n).map((f) => f.event)).toEqual(Array(n).fill('session/event'))
    expect(c.frames.slice(0, n).map((f) => f.json)).toEqual(log)
    expect(c.frames[n].event).toBe('stream/ready')
    expect(c.frames[n].json).toEqual({ headSeq: n - 1 })
    expect(c.frames[n + 1].event).toBe('agent/status')
    expect(c.frames[n + 1].json).toEqual({ status: 'idle' })
    expectIds(c.frames)
    // no snapshot while nothing streams
    expect(streamFrames(c.frames)).toEqual([])
    // an empty log: ready at -1
    const empty = await t.createSession()
    const e = await sse(empty.id)
    await e.waitFor((f) => f.event === 'agent/status')
    expect(e.frames.map((f) => [f.event, f.json])).toEqual([
      ['stream/ready', { headSeq: -1 }],
      ['agent/status', { status: 'idle' }],
    ])
    // the response is an event stream
    const res = await fetch(`${t.url}/v1/sessions/${empty.id}/stream`, { headers: auth })
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/)
    await res.body?.cancel()
  })

  it('?after= resumes after a seq; Last-Event-ID wins over ?after=', async () => {
    const { s, log } = await withTurn()
    const a = await sse(s.id, '?after=5')
    await a.waitFor((f) => f.event === 'stream/ready')
    expect(durable(a.frames).map((f) => f.json)).toEqual(log.filter((e) => e.seq > 5))
    expect(a.frames.find((f) => f.event === 'stream/ready')!.json).toEqual({ headSeq: log.length - 1 })
    const b = await sse(s.id, '?after=2', { 'last-event-id': '7' })
    await b.waitFor((f) => f.event === 'stream/ready')
    expect(durable(b.frames).map((f) => f.json)).toEqual(log.filter((e) => e.seq > 7))
    const c = await sse(s.id, '', { 'last-event-id': String(log.length - 1) })
    await c.waitFor((f) => f.event === 'agent/status')
    expect(durable(c.frames)).toEqual([])
    expect(c.frames[0].event).toBe('stream/ready')
    // -1 is the whole log
    const d = await sse(s.id, '?after=-1')
    await d.waitFor((f) => f.event === 'stream/ready')
    expect(durable(d.frames).map((f) => f.json)).toEqual(log)
    // an after beyond the head sends nothing old and waits for newer events
    const e = await sse(s.id, `?after=${log.length + 5}`)
    await e.waitFor((f) => f.event === 'stream/ready')
    expect(durable(e.frames)).toEqual([])
  })

  it('a reconnect with Last-Event-ID loses nothing and repeats nothing across a running turn', async () => {
    const s = await t.createSession()
    const g = gate()
    t.models.script(s.id, { text: ['a', 'b', 'c'], gate: g.promise }, { text: ['second'] })
    const first = await sse(s.id)
    await first.waitFor((f) => f.event === 'stream/ready')
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'go' })
    await first.waitFor((f) => f.event === 'session/event' && f.json.type === 'request/header')
    first.close()
    await first.done
    const got1 = durable(first.frames)
    const lastId = got1.at(-1)!.id!
    expect(Number(lastId)).toBeGreaterThanOrEqual(6)
    // more events while disconnected: a steer (a splice) lands before the reconnect
    await t.api('POST', `/v1/sessions/${s.id}/steer`, { content: 'meanwhile' })
    const second = await sse(s.id, '', { 'last-event-id': lastId })
    await second.waitFor((f) => f.event === 'stream/ready')
    g.open()
    await second.waitFor((f) => f.event === 'session/event' && f.json.type === 'turn/end')
    const log = await t.waitIdle(s.id)
    await second.waitFor((f) => f.event === 'session/event' && f.json.seq === log.at(-1)!.seq)
    const got2 = durable(second.frames)
    const all = [...got1, ...got2]
    expect(all.map((f) => f.json)).toEqual(log)
    expect(all.map((f) => Number(f.id))).toEqual(log.map((e) => e.seq))
    expect(Number(got2[0].id)).toBe(Number(lastId) + 1)
    // stream/ready on the second connection came after its backlog, and before anything newer
    const ready = second.frames.findIndex((f) => f.event === 'stream/ready')
    const head = second.frames[ready].json.headSeq
    expect(durable(second.frames.slice(0, ready)).map((f) => f.json.seq)).toEqual(log.filter((e) => e.seq > Number(lastId) && e.seq <= head).map((e) => e.seq))
    expect(second.frames[ready + 1].event).toBe('agent/status')
    expect(second.frames[ready + 1].json).toEqual({ status: 'running' })
    expectIds(first.frames)
    expectIds(second.frames)
    expectValidLog(log)
  })

  it('the live frames of a turn: inbox notifications, status running then idle, start/chunk/end with dense indexes, end after its event', async () => {
    const s = await t.createSession()
    const c = await sse(s.id)
    await c.waitFor((f) => f.event === 'agent/status')
    const ready = c.frames.length
    t.models.script(s.id, { text: ['Hel', 'lo', ' there'], usage: { input: 9, output: 4 } })
    const f = await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi', id: 'live-1' })
    await t.waitForTurnEnd(s.id, 1)
    const log = await t.waitIdle(s.id)
    await c.waitFor((x) => x.event === 'session/event' && x.json.seq === log.at(-1)!.seq)
    await c.waitFor((x) => x.event === 'agent/status' && x.json.status === 'idle' && c.frames.indexOf(x) >= ready)
    const live = c.frames.slice(ready)
    expectIds(c.frames)
    // durable events, each once, in order
    expect(durable(live).map((x) => x.json)).toEqual(log)
    // status: exactly running, then idle
    expect(live.filter((x) => x.event === 'agent/status').map((x) => x.json)).toEqual([{ status: 'running' }, { status: 'idle' }])
    const runningAt = live.findIndex((x) => x.event === 'agent/status')
    const turnStartAt = live.findIndex((x) => x.event === 'session/event' && x.json.type === 'turn/start')
    expect(runningAt).toBeLessThan(turnStartAt)
    const idleAt = live.findIndex((x) => x.event === 'agent/status' && x.json.status === 'idle')
    const turnEndAt = live.findIndex((x) => x.event === 'session/event' && x.json.type === 'turn/end')
    expect(idleAt).toBeGreaterThan(turnEndAt)
    // inbox notifications
    const inserted = live.filter((x) => x.event === 'agent/inbox/inserted')
    expect(inserted.map((x) => x.json.message)).toEqual([{ id: 'live-1', role: 'user', content: [{ type: 'text', text: 'hi' }], source: { kind: 'user' } }])
    expect(live.indexOf(inserted[0])).toBeGreaterThan(live.findIndex((x) => x.event === 'session/event' && x.json.seq === f.body.seq))
    const claimed = live.filter((x) => x.event === 'agent/inbox/claimed')
    expect(claimed.map((x) => [x.json.message.id, x.json.turn])).toEqual([['live-1', 1]])
    for (const x of [...inserted, ...claimed]) expect(x.json.agent).toBeUndefined()
    // the attempt's frames
    const frames = streamFrames(live)
    expect(frames.map((x) => x.json.kind)).toEqual(['start', ...Array(frames.length - 2).fill('chunk'), 'end'])
    const [start, end] = [frames[0].json, frames.at(-1)!.json]
    const chunks = frames.slice(1, -1).map((x) => x.json)
    const stepStart = log.find((e) => e.type === 'step/start')!
    expect(start).toEqual({ kind: 'start', attemptId: start.attemptId, revision: start.revision, turn: 1, step: (stepStart.data as any).step })
    expect(chunks.map((x) => x.index)).toEqual(chunks.map((_, i) => i))
    for (const x of chunks) expect(x.attemptId).toBe(start.attemptId)
    const revisions = [start, ...chunks, end].map((x) => x.revision)
    for (let i = 1; i < revisions.length; i++) expect(revisions[i]).toBeGreaterThan(revisions[i - 1])
    expect(chunks.filter((x) => x.chunk.type === 'text-delta').map((x) => x.chunk.text)).toEqual(['Hel', 'lo', ' there'])
    const msg = log.find((e) => e.type === 'assistant/message')!
    expect(end).toMatchObject({ kind: 'end', attemptId: start.attemptId, index: chunks.length, outcome: { kind: 'committed', eventType: 'assistant/message', seq: msg.seq } })
    expect(start.attemptId).toBe(`${s.id}:${msg.seq}`)
    // the end frame comes after the durable event it names
    const endAt = live.indexOf(frames.at(-1)!)
    const msgAt = live.findIndex((x) => x.event === 'session/event' && x.json.seq === msg.seq)
    expect(msgAt).toBeGreaterThanOrEqual(0)
    expect(endAt).toBeGreaterThan(msgAt)
    // the chunk frames are exactly the stored stream: same chunks, same times
    expect(chunks.map((x) => ({ time: x.time, chunk: x.chunk }))).toEqual(expand((msg.data as any).stream))
  })

  it('a late subscriber gets a snapshot of the attempt so far; later chunks continue its indexes', async () => {
    const s = await t.createSession()
    const g = gate()
    t.models.script(s.id, { reasoning: ['think'], text: ['x1', 'x2', 'x3', 'x4', 'x5'], holdAfter: 4, gate: g.promise })
    const early = await sse(s.id)
    await early.waitFor((f) => f.event === 'stream/ready')
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'stream please' })
    // held after the reasoning delta and three text deltas
    await early.waitFor((f) => f.event === 'agent/assistant-stream' && f.json.kind === 'chunk' && f.json.chunk.type === 'text-delta' && f.json.chunk.text === 'x3')
    const soFar = streamFrames(early.frames, 'chunk').map((f) => f.json)
    const startFrame = streamFrames(early.frames, 'start')[0].json
    const late = await sse(s.id)
    const snapFrame = await late.waitFor((f) => f.event === 'agent/assistant-stream')
    const i = late.frames.indexOf(snapFrame)
    expect(late.frames[i - 2].event).toBe('stream/ready')
    expect(late.frames[i - 1].event).toBe('agent/status')
    expect(late.frames[i - 1].json).toEqual({ status: 'running' })
    expect(durable(late.frames.slice(0, i - 2)).length).toBe(late.frames[i - 2].json.headSeq + 1)
    const snap = snapFrame.json
    expect(Object.keys(snap).sort()).toEqual(['attemptId', 'kind', 'revision', 'step', 'stream', 'turn'])
    expect(snap.kind).toBe('snapshot')
    expect(snap.attemptId).toBe(startFrame.attemptId)
    expect(snap.turn).toBe(startFrame.turn)
    expect(snap.step).toBe(startFrame.step)
    expect(snap.revision).toBe(soFar.at(-1).revision)
    const expanded = expand(snap.stream)
    expect(expanded).toEqual(soFar.map((c) => ({ time: c.time, chunk: c.chunk })))
    expect(expanded.filter((c) => c.chunk.type === 'text-delta').map((c) => c.chunk.text)).toEqual(['x1', 'x2', 'x3'])
    expect(expanded.filter((c) => c.chunk.type === 'reasoning-delta').map((c) => c.chunk.text)).toEqual(['think'])
    // release: the late subscriber's chunks continue at the snapshot's count
    g.open()
    await late.waitFor((f) => f.event === 'agent/assistant-stream' && f.json.kind === 'end')
    await early.waitFor((f) => f.event === 'agent/assistant-stream' && f.json.kind === 'end')
    const lateChunks = streamFrames(late.frames, 'chunk').map((f) => f.json)
    expect(lateChunks[0].index).toBe(expanded.length)
    expect(lateChunks.map((c) => c.index)).toEqual(lateChunks.map((_, k) => expanded.length + k))
    const all = streamFrames(early.frames, 'chunk').map((f) => f.json)
    expect(lateChunks).toEqual(all.slice(expanded.length))
    expect(lateChunks.filter((c) => c.chunk.type === 'text-delta').map((c) => c.chunk.text)).toEqual(['x4', 'x5'])
    // no start frame on the late connection: the snapshot stands for it
    expect(streamFrames(late.frames, 'start')).toEqual([])
    const endLate = streamFrames(late.frames, 'end')[0].json
    expect(endLate).toEqual(streamFrames(early.frames, 'end')[0].json)
    const log = await t.waitIdle(s.id)
    const msg = log.find((e) => e.type === 'assistant/message')!
    expect(expand((msg.data as any).stream)).toEqual(all.map((c) => ({ time: c.time, chunk: c.chunk })))
    expectValidLog(log)
  })

  it('a stream of a session that does not exist, or without a key, is refused before streaming', async () => {
    const r = await fetch(`${t.url}/v1/sessions/nope/stream`, { headers: auth })
    expect(r.status).toBe(404)
    expect(((await r.json()) as any).error.code).toBe('session-not-found')
    const s = await t.createSession()
    const u = await fetch(`${t.url}/v1/sessions/${s.id}/stream`)
    expect(u.status).toBe(401)
    expect(((await u.json()) as any).error.code).toBe('unauthorized')
    const b = await fetch(`${t.url}/v1/sessions/${s.id}/stream?after=abc`, { headers: auth })
    expect(b.status).toBe(400)
    expect(((await b.json()) as any).error.code).toBe('bad-request')
  })
})
