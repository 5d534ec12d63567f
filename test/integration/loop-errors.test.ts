// SPEC §16.6 (request errors) and §16.8 (edges and reconstruction) through the real loop on one
// database (docs/testing.md). The built-in plugins are off here, so the only agent/request-error listener is the
// test's own (C19 style); llm-retry itself is covered in llm-retry.test.ts.

import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { expectValidLog, reconstructionCheck } from '../helpers/invariants.js'
import { d, ofType, throughSeed, turnEnd, types, userTexts } from '../helpers/events.js'
import { until } from '../helpers/wait.js'
import { LOOP_REQUEST } from '../../src/agent/index.js'
import { DEFAULT_RETRY_POLICY } from '../../src/llm/types.js'

const push = <T>(m: Map<string, T[]>, k: string, v: T) => {
  const l = m.get(k) ?? []
  l.push(v)
  m.set(k, l)
}

class Instruments {
  /** behaviours per session */
  readonly requestThrows = new Set<string>()
  readonly streamThrows = new Set<string>()
  readonly recovery = new Map<string, 'retry-once' | 'throw' | 'cancel-then-retry'>()
  readonly throwingObservers = new Set<string>()
  /** records per session */
  readonly requestErrors = new Map<string, any[]>()
  readonly proposals = new Map<string, any[]>()
  readonly assembles = new Map<string, number[]>()
  readonly preSteps = new Map<string, number[]>()
  readonly requests = new Map<string, number[]>()
  readonly loopRequests = new Map<string, any[]>()
  readonly statuses = new Map<string, string[]>()
  readonly errors = new Map<string, any[]>()
  readonly frames = new Map<string, any[]>()
  cancel: (sessionId: string) => Promise<unknown> = async () => undefined

  plugin() {
    return (root: any) =>
      root.plugin({
        name: 'test-errors',
        apply: (ctx: any) => {
          ctx.tools.register({
            name: 'echo',
            description: 'echoes',
            parameters: { type: 'object', properties: { text: { type: 'string' } } },
            execute: async (args: any) => ({ content: `echo ${args?.text}` }),
          })
          ctx.hooks.waterfall('system-prompt/assemble', async (a: any, next: () => Promise<unknown>, c: any) => {
            push(this.assembles, c.agent.id, c.step)
            return next()
          })
          ctx.hooks.waterfall('agent/pre-step', async (p: any, next: () => Promise<unknown>) => {
            push(this.preSteps, p.agent.id, p.step)
            return next()
          })
          ctx.hooks.waterfall('agent/request', async (p: any, next: () => Promise<unknown>) => {
            push(this.requests, p.agent.id, p.step)
            if (this.requestThrows.has(p.agent.id)) throw new Error('request listener exploded')
            const c = await next()
            push(this.proposals, p.agent.id, structuredClone(c))
            return c
          })
          ctx.hooks.waterfall('llm/stream', async (req: any, next: () => Promise<unknown>) => {
            if (req[LOOP_REQUEST]) push(this.loopRequests, req.sessionId, structuredClone(req.messages))
            if (this.streamThrows.has(req.sessionId)) throw new Error('stream listener exploded')
            return next()
          })
          ctx.hooks.waterfall('agent/request-error', async (p: any, next: () => Promise<unknown>) => {
            const id = p.agent.id
            push(this.requestErrors, id, { turn: p.turn, step: p.step, provider: p.provider, failure: p.failure, retryPolicy: p.retryPolicy, aborted: p.signal.aborted })
            const b = this.recovery.get(id)
            if (b === 'throw') throw new Error('recovery listener exploded')
            if (b === 'retry-once') {
              this.recovery.delete(id)
              return { kind: 'retry' }
            }
            if (b === 'cancel-then-retry') {
              this.recovery.delete(id)
              await this.cancel(id)
              await until('the abort', () => p.signal.aborted)
              return { kind: 'retry' }
            }
            return next()
          })
          ctx.on('session/event', (e: any) => {
            if (!this.throwingObservers.has(e.sessionId)) return
            throw new Error('observer exploded')
          })
          ctx.on('session/event', async (e: any) => {
            if (!this.throwingObservers.has(e.sessionId)) return
            throw new Error('async observer exploded')
          })
          ctx.on('agent/status', (p: any) => {
            push(this.statuses, p.agent?.id, p.status)
            if (this.throwingObservers.has(p.agent?.id)) throw new Error('status listener exploded')
          })
          ctx.on('agent/error', (p: any) => push(this.errors, p.agent?.id, { turn: p.turn, step: p.step, error: p.error }))
          ctx.on('agent/assistant-stream', (p: any) => push(this.frames, p.agent?.id, p.frame))
        },
      })
  }
}

describe.each(APP_DB_KINDS)('SPEC §16.6 and §16.8 on %s', (kind) => {
  let t: TestApp
  const ins = new Instruments()
  const problems: string[] = []
  beforeAll(async () => {
    t = await startTestApp({
      kind,
      env: { AGENTD_BUILTIN_PLUGINS: '', AGENTD_RATE_LIMIT_PER_MIN: '1000000' },
      plugins: [(root, db) => reconstructionCheck(db, problems)(root), (root) => ins.plugin()(root)],
    })
    ins.cancel = (id) => t.api('POST', `/v1/sessions/${id}/cancel`, {})
  })
  afterAll(async () => {
    await t?.close()
  })

  const post = (id: string, route: string, body?: unknown) => t.api('POST', `/v1/sessions/${id}/${route}`, body)
  const keyOf = async (id: string) => (await t.app.db.query<{ key: string }>('SELECT key FROM sessions WHERE id = $1', [id])).rows[0].key

  // ---- §16.6 ----

  it('agent/request-error never sees middleware failures: a throwing agent/request listener ends the turn error', async () => {
    const s = await t.createSession({ system: 'P' })
    ins.requestThrows.add(s.id)
    t.models.script(s.id, { text: ['never'] })
    await post(s.id, 'followup', { content: 'hi' })
    const evs = await t.waitForTurnEnd(s.id, 1)
    ins.requestThrows.delete(s.id)
    expect(types(evs)).toEqual(['agent/inbox/spliced', 'turn/start', 'agent/inbox/spliced', 'step/start', 'step/end', 'turn/end'])
    const reason = d(turnEnd(evs, 1)).reason
    expect(reason.kind).toBe('error')
    expect(reason.error.code).toBe('UNKNOWN')
    expect(reason.error.message).toContain('request listener exploded')
    expect(ins.requestErrors.get(s.id)).toBeUndefined()
    expect(t.models.requestsOf(s.id)).toHaveLength(0)
    // SPEC §5.7: a turn-ending failure emits agent/error
    await until('agent/error', () => ins.errors.get(s.id)?.length)
    expect(ins.errors.get(s.id)).toEqual([{ turn: 1, step: 1, error: reason.error }])
    expectValidLog(evs)
    await t.waitIdle(s.id)
  })

  it('agent/request-error never sees middleware failures: a throwing llm/stream listener fails the turn with no frames and no settlement', async () => {
    const s = await t.createSession({ system: 'P' })
    ins.streamThrows.add(s.id)
    t.models.script(s.id, { text: ['never'] })
    await post(s.id, 'followup', { content: 'hi' })
    const evs = await t.waitForTurnEnd(s.id, 1)
    ins.streamThrows.delete(s.id)
    expect(d(turnEnd(evs, 1)).reason).toMatchObject({ kind: 'error', error: { code: 'UNKNOWN' } })
    expect(d(turnEnd(evs, 1)).reason.error.message).toContain('stream listener exploded')
    expect(ofType(evs, 'assistant/attempt')).toEqual([])
    expect(ofType(evs, 'assistant/message')).toEqual([])
    expect(ins.requestErrors.get(s.id)).toBeUndefined()
    expect(ins.frames.get(s.id)).toBeUndefined()
    expect(t.models.requestsOf(s.id)).toHaveLength(0)
    expectValidLog(evs)
    await t.waitIdle(s.id)
  })

  it('C19: a retry keeps one turn and one step, and the payload carries the registration retryPolicy', async () => {
    const s = await t.createSession({ system: 'P' })
    ins.recovery.set(s.id, 'retry-once')
    t.models.script(s.id, { error: '429 rate limited' }, { text: ['fine'] })
    await post(s.id, 'followup', { content: 'hi' })
    const evs = await t.waitForTurnEnd(s.id, 1)
    expect(types(evs)).toEqual([
      'agent/inbox/spliced', 'turn/start', 'agent/inbox/spliced', 'step/start', 'system/message', 'user/message',
      'request/header', 'request/context', 'assistant/attempt', 'assistant/message', 'step/end', 'turn/end',
    ])
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'completed' })
    expect(d(ofType(evs, 'request/header')[0]).reason).toBe('initial')
    const [pe] = ins.requestErrors.get(s.id)!
    expect(ins.requestErrors.get(s.id)).toHaveLength(1)
    expect(pe).toMatchObject({ turn: 1, step: 1, provider: 'test', aborted: false, failure: { code: 'RATE_LIMIT', status: 429 } })
    // SPEC §18.2: every registration carries the normal-mode policy unless configured otherwise
    expect(pe.retryPolicy).toEqual({ ...DEFAULT_RETRY_POLICY, codes: [...DEFAULT_RETRY_POLICY.codes] })
    expect(pe.retryPolicy).toMatchObject({ mode: 'normal', maxRetries: 5, initialDelayMs: 500, maxDelayMs: 10000, jitterRatio: 0.1 })
    // agent/request twice; assembly and pre-step once
    expect(ins.requests.get(s.id)).toEqual([1, 1])
    expect(ins.assembles.get(s.id)).toEqual([1])
    expect(ins.preSteps.get(s.id)).toEqual([1])
    expect(t.models.requestsOf(s.id)).toHaveLength(2)
    // two start frames with end outcomes [assistant/attempt, assistant/message]
    await until('two end frames', () => ins.frames.get(s.id)?.filter((f) => f.kind === 'end').length === 2)
    const frames = ins.frames.get(s.id)!
    expect(frames.filter((f) => f.kind === 'start')).toHaveLength(2)
    expect(frames.filter((f) => f.kind === 'end').map((f) => f.outcome.eventType)).toEqual(['assistant/attempt', 'assistant/message'])
    expectValidLog(evs)
    expect(problems).toEqual([])
    await t.waitIdle(s.id)
  })

  it('a cancel outranks a retry: a listener that cancels and then answers retry ends the turn aborted', async () => {
    const s = await t.createSession({ system: 'P' })
    ins.recovery.set(s.id, 'cancel-then-retry')
    t.models.script(s.id, { error: '503 unavailable' }, { text: ['never'] })
    await post(s.id, 'followup', { content: 'hi' })
    const evs = await t.waitForTurnEnd(s.id, 1)
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'aborted', reason: { kind: 'user' } })
    expect(t.models.requestsOf(s.id)).toHaveLength(1)
    expect(ofType(evs, 'assistant/message')).toEqual([])
    expect(ofType(evs, 'assistant/attempt')).toHaveLength(1)
    expect(ofType(evs, 'step/start')).toHaveLength(1)
    expectValidLog(evs)
    await t.waitIdle(s.id)
  })

  it('a recovery listener that throws prevents any retry', async () => {
    const s = await t.createSession({ system: 'P' })
    ins.recovery.set(s.id, 'throw')
    t.models.script(s.id, { error: '500 upstream exploded' }, { text: ['never'] })
    await post(s.id, 'followup', { content: 'hi' })
    const evs = await t.waitForTurnEnd(s.id, 1)
    ins.recovery.delete(s.id)
    const reason = d(turnEnd(evs, 1)).reason
    expect(reason.kind).toBe('error')
    expect(reason.error.message).toContain('recovery listener exploded')
    expect(t.models.requestsOf(s.id)).toHaveLength(1)
    expect(ofType(evs, 'assistant/attempt')).toHaveLength(1)
    expect(ofType(evs, 'assistant/message')).toEqual([])
    expectValidLog(evs)
    await t.waitIdle(s.id)
  })

  it('a finish error without recovery becomes a turn error carrying the failure', async () => {
    const s = await t.createSession({ system: 'P' })
    t.models.script(s.id, { error: '500 upstream exploded' })
    await post(s.id, 'followup', { content: 'hi' })
    const evs = await t.waitForTurnEnd(s.id, 1)
    expect(types(evs).slice(-4)).toEqual(['request/context', 'assistant/attempt', 'step/end', 'turn/end'])
    expect(d(turnEnd(evs, 1)).reason).toMatchObject({ kind: 'error', error: { code: 'SERVER', status: 500 } })
    expect(ins.requestErrors.get(s.id)).toHaveLength(1)
    expect(ins.requestErrors.get(s.id)![0].failure).toEqual(d(turnEnd(evs, 1)).reason.error)
    await until('agent/error', () => ins.errors.get(s.id)?.length)
    expectValidLog(evs)
    await t.waitIdle(s.id)
  })

  // ---- §16.8 ----

  it('throwing session/event observers and notification listeners are contained: the turn completes', async () => {
    const s = await t.createSession({ system: 'P' })
    ins.throwingObservers.add(s.id)
    t.models.script(s.id, { text: ['one'] }, { text: ['two'] })
    await post(s.id, 'followup', { content: 'hi' })
    let evs = await t.waitForTurnEnd(s.id, 1)
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'completed' })
    await t.waitIdle(s.id)
    await post(s.id, 'followup', { content: 'again' })
    evs = await t.waitForTurnEnd(s.id, 2)
    ins.throwingObservers.delete(s.id)
    expect(d(turnEnd(evs, 2)).reason).toEqual({ kind: 'completed' })
    expect(ofType(evs, 'assistant/message').map((e) => d(e).message.content[0].text)).toEqual(['one', 'two'])
    expectValidLog(evs)
  })

  it('a rejected turn/end stops the Agent and releases the session; the next holder repairs the turn', async () => {
    const s = await t.createSession({ system: 'P' })
    const key = await keyOf(s.id)
    const suffix = key.replace(/-/g, '_')
    await t.app.db.query(`CREATE FUNCTION reject_turn_end_${suffix}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'turn/end rejected by the test'; END $$`)
    await t.app.db.query(
      `CREATE TRIGGER reject_turn_end_${suffix} BEFORE INSERT ON session_events FOR EACH ROW
       WHEN (NEW.session_key = '${key}'::uuid AND NEW.type = 'turn/end' AND NEW.body LIKE '%"data":{"turn":1,%' AND NEW.body NOT LIKE '%"interrupted"%') EXECUTE FUNCTION reject_turn_end_${suffix}()`,
    )
    try {
      // turn 1's answer, then the crash continuation's (SPEC §19: it opens right after the repair)
      t.models.script(s.id, { text: ['hello'] }, { text: ['back'] })
      await post(s.id, 'followup', { content: 'hi' })
      await t.models.waitForRequest(s.id, 1)
      const first = await until('the driver', () => t.app.host!.agent(key))
      // the Agent stops driving and the session is released …
      await until('the Agent to stop', () => t.app.host!.agent(key) !== first, 10000)
      // … and whoever takes it next repairs the open turn before anything else
      const evs = throughSeed(await t.waitFor(s.id, (e) => e.type === 'session/end-seed', 10000))
      // the answer's unit carried the turn/end, so it was rejected with it (a rejected settlement
      // writes nothing, SPEC §9.3); the turn failed, its step/end committed and its turn/end, a
      // closer, was rejected again: the Agent stopped, and repair closed the turn
      expect(types(evs).slice(-4)).toEqual(['request/context', 'step/end', 'turn/end', 'session/end-seed'])
      expect(ofType(evs, 'assistant/message')).toHaveLength(0)
      expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'interrupted' })
      expect(ofType(evs, 'turn/end')).toHaveLength(1)
      expectValidLog(evs)
    } finally {
      await t.app.db.query(`DROP TRIGGER IF EXISTS reject_turn_end_${suffix} ON session_events`)
      await t.app.db.query(`DROP FUNCTION IF EXISTS reject_turn_end_${suffix}()`)
    }
    // the continuation of turn 1 runs in the next holder's new loop instance
    let evs = await t.waitForTurnEnd(s.id, 2)
    expect(d(ofType(evs, 'turn/start').at(-1))).toEqual({ turn: 2, continues: 1 })
    expect(d(turnEnd(evs, 2)).reason).toEqual({ kind: 'completed' })
    expect(d(ofType(evs, 'request/header').at(-1)).reason).toBe('resume')
    await t.waitIdle(s.id)
    t.models.script(s.id, { text: ['again'] })
    await post(s.id, 'followup', { content: 'again' })
    evs = await t.waitForTurnEnd(s.id, 3)
    expect(d(turnEnd(evs, 3)).reason).toEqual({ kind: 'completed' })
    expectValidLog(evs)
  })

  it('disposal keeps turns balanced: a dropped Agent ends its open turn aborted {disposed}', async () => {
    const s = await t.createSession({ system: 'P' })
    const key = await keyOf(s.id)
    t.models.script(s.id, { text: ['partial'], hang: true }, { text: ['later'] })
    await post(s.id, 'followup', { content: 'hi' })
    await until('the partial text to stream', () => ins.frames.get(s.id)?.some((f) => f.kind === 'chunk' && f.chunk.type === 'text-delta'))
    await t.app.host!.drop(key, { release: true })
    let evs = await t.waitForTurnEnd(s.id, 1)
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'aborted', reason: { kind: 'disposed' } })
    expect(types(evs).slice(-3)).toEqual(['assistant/message', 'step/end', 'turn/end'])
    expectValidLog(evs)
    await post(s.id, 'followup', { content: 'again' })
    evs = await t.waitForTurnEnd(s.id, 2)
    const t2 = evs.slice(evs.indexOf(turnEnd(evs, 1)!) + 1)
    expect(types(t2).filter((x) => x !== 'agent/inbox/spliced').slice(0, 2)).toEqual(['session/end-seed', 'turn/start'])
    expect(d(turnEnd(evs, 2)).reason).toEqual({ kind: 'completed' })
    expectValidLog(evs)
  })

  it('adapter defaults are logged in the header and re-derived: the next proposal omits them', async () => {
    const s = await t.createSession({ system: 'P' })
    t.models.script(s.id, { text: ['one'] }, { text: ['two'] })
    await post(s.id, 'followup', { content: 'hi' })
    await t.waitForTurnEnd(s.id, 1)
    await t.waitIdle(s.id)
    await post(s.id, 'followup', { content: 'again' })
    const evs = await t.waitForTurnEnd(s.id, 2)
    const headers = ofType(evs, 'request/header')
    expect(headers).toHaveLength(1)
    expect(d(headers[0])).toEqual({ header: { config: { provider: 'test', model: 'scripted', maxTokens: 1024 }, adapterDefaults: { maxTokens: true } }, reason: 'initial' })
    // the first proposal has no maxTokens (none in the session); the second is the header minus the defaulted field
    expect(ins.proposals.get(s.id)).toEqual([{ provider: 'test', model: 'scripted' }, { provider: 'test', model: 'scripted' }])
    expect(t.models.requestsOf(s.id).map((r) => r.options?.maxTokens)).toEqual([1024, 1024])
    // an explicit session maxTokens is no default and is proposed again
    const m = await t.createSession({ system: 'P', maxTokens: 100 })
    t.models.script(m.id, { text: ['one'] }, { text: ['two'] })
    await post(m.id, 'followup', { content: 'hi' })
    await t.waitForTurnEnd(m.id, 1)
    await t.waitIdle(m.id)
    await post(m.id, 'followup', { content: 'again' })
    const mevs = await t.waitForTurnEnd(m.id, 2)
    expect(ofType(mevs, 'request/header').map((e) => d(e))).toEqual([{ header: { config: { provider: 'test', model: 'scripted', maxTokens: 100 } }, reason: 'initial' }])
    expect(ins.proposals.get(m.id)).toEqual([{ provider: 'test', model: 'scripted', maxTokens: 100 }, { provider: 'test', model: 'scripted', maxTokens: 100 }])
    expect(t.models.requestsOf(m.id).map((r) => r.options?.maxTokens)).toEqual([100, 100])
    expectValidLog(evs)
    expectValidLog(mevs)
    expect(problems).toEqual([])
  })

  it('request/context is deduplicated: no second one when nothing changed, also across a retry', async () => {
    const s = await t.createSession({ system: 'P' })
    ins.recovery.set(s.id, 'retry-once')
    t.models.script(s.id, { error: '500 boom' }, { text: ['one'] }, { text: ['two'] })
    await post(s.id, 'followup', { content: 'hi' })
    await t.waitForTurnEnd(s.id, 1)
    await t.waitIdle(s.id)
    await post(s.id, 'followup', { content: 'again' })
    const evs = await t.waitForTurnEnd(s.id, 2)
    expect(ofType(evs, 'request/context').map((e) => d(e))).toEqual([{ provider: 'test', model: 'scripted', contextWindow: 8192 }])
    expect(ofType(evs, 'request/header')).toHaveLength(1)
    expect(t.models.requestsOf(s.id)).toHaveLength(3)
    expectValidLog(evs)
    expect(problems).toEqual([])
  })

  it('C3: a followup burst in one tick gives turns 1, 2, 3, each claiming one prompt; status running once, idle once', async () => {
    const s = await t.createSession({ system: 'P' })
    const key = await keyOf(s.id)
    const agent = (await t.app.host!.claim(key))!
    expect(agent).toBeTruthy()
    t.models.script(s.id, { text: ['1'] }, { text: ['2'] }, { text: ['3'] })
    const h = agent.handle('test-burst')
    const accepted = await Promise.all([h.followup('a'), h.followup('b'), h.followup('c')])
    expect(accepted.map((a) => a.seq)).toEqual([...accepted.map((a) => a.seq)].sort((x, y) => x - y))
    await agent.whenIdle()
    const evs = await t.waitForTurnEnd(s.id, 3)
    const starts = ofType(evs, 'turn/start').map((e) => d(e).turn)
    expect(starts).toEqual([1, 2, 3])
    for (const [turn, text] of [[1, 'a'], [2, 'b'], [3, 'c']] as const) {
      const a = evs.findIndex((e) => e.type === 'turn/start' && d(e).turn === turn)
      const b = evs.findIndex((e) => e.type === 'turn/end' && d(e).turn === turn)
      const slice = evs.slice(a, b)
      expect(userTexts(slice)).toEqual([text])
      // one claim per turn, removing one next-turn prompt
      expect(ofType(slice, 'agent/inbox/spliced').map((e) => d(e))).toEqual([{ target: 'next-turn', start: 0, removedCount: 1, inserted: [] }])
    }
    await until('idle status', () => ins.statuses.get(s.id)?.at(-1) === 'idle')
    expect(ins.statuses.get(s.id)).toEqual(['running', 'idle'])
    expectValidLog(evs)
  })

  it('requests extend append-only within a series (tool round trip, then another turn)', async () => {
    const s = await t.createSession({ system: 'P', tools: [{ name: 'echo', execution: { type: 'builtin' } }] })
    t.models.script(s.id, { toolCalls: [{ id: 'c1', name: 'echo', arguments: { text: 'x' } }] }, { text: ['done'] }, { text: ['more'] })
    await post(s.id, 'followup', { content: 'hi' })
    await t.waitForTurnEnd(s.id, 1)
    await t.waitIdle(s.id)
    await post(s.id, 'followup', { content: 'again' })
    const evs = await t.waitForTurnEnd(s.id, 2)
    const reqs = ins.loopRequests.get(s.id)!
    expect(reqs).toHaveLength(3)
    for (let i = 1; i < reqs.length; i++) {
      expect(reqs[i].length).toBeGreaterThan(reqs[i - 1].length)
      expect(reqs[i].slice(0, reqs[i - 1].length)).toEqual(reqs[i - 1])
    }
    expect(reqs[2].map((m: any) => m.role)).toEqual(['system', 'user', 'assistant', 'user', 'assistant', 'user'])
    expect(ofType(evs, 'request/header').map((e) => d(e).reason)).toEqual(['initial'])
    expect(ofType(evs, 'system/message')).toHaveLength(1)
    expectValidLog(evs)
    expect(problems).toEqual([])
  })
})
