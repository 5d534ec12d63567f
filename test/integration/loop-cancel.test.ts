// SPEC §16.4 cancellation through the real loop on one database (docs/testing.md): keepInbox, the wake latch (C18),
// cancelling an idle session, prefix finalization (§9.3, §18.8), cancels during error recovery
// (§10.1, §18.3), the first cause winning (§5.5), C16, C17 and cancels issued by observers (§18.9).

import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { expectValidLog, reconstructionCheck } from '../helpers/invariants.js'
import { gate as makeGate } from '../helpers/scripted.js'
import { d, ofType, turnEnd, types, userTexts } from '../helpers/events.js'
import { Journal } from '../helpers/loop.js'
import { until } from '../helpers/wait.js'
import type { StreamChunk } from '../../src/session/index.js'

/** Per-test-file instrumentation shared by the plugin and the tests. */
class Probe extends Journal {
  readonly handles = new Map<string, any>()
  readonly signals = new Map<string, AbortSignal>()
  readonly statuses = new Map<string, string[]>()
  readonly frames = new Map<string, any[]>()
  readonly discarded: string[] = []
  /** agent/request listeners that wait on a gate, per session */
  readonly holdRequest = new Map<string, { entered: boolean; gate: ReturnType<typeof makeGate> }>()
  /** session → event type whose publication makes an observer cancel */
  readonly cancelOn = new Map<string, string>()
  /** session → queued custom llm/stream sources */
  readonly custom = new Map<string, Array<(req: any) => AsyncIterable<StreamChunk>>>()

  plugin() {
    return (root: any) =>
      root.plugin({
        name: 'test-cancel',
        apply: (ctx: any) => {
          ctx.tools.register({
            name: 'probe',
            description: 'test tool',
            parameters: { type: 'object', properties: { key: { type: 'string' } } },
            isConcurrencySafe: (args: any) => args?.parallel === true,
            execute: async (args: any, { signal, sessionId }: { signal: AbortSignal; sessionId: string }) => {
              const key = String(args?.key)
              this.log(sessionId, `start:${key}`)
              signal.addEventListener('abort', () => this.log(sessionId, `abort:${key}`), { once: true })
              if (args?.hold) await this.gate(sessionId, key).promise
              this.log(sessionId, `end:${key}`)
              return { content: `done ${key}` }
            },
          })
          ctx.hooks.waterfall('agent/pre-step', async (p: any, next: () => Promise<unknown>) => {
            this.handles.set(p.agent.id, p.agent)
            return next()
          })
          ctx.hooks.waterfall('agent/request', async (p: any, next: () => Promise<unknown>) => {
            this.handles.set(p.agent.id, p.agent)
            this.signals.set(p.agent.id, p.signal)
            const h = this.holdRequest.get(p.agent.id)
            if (h) {
              h.entered = true
              await h.gate.promise
            }
            return next()
          })
          ctx.hooks.waterfall('llm/stream', async (req: any, next: () => Promise<unknown>) => {
            const q = this.custom.get(req.sessionId)
            if (q?.length) return q.shift()!(req)
            return next()
          })
          ctx.on('agent/status', (p: any) => {
            const l = this.statuses.get(p.agent?.id) ?? []
            l.push(p.status)
            this.statuses.set(p.agent?.id, l)
          })
          ctx.on('agent/assistant-stream', (p: any) => {
            const l = this.frames.get(p.agent?.id) ?? []
            l.push(p.frame)
            this.frames.set(p.agent?.id, l)
          })
          ctx.on('agent/inbox/discarded', (p: any) => this.discarded.push(p.message.id))
          ctx.on('session/event', (e: any) => {
            if (this.cancelOn.get(e.sessionId) === e.type) {
              this.cancelOn.delete(e.sessionId)
              void this.handles.get(e.sessionId)?.cancel()
            }
          })
        },
      })
  }
}

const abortedPromise = (signal: AbortSignal) =>
  new Promise<void>((r) => {
    if (signal.aborted) return r()
    signal.addEventListener('abort', () => r(), { once: true })
  })

describe.each(APP_DB_KINDS)('SPEC §16.4 cancellation on %s', (kind) => {
  let t: TestApp
  const probe = new Probe()
  const problems: string[] = []
  const seen = { n: 0 }
  beforeAll(async () => {
    t = await startTestApp({
      kind,
      env: { AGENTD_MAX_PARALLEL_TOOL_CALLS: '2', AGENTD_RATE_LIMIT_PER_MIN: '1000000' },
      plugins: [(root, db) => reconstructionCheck(db, problems, seen)(root), (root) => probe.plugin()(root)],
    })
  })
  afterAll(async () => {
    await t?.close()
  })

  const post = (id: string, route: string, body?: unknown) => t.api('POST', `/v1/sessions/${id}/${route}`, body)
  const probeTool = [{ name: 'probe', execution: { type: 'builtin' } }]

  it('keepInbox: a cancel with keepInbox keeps queued followups, which run once woken', async () => {
    const s = await t.createSession({ system: 'P' })
    t.models.script(s.id, { text: ['partial'], hang: true }, { text: ['two done'] }, { text: ['three done'] }, { text: ['four done'] })
    await post(s.id, 'followup', { content: 'one' })
    await t.models.waitForRequest(s.id, 1)
    const f2 = await post(s.id, 'followup', { content: 'two' })
    const f3 = await post(s.id, 'followup', { content: 'three' })
    expect(f2.status).toBe(202)
    const c = await post(s.id, 'cancel', { keepInbox: true })
    expect(c.status).toBe(202)
    expect(c.body).toEqual({ cancelled: true })
    let evs = await t.waitForTurnEnd(s.id, 1)
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'aborted', reason: { kind: 'user' } })
    evs = await t.waitIdle(s.id)
    // nothing was removed by a cancelling splice; both prompts are still queued, in order
    expect(ofType(evs, 'agent/inbox/spliced').filter((e) => d(e).outcome === 'canceled')).toEqual([])
    const inbox = (await t.api('GET', `/v1/sessions/${s.id}/inbox`)).body
    expect(inbox.nextTurn.map((m: any) => m.id)).toEqual([f2.body.messageId, f3.body.messageId])
    expect(inbox.nextStep).toEqual([])
    expect(ofType(evs, 'turn/start')).toHaveLength(1)
    // a later wake runs the kept prompts first, one per turn
    await post(s.id, 'followup', { content: 'four' })
    evs = await t.waitForTurnEnd(s.id, 4)
    for (const [turn, text] of [[2, 'two'], [3, 'three'], [4, 'four']] as const) {
      const start = evs.findIndex((e) => e.type === 'turn/start' && d(e).turn === turn)
      const end = evs.findIndex((e) => e.type === 'turn/end' && d(e).turn === turn)
      expect(userTexts(evs.slice(start, end))).toEqual([text])
      expect(d(evs[end]).reason).toEqual({ kind: 'completed' })
    }
    expectValidLog(evs)
    expect(problems).toEqual([])
  })

  it('without keepInbox, a cancel clears queued followups with one cancelling splice', async () => {
    const s = await t.createSession({ system: 'P' })
    t.models.script(s.id, { text: ['partial'], hang: true })
    await post(s.id, 'followup', { content: 'one' })
    await t.models.waitForRequest(s.id, 1)
    const f2 = await post(s.id, 'followup', { content: 'two' })
    const f3 = await post(s.id, 'followup', { content: 'three' })
    const c = await post(s.id, 'cancel', {})
    expect(c.body).toEqual({ cancelled: true })
    await t.waitForTurnEnd(s.id, 1)
    const evs = await t.waitIdle(s.id)
    const cancelling = ofType(evs, 'agent/inbox/spliced').filter((e) => d(e).outcome === 'canceled')
    expect(cancelling.map((e) => e.data)).toEqual([{ target: 'next-turn', start: 0, removedCount: 2, inserted: [], outcome: 'canceled' }])
    expect(cancelling[0].seq).toBeLessThan(turnEnd(evs, 1)!.seq)
    expect(probe.discarded).toEqual(expect.arrayContaining([f2.body.messageId, f3.body.messageId]))
    expect((await t.api('GET', `/v1/sessions/${s.id}/inbox`)).body).toEqual({ nextTurn: [], nextStep: [] })
    expect(ofType(evs, 'turn/start')).toHaveLength(1)
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'aborted', reason: { kind: 'user' } })
    expectValidLog(evs)
  })

  it('C18: cancel {keepInbox} while running, then a steer before idle: it goes to next-turn and runs in a fresh turn without another delivery', async () => {
    const s = await t.createSession({ system: 'P', tools: probeTool })
    t.models.script(s.id, { toolCalls: [{ id: 'c1', name: 'probe', arguments: { key: 'slow', hold: true } }] }, { text: ['x handled'] })
    await post(s.id, 'followup', { content: 'go' })
    // the tool runs and ignores the abort, so the cancelled turn converges slowly
    await until('the tool to start', () => probe.lines(s.id).includes('start:slow'))
    const c = await post(s.id, 'cancel', { keepInbox: true })
    expect(c.body).toEqual({ cancelled: true })
    await until('the abort to reach the tool', () => probe.lines(s.id).includes('abort:slow'))
    const x = await post(s.id, 'steer', { content: 'x' })
    expect(x.status).toBe(202)
    let evs = await t.events(s.id)
    const splice = evs.find((e) => e.seq === x.body.seq)!
    // SPEC §4.4: waking input after a cancel request goes to next-turn, whatever the route
    expect(d(splice).target).toBe('next-turn')
    expect(turnEnd(evs, 1)).toBeUndefined()
    probe.gate(s.id, 'slow').open()
    evs = await t.waitForTurnEnd(s.id, 2)
    evs = await t.waitIdle(s.id)
    // the started call's result still commits (SPEC §11.8), then the turn ends aborted
    const t1 = evs.slice(0, evs.indexOf(turnEnd(evs, 1)!) + 1)
    expect(types(t1.filter((e) => e.type !== 'agent/inbox/spliced')).slice(-4)).toEqual(['tool/call', 'tool/result', 'step/end', 'turn/end'])
    expect(d(ofType(t1, 'tool/result')[0]).message.content[0]).toMatchObject({ isError: false, content: [{ type: 'text', text: 'done slow' }] })
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'aborted', reason: { kind: 'user' } })
    const t2 = evs.slice(evs.indexOf(turnEnd(evs, 1)!) + 1)
    expect(types(t2)[0]).toBe('turn/start')
    expect(userTexts(t2)).toEqual(['x'])
    expect(d(turnEnd(evs, 2)).reason).toEqual({ kind: 'completed' })
    // exactly one delivery after the cancel: x, and no further one
    expect(ofType(evs, 'agent/inbox/spliced').filter((e) => d(e).inserted.length).length).toBe(2)
    await until('status idle', () => probe.statuses.get(s.id)?.at(-1) === 'idle')
    expect(probe.statuses.get(s.id)).toEqual(['running', 'idle', 'running', 'idle'])
    expectValidLog(evs)
    expect(problems).toEqual([])
  })

  it('cancelling an idle session only clears its inbox ({cancelled:false}) and arms nothing', async () => {
    const s = await t.createSession({ system: 'P' })
    const inj = await post(s.id, 'inject', { content: 'context' })
    expect(inj.status).toBe(202)
    // keepInbox on an idle session: nothing at all
    const head = (await t.api('GET', `/v1/sessions/${s.id}`)).body.headSeq
    const k = await post(s.id, 'cancel', { keepInbox: true })
    expect(k.body).toEqual({ cancelled: false })
    expect((await t.api('GET', `/v1/sessions/${s.id}`)).body.headSeq).toBe(head)
    const c = await post(s.id, 'cancel', {})
    expect(c.status).toBe(202)
    expect(c.body).toEqual({ cancelled: false })
    let evs = await t.events(s.id)
    expect(evs.map((e) => [e.type, e.data])).toEqual([
      ['agent/inbox/spliced', { target: 'next-step', start: 0, inserted: [expect.objectContaining({ id: inj.body.messageId })] }],
      ['agent/inbox/spliced', { target: 'next-step', start: 0, removedCount: 1, inserted: [], outcome: 'canceled' }],
    ])
    expect((await t.api('GET', `/v1/sessions/${s.id}/inbox`)).body).toEqual({ nextTurn: [], nextStep: [] })
    expect((await t.api('GET', `/v1/sessions/${s.id}`)).body.status).toBe('idle')
    // the next followup's turn holds only its own prompt
    t.models.script(s.id, { text: ['ok'] })
    await post(s.id, 'followup', { content: 'go' })
    evs = await t.waitForTurnEnd(s.id, 1)
    expect(userTexts(evs)).toEqual(['go'])
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'completed' })
    expectValidLog(evs)
  })

  it('prefix finalization: a cancelled stream keeps its text and reasoning as an interrupted message and drops its tool call', async () => {
    const s = await t.createSession({ system: 'P', tools: probeTool })
    t.models.script(s.id, { reasoning: ['thinking ', 'hard'], text: ['Hel', 'lo'], toolCalls: [{ id: 'c1', name: 'probe', arguments: { key: 'never' } }], hang: true }, { text: ['after'] })
    await post(s.id, 'followup', { content: 'hi' })
    await until('the tool-call block to stream', () => probe.frames.get(s.id)?.some((f) => f.kind === 'chunk' && f.chunk.type === 'block-end' && f.chunk.block.type === 'tool-call'))
    await post(s.id, 'cancel', {})
    let evs = await t.waitForTurnEnd(s.id, 1)
    const am = ofType(evs, 'assistant/message')
    expect(am).toHaveLength(1)
    expect(d(am[0]).interrupted).toBe(true)
    expect(d(am[0]).message.content).toEqual([
      { type: 'reasoning', text: 'thinking hard' },
      { type: 'text', text: 'Hello' },
    ])
    expect(ofType(evs, 'assistant/attempt')).toEqual([])
    expect(ofType(evs, 'tool/call')).toEqual([])
    expect(ofType(evs, 'tool/result')).toEqual([])
    expect(types(evs).slice(-3)).toEqual(['assistant/message', 'step/end', 'turn/end'])
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'aborted', reason: { kind: 'user' } })
    expect(probe.lines(s.id)).toEqual([])
    // the end frame names the committed prefix
    await until('the end frame', () => probe.frames.get(s.id)?.some((f) => f.kind === 'end'))
    const end = probe.frames.get(s.id)!.find((f) => f.kind === 'end')
    expect(end.outcome).toEqual({ kind: 'committed', eventType: 'assistant/message', seq: am[0].seq })
    // what the user saw is history for the next request (SPEC §14.1)
    await t.waitIdle(s.id)
    await post(s.id, 'followup', { content: 'next' })
    evs = await t.waitForTurnEnd(s.id, 2)
    const req = t.models.requestsOf(s.id)[1]
    expect(req.context.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'user'])
    const text = (req.context.messages[1] as any).content.filter((b: any) => b.type === 'text').map((b: any) => b.text)
    expect(text).toEqual(['Hello'])
    expectValidLog(evs)
    expect(problems).toEqual([])
  })

  it('prefix finalization drops a partial tool call that was still streaming', async () => {
    const s = await t.createSession({ system: 'P', tools: probeTool })
    probe.custom.set(s.id, [
      (req: any) =>
        (async function* () {
          yield { type: 'block-start', index: 0, blockType: 'text' } as StreamChunk
          yield { type: 'text-delta', index: 0, text: 'Let me check' } as StreamChunk
          yield { type: 'block-end', index: 0, block: { type: 'text', text: 'Let me check' } } as StreamChunk
          yield { type: 'block-start', index: 1, blockType: 'tool-call' } as StreamChunk
          yield { type: 'tool-call-delta', index: 1, id: 'c9', name: 'probe', argumentsDelta: '{"key":' } as StreamChunk
          await abortedPromise(req.signal)
        })(),
    ])
    await post(s.id, 'followup', { content: 'hi' })
    await until('the partial call to stream', () => probe.frames.get(s.id)?.some((f) => f.kind === 'chunk' && f.chunk.type === 'tool-call-delta'))
    await post(s.id, 'cancel', {})
    const evs = await t.waitForTurnEnd(s.id, 1)
    const am = ofType(evs, 'assistant/message')
    expect(am).toHaveLength(1)
    expect(d(am[0]).interrupted).toBe(true)
    expect(d(am[0]).message.content).toEqual([{ type: 'text', text: 'Let me check' }])
    expect(ofType(evs, 'tool/call')).toEqual([])
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'aborted', reason: { kind: 'user' } })
    expectValidLog(evs)
  })

  it('a cancel with nothing visible streamed writes assistant/attempt and no assistant/message', async () => {
    const s = await t.createSession({ system: 'P' })
    t.models.script(s.id, { hang: true })
    await post(s.id, 'followup', { content: 'hi' })
    await t.models.waitForRequest(s.id, 1)
    await post(s.id, 'cancel', {})
    const evs = await t.waitForTurnEnd(s.id, 1)
    expect(ofType(evs, 'assistant/message')).toEqual([])
    expect(ofType(evs, 'assistant/attempt')).toHaveLength(1)
    expect(types(evs).slice(-3)).toEqual(['assistant/attempt', 'step/end', 'turn/end'])
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'aborted', reason: { kind: 'user' } })
    await until('the end frame', () => probe.frames.get(s.id)?.some((f) => f.kind === 'end'))
    expect(probe.frames.get(s.id)!.find((f) => f.kind === 'end').outcome).toEqual({ kind: 'committed', eventType: 'assistant/attempt', seq: ofType(evs, 'assistant/attempt')[0].seq })
    expectValidLog(evs)
  })

  it('a cancel after only blank text streamed writes no assistant/message', async () => {
    const s = await t.createSession({ system: 'P' })
    t.models.script(s.id, { text: ['  ', '\n'], hang: true })
    await post(s.id, 'followup', { content: 'hi' })
    await until('two text deltas', () => (probe.frames.get(s.id) ?? []).filter((f) => f.kind === 'chunk' && f.chunk.type === 'text-delta').length === 2)
    await post(s.id, 'cancel', {})
    const evs = await t.waitForTurnEnd(s.id, 1)
    expect(ofType(evs, 'assistant/message')).toEqual([])
    expect(ofType(evs, 'assistant/attempt')).toHaveLength(1)
    expectValidLog(evs)
  })

  it('a cancel during error recovery (llm-retry backoff) never converts the failed stream into a message and writes no llm/retry-started', async () => {
    const s = await t.createSession({ system: 'P' })
    t.models.script(s.id, { error: '500 upstream exploded' }, { text: ['never sent'] })
    await post(s.id, 'followup', { content: 'hi' })
    await t.waitFor(s.id, (e) => e.type === 'llm/retry')
    await post(s.id, 'cancel', {})
    const evs = await t.waitForTurnEnd(s.id, 1)
    expect(ofType(evs, 'assistant/message')).toEqual([])
    expect(ofType(evs, 'assistant/attempt')).toHaveLength(1)
    expect(ofType(evs, 'llm/retry')).toHaveLength(1)
    expect(ofType(evs, 'llm/retry-started')).toEqual([])
    expect(types(evs).slice(-5)).toEqual(['request/context', 'assistant/attempt', 'llm/retry', 'step/end', 'turn/end'])
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'aborted', reason: { kind: 'user' } })
    expect(t.models.requestsOf(s.id)).toHaveLength(1)
    expect(t.models.pending(s.id)).toBe(1)
    expectValidLog(evs)
  })

  it('the earliest cause is kept: a hook cancel before a user cancel, and a user cancel before a hook cancel', async () => {
    // hook first
    const a = await t.createSession({ system: 'P' })
    t.models.script(a.id, { hang: true })
    await post(a.id, 'followup', { content: 'hi' })
    await t.models.waitForRequest(a.id, 1)
    await probe.handles.get(a.id).cancel({ reason: 'first', keepInbox: true })
    await post(a.id, 'cancel', {})
    let evs = await t.waitForTurnEnd(a.id, 1)
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'aborted', reason: { kind: 'hook', reason: 'first' } })
    expectValidLog(evs)
    // user first: once the driver has aborted for it, a later hook cancel changes nothing
    const b = await t.createSession({ system: 'P' })
    t.models.script(b.id, { hang: true })
    await post(b.id, 'followup', { content: 'hi' })
    await t.models.waitForRequest(b.id, 1)
    await post(b.id, 'cancel', { keepInbox: true })
    await until('the abort', () => probe.signals.get(b.id)?.aborted)
    await probe.handles.get(b.id).cancel({ reason: 'late' })
    evs = await t.waitForTurnEnd(b.id, 1)
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'aborted', reason: { kind: 'user' } })
    expectValidLog(evs)
  })

  it('C16: a cancel while agent/request is pending admits nothing and calls no model', async () => {
    const s = await t.createSession({ system: 'P' })
    const hold = { entered: false, gate: makeGate() }
    probe.holdRequest.set(s.id, hold)
    t.models.script(s.id, { text: ['never'] })
    await post(s.id, 'followup', { content: 'hi' })
    await until('agent/request to be entered', () => hold.entered)
    await post(s.id, 'cancel', {})
    await until('the abort', () => probe.signals.get(s.id)?.aborted)
    hold.gate.open()
    const evs = await t.waitForTurnEnd(s.id, 1)
    probe.holdRequest.delete(s.id)
    expect(types(evs)).toEqual(['agent/inbox/spliced', 'turn/start', 'agent/inbox/spliced', 'step/start', 'step/end', 'turn/end'])
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'aborted', reason: { kind: 'user' } })
    expect(t.models.requestsOf(s.id)).toHaveLength(0)
    expectValidLog(evs)
  })

  it('C17: cancel during tools (cap 2): started results commit in order, the queued call gets TOOL_ABORTED_BEFORE_DISPATCH', async () => {
    const s = await t.createSession({ system: 'P', tools: probeTool })
    t.models.script(s.id, {
      toolCalls: [
        { id: 'c1', name: 'probe', arguments: { key: 'a', parallel: true, hold: true } },
        { id: 'c2', name: 'probe', arguments: { key: 'b', parallel: true, hold: true } },
        { id: 'c3', name: 'probe', arguments: { key: 'c', parallel: true } },
      ],
    })
    await post(s.id, 'followup', { content: 'go' })
    await until('two calls running', () => probe.lines(s.id).includes('start:a') && probe.lines(s.id).includes('start:b'))
    let evs = await t.events(s.id)
    expect(ofType(evs, 'tool/call').map((e) => d(e).callId)).toEqual(['c1', 'c2'])
    await post(s.id, 'cancel', {})
    await until('the abort to reach the tools', () => probe.lines(s.id).includes('abort:a'))
    // the second call finishes first; commits stay in model order
    probe.gate(s.id, 'b').open()
    await until('call b to end', () => probe.lines(s.id).includes('end:b'))
    probe.gate(s.id, 'a').open()
    evs = await t.waitForTurnEnd(s.id, 1)
    const tail = evs.slice(evs.findIndex((e) => e.type === 'tool/call'))
    expect(tail.map((e) => [e.type, d(e).callId ?? d(e).message?.source?.callId ?? null])).toEqual([
      ['tool/call', 'c1'],
      ['tool/call', 'c2'],
      ['tool/result', 'c1'],
      ['tool/result', 'c2'],
      ['tool/call', 'c3'],
      ['tool/result', 'c3'],
      ['step/end', null],
      ['turn/end', null],
    ])
    const [r1, r2, r3] = ofType(evs, 'tool/result')
    expect(d(r1).message.content[0]).toMatchObject({ isError: false, content: [{ type: 'text', text: 'done a' }] })
    expect(d(r2).message.content[0]).toMatchObject({ isError: false, content: [{ type: 'text', text: 'done b' }] })
    expect(d(r3).error).toEqual({ name: 'AbortError', code: 'TOOL_ABORTED_BEFORE_DISPATCH' })
    expect(d(r3).message.content[0]).toMatchObject({ isError: true, content: [{ type: 'text', text: 'Error: tool call aborted before dispatch' }] })
    expect(r3.sourceEventSeqs).toEqual([ofType(evs, 'tool/call')[2].seq])
    expect(probe.lines(s.id)).not.toContain('start:c')
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'aborted', reason: { kind: 'user' } })
    expectValidLog(evs)
    expect(problems).toEqual([])
  })

  it('a cancel issued by a session/event observer of step/start still leaves a balanced log', async () => {
    const s = await t.createSession({ system: 'P' })
    probe.cancelOn.set(s.id, 'step/start')
    t.models.script(s.id, { text: ['never'] })
    await post(s.id, 'followup', { content: 'hi' })
    const evs = await t.waitForTurnEnd(s.id, 1)
    expect(types(evs)).toEqual(['agent/inbox/spliced', 'turn/start', 'agent/inbox/spliced', 'step/start', 'step/end', 'turn/end'])
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'aborted', reason: { kind: 'user' } })
    expect(t.models.requestsOf(s.id)).toHaveLength(0)
    expectValidLog(evs)
    await t.waitIdle(s.id)
  })

  it('a cancel issued by an assistant/message observer still leaves a balanced log (the calls are aborted before dispatch)', async () => {
    const s = await t.createSession({ system: 'P', tools: probeTool })
    probe.cancelOn.set(s.id, 'assistant/message')
    t.models.script(s.id, { toolCalls: [{ id: 'c1', name: 'probe', arguments: { key: 'z' } }] })
    await post(s.id, 'followup', { content: 'hi' })
    const evs = await t.waitForTurnEnd(s.id, 1)
    expect(types(evs).slice(-5)).toEqual(['assistant/message', 'tool/call', 'tool/result', 'step/end', 'turn/end'])
    expect(d(ofType(evs, 'tool/result')[0]).error).toEqual({ name: 'AbortError', code: 'TOOL_ABORTED_BEFORE_DISPATCH' })
    expect(probe.lines(s.id)).toEqual([])
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'aborted', reason: { kind: 'user' } })
    expectValidLog(evs)
    await t.waitIdle(s.id)
  })
})
