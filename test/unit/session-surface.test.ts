// The surface of SPEC §3.2 (append/replace, sourceEventSeqs, head protection, tool/result
// replacement, replaceGeneration, rejection and undo) and the projection of SPEC §14 (deriveMessages).

import { describe, expect, it } from 'vitest'
import {
  deriveFromSurfaceEvents,
  SessionState,
  SurfaceError,
  type ContentBlock,
  type Json,
  type Message,
  type SurfaceOp,
} from '../../src/session/index.js'
import { asstMsg, LogBuilder, rejectionCheck, rep, snapshotState, sysMsg, toolResMsg, userMsg } from '../helpers/session-log.js'

// ---- the log builder: every event continues the state's seq and time ----

class Sess extends LogBuilder {
  system(id: string, text: string | null, op: SurfaceOp = 'append', src?: number[]): number {
    return this.add('system/message', { ...this.ts, message: sysMsg(id, text) }, op, src)
  }
  assistant(id: string, content: ContentBlock[], extra: Record<string, Json> = {}): number {
    return this.add('assistant/message', { ...this.ts, message: asstMsg(id, content), stream: [], ...extra }, 'append')
  }
}

/** Everything apply() may touch but `fresh`, deep-copied. */
const snap = (s: SessionState) => snapshotState(s, { fresh: false })
/** apply() must throw `cls` and leave every part of the state as it was. */
const expectRejected = rejectionCheck(SurfaceError, snap)

const surfaceSeqs = (s: SessionState) => s.nodes.map((n) => n.seq)

/**
 * One finished turn: surface [2 system, 3 user, 4 assistant(call c1), 6 tool/result, 9 assistant].
 * seq 0 turn/start, 1 step/start, 5 tool/call, 7 step/end, 8 step/start, 10 step/end, 11 turn/end.
 */
function baseTurn(): Sess {
  const x = new Sess()
  x.turnStart()
  x.stepStart()
  x.system('sys-1', 'You are helpful.')
  x.user(userMsg('u1', 'hi'))
  x.assistant('a1', [{ type: 'text', text: 'calling' }, { type: 'tool-call', id: 'c1', name: 'echo', arguments: '{"text":"x"}' }])
  x.toolCall('c1', 'echo', '{"text":"x"}')
  x.toolResult('c1', 'x', 5)
  x.stepEnd()
  x.stepStart()
  x.assistant('a2', [{ type: 'text', text: 'done' }])
  x.stepEnd()
  x.turnEnd()
  return x
}

const checkpoint = (id = 'cp1') => userMsg(id, 'summary of earlier work', { kind: 'plugin', plugin: 'compaction', form: 'checkpoint' })

describe('surface appends and replacements (SPEC §3.2.2, §3.2.3)', () => {
  it('appends push the event seq onto the end of the surface, in log order, without touching replaceGeneration', () => {
    const x = baseTurn()
    expect(surfaceSeqs(x.s)).toEqual([2, 3, 4, 6, 9])
    expect(x.s.nodes.map((n) => n.type)).toEqual(['system/message', 'user/message', 'assistant/message', 'tool/result', 'assistant/message'])
    expect(x.s.replaceGeneration).toBe(0)
    expect(x.s.nodes[1].event).toBe(x.log[3])
  })

  it('a replace range (inclusive) is removed and the new event takes its place', () => {
    const x = baseTurn()
    const seq = x.user(checkpoint(), rep(3, 6), [3, 4, 6])
    expect(seq).toBe(12)
    expect(surfaceSeqs(x.s)).toEqual([2, 12, 9])
    expect(x.s.nodes[1].event).toBe(x.log[12])
    expect(x.s.replaceGeneration).toBe(1)
  })

  it('a single-node range (start = end) is a valid replacement', () => {
    const x = baseTurn()
    x.user(userMsg('u1b', 'hi, edited'), rep(3, 3), [3])
    expect(surfaceSeqs(x.s)).toEqual([2, 12, 4, 6, 9])
    expect(x.s.replaceGeneration).toBe(1)
  })

  it('a replacement node can itself be shadowed later, and the count of replacements is the generation', () => {
    const x = baseTurn()
    x.user(checkpoint('cp1'), rep(3, 4), [3, 4])
    expect(surfaceSeqs(x.s)).toEqual([2, 12, 6, 9])
    x.user(checkpoint('cp2'), rep(12, 9), [12, 6, 9])
    expect(surfaceSeqs(x.s)).toEqual([2, 13])
    expect(x.s.replaceGeneration).toBe(2)
    // appends after replacements leave the generation alone
    x.turnStart()
    x.stepStart()
    x.user(userMsg('u2', 'next'))
    x.assistant('a3', [{ type: 'text', text: 'ok' }])
    expect(x.s.replaceGeneration).toBe(2)
    expect(surfaceSeqs(x.s)).toEqual([2, 13, 16, 17])
  })

  it('sourceEventSeqs may list seqs beyond the shadowed range as long as every shadowed seq is there', () => {
    const x = baseTurn()
    // the tool/call (5) is not on the surface but is a legitimate provenance of the checkpoint
    x.user(checkpoint(), rep(3, 6), [3, 4, 5, 6])
    expect(surfaceSeqs(x.s)).toEqual([2, 12, 9])
  })

  describe('rejected replace ranges leave the state unchanged', () => {
    it('start after end', () => {
      const x = baseTurn()
      expectRejected(x, x.ev('user/message', checkpoint() as unknown as Json, rep(6, 3), [3, 4, 6]))
    })
    it('start not on the surface (a non-surface event, an unknown seq)', () => {
      const x = baseTurn()
      expectRejected(x, x.ev('user/message', checkpoint() as unknown as Json, rep(5, 6), [5, 6]))
      expectRejected(x, x.ev('user/message', checkpoint() as unknown as Json, rep(99, 99), [3]))
    })
    it('end not on the surface', () => {
      const x = baseTurn()
      expectRejected(x, x.ev('user/message', checkpoint() as unknown as Json, rep(3, 7), [3, 4, 6, 7]))
    })
    it('a seq that was on the surface but is shadowed now', () => {
      const x = baseTurn()
      x.user(checkpoint('cp1'), rep(3, 4), [3, 4])
      expectRejected(x, x.ev('user/message', checkpoint('cp2') as unknown as Json, rep(3, 6), [3, 4, 6]))
      expectRejected(x, x.ev('user/message', checkpoint('cp2') as unknown as Json, rep(4, 4), [4]))
    })
    it('sourceEventSeqs missing a shadowed seq, or absent', () => {
      const x = baseTurn()
      expectRejected(x, x.ev('user/message', checkpoint() as unknown as Json, rep(3, 6), [3, 6]))
      expectRejected(x, x.ev('user/message', checkpoint() as unknown as Json, rep(3, 6)))
    })
    it('an unknown surfaceOp', () => {
      const x = baseTurn()
      expectRejected(x, x.ev('user/message', checkpoint() as unknown as Json, 'prepend' as unknown as SurfaceOp))
      expectRejected(x, x.ev('user/message', checkpoint() as unknown as Json, { op: 'shadow', start: 3, end: 3 } as unknown as SurfaceOp, [3]))
    })
  })
})

describe('sourceEventSeqs (SPEC §3.2.4) and which types carry surface fields (SPEC §3.2.1)', () => {
  it('must be non-empty', () => {
    const x = baseTurn()
    expectRejected(x, x.ev('user/message', checkpoint() as unknown as Json, 'append', []))
    expectRejected(x, x.ev('user/message', checkpoint() as unknown as Json, rep(3, 3), []))
  })
  it('must be duplicate-free', () => {
    const x = baseTurn()
    expectRejected(x, x.ev('user/message', checkpoint() as unknown as Json, rep(3, 6), [3, 4, 4, 6]))
  })
  it("must lie below the event's own seq", () => {
    const x = baseTurn()
    expect(x.s.nextSeq).toBe(12)
    expectRejected(x, x.ev('user/message', checkpoint() as unknown as Json, rep(3, 3), [3, 12]))
    expectRejected(x, x.ev('user/message', checkpoint() as unknown as Json, rep(3, 3), [3, 40]))
  })
  it('is accepted on an appended tool/result citing its tool/call', () => {
    const x = baseTurn()
    expect(x.log[6].sourceEventSeqs).toEqual([5])
    expect(surfaceSeqs(x.s)).toContain(6)
  })
  it('assistant/message may not carry it, not even when appending', () => {
    const x = baseTurn()
    x.turnStart()
    x.stepStart()
    expectRejected(x, x.ev('assistant/message', { ...x.ts, message: asstMsg('a9', [{ type: 'text', text: 'x' }]), stream: [] }, 'append', [2]))
    expectRejected(x, x.ev('assistant/message', { ...x.ts, message: asstMsg('a9', [{ type: 'text', text: 'x' }]), stream: [] }, rep(9, 9), [9]))
  })
  it('non-surface types may carry neither surfaceOp nor sourceEventSeqs', () => {
    const x = baseTurn()
    expectRejected(x, x.ev('turn/start', { turn: 2 }, 'append'))
    expectRejected(x, x.ev('turn/start', { turn: 2 }, undefined, [1]))
    expectRejected(x, x.ev('agent/inbox/spliced', { target: 'next-turn', start: 0, inserted: [userMsg('q', 'q')] as unknown as Json }, 'append'))
    expectRejected(x, x.ev('compaction/prune', { shadowedRange: { start: 6, end: 6 }, shadowedSeqs: [6], shadowedTokenCount: 1 }, rep(6, 6), [6]))
    expectRejected(x, x.ev('session/end-seed', {}, undefined, [3]))
    x.turnStart()
    x.stepStart()
    expectRejected(x, x.ev('tool/call', { ...x.ts, callId: 'c9', name: 'echo', arguments: '{}' }, undefined, [4]))
    expectRejected(x, x.ev('assistant/attempt', { ...x.ts, stream: [] }, 'append'))
  })
  it('each of the four surface types must carry surfaceOp', () => {
    const x = baseTurn()
    x.turnStart()
    x.stepStart()
    expectRejected(x, x.ev('user/message', userMsg('u9', 'x') as unknown as Json))
    expectRejected(x, x.ev('system/message', { ...x.ts, message: sysMsg('s9', 'S') }))
    expectRejected(x, x.ev('assistant/message', { ...x.ts, message: asstMsg('a9', [{ type: 'text', text: 'x' }]), stream: [] }))
    expectRejected(x, x.ev('tool/result', { ...x.ts, message: toolResMsg('c1', 'y') }, undefined, [5]))
  })
})

describe('head protection (SPEC §3.2.6)', () => {
  function openStep(): Sess {
    const x = baseTurn()
    x.turnStart() // 12
    x.stepStart() // 13
    return x
  }
  it('a single-node system/message may replace the head system node', () => {
    const x = openStep()
    x.system('sys-2', 'New prompt.', rep(2, 2), [2])
    expect(surfaceSeqs(x.s)).toEqual([14, 3, 4, 6, 9])
    expect(x.s.replaceGeneration).toBe(1)
    expect(x.s.deriveMessages()[0]).toEqual(sysMsg('sys-2', 'New prompt.'))
  })
  it('no other type may replace the head, and no range wider than the head', () => {
    const x = openStep()
    expectRejected(x, x.ev('user/message', checkpoint() as unknown as Json, rep(2, 2), [2]))
    expectRejected(x, x.ev('user/message', checkpoint() as unknown as Json, rep(2, 4), [2, 3, 4]))
    expectRejected(x, x.ev('system/message', { ...x.ts, message: sysMsg('sys-2', 'P') }, rep(2, 3), [2, 3]))
    expectRejected(x, x.ev('tool/result', x.toolResultData('c1', 'z'), rep(2, 2), [2]))
  })
  it('non-head system nodes are unprotected: a checkpoint may shadow one', () => {
    const x = openStep()
    const s2 = x.system('sys-mid', 'mid-session system node') // 14, appended at the end: not the head
    x.user(userMsg('u2', 'more'))
    x.stepEnd()
    x.turnEnd()
    x.user(checkpoint(), rep(3, s2), [3, 4, 6, 9, s2])
    expect(surfaceSeqs(x.s)).toEqual([2, 18, 15])
    expect(x.s.replaceGeneration).toBe(1)
  })
  it('a head that is not a system/message is not protected', () => {
    const x = new Sess()
    x.turnStart()
    x.stepStart()
    x.user(userMsg('u1', 'no system prompt')) // 2: head
    x.assistant('a1', [{ type: 'text', text: 'ok' }]) // 3
    x.stepEnd()
    x.turnEnd()
    x.user(checkpoint(), rep(2, 3), [2, 3])
    expect(surfaceSeqs(x.s)).toEqual([6])
  })
})

describe('replacing tool/result (SPEC §3.2.5)', () => {
  it('may shadow exactly one tool/result, changing only the tool-result content', () => {
    const x = baseTurn()
    const before = x.log[6].data as any
    const pruned = structuredClone(before)
    pruned.message.content[0].content = [{ type: 'text', text: '[output pruned]' }]
    x.add('tool/result', pruned, rep(6, 6), [6])
    expect(surfaceSeqs(x.s)).toEqual([2, 3, 4, 12, 9])
    expect(x.s.replaceGeneration).toBe(1)
    expect(x.s.deriveMessages()[3]).toEqual(pruned.message)
  })
  it('may not shadow a node that is not a tool/result, nor more than one node', () => {
    const x = baseTurn()
    const d = x.log[6].data as any
    expectRejected(x, x.ev('tool/result', d, rep(3, 3), [3]))
    expectRejected(x, x.ev('tool/result', d, rep(4, 6), [4, 6]))
    expectRejected(x, x.ev('tool/result', d, rep(6, 9), [6, 9]))
  })
  it('may not change anything outside the tool-result content', () => {
    const x = baseTurn()
    const base = x.log[6].data as any
    const variants: Array<(d: any) => void> = [
      (d) => (d.message.content[0].isError = true),
      (d) => (d.message.content[0].toolCallId = 'c2'),
      (d) => (d.message.id = 'other-id'),
      (d) => (d.message.source = { kind: 'tool', callId: 'c2' }),
      (d) => (d.turn = 2),
      (d) => (d.step = 2),
      (d) => (d.meta = { pruned: true }),
      (d) => (d.error = { name: 'ToolError', code: 'TOOL_ERROR' }),
    ]
    for (const change of variants) {
      const d = structuredClone(base)
      d.message.content[0].content = [{ type: 'text', text: 'pruned' }]
      change(d)
      expectRejected(x, x.ev('tool/result', d, rep(6, 6), [6]))
    }
  })
})

describe('replaceGeneration (SPEC §3.2.3)', () => {
  it('goes up by exactly one per replacement and never on appends', () => {
    const x = baseTurn()
    const gens: number[] = [x.s.replaceGeneration]
    x.user(userMsg('u1e', 'edited'), rep(3, 3), [3])
    gens.push(x.s.replaceGeneration)
    const pruned = structuredClone(x.log[6].data as any)
    pruned.message.content[0].content = []
    x.add('tool/result', pruned, rep(6, 6), [6])
    gens.push(x.s.replaceGeneration)
    x.turnStart()
    x.stepStart()
    x.user(userMsg('u2', 'x'))
    x.assistant('a3', [{ type: 'text', text: 'y' }])
    gens.push(x.s.replaceGeneration)
    x.system('sys-2', 'P2', rep(2, 2), [2])
    gens.push(x.s.replaceGeneration)
    expect(gens).toEqual([0, 1, 2, 2, 3])
  })
  it('a rejected replacement does not count', () => {
    const x = baseTurn()
    expectRejected(x, x.ev('user/message', checkpoint() as unknown as Json, rep(3, 6), [3]))
    expect(x.s.replaceGeneration).toBe(0)
  })
})

describe('undo of apply() (SPEC §3.1.4)', () => {
  it('restores the exact state before a replacement, and the same seq can be applied afresh', () => {
    const x = baseTurn()
    const before = snap(x.s)
    const undo = x.s.apply(x.ev('user/message', checkpoint() as unknown as Json, rep(3, 6), [3, 4, 6]))
    expect(surfaceSeqs(x.s)).toEqual([2, 12, 9])
    undo()
    expect(snap(x.s)).toEqual(before)
    expect(surfaceSeqs(x.s)).toEqual([2, 3, 4, 6, 9])
    x.user(userMsg('u1e', 'edit'), rep(3, 3), [3])
    expect(surfaceSeqs(x.s)).toEqual([2, 12, 4, 6, 9])
    expect(x.s.replaceGeneration).toBe(1)
  })
  it('restores the state after a multi-event unit is undone in reverse order', () => {
    const x = baseTurn()
    const before = snap(x.s)
    const undos = [
      x.s.apply(x.ev('agent/inbox/spliced', { target: 'next-turn', start: 0, inserted: [userMsg('q1', 'queued')] as unknown as Json })),
    ]
    undos.push(x.s.apply(x.ev('turn/start', { turn: 2 })))
    undos.push(x.s.apply(x.ev('agent/inbox/spliced', { target: 'next-turn', start: 0, removedCount: 1, inserted: [] })))
    undos.push(x.s.apply(x.ev('step/start', { turn: 2, step: 1 })))
    undos.push(x.s.apply(x.ev('user/message', userMsg('q1', 'queued') as unknown as Json, 'append')))
    undos.push(x.s.apply(x.ev('user/message', checkpoint() as unknown as Json, rep(3, 6), [3, 4, 6])))
    expect(x.s.replaceGeneration).toBe(1)
    for (let i = undos.length - 1; i >= 0; i--) undos[i]()
    expect(snap(x.s)).toEqual(before)
  })
})

describe('deriveMessages (SPEC §14.1, §14.2, §18.8)', () => {
  it('projects each surface type as SPEC §14.1 says and nothing else', () => {
    const x = new Sess()
    x.add('agent/inbox/spliced', { target: 'next-turn', start: 0, inserted: [userMsg('u1', 'hi')] as unknown as Json })
    x.turnStart()
    x.add('agent/inbox/spliced', { target: 'next-turn', start: 0, removedCount: 1, inserted: [] })
    x.stepStart()
    x.system('sys-empty', null) // [] content: nothing
    const u1 = userMsg('u1', 'hi')
    x.user(u1)
    const injected = userMsg('ctx1', 'context', { kind: 'plugin', plugin: 'my-plugin', form: 'note', extra: { a: [1, 2] } })
    x.user(injected)
    x.add('request/header', { header: { config: { provider: 'test', model: 'm' } }, reason: 'initial' })
    x.add('request/context', { provider: 'test', model: 'm' })
    x.add('assistant/attempt', { ...x.ts, stream: [] })
    x.assistant('a-usage-only', [], { usage: { inputTokens: 5, outputTokens: 0 } }) // empty: nothing
    x.assistant('a1', [{ type: 'text', text: 'call' }, { type: 'tool-call', id: 'c1', name: 'echo', arguments: '{}' }])
    const callSeq = x.toolCall('c1')
    x.toolResult('c1', 'echoed', callSeq)
    x.add('llm/retry', { retryId: 'r', ...x.ts, provider: 'test', mode: 'normal', policyKey: 'k', retry: 1, maxRetries: 3, delayMs: 1, failure: { message: 'x', code: 'SERVER' } })
    x.stepEnd()
    x.stepStart()
    x.assistant('a-trunc', [{ type: 'text', text: 'cut off' }]) // a max-tokens message with text projects (§18.8)
    x.stepEnd()
    x.stepStart()
    x.assistant('a-int', [{ type: 'text', text: 'partial answ' }], { interrupted: true })
    x.stepEnd()
    x.turnEnd()
    x.add('session/end-seed', {})
    x.add('compaction/start', { compactionId: 'k1', turn: null })
    x.add('compaction/end', { compactionId: 'k1', turn: null })
    const got = x.s.deriveMessages()
    expect(got).toEqual([
      u1,
      injected,
      asstMsg('a1', [{ type: 'text', text: 'call' }, { type: 'tool-call', id: 'c1', name: 'echo', arguments: '{}' }]),
      toolResMsg('c1', 'echoed'),
      asstMsg('a-trunc', [{ type: 'text', text: 'cut off' }]),
      asstMsg('a-int', [{ type: 'text', text: 'partial answ' }]),
    ] as unknown as Message[])
    // a system node with text projects its message, provider and model included on assistants
    const y = new Sess()
    y.turnStart()
    y.stepStart()
    y.system('sys', 'P')
    y.assistant('a', [{ type: 'reasoning', text: 'think' }, { type: 'text', text: 'x' }], { usage: { inputTokens: 1, outputTokens: 1 } })
    expect(y.s.deriveMessages()).toEqual([sysMsg('sys', 'P'), asstMsg('a', [{ type: 'reasoning', text: 'think' }, { type: 'text', text: 'x' }])])
    expect(deriveFromSurfaceEvents(x.log)).toEqual(got)
  })

  it('shadowed nodes vanish and surface order, not seq order, decides', () => {
    const x = baseTurn()
    x.user(checkpoint(), rep(3, 6), [3, 4, 6]) // seq 12 sits before seq 9
    const got = x.s.deriveMessages()
    expect(got).toEqual([sysMsg('sys-1', 'You are helpful.'), checkpoint(), asstMsg('a2', [{ type: 'text', text: 'done' }])])
    expect(got.some((m) => m.id === 'u1' || m.id === 'a1' || m.id === 'r-c1')).toBe(false)
    // the shadowed events stay in the log
    expect(x.log.map((e) => e.seq)).toEqual([...Array(13).keys()])
  })

  it('SessionState.deriveMessages() equals deriveFromSurfaceEvents() on the same log, also from the surface-eligible events alone', () => {
    const x = baseTurn()
    x.turnStart()
    x.stepStart()
    x.system('sys-2', 'Prompt two', rep(2, 2), [2])
    x.user(userMsg('u2', 'second'))
    x.assistant('a3', [{ type: 'tool-call', id: 'c2', name: 'echo', arguments: '{"a":1}' }])
    const c2 = x.toolCall('c2', 'echo', '{"a":1}')
    x.toolResult('c2', 'big output', c2)
    x.stepEnd()
    x.turnEnd()
    const pruned = structuredClone(x.log[c2 + 1].data as any)
    pruned.message.content[0].content = [{ type: 'text', text: '[pruned]' }]
    x.add('tool/result', pruned, rep(c2 + 1, c2 + 1), [c2 + 1])
    x.user(checkpoint('cp1'), rep(3, 9), [3, 4, 6, 9])
    x.user(checkpoint('cp2'), rep(x.s.nodes[1].seq, x.s.nodes[2].seq), [x.s.nodes[1].seq, x.s.nodes[2].seq])
    const fromState = x.s.deriveMessages()
    expect(fromState.length).toBe(x.s.nodes.filter((n) => n.message).length)
    expect(deriveFromSurfaceEvents(x.log)).toEqual(fromState)
    const surfaceOnly = x.log.filter((e) => ['system/message', 'user/message', 'assistant/message', 'tool/result'].includes(e.type))
    expect(deriveFromSurfaceEvents(surfaceOnly)).toEqual(fromState)
    expect(SessionState.fromEvents(x.log).deriveMessages()).toEqual(fromState)
    expect(fromState[0]).toEqual(sysMsg('sys-2', 'Prompt two'))
    expect(fromState[1]).toEqual(checkpoint('cp2'))
  })

  it('returns a fresh array each time (SPEC §14.3)', () => {
    const x = baseTurn()
    const a = x.s.deriveMessages()
    a.pop()
    const b = x.s.deriveMessages()
    expect(b).not.toBe(a)
    expect(b.length).toBe(a.length + 1)
  })
})
