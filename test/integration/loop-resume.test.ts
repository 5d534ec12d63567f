// SPEC §13 and §16.9 (resume) on one database (docs/testing.md): instance lifetime and idle release (§13.3a), resume of
// a completed log (C24: session/end-seed, then H(resume)), an idle inject while released, a failed load
// that writes nothing, and crash repair of a log left inside an open turn (§13.1–13.2), taken over by
// the worker's scan without a delivery.

import crypto from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import type { Step } from '../helpers/scripted.js'
import { expectValidLog, reconstructionCheck } from '../helpers/invariants.js'
import { d, ofType, throughSeed, turnEnd, types, userTexts } from '../helpers/events.js'
import { until } from '../helpers/wait.js'
import { eventJson } from '../../src/store/index.js'
import type { SessionEvent } from '../../src/session/index.js'

const IDLE_RELEASE_MS = 300

describe.each(APP_DB_KINDS)('SPEC §13 / §16.9 resume and repair on %s', (kind) => {
  let t: TestApp
  const problems: string[] = []
  const sessionStarts = new Map<string, string[]>()
  beforeAll(async () => {
    t = await startTestApp({
      kind,
      env: { AGENTD_IDLE_RELEASE_MS: String(IDLE_RELEASE_MS), AGENTD_RATE_LIMIT_PER_MIN: '1000000' },
      plugins: [
        (root, db) => reconstructionCheck(db, problems)(root),
        (root) =>
          root.plugin({
            name: 'test-resume',
            apply(ctx: any) {
              ctx.on('agent/session-start', (p: any) => {
                const l = sessionStarts.get(p.agent?.id) ?? []
                l.push(p.source)
                sessionStarts.set(p.agent?.id, l)
              })
            },
          }),
      ],
    })
  })
  afterAll(async () => {
    await t?.close()
  })

  const post = (id: string, route: string, body?: unknown) => t.api('POST', `/v1/sessions/${id}/${route}`, body)
  const keyOf = async (id: string) => (await t.app.db.query<{ key: string }>('SELECT key FROM sessions WHERE id = $1', [id])).rows[0].key
  const leaseOwner = async (key: string) => (await t.app.db.query<{ lease_owner: string | null }>('SELECT lease_owner FROM sessions WHERE key = $1', [key])).rows[0].lease_owner
  const released = (key: string) => until('the idle release', async () => !t.app.host!.agent(key) && (await leaseOwner(key)) === null, 5000)
  /** A session whose turn 1 (hi → hello) completed and whose Agent was then released; `later` scripts the answers after. */
  const releasedAfterTurn1 = async (...later: Step[]) => {
    const s = await t.createSession({ system: 'P' })
    const key = await keyOf(s.id)
    t.models.script(s.id, { text: ['hello'] }, ...later)
    await post(s.id, 'followup', { content: 'hi' })
    await t.waitForTurnEnd(s.id, 1)
    await released(key)
    return { s, key }
  }

  it('§13.3a: an idle Agent is kept (a waking delivery reuses the instance), then released with its lease', async () => {
    const s = await t.createSession({ system: 'P' })
    const key = await keyOf(s.id)
    t.models.script(s.id, { text: ['one'] }, { text: ['two'] })
    await post(s.id, 'followup', { content: 'first' })
    const agent = await until('the driver', () => t.app.host!.agent(key))
    await agent.whenIdle()
    // within the idle window the same loop instance takes the next delivery
    await agent.handle('test-resume').followup('second')
    expect(t.app.host!.agent(key)).toBe(agent)
    await agent.whenIdle()
    // idle, and still held (the release comes AGENTD_IDLE_RELEASE_MS later)
    expect(await leaseOwner(key)).toBe(t.app.host!.owner)
    let evs = await t.waitForTurnEnd(s.id, 2)
    expect(ofType(evs, 'session/end-seed')).toEqual([])
    expect(ofType(evs, 'request/header')).toHaveLength(1)
    expect(sessionStarts.get(s.id)).toEqual(['startup'])
    // then both the Agent and the lease go
    await released(key)
    evs = await t.events(s.id)
    expect(types(evs).at(-1)).toBe('turn/end')
    expectValidLog(evs)
  })

  it('C24: a new loop instance over a completed log writes session/end-seed; the next followup opens turn 2 with H(resume) and the whole history', async () => {
    const { s, key } = await releasedAfterTurn1({ text: ['again'] })
    const before = await t.events(s.id)
    // attaching writes the marker before anything else
    const agent = (await t.app.host!.claim(key))!
    expect(agent).toBeTruthy()
    let evs = await t.events(s.id)
    expect(types(evs.slice(before.length))).toEqual(['session/end-seed'])
    expect(d(evs.at(-1))).toEqual({})
    expect(sessionStarts.get(s.id)).toEqual(['startup', 'resume'])
    await post(s.id, 'followup', { content: 'more' })
    evs = await t.waitForTurnEnd(s.id, 2)
    const t2 = evs.slice(before.length + 1)
    expect(types(t2)).toEqual(['agent/inbox/spliced', 'turn/start', 'agent/inbox/spliced', 'step/start', 'user/message', 'request/header', 'assistant/message', 'step/end', 'turn/end'])
    expect(d(ofType(t2, 'request/header')[0]).reason).toBe('resume')
    expect(d(ofType(t2, 'turn/start')[0]).turn).toBe(2)
    // history continues: the prompt, hi, hello, more
    const req = t.models.requestsOf(s.id)[1]
    expect(req.context.systemPrompt).toBe('P')
    expect(req.context.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'user'])
    expectValidLog(evs)
    expect(problems).toEqual([])
  })

  it('C24 via idle release: the followup that wakes a released session attaches a new instance (end-seed, then H(resume))', async () => {
    const { s } = await releasedAfterTurn1({ text: ['again'] })
    await post(s.id, 'followup', { content: 'more' })
    const evs = await t.waitForTurnEnd(s.id, 2)
    const end1 = evs.indexOf(turnEnd(evs, 1)!)
    expect(types(evs.slice(end1 + 1, end1 + 4))).toEqual(['agent/inbox/spliced', 'session/end-seed', 'turn/start'])
    expect(ofType(evs, 'request/header').map((e) => d(e).reason)).toEqual(['initial', 'resume'])
    expect(ofType(evs, 'request/context')).toHaveLength(1)
    expect(ofType(evs, 'system/message')).toHaveLength(1)
    expect(d(turnEnd(evs, 2)).reason).toEqual({ kind: 'completed' })
    expectValidLog(evs)
    expect(problems).toEqual([])
  })

  it('an idle inject while released creates no turn, also when a loop instance attaches; the next followup takes it first', async () => {
    const { s, key } = await releasedAfterTurn1({ text: ['got both'] })
    const inj = await post(s.id, 'inject', { content: 'ctx' })
    expect(inj.status).toBe(202)
    expect((await t.api('GET', `/v1/sessions/${s.id}`)).body.status).toBe('idle')
    // a loaded instance opens no turn for parked inject()s (SPEC §13.4)
    const agent = (await t.app.host!.claim(key))!
    await agent.whenIdle()
    expect(agent.status).toBe('idle')
    let evs = await t.events(s.id)
    expect(types(evs.slice(-2))).toEqual(['agent/inbox/spliced', 'session/end-seed'])
    expect(ofType(evs, 'turn/start')).toHaveLength(1)
    await post(s.id, 'followup', { content: 'go' })
    evs = await t.waitForTurnEnd(s.id, 2)
    const t2 = evs.slice(evs.indexOf(turnEnd(evs, 1)!) + 1)
    expect(ofType(t2, 'turn/start').map((e) => d(e).turn)).toEqual([2])
    expect(userTexts(t2)).toEqual(['ctx', 'go'])
    expectValidLog(evs)
  })

  it('a failed load writes nothing and the session is not driven', async () => {
    const { s, key } = await releasedAfterTurn1()
    // a splice that cannot fold: it removes from an empty list (SPEC §4.1: a fatal load error)
    await t.app.db.transaction(async (tx) => {
      const { rows } = await tx.query<{ next_seq: number; last_time: number }>('SELECT next_seq, last_time FROM sessions WHERE key = $1 FOR UPDATE', [key])
      const e: SessionEvent = { seq: rows[0].next_seq, time: Number(rows[0].last_time), type: 'agent/inbox/spliced', data: { target: 'next-turn', start: 0, removedCount: 3, inserted: [] } }
      await tx.query('INSERT INTO session_events (session_key, seq, time, type, body) VALUES ($1, $2, $3, $4, $5)', [key, e.seq, e.time, e.type, eventJson(e)])
      await tx.query('UPDATE sessions SET next_seq = next_seq + 1 WHERE key = $1', [key])
    })
    const before = await t.events(s.id)
    expect(await t.app.host!.claim(key)).toBeNull()
    expect(t.app.host!.agent(key)).toBeUndefined()
    const after = await t.events(s.id)
    expect(after).toEqual(before)
    expect(ofType(after, 'session/end-seed')).toEqual([])
    expect(await leaseOwner(key)).toBeNull()
  })

  it('C24 crash repair: a log left inside an open turn is taken over by the scan and closed deterministically, then marked; §19: the turn is continued', async () => {
    const s = await t.createSession({ system: 'P' })
    const key = await keyOf(s.id)
    const T = Date.now() - 5000
    const mid = () => `msg_${crypto.randomUUID().replace(/-/g, '')}`
    const u1 = { id: mid(), role: 'user', content: [{ type: 'text', text: 'do two things' }], source: { kind: 'user' } }
    const drafts: Array<Omit<SessionEvent, 'seq' | 'time'>> = [
      { type: 'agent/inbox/spliced', data: { target: 'next-turn', start: 0, inserted: [u1] } },
      { type: 'turn/start', data: { turn: 1 } },
      { type: 'agent/inbox/spliced', data: { target: 'next-turn', start: 0, removedCount: 1, inserted: [] } },
      { type: 'step/start', data: { turn: 1, step: 1 } },
      { type: 'system/message', data: { turn: 1, step: 1, message: { id: mid(), role: 'system', content: [{ type: 'text', text: 'P' }], source: { kind: 'plugin', plugin: 'system-prompt' } } }, surfaceOp: 'append' },
      { type: 'user/message', data: u1, surfaceOp: 'append' },
      { type: 'request/header', data: { header: { config: { provider: 'test', model: 'scripted', maxTokens: 1024 }, adapterDefaults: { maxTokens: true } }, reason: 'initial' } },
      { type: 'request/context', data: { provider: 'test', model: 'scripted', contextWindow: 8192 } },
      {
        type: 'assistant/message',
        data: {
          turn: 1,
          step: 1,
          message: {
            id: mid(),
            role: 'assistant',
            content: [
              { type: 'tool-call', id: 'call_first', name: 'probe', arguments: '{"n":1}' },
              { type: 'tool-call', id: 'call_second', name: 'probe', arguments: '{"n":2}' },
            ],
            source: { kind: 'model', provider: 'test', model: 'scripted' },
          },
          stream: [{ type: 'chunk', time: T, chunk: { type: 'finish', reason: { kind: 'tool-calls' } } }],
          usage: { inputTokens: 10, outputTokens: 5 },
        },
        surfaceOp: 'append',
      },
      { type: 'tool/call', data: { turn: 1, step: 1, callId: 'call_first', name: 'probe', arguments: '{"n":1}' } },
    ]
    const events = drafts.map((x, i) => ({ ...x, seq: i, time: T }) as SessionEvent)
    await t.app.db.transaction(async (tx) => {
      await tx.query('SELECT key FROM sessions WHERE key = $1 FOR UPDATE', [key])
      for (const e of events) await tx.query('INSERT INTO session_events (session_key, seq, time, type, body) VALUES ($1, $2, $3, $4, $5)', [key, e.seq, e.time, e.type, eventJson(e)])
      await tx.query(
        `UPDATE sessions SET next_seq = $2, last_time = $3, updated_at = $3, open_turn = 1, run_state = 'running',
           inbox = '{"nextTurn":[],"nextStep":[]}', lease_owner = NULL, lease_expires_at = NULL WHERE key = $1`,
        [key, events.length, T],
      )
    })
    // the continuation's answer (SPEC §19.3: it opens right after the repair)
    t.models.script(s.id, { text: ['checked'] })
    // no delivery: the worker's scan takes the session over within ~2 s
    let evs = await t.waitFor(s.id, (e) => e.type === 'session/end-seed', 8000)
    const added = throughSeed(evs.slice(events.length))
    expect(types(added)).toEqual(['tool/result', 'tool/result', 'step/end', 'turn/end', 'session/end-seed'])
    const [r1, r2, stepEnd, end, seed] = added
    expect(d(r1).message.source).toEqual({ kind: 'tool', callId: 'call_first' })
    expect(d(r1).message.content[0]).toMatchObject({ type: 'tool-result', toolCallId: 'call_first', isError: true })
    expect(d(r1).error).toEqual({ name: 'ToolError', code: 'TOOL_OUTCOME_UNKNOWN' })
    expect(r1.sourceEventSeqs).toEqual([events.length - 1])
    expect(r1.surfaceOp).toBe('append')
    const text1 = d(r1).message.content[0].content[0].text as string
    expect(text1).toMatch(/^Error: /)
    expect(text1).toMatch(/verif/i)
    expect(d(r2).message.content[0]).toMatchObject({ type: 'tool-result', toolCallId: 'call_second', isError: true })
    expect(d(r2).error).toEqual({ name: 'AbortError', code: 'TOOL_NOT_STARTED' })
    expect(r2.sourceEventSeqs).toBeUndefined()
    expect(d(r1)).toMatchObject({ turn: 1, step: 1 })
    expect(d(r2)).toMatchObject({ turn: 1, step: 1 })
    expect(d(stepEnd)).toEqual({ turn: 1, step: 1 })
    expect(d(end)).toEqual({ turn: 1, reason: { kind: 'interrupted' } })
    // closers reuse the last stored time; the marker follows the clock
    for (const e of [r1, r2, stepEnd, end]) expect(e.time).toBe(T)
    expect(seed.time).toBeGreaterThanOrEqual(T)
    expect(d(seed)).toEqual({})
    expectValidLog(evs)
    // SPEC §19.3: the crashed holder's wake was unspent, so the holder continues turn 1 without new
    // input: turn 2 {continues: 1} admits nothing new and asks the model, which sees the synthetic results
    evs = await t.waitForTurnEnd(s.id, 2, 8000)
    expect(d(ofType(evs, 'turn/start').at(-1))).toEqual({ turn: 2, continues: 1 })
    expect(d(turnEnd(evs, 2)).reason).toEqual({ kind: 'completed' })
    expect(userTexts(evs)).toEqual(['do two things'])
    const req = t.models.requestsOf(s.id)[0]
    const results = req.context.messages.filter((m) => m.role === 'toolResult') as any[]
    expect(results.map((m) => [m.toolCallId, m.isError])).toEqual([['call_first', true], ['call_second', true]])
    expect(JSON.stringify(results[0].content)).toContain(text1.slice(7, 40))
    expect(req.context.messages.at(-1)?.role).toBe('toolResult')
    expect(d(ofType(evs, 'request/header').at(-1)).reason).toBe('resume')
    // a later followup is an ordinary turn
    t.models.script(s.id, { text: ['fine'] })
    await post(s.id, 'followup', { content: 'what happened?' })
    evs = await t.waitForTurnEnd(s.id, 3)
    expect(d(ofType(evs, 'turn/start').at(-1))).toEqual({ turn: 3 })
    expect(d(turnEnd(evs, 3)).reason).toEqual({ kind: 'completed' })
    expectValidLog(evs)
    expect(problems).toEqual([])
  })
})
