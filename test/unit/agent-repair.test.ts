// Crash repair planning (SPEC §13.1, §18.10, §18.13) as a pure function of the folded log: the
// deterministic closers of a turn the previous holder left open, in order, and that they fold.

import { describe, expect, it } from 'vitest'
import { NOT_STARTED_TEXT, OUTCOME_UNKNOWN_TEXT, planRepair } from '../../src/agent/index.js'
import type { ContentBlock } from '../../src/session/index.js'
import { stamp } from '../../src/store/index.js'
import { asstMsg, LogBuilder, userMsg } from '../helpers/session-log.js'

const call = (id: string): ContentBlock => ({ type: 'tool-call', id, name: 'echo', arguments: '{}' })
const kinds = (ds: ReturnType<typeof planRepair>) => ds.map((d) => d.type)

describe('planRepair (SPEC §13.1)', () => {
  it('a log that ends outside a turn needs nothing', () => {
    const b = new LogBuilder()
    expect(planRepair(b.s)).toEqual([])
    b.turnStart()
    b.stepStart()
    b.add('assistant/message', { ...b.ts, message: asstMsg('a1', [{ type: 'text', text: 'hi' }]), stream: [] }, 'append')
    b.stepEnd()
    b.turnEnd()
    expect(planRepair(b.s)).toEqual([])
  })

  it('an open step with calls: a result per unanswered call in model order (unknown outcome when its tool/call was logged), then step/end and turn/end interrupted', () => {
    const b = new LogBuilder()
    b.turnStart()
    b.stepStart()
    b.user(userMsg('u1', 'go'))
    b.add('assistant/message', { ...b.ts, message: asstMsg('a1', [call('c1'), call('c2'), call('c3')]), stream: [] }, 'append')
    const c1 = b.toolCall('c1')
    b.toolResult('c1', 'done', c1)
    const c2 = b.toolCall('c2')
    const drafts = planRepair(b.s)
    expect(kinds(drafts)).toEqual(['tool/result', 'tool/result', 'step/end', 'turn/end'])
    const [r2, r3, stepEnd, turnEnd] = drafts
    expect(r2).toMatchObject({ surfaceOp: 'append', sourceEventSeqs: [c2], data: { turn: 1, step: 1, error: { name: 'ToolError', code: 'TOOL_OUTCOME_UNKNOWN' } } })
    expect((r2.data as any).message).toMatchObject({ role: 'user', source: { kind: 'tool', callId: 'c2' }, content: [{ type: 'tool-result', toolCallId: 'c2', isError: true, content: [{ type: 'text', text: OUTCOME_UNKNOWN_TEXT }] }] })
    // never started: no citation
    expect(r3.sourceEventSeqs).toBeUndefined()
    expect(r3.data).toMatchObject({ turn: 1, step: 1, error: { name: 'AbortError', code: 'TOOL_NOT_STARTED' } })
    expect((r3.data as any).message.content[0].content).toEqual([{ type: 'text', text: NOT_STARTED_TEXT }])
    expect(stepEnd.data).toEqual({ turn: 1, step: 1 })
    expect(turnEnd.data).toEqual({ turn: 1, reason: { kind: 'interrupted' } })
    // the closers fold: the log is whole again, nothing left open
    for (const e of stamp(b.s, drafts, b.s.lastTime)) b.s.apply(e)
    expect(b.s.openTurn).toBeNull()
    expect(b.s.openStep).toBeNull()
    expect([...b.s.openCalls.keys()]).toEqual([])
  })

  it('an open turn between steps gets only its turn/end; a step open before any call gets step/end too', () => {
    const b = new LogBuilder()
    b.turnStart()
    b.stepStart()
    b.stepEnd()
    expect(kinds(planRepair(b.s))).toEqual(['turn/end'])
    b.stepStart()
    expect(planRepair(b.s).map((d) => d.data)).toEqual([{ turn: 1, step: 2 }, { turn: 1, reason: { kind: 'interrupted' } }])
  })

  it('is pure: planning twice gives the same closers and leaves the state as it was', () => {
    const b = new LogBuilder()
    b.turnStart()
    b.stepStart()
    b.add('assistant/message', { ...b.ts, message: asstMsg('a1', [call('c1')]), stream: [] }, 'append')
    const before = { nextSeq: b.s.nextSeq, open: [...b.s.openCalls.keys()] }
    const strip = (ds: ReturnType<typeof planRepair>) => ds.map((d) => ({ ...d, data: { ...(d.data as object), message: undefined } }))
    expect(strip(planRepair(b.s))).toEqual(strip(planRepair(b.s)))
    expect({ nextSeq: b.s.nextSeq, open: [...b.s.openCalls.keys()] }).toEqual(before)
  })
})
