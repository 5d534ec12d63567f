// SessionState bookkeeping: seq/time (SPEC §3.1.2), turn and step pairing (SPEC §15.2–3), open tool
// calls for crash repair (SPEC §13.1), fresh logs and end-seeds (SPEC §13.2), the latest header and
// route context (SPEC §13.4), the snapshot tracker (SPEC §7.3), and undo (SPEC §3.1.4).

import { isDeepStrictEqual } from 'node:util'
import { describe, expect, it } from 'vitest'
import {
  InboxError,
  JsonValueError,
  LogError,
  SessionState,
  type ContentBlock,
  type Json,
  type SessionEvent,
  type SurfaceOp,
  type UserMessage,
} from '../../src/session/index.js'
import { asstMsg, LogBuilder, rejectionCheck, rep, snapshotState, sysMsg, toolResMsg, userMsg } from '../helpers/session-log.js'

const snapshotMsg = (id: string, text: string): UserMessage => userMsg(id, text, { kind: 'plugin', plugin: 'system-prompt', form: 'snapshot', sections: ['ctx'] })

class Sess extends LogBuilder {
  system(text: string, op: SurfaceOp = 'append', src?: number[]): number {
    return this.add('system/message', { ...this.ts, message: sysMsg(`sys-${this.s.nextSeq}`, text) }, op, src)
  }
  assistant(content: ContentBlock[], extra: Record<string, Json> = {}): number {
    return this.add('assistant/message', { ...this.ts, message: asstMsg(`a-${this.s.nextSeq}`, content), stream: [], ...extra }, 'append')
  }
}

const snap = (s: SessionState) => snapshotState(s)
const expectRejected = rejectionCheck(LogError, snap)

describe('seq and time (SPEC §3.1.2)', () => {
  it('each event must take the next seq', () => {
    const x = new Sess()
    expectRejected(x, { ...x.ev('turn/start', { turn: 1 }), seq: 1 })
    x.turnStart()
    expectRejected(x, { ...x.ev('step/start', { turn: 1, step: 1 }), seq: 0 })
    expectRejected(x, { ...x.ev('step/start', { turn: 1, step: 1 }), seq: 2 })
    expect(x.s.headSeq).toBe(0)
  })
  it('time may repeat but never decrease', () => {
    const x = new Sess()
    x.turnStart()
    const t = x.s.lastTime
    x.s.apply({ ...x.ev('step/start', { turn: 1, step: 1 }), time: t })
    expect(x.s.lastTime).toBe(t)
    expectRejected(x, { ...x.ev('step/end', { turn: 1, step: 1 }), time: t - 1 })
  })
  it('data must be lossless JSON (SPEC §3.1.3)', () => {
    const x = new Sess()
    x.turnStart()
    expectRejected(x, x.ev('my/plugin-event', { n: NaN }), JsonValueError)
    expectRejected(x, x.ev('my/plugin-event', { d: new Date() as unknown as Json }), JsonValueError)
    x.stepStart()
    expectRejected(x, x.ev('user/message', { ...userMsg('u', 'x'), extra: -0 } as unknown as Json, 'append'), JsonValueError)
  })
})

describe('turn pairing and numbering (SPEC §15.2)', () => {
  it('turns number from 1 without gaps and may not nest', () => {
    const x = new Sess()
    expectRejected(x, x.ev('turn/start', { turn: 2 }))
    expectRejected(x, x.ev('turn/start', { turn: 0 }))
    x.turnStart()
    expect(x.s.openTurn).toBe(1)
    expectRejected(x, x.ev('turn/start', { turn: 2 }))
    x.turnEnd()
    expect(x.s.openTurn).toBeNull()
    expectRejected(x, x.ev('turn/start', { turn: 1 }))
    expectRejected(x, x.ev('turn/start', { turn: 3 }))
    x.turnStart()
    expect(x.s.lastTurn).toBe(2)
  })
  it('turn/end needs that open turn and no open step', () => {
    const x = new Sess()
    expectRejected(x, x.ev('turn/end', { turn: 1, reason: { kind: 'completed' } }))
    x.turnStart()
    expectRejected(x, x.ev('turn/end', { turn: 2, reason: { kind: 'completed' } }))
    x.stepStart()
    expectRejected(x, x.ev('turn/end', { turn: 1, reason: { kind: 'completed' } }))
    x.stepEnd()
    x.turnEnd()
    expectRejected(x, x.ev('turn/end', { turn: 1, reason: { kind: 'completed' } }))
  })
})

describe('step pairing and step-scoped events (SPEC §15.3)', () => {
  it('steps number from 1 per turn without gaps and may not nest', () => {
    const x = new Sess()
    expectRejected(x, x.ev('step/start', { turn: 1, step: 1 })) // outside a turn
    x.turnStart()
    expectRejected(x, x.ev('step/start', { turn: 2, step: 1 })) // wrong turn
    expectRejected(x, x.ev('step/start', { turn: 1, step: 2 })) // gap
    x.stepStart()
    expectRejected(x, x.ev('step/start', { turn: 1, step: 2 })) // nested
    x.stepEnd()
    expectRejected(x, x.ev('step/start', { turn: 1, step: 1 })) // repeated
    expectRejected(x, x.ev('step/start', { turn: 1, step: 3 })) // gap
    x.stepStart()
    expect(x.s.lastStep).toBe(2)
    x.stepEnd()
    x.turnEnd()
    x.turnStart()
    expectRejected(x, x.ev('step/start', { turn: 2, step: 3 })) // numbering restarts per turn
    x.stepStart()
    expect(x.ts).toEqual({ turn: 2, step: 1 })
  })
  it('step/end needs that open step of that turn', () => {
    const x = new Sess()
    x.turnStart()
    expectRejected(x, x.ev('step/end', { turn: 1, step: 1 }))
    x.stepStart()
    expectRejected(x, x.ev('step/end', { turn: 1, step: 2 }))
    expectRejected(x, x.ev('step/end', { turn: 2, step: 1 }))
    x.stepEnd()
    expectRejected(x, x.ev('step/end', { turn: 1, step: 1 }))
  })

  const scoped = (type: string, ts: { turn: number; step: number }): [Json, SurfaceOp | undefined, number[] | undefined] => {
    switch (type) {
      case 'system/message':
        return [{ ...ts, message: { id: 's', role: 'system', content: [{ type: 'text', text: 'P' }], source: { kind: 'plugin', plugin: 'system-prompt' } } }, 'append', undefined]
      case 'assistant/message':
        return [{ ...ts, message: asstMsg('a', [{ type: 'text', text: 'x' }]), stream: [] }, 'append', undefined]
      case 'assistant/attempt':
        return [{ ...ts, stream: [] }, undefined, undefined]
      case 'tool/call':
        return [{ ...ts, callId: 'c9', name: 'echo', arguments: '{}' }, undefined, undefined]
      default: // append-origin tool/result
        return [{ ...ts, message: toolResMsg('c1', 'r') }, 'append', undefined]
    }
  }
  const STEP_SCOPED = ['system/message', 'assistant/message', 'assistant/attempt', 'tool/call', 'tool/result']

  it.each(STEP_SCOPED)('%s outside a step is rejected', (type) => {
    const x = new Sess()
    x.turnStart()
    x.stepStart()
    x.stepEnd()
    expectRejected(x, x.ev(type, ...scoped(type, { turn: 1, step: 1 })))
    x.turnEnd()
    expectRejected(x, x.ev(type, ...scoped(type, { turn: 1, step: 1 })))
  })
  it.each(STEP_SCOPED)('%s carrying another turn or step than the open one is rejected', (type) => {
    const x = new Sess()
    x.turnStart()
    x.stepStart()
    x.stepEnd()
    x.stepStart() // turn 1, step 2 open
    expectRejected(x, x.ev(type, ...scoped(type, { turn: 1, step: 1 })))
    expectRejected(x, x.ev(type, ...scoped(type, { turn: 2, step: 2 })))
    // the right coordinates pass
    x.add(type, ...scoped(type, { turn: 1, step: 2 }))
  })
  it('an appended user/message must sit inside an open step; a replacing one (a checkpoint) need not', () => {
    const x = new Sess()
    expectRejected(x, x.ev('user/message', userMsg('u0', 'x') as unknown as Json, 'append'))
    x.turnStart()
    x.stepStart()
    const u = x.user(userMsg('u1', 'hi'))
    x.stepEnd()
    x.turnEnd()
    expectRejected(x, x.ev('user/message', userMsg('u2', 'late') as unknown as Json, 'append'))
    x.user(userMsg('cp', 'summary', { kind: 'plugin', plugin: 'compaction', form: 'checkpoint' }), rep(u, u), [u])
    expect(x.s.nodes.map((n) => n.seq)).toEqual([5])
  })
})

describe('open tool calls for crash repair (SPEC §13.1)', () => {
  it('lists the open turn’s tool-call blocks lacking a result, in model order, with the seq of a logged tool/call', () => {
    const x = new Sess()
    x.turnStart()
    x.stepStart()
    x.user(userMsg('u', 'go'))
    x.assistant([
      { type: 'text', text: 'three calls' },
      { type: 'tool-call', id: 'c1', name: 'a', arguments: '{}' },
      { type: 'tool-call', id: 'c2', name: 'b', arguments: '{}' },
      { type: 'tool-call', id: 'c3', name: 'c', arguments: '{}' },
    ])
    const c1 = x.toolCall('c1', 'a')
    x.toolResult('c1', 'ok', c1)
    const c2 = x.toolCall('c2', 'b')
    expect([...x.s.openCalls.values()]).toEqual([
      { callId: 'c2', name: 'b', turn: 1, step: 1, callSeq: c2 },
      { callId: 'c3', name: 'c', turn: 1, step: 1 },
    ])
    // a crash here: the repaired log closes them; the same state folds from the log
    expect([...SessionState.fromEvents(x.log).openCalls.values()]).toEqual([...x.s.openCalls.values()])
    x.toolResult('c2', 'ok', c2)
    x.toolResult('c3', 'not started')
    expect(x.s.openCalls.size).toBe(0)
  })
  it('calls of an earlier turn are not open in the next turn', () => {
    const x = new Sess()
    x.turnStart()
    x.stepStart()
    x.assistant([{ type: 'tool-call', id: 'old', name: 'a', arguments: '{}' }])
    x.stepEnd()
    x.turnEnd()
    expect([...x.s.openCalls.keys()]).toEqual(['old'])
    x.turnStart()
    expect(x.s.openCalls.size).toBe(0)
  })
  it('a replacing tool/result (pruning) does not close or reopen a call', () => {
    const x = new Sess()
    x.turnStart()
    x.stepStart()
    x.assistant([{ type: 'tool-call', id: 'c1', name: 'a', arguments: '{}' }, { type: 'tool-call', id: 'c2', name: 'b', arguments: '{}' }])
    const c1 = x.toolCall('c1', 'a')
    const r1 = x.toolResult('c1', 'big', c1)
    const d = structuredClone(x.log[r1].data as any)
    d.message.content[0].content = []
    x.add('tool/result', d, rep(r1, r1), [r1])
    expect([...x.s.openCalls.keys()]).toEqual(['c2'])
  })
})

describe('fresh logs and end-seeds (SPEC §13.2)', () => {
  it('an empty log and a log of splices only are fresh', () => {
    const x = new Sess()
    expect(x.s.fresh).toBe(true)
    x.splice({ target: 'next-turn', start: 0, inserted: [userMsg('a', 'a')] as unknown as Json })
    x.splice({ target: 'next-step', start: 0, inserted: [userMsg('b', 'b')] as unknown as Json })
    x.splice({ target: 'next-step', start: 0, removedCount: 1, inserted: [], outcome: 'canceled' })
    expect(x.s.fresh).toBe(true)
    expect(x.s.nonSpliceSinceSeed).toBe(false)
    expect(SessionState.fromEvents(x.log).fresh).toBe(true)
  })
  it('any other event ends freshness; an end-seed resets nonSpliceSinceSeed but the log is not fresh again', () => {
    const x = new Sess()
    x.splice({ target: 'next-turn', start: 0, inserted: [userMsg('a', 'a')] as unknown as Json })
    x.turnStart()
    expect(x.s.fresh).toBe(false)
    expect(x.s.nonSpliceSinceSeed).toBe(true)
    x.turnEnd()
    const seed = x.add('session/end-seed', {})
    expect(x.s.lastSeedSeq).toBe(seed)
    expect(x.s.nonSpliceSinceSeed).toBe(false)
    expect(x.s.fresh).toBe(false)
    // splices after the seed: a loading instance writes no new seed
    x.splice({ target: 'next-turn', start: 0, inserted: [userMsg('b', 'b')] as unknown as Json })
    expect(x.s.nonSpliceSinceSeed).toBe(false)
    expect(SessionState.fromEvents(x.log).nonSpliceSinceSeed).toBe(false)
    // anything else after the seed: it does
    x.add('request/header', { header: { config: { provider: 'p', model: 'm' } }, reason: 'resume' })
    expect(x.s.nonSpliceSinceSeed).toBe(true)
    expect(SessionState.fromEvents(x.log).nonSpliceSinceSeed).toBe(true)
  })
  it('a copied log that starts with an end-seed (fork) is not fresh', () => {
    const x = new Sess()
    x.add('session/end-seed', {})
    expect(x.s.fresh).toBe(false)
    expect(x.s.nonSpliceSinceSeed).toBe(false)
  })
})

describe('latest header, route context and compaction folds (SPEC §13.4)', () => {
  it('keeps the newest request/header with its seq and the newest request/context', () => {
    const x = new Sess()
    expect(x.s.latestHeader).toBeUndefined()
    expect(x.s.latestContext).toBeUndefined()
    const h1 = { config: { provider: 'p', model: 'm1', maxTokens: 100 }, tools: [{ name: 't', description: 'd', parameters: { type: 'object' } }] }
    const s1 = x.add('request/header', { header: h1, reason: 'initial' })
    x.add('request/context', { provider: 'p', model: 'm1', contextWindow: 1000 })
    x.turnStart()
    const h2 = { config: { provider: 'p', model: 'm2' }, adapterDefaults: { maxTokens: true } }
    expect(x.s.latestHeader).toEqual({ seq: s1, header: h1 })
    const s2 = x.add('request/header', { header: h2, reason: 'change', startsSeries: true })
    x.add('request/context', { provider: 'p', model: 'm2' })
    x.turnEnd()
    expect(x.s.latestHeader).toEqual({ seq: s2, header: h2 })
    expect(x.s.latestContext).toEqual({ provider: 'p', model: 'm2' })
    const loaded = SessionState.fromEvents(x.log)
    expect(loaded.latestHeader).toEqual({ seq: s2, header: h2 })
    expect(loaded.latestContext).toEqual({ provider: 'p', model: 'm2' })
  })
  it('tracks an open compaction until its end or an end-seed', () => {
    const x = new Sess()
    x.add('compaction/start', { compactionId: 'k1', turn: null })
    expect(x.s.openCompaction).toBe('k1')
    x.add('compaction/end', { compactionId: 'other', turn: null })
    expect(x.s.openCompaction).toBe('k1')
    x.add('compaction/end', { compactionId: 'k1', turn: null })
    expect(x.s.openCompaction).toBeUndefined()
    x.add('compaction/start', { compactionId: 'k2', turn: null })
    x.add('session/end-seed', {})
    expect(x.s.openCompaction).toBeUndefined()
  })
})

describe('runtime-context snapshot tracker (SPEC §7.3)', () => {
  function withSnapshots(): { x: Sess; snapA: number; snapB: number } {
    const x = new Sess()
    x.turnStart()
    x.stepStart()
    x.system('P')
    x.user(userMsg('u1', 'hi'))
    const snapA = x.user(snapshotMsg('snapA', 'ctx A'))
    x.assistant([{ type: 'text', text: 'ok' }])
    x.stepEnd()
    x.turnEnd()
    x.turnStart()
    x.stepStart()
    x.user(userMsg('u2', 'again'))
    const snapB = x.user(snapshotMsg('snapB', 'ctx B'))
    x.assistant([{ type: 'text', text: 'ok' }])
    x.stepEnd()
    x.turnEnd()
    return { x, snapA, snapB }
  }
  it('remembers the text of the snapshot last retained on the surface', () => {
    const { x, snapB } = withSnapshots()
    expect(x.s.snapshot).toEqual({ seq: snapB, text: 'ctx B' })
    expect(SessionState.fromEvents(x.log).snapshot).toEqual({ seq: snapB, text: 'ctx B' })
  })
  it('shadowing the retained snapshot clears the tracker; other replacements leave it alone', () => {
    const { x, snapA, snapB } = withSnapshots()
    const u1 = snapA - 1
    x.user(userMsg('u1e', 'edited'), rep(u1, u1), [u1])
    expect(x.s.snapshot).toEqual({ seq: snapB, text: 'ctx B' })
    x.user(userMsg('cp', 'summary', { kind: 'plugin', plugin: 'compaction', form: 'checkpoint' }), rep(snapB - 1, snapB + 1), [snapB - 1, snapB, snapB + 1])
    expect(x.s.snapshot).toBeUndefined()
  })
  it('on load restores from the newest surviving snapshot', () => {
    const { x, snapA, snapB } = withSnapshots()
    x.user(userMsg('cp', 'summary', { kind: 'plugin', plugin: 'compaction', form: 'checkpoint' }), rep(snapB, snapB), [snapB])
    expect(SessionState.fromEvents(x.log).snapshot).toEqual({ seq: snapA, text: 'ctx A' })
    // every snapshot shadowed: nothing retained
    const y = withSnapshots()
    y.x.user(userMsg('cp', 'summary', { kind: 'plugin', plugin: 'compaction', form: 'checkpoint' }), rep(y.snapA, y.snapB + 1), y.x.s.nodes.filter((n) => n.seq >= y.snapA).map((n) => n.seq))
    expect(SessionState.fromEvents(y.x.log).snapshot).toBeUndefined()
  })
  it('on load a malformed newest snapshot counts as unknown (null)', () => {
    const x = new Sess()
    x.turnStart()
    x.stepStart()
    x.user(snapshotMsg('good', 'ctx'))
    const bad: UserMessage = { id: 'bad', role: 'user', content: [{ type: 'image', url: 'https://example.com/x.png' }], source: { kind: 'plugin', plugin: 'system-prompt', form: 'snapshot' } }
    x.user(bad)
    expect(SessionState.fromEvents(x.log).snapshot).toBeNull()
    const y = new Sess()
    y.turnStart()
    y.stepStart()
    y.user({ id: 'empty', role: 'user', content: [], source: { kind: 'plugin', plugin: 'system-prompt', form: 'snapshot' } })
    expect(SessionState.fromEvents(y.log).snapshot).toBeNull()
  })
  it('a user/message from another plugin or form is not a snapshot', () => {
    const x = new Sess()
    x.turnStart()
    x.stepStart()
    x.user(userMsg('n1', 'note', { kind: 'plugin', plugin: 'other', form: 'snapshot' }))
    x.user(userMsg('n2', 'note', { kind: 'plugin', plugin: 'system-prompt', form: 'checkpoint' }))
    expect(x.s.snapshot).toBeUndefined()
    expect(SessionState.fromEvents(x.log).snapshot).toBeUndefined()
  })
})

describe('usage anchor (SPEC §12.2)', () => {
  it('is the latest assistant/message with usage, with the generation and header at that point', () => {
    const x = new Sess()
    const h = x.add('request/header', { header: { config: { provider: 'p', model: 'm' } }, reason: 'initial' })
    x.turnStart()
    x.stepStart()
    const u = x.user(userMsg('u', 'x'))
    const a1 = x.assistant([{ type: 'text', text: 'a' }], { usage: { inputTokens: 10, outputTokens: 2 } })
    x.assistant([{ type: 'text', text: 'b' }]) // no usage: the anchor stays
    expect(x.s.anchor).toEqual({ seq: a1, usage: { inputTokens: 10, outputTokens: 2 }, generation: 0, headerSeq: h })
    x.user(userMsg('ue', 'edit'), rep(u, u), [u])
    const a3 = x.assistant([], { usage: { inputTokens: 30, outputTokens: 0 } })
    expect(x.s.anchor).toEqual({ seq: a3, usage: { inputTokens: 30, outputTokens: 0 }, generation: 1, headerSeq: h })
  })
})

describe('undo (SPEC §3.1.4) and fatal load errors (SPEC §4.1)', () => {
  /** A log touching every fold: splices, turns, steps, surface appends and replacements, calls, headers, retries, seeds. */
  function richLog(): SessionEvent[] {
    const x = new Sess()
    x.splice({ target: 'next-turn', start: 0, inserted: [userMsg('q1', 'first')] as unknown as Json })
    x.splice({ target: 'next-step', start: 0, inserted: [userMsg('s1', 'steer')] as unknown as Json })
    x.turnStart()
    x.splice({ target: 'next-step', start: 0, removedCount: 1, inserted: [] })
    x.splice({ target: 'next-turn', start: 0, removedCount: 1, inserted: [] })
    x.stepStart()
    x.system('P')
    x.user(userMsg('s1', 'steer'))
    x.user(userMsg('q1', 'first'))
    x.user(snapshotMsg('snap', 'ctx'))
    x.add('request/header', { header: { config: { provider: 'p', model: 'm' } }, reason: 'initial' })
    x.add('request/context', { provider: 'p', model: 'm' })
    x.add('assistant/attempt', { ...x.ts, stream: [] })
    x.add('llm/retry', { retryId: 'r1', ...x.ts, provider: 'p', mode: 'normal', policyKey: 'k', retry: 1, maxRetries: 3, delayMs: 10, failure: { message: 'x', code: 'SERVER' } })
    x.system('P2', rep(6, 6), [6])
    x.assistant([{ type: 'tool-call', id: 'c1', name: 'a', arguments: '{}' }, { type: 'tool-call', id: 'c2', name: 'b', arguments: '{}' }], { usage: { inputTokens: 5, outputTokens: 5 } })
    const c1 = x.toolCall('c1', 'a')
    const r1 = x.toolResult('c1', 'one', c1)
    x.toolResult('c2', 'two')
    x.stepEnd()
    x.stepStart()
    x.assistant([{ type: 'text', text: 'done' }])
    x.stepEnd()
    x.turnEnd()
    const pr = structuredClone(x.log[r1].data as any)
    pr.message.content[0].content = []
    x.add('tool/result', pr, rep(r1, r1), [r1])
    x.add('compaction/start', { compactionId: 'k', turn: null })
    x.user(userMsg('cp', 'summary', { kind: 'plugin', plugin: 'compaction', form: 'checkpoint' }), rep(7, 9), [7, 8, 9])
    x.add('compaction/end', { compactionId: 'k', turn: null })
    x.add('session/end-seed', {})
    x.splice({ target: 'next-turn', start: 0, inserted: [userMsg('q2', 'later')] as unknown as Json })
    x.turnStart()
    return x.log
  }

  it('the undo of every event of a rich log restores the exact previous state', () => {
    const log = richLog()
    const s = new SessionState()
    const wrong: string[] = []
    for (const e of log) {
      const before = snap(s)
      const undo = s.apply(e)
      const after = snap(s)
      expect(after).not.toEqual(before)
      undo()
      const undone = snap(s) as Record<string, unknown>
      const differs = Object.keys(before).filter((k) => !isDeepStrictEqual((before as Record<string, unknown>)[k], undone[k]))
      if (differs.length) wrong.push(`undo of seq ${e.seq} ${e.type} changed ${differs.join(', ')}`)
      // go on from the state the log really has
      const fresh = SessionState.fromEvents(log.slice(0, e.seq + 1))
      expect(snap(fresh)).toEqual(after)
      Object.assign(s, fresh)
    }
    expect(wrong).toEqual([])
    expect(snap(s)).toEqual(snap(SessionState.fromEvents(log)))
  })

  it('fromEvents throws at the first event that does not fold', () => {
    const log = richLog()
    const broken = log.map((e) => structuredClone(e))
    const at = broken.findIndex((e) => e.type === 'step/start' && (e.data as any).step === 2)
    ;(broken[at].data as any).step = 3
    expect(() => SessionState.fromEvents(broken)).toThrow(LogError)
    const dup = log.map((e) => structuredClone(e))
    const last = dup.findLastIndex((e) => e.type === 'agent/inbox/spliced')
    ;(dup[last].data as any).inserted = [userMsg('q2', 'x'), userMsg('q2', 'y')]
    expect(() => SessionState.fromEvents(dup)).toThrow(InboxError)
  })
})
