// Many processes, one PostgreSQL (SPEC §2.2, §13, §18.4, §18.5, §18.11, §18.12; API.md §5, §6):
// real agentd server processes (`node --import tsx src/main.ts`) on one database, a scripted
// OpenAI-compatible model and an http tool server. Which process drives a session is read from
// its lease row (lease_owner = host:pid:random).

import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { openSse, type SseFrame } from '../helpers/app.js'
import { expectValidLog } from '../helpers/invariants.js'
import { throughSeed } from '../helpers/events.js'
import { httpTool, ownerPid, startCluster, type Cluster } from './helpers-processes.js'

type Sse = Awaited<ReturnType<typeof openSse>>

const LEASE_TTL_MS = 2000
const POLL_SLACK_MS = 1000 // polling and HTTP latency of the observation itself

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
const gate = () => {
  let open!: () => void
  const promise = new Promise<void>((r) => (open = r))
  return { promise, open }
}
const durable = (frames: SseFrame[]) => frames.filter((f) => f.event === 'session/event')
const streamFrames = (frames: SseFrame[]) => frames.filter((f) => f.event === 'agent/assistant-stream').map((f) => f.json)
const textDeltas = (chunks: any[]) => chunks.filter((c) => c.chunk?.type === 'text-delta').map((c) => c.chunk.text).join('')
const userTexts = (log: any[]) => log.filter((e) => e.type === 'user/message').map((e) => e.data.content.map((b: any) => b.text ?? '').join(''))

const summary = (log: any[]) =>
  log.map((e) => `${e.seq}:${e.type}${e.type === 'turn/end' ? JSON.stringify(e.data.reason) : e.type === 'request/header' ? `(${e.data.reason})` : e.type === 'turn/start' ? `{${e.data.turn}}` : ''}`).join(' ')

async function until(what: string, cond: () => boolean | Promise<boolean>, timeoutMs = 10000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`)
    await sleep(20)
  }
}

/** Number of stream chunks a compact record list expands to (SPEC §9.4). */
function chunkCount(records: any[]): number {
  let n = 0
  for (const r of records) {
    if (r.type === 'text-chunks' || r.type === 'reasoning-chunks') n += r.texts.length
    else if (r.type === 'tool-call-chunks') n += r.args.length
    else n += 1
  }
  return n
}
const recordsText = (records: any[]) => records.filter((r) => r.type === 'text-chunks').flatMap((r) => r.texts).join('')

describe('agentd processes on one PostgreSQL', () => {
  let c: Cluster
  const open: Sse[] = []
  const auth = () => ({ authorization: `Bearer ${c.key}` })
  const subscribe = async (i: number, id: string, headers: Record<string, string> = {}) => {
    const s = await openSse(`${c.procs[i].url}/v1/sessions/${encodeURIComponent(id)}/stream`, { ...auth(), ...headers })
    open.push(s)
    expect(s.status).toBe(200)
    return s
  }
  const live = (s: Sse) => s.waitFor((f) => f.event === 'agent/status')

  beforeAll(async () => {
    // a short idle release makes sessions change hands between turns; lease renewals every ~0.7 s
    c = await startCluster({ processes: 2, env: { AGENTD_LEASE_TTL_MS: String(LEASE_TTL_MS), AGENTD_IDLE_RELEASE_MS: '300', AGENTD_SHUTDOWN_GRACE_MS: '1000' } })
  }, 90000)
  beforeEach(async () => {
    await c.ensureUp()
  }, 60000)
  afterAll(async () => {
    for (const s of open) s.close()
    await c?.close()
  }, 60000)

  it('a followup POSTed to process 0 streams to SSE subscribers on both processes: durable frames equal GET /events, live frames in order', async () => {
    const s = await c.createSession(0)
    c.llm.script(s.marker, { chunks: ['Hel', 'lo ', 'world'] })
    const subs = [await subscribe(0, s.id), await subscribe(1, s.id)]
    await Promise.all(subs.map(live))

    const r = await c.api(0, 'POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })
    expect(r.status).toBe(202)
    for (const sub of subs) {
      await until('turn/end and agent/status idle on the subscriber', () => {
        const st = sub.frames.filter((f) => f.event === 'agent/status').map((f) => f.json.status)
        return durable(sub.frames).some((f) => f.json.type === 'turn/end') && st.length >= 3 && st.at(-1) === 'idle'
      })
    }
    const log = await c.events(1, s.id)
    expectValidLog(log)
    expect(log.at(-1)).toMatchObject({ type: 'turn/end', data: { turn: 1, reason: { kind: 'completed' } } })
    const am = log.find((e) => e.type === 'assistant/message')
    expect(am.data.message.content).toEqual([{ type: 'text', text: 'Hello world' }])

    for (const sub of subs) {
      // durable: every event exactly once, in order, ids = seq, bodies as GET /events
      const d = durable(sub.frames)
      expect(d.map((f) => f.id)).toEqual(log.map((e) => String(e.seq)))
      expect(d.map((f) => f.json)).toEqual(log)
      // connect order: (empty backlog) stream/ready, agent/status
      expect(sub.frames[0]).toMatchObject({ event: 'stream/ready', json: { headSeq: -1 } })
      expect(sub.frames[1]).toMatchObject({ event: 'agent/status', json: { status: 'idle' } })
      // live notifications travel through the bus, whichever process emits them (SPEC §18.11)
      expect(sub.frames.filter((f) => f.event === 'agent/status').map((f) => f.json)).toEqual([{ status: 'idle' }, { status: 'running' }, { status: 'idle' }])
      expect(sub.frames.find((f) => f.event === 'agent/inbox/inserted')?.json).toMatchObject({ message: { id: r.body.messageId, role: 'user' } })
      expect(sub.frames.find((f) => f.event === 'agent/inbox/claimed')?.json).toMatchObject({ message: { id: r.body.messageId }, turn: 1 })
      expect(sub.frames.find((f) => f.event === 'agent/session-start')?.json).toEqual({ source: 'startup' })
      for (const f of sub.frames) if (f.event !== 'session/event') expect(f.id).toBeUndefined()

      const as = streamFrames(sub.frames)
      const attemptId = `${s.id}:${am.seq}`
      expect(as[0]).toMatchObject({ kind: 'start', attemptId, turn: 1, step: 1 })
      const chunks = as.filter((x) => x.kind === 'chunk')
      expect(chunks.length).toBeGreaterThanOrEqual(3)
      expect(chunks.map((x) => x.index)).toEqual([...chunks.keys()])
      expect(chunks.every((x) => x.attemptId === attemptId)).toBe(true)
      expect(textDeltas(chunks)).toBe('Hello world')
      const end = as.at(-1)
      expect(end).toMatchObject({ kind: 'end', attemptId, index: chunks.length, outcome: { kind: 'committed', eventType: 'assistant/message', seq: am.seq } })
      expect(as.filter((x) => x.kind === 'end')).toHaveLength(1)
      const revs = as.map((x) => x.revision)
      for (let i = 1; i < revs.length; i++) expect(revs[i]).toBeGreaterThan(revs[i - 1])
      // the end frame only after the durable event it names (SPEC §18.11)
      const endPos = sub.frames.findIndex((f) => f.event === 'agent/assistant-stream' && f.json.kind === 'end')
      const amPos = sub.frames.findIndex((f) => f.event === 'session/event' && f.json.seq === am.seq)
      expect(amPos).toBeGreaterThanOrEqual(0)
      expect(amPos).toBeLessThan(endPos)
      // the first chunk after start, the status running before the end
      const startPos = sub.frames.findIndex((f) => f.event === 'agent/assistant-stream' && f.json.kind === 'start')
      expect(startPos).toBeLessThan(sub.frames.findIndex((f) => f.event === 'agent/assistant-stream' && f.json.kind === 'chunk'))
    }
    for (const sub of subs) sub.close()
  })

  it('a late subscriber on either process joining mid-stream gets stream/ready, agent/status, then the snapshot of the attempt so far', async () => {
    const s = await c.createSession(0)
    const g = gate()
    c.llm.script(s.marker, { chunks: ['one ', 'two ', 'three ', 'four'], holdAfter: 2, gate: g.promise })
    const early = [await subscribe(0, s.id), await subscribe(1, s.id)]
    await Promise.all(early.map(live))
    expect((await c.api(0, 'POST', `/v1/sessions/${s.id}/followup`, { content: 'count' })).status).toBe(202)
    // both processes have seen the first two deltas (the model holds after them)
    for (const sub of early) {
      await until('two text deltas on the early subscriber', () => textDeltas(streamFrames(sub.frames).filter((x) => x.kind === 'chunk')) === 'one two ')
    }
    const head = (await c.events(0, s.id)).at(-1).seq
    const late = [await subscribe(0, s.id), await subscribe(1, s.id)]
    for (const [i, sub] of late.entries()) {
      await sub.waitFor((f) => f.event === 'agent/assistant-stream')
      const k = sub.frames.findIndex((f) => f.event === 'stream/ready')
      // the backlog first, dense from 0
      expect(durable(sub.frames.slice(0, k)).map((f) => Number(f.id))).toEqual([...Array(head + 1).keys()])
      expect(sub.frames[k].json).toEqual({ headSeq: head })
      expect(sub.frames[k + 1]).toMatchObject({ event: 'agent/status', json: { status: 'running' } })
      const snap = sub.frames[k + 2]
      const earlyFrames = streamFrames(early[i].frames)
      const start = earlyFrames.find((x) => x.kind === 'start')
      const lastChunk = earlyFrames.filter((x) => x.kind === 'chunk').at(-1)
      expect(snap.event).toBe('agent/assistant-stream')
      expect(snap.json).toMatchObject({ kind: 'snapshot', attemptId: start.attemptId, revision: lastChunk.revision, turn: 1, step: 1 })
      expect(recordsText(snap.json.stream)).toBe('one two ')
      expect(chunkCount(snap.json.stream)).toBe(lastChunk.index + 1)
    }
    g.open()
    const log = await c.waitForTurnEnd(0, s.id, 1)
    expectValidLog(log)
    for (const sub of late) {
      await until('turn/end on the late subscriber', () => durable(sub.frames).some((f) => f.json.type === 'turn/end'))
      await until('end frame on the late subscriber', () => streamFrames(sub.frames).some((x) => x.kind === 'end'))
      const as = streamFrames(sub.frames)
      const snap = as[0]
      const chunks = as.filter((x) => x.kind === 'chunk')
      // live chunks continue the snapshot's indexes; none repeated
      const covered = chunkCount(snap.stream)
      expect(chunks.map((x) => x.index)).toEqual(chunks.map((_, j) => covered + j))
      expect(recordsText(snap.stream) + textDeltas(chunks)).toBe('one two three four')
      const d = durable(sub.frames)
      const full = await c.events(1, s.id)
      expect(d.map((f) => f.json)).toEqual(full)
    }
    for (const sub of [...early, ...late]) sub.close()
  })

  it('a cancel POSTed to the process that does not drive the session aborts the streaming turn {user}', async () => {
    const s = await c.createSession(0)
    c.llm.script(s.marker, { chunks: ['partial '], hang: true })
    expect((await c.api(0, 'POST', `/v1/sessions/${s.id}/followup`, { content: 'go on forever' })).status).toBe(202)
    const req = await c.llm.waitForRequest(s.marker, 1)
    const driver = await c.waitForHolder(s.id)
    const other = 1 - driver
    const r = await c.api(other, 'POST', `/v1/sessions/${s.id}/cancel`, {})
    expect(r.status).toBe(202)
    expect(r.body).toEqual({ cancelled: true })
    const log = await c.waitForTurnEnd(other, s.id, 1, 5000)
    expect(log.find((e) => e.type === 'turn/end').data).toEqual({ turn: 1, reason: { kind: 'aborted', reason: { kind: 'user' } } })
    expectValidLog(log)
    await until('the model request was aborted', () => req.closedEarly)
    await until('session idle', async () => (await c.api(driver, 'GET', `/v1/sessions/${s.id}`)).body.status === 'idle')
    expect(c.llm.requests(s.marker)).toHaveLength(1)
  })

  it('DELETE of a queued followup on the other process removes it before it runs', async () => {
    const s = await c.createSession(0)
    const g = gate()
    c.llm.script(s.marker, { chunks: ['working'], gate: g.promise })
    c.llm.fallback(s.marker, { chunks: ['ok'] })
    expect((await c.api(0, 'POST', `/v1/sessions/${s.id}/followup`, { content: 'first' })).status).toBe(202)
    await c.llm.waitForRequest(s.marker, 1)
    const driver = await c.waitForHolder(s.id)
    const other = 1 - driver
    const q = await c.api(driver, 'POST', `/v1/sessions/${s.id}/followup`, { content: 'queued' })
    expect(q.status).toBe(202)
    expect((await c.api(other, 'GET', `/v1/sessions/${s.id}/inbox`)).body.nextTurn.map((m: any) => m.id)).toEqual([q.body.messageId])
    const del = await c.api(other, 'DELETE', `/v1/sessions/${s.id}/inbox/${encodeURIComponent(q.body.messageId)}`)
    expect(del.status).toBe(204)
    expect((await c.api(driver, 'GET', `/v1/sessions/${s.id}/inbox`)).body).toEqual({ nextTurn: [], nextStep: [] })
    g.open()
    await c.waitForTurnEnd(0, s.id, 1)
    // the next turn is the next followup's, not the removed one's
    expect((await c.api(other, 'POST', `/v1/sessions/${s.id}/followup`, { content: 'after' })).status).toBe(202)
    const log = await c.waitForTurnEnd(0, s.id, 2)
    expectValidLog(log)
    expect(log.filter((e) => e.type === 'turn/end').map((e) => e.data.reason.kind)).toEqual(['completed', 'completed'])
    expect(userTexts(log)).toEqual(['first', 'after'])
    const removal = log.find((e) => e.type === 'agent/inbox/spliced' && e.data.outcome === 'canceled')
    expect(removal.data).toMatchObject({ target: 'next-turn', removedCount: 1, inserted: [] })
    expect(c.llm.requests(s.marker)).toHaveLength(2)
    expect((await c.api(0, 'GET', `/v1/sessions/${s.id}/inbox`)).body).toEqual({ nextTurn: [], nextStep: [] })
  })

  it('SIGKILL of the lease holder mid-tool: a survivor repairs the turn within the lease TTL + 2 s and continues it (SPEC §19), the tool is not run again, SSE resumes on the survivor', async () => {
    const key = `slow-${Date.now()}`
    const s = await c.createSession(0, { tools: [httpTool(c.tools, 'slow', 'hold', key)] })
    c.llm.script(s.marker, { toolCalls: [{ id: 'call_s1', name: 'slow', arguments: {} }] })
    c.llm.fallback(s.marker, { chunks: ['done'] })
    const subs = [await subscribe(0, s.id), await subscribe(1, s.id)]
    await Promise.all(subs.map(live))

    expect((await c.api(0, 'POST', `/v1/sessions/${s.id}/followup`, { content: 'run the slow tool' })).status).toBe(202)
    await c.tools.waitForCalls('hold', 1, key)
    const atCall = await c.waitFor(0, s.id, (e) => e.type === 'tool/call')
    const tc = atCall.find((e) => e.type === 'tool/call')
    const holder = await c.waitForHolder(s.id)
    const survivor = 1 - holder
    const { token: tokenBefore } = await c.lease(s.id)
    await until('the tool/call on the subscriber of the doomed process', () => durable(subs[holder].frames).some((f) => f.json.type === 'tool/call'))
    const last = (await c.events(survivor, s.id)).at(-1) // nothing is written while the tool is held
    expect(last.seq).toBe(tc.seq)

    c.procs[holder].child.kill('SIGKILL')
    const killedAt = Date.now()
    await c.procs[holder].exited
    c.tools.release(key)

    await c.waitFor(survivor, s.id, (e) => e.type === 'turn/end', LEASE_TTL_MS + 10000, 50)
    const seenAfterMs = Date.now() - killedAt
    expect(seenAfterMs).toBeLessThanOrEqual(LEASE_TTL_MS + 2000 + POLL_SLACK_MS)
    const lease = await c.lease(s.id)
    // taken over by the survivor (which may already have released the idle session again)
    expect([undefined, c.procs[survivor].pid]).toContain(ownerPid(lease.owner))
    expect(lease.token).toBeGreaterThan(tokenBefore)
    const after = throughSeed((await c.waitFor(survivor, s.id, (e) => e.type === 'session/end-seed')).filter((e) => e.seq > last.seq))
    expect(after.map((e) => e.type)).toEqual(['tool/result', 'step/end', 'turn/end', 'session/end-seed'])
    const [tr, se, te, seed] = after
    expect(tr.sourceEventSeqs).toEqual([tc.seq])
    expect(tr.time).toBe(last.time)
    expect(tr.data).toMatchObject({ turn: 1, step: 1, error: { code: 'TOOL_OUTCOME_UNKNOWN' }, message: { role: 'user', content: [{ type: 'tool-result', toolCallId: 'call_s1', isError: true }] } })
    expect(se).toMatchObject({ time: last.time, data: { turn: 1, step: 1 } })
    expect(te).toMatchObject({ time: last.time, data: { turn: 1, reason: { kind: 'interrupted' } } })
    expect(seed.data).toEqual({})

    // the subscriber of the killed process saw its stream end; it resumes on the survivor
    await subs[holder].done
    const ids = durable(subs[holder].frames).map((f) => Number(f.id))
    const resumed = await subscribe(survivor, s.id, ids.length ? { 'last-event-id': String(ids.at(-1)) } : {})

    // SPEC §19: without new input the survivor continues turn 1; the model sees the synthetic result
    const cont = await c.waitForTurnEnd(survivor, s.id, 2, 15000)
    const fromSeed = cont.filter((e) => e.seq > seed.seq)
    expect(fromSeed[0]).toMatchObject({ type: 'turn/start', data: { turn: 2, continues: 1 } })
    expect(fromSeed.find((e) => e.type === 'request/header')?.data.reason).toBe('resume')
    expect(fromSeed.some((e) => e.type === 'user/message')).toBe(false)
    expect(cont.at(-1).data.reason).toEqual({ kind: 'completed' })
    const req2 = c.llm.requests(s.marker)[1]
    expect(req2.body.messages.at(-1)).toMatchObject({ role: 'tool', tool_call_id: 'call_s1' })

    // a new followup on the survivor runs as an ordinary turn
    expect((await c.api(survivor, 'POST', `/v1/sessions/${s.id}/followup`, { content: 'are you still there?' })).status).toBe(202)
    const log = await c.waitForTurnEnd(survivor, s.id, 3)
    expectValidLog(log)
    expect(log.at(-1).data.reason).toEqual({ kind: 'completed' })
    expect(log.find((e) => e.type === 'turn/start' && e.data.turn === 3).data).toEqual({ turn: 3 })
    expect(c.tools.calls('hold', key)).toHaveLength(1)
    expect(c.llm.requests(s.marker)).toHaveLength(3)

    // every durable event exactly once across the kill, on both subscribers
    for (const sub of [resumed, subs[survivor]]) await until('turn 3 end on the subscriber', () => durable(sub.frames).some((f) => f.json.type === 'turn/end' && f.json.data.turn === 3))
    const across = [...durable(subs[holder].frames), ...durable(resumed.frames)]
    expect(across.map((f) => Number(f.id))).toEqual(log.map((e) => e.seq))
    expect(across.map((f) => f.json)).toEqual(log)
    expect(durable(subs[survivor].frames).map((f) => f.json)).toEqual(log)
  })

  it('SIGTERM of the lease holder: the streaming turn ends aborted {disposed} balanced, exit 0, lease released, SSE closed; the other process runs the next followup', async () => {
    const s = await c.createSession(0)
    c.llm.script(s.marker, { chunks: ['streaming '], hang: true })
    c.llm.fallback(s.marker, { chunks: ['back'] })
    expect((await c.api(0, 'POST', `/v1/sessions/${s.id}/followup`, { content: 'stream forever' })).status).toBe(202)
    const req = await c.llm.waitForRequest(s.marker, 1)
    const holder = await c.waitForHolder(s.id)
    const other = 1 - holder
    const p = c.procs[holder]
    const owner = (await c.lease(s.id)).owner
    const sub = await subscribe(holder, s.id)
    await sub.waitFor((f) => f.event === 'agent/assistant-stream')
    const watcher = await subscribe(other, s.id)
    await live(watcher)

    p.child.kill('SIGTERM')
    const exit = await p.exited
    expect(exit).toEqual({ code: 0, signal: null })
    // released at shutdown, not left to expire
    const lease = await c.lease(s.id)
    expect(lease.owner === null || lease.owner !== owner).toBe(true)
    expect(ownerPid(lease.owner)).not.toBe(p.pid)
    // the stream on the stopped process ended
    await sub.done
    await until('the model request was closed', () => req.closedEarly)

    const log = await c.waitForTurnEnd(other, s.id, 1, 5000)
    expectValidLog(log)
    expect(log.find((e) => e.type === 'turn/end').data).toEqual({ turn: 1, reason: { kind: 'aborted', reason: { kind: 'disposed' } } })
    // balanced closers by the stopping driver: no crash repair
    expect(log.some((e) => e.type === 'tool/result' || (e.type === 'turn/end' && e.data.reason.kind === 'interrupted'))).toBe(false)
    expect(log.filter((e) => e.type === 'step/start')).toHaveLength(log.filter((e) => e.type === 'step/end').length)
    const sd = durable(sub.frames)
    expect(sd.map((f) => f.json)).toEqual(log.slice(0, sd.length))

    expect((await c.api(other, 'POST', `/v1/sessions/${s.id}/followup`, { content: 'anyone?' })).status).toBe(202)
    const log2 = await c.waitForTurnEnd(other, s.id, 2)
    expectValidLog(log2)
    expect(log2.at(-1).data.reason).toEqual({ kind: 'completed' })
    expect(userTexts(log2)).toEqual(['stream forever', 'anyone?'])
    await until('turn 2 on the watcher', () => durable(watcher.frames).some((f) => f.json.type === 'turn/end' && f.json.data.turn === 2))
    expect(durable(watcher.frames).map((f) => f.json)).toEqual(log2)
  })
})

// A cluster of its own: nobody is killed here, and a TTL that survives a loaded 2-core machine keeps a
// slow renewal from turning into a takeover (which would be correct, but is not what this test asks).
describe('three processes under load', () => {
  let c: Cluster
  beforeAll(async () => {
    c = await startCluster({ processes: 3, env: { AGENTD_LEASE_TTL_MS: '15000' } })
  }, 90000)
  afterAll(async () => {
    await c?.close()
  }, 60000)

  it('POST compact on the process that does not drive the session: the holder compacts it, no new loop instance', async () => {
    const s = await c.createSession(0)
    const long = 'x'.repeat(3000)
    c.llm.script(s.marker, { chunks: [long] }, { chunks: [long] }, { chunks: [long] })
    for (let turn = 1; turn <= 3; turn++) {
      expect((await c.api(0, 'POST', `/v1/sessions/${s.id}/followup`, { content: `turn ${turn} ${long}` })).status).toBe(202)
      await c.waitForTurnEnd(0, s.id, turn)
    }
    const driver = await c.waitForHolder(s.id)
    const other = (driver + 1) % 3
    const before = await c.events(other, s.id)
    c.llm.script(s.marker, { chunks: ['a short summary of three long turns'] })
    const r = await c.api(other, 'POST', `/v1/sessions/${s.id}/compact`)
    expect(r.status).toBe(202)
    expect(r.body).toEqual({ compacted: true })
    const after = await c.events(other, s.id)
    const added = after.slice(before.length).map((e: { type: string }) => e.type)
    // the driving process ran it as maintenance of its own loop instance: no session/end-seed
    expect(added).toEqual(['compaction/start', 'compaction/summary', 'user/message', 'compaction/end'])
    expect(await c.waitForHolder(s.id)).toBe(driver)
    expectValidLog(after)
  })


  it('no session ever has two turns open: 20 sessions x 10 followups round-robin over 3 processes', async () => {
    const SESSIONS = 20
    const TURNS = 10
    const sessions = await Promise.all(Array.from({ length: SESSIONS }, (_, i) => c.createSession(i % 3)))
    for (const s of sessions) c.llm.fallback(s.marker, { chunks: ['ok'] })
    const prompts = sessions.map((s, i) => Array.from({ length: TURNS }, (_, j) => `s${i}-p${j}`))
    let rr = 0
    await Promise.all(
      sessions.map(async (s, i) => {
        // two waves of five concurrent followups; the second arrives while turns run
        for (const wave of [prompts[i].slice(0, 5), prompts[i].slice(5)]) {
          const rs = await Promise.all(wave.map((p) => c.api(rr++ % 3, 'POST', `/v1/sessions/${s.id}/followup`, { content: p })))
          for (const r of rs) expect(r.status, r.text).toBe(202)
        }
      }),
    )
    const logs = await Promise.all(
      // done: all turns ended, or one ended otherwise than completed (the checks below report it)
      sessions.map((s, i) => c.waitFor(i % 3, s.id, (_e, all) => all.filter((e) => e.type === 'turn/end').length >= TURNS || all.some((e) => e.type === 'turn/end' && e.data.reason.kind !== 'completed'), 45000, 250)),
    )
    for (const [i, log] of logs.entries()) {
      try {
        expectValidLog(log)
      } catch (e) {
        throw new Error(`${(e as Error).message}\nlog of ${sessions[i].id}: ${summary(log)}`)
      }
      const ends = log.filter((e) => e.type === 'turn/end')
      expect(ends.map((e) => e.data.reason), `turn ends of ${sessions[i].id}`).toEqual(Array(TURNS).fill({ kind: 'completed' }))
      expect(log.filter((e) => e.type === 'turn/start')).toHaveLength(TURNS)
      // each turn admitted exactly its own prompt
      let turn = 0
      const perTurn = new Map<number, string[]>()
      for (const e of log) {
        if (e.type === 'turn/start') turn = e.data.turn
        if (e.type === 'user/message') perTurn.set(turn, [...(perTurn.get(turn) ?? []), e.data.content[0].text])
      }
      expect([...perTurn.keys()].sort((a, b) => a - b)).toEqual([...Array(TURNS).keys()].map((k) => k + 1))
      for (const texts of perTurn.values()) expect(texts).toHaveLength(1)
      expect([...perTurn.values()].flat().sort()).toEqual([...prompts[i]].sort())
      // one model call per turn, never two in flight for one session
      expect(c.llm.requests(sessions[i].marker)).toHaveLength(TURNS)
      expect(c.llm.maxInFlight(sessions[i].marker)).toBe(1)
    }
  }, 90000)
})
