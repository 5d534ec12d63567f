// Crash continuation (SPEC §19) as pure functions of the log: whether a continuation is owed, the
// carried messages (claimed by the interrupted turn, never admitted; inherited along a chain of
// continuations), the crash-loop count, and the decision from the row's flags (§19.5).

import { describe, expect, it } from 'vitest'
import { continuationDelayMs, continuationDuty, decideContinuation, planRepair } from '../../src/agent/index.js'
import type { Json, UserMessage } from '../../src/session/index.js'
import { stamp } from '../../src/store/index.js'
import { asstMsg, LogBuilder, userMsg } from '../helpers/session-log.js'

const ids = (ms: UserMessage[]) => ms.map((m) => m.id)

/** Queues `ms` in next-turn (one splice each) and `steer` in next-step. */
function deliver(b: LogBuilder, ms: UserMessage[], target: 'next-turn' | 'next-step' = 'next-turn') {
  for (const m of ms) b.splice({ target, start: target === 'next-turn' ? b.s.inbox.nextTurn.length : b.s.inbox.nextStep.length, inserted: [m as unknown as Json] })
}

/** A claim at a turn boundary, as planClaim writes it: all of next-step, then the first prompt. */
function claim(b: LogBuilder, withPrompt = true) {
  if (b.s.inbox.nextStep.length) b.splice({ target: 'next-step', start: 0, removedCount: b.s.inbox.nextStep.length, inserted: [] })
  if (withPrompt && b.s.inbox.nextTurn.length) b.splice({ target: 'next-turn', start: 0, removedCount: 1, inserted: [] })
}

/** Repair as attach writes it: the closers of the open turn. */
function repair(b: LogBuilder) {
  const t = b.s.openTurn
  for (const e of stamp(b.s, planRepair(b.s), b.s.lastTime)) {
    b.s.apply(e)
    b.log.push(e)
  }
  b.add('session/end-seed', {})
  return t
}

function answered(b: LogBuilder) {
  b.add('assistant/message', { ...b.ts, message: asstMsg(`a${b.s.nextSeq}`, [{ type: 'text', text: 'ok' }]), stream: [] }, 'append')
}

describe('continuationDuty (SPEC §19.2–§19.3)', () => {
  it('nothing is owed without a repaired turn, or when the last turn did not end interrupted', () => {
    const b = new LogBuilder()
    deliver(b, [userMsg('u1', 'hi')])
    b.turnStart()
    claim(b)
    b.stepStart()
    b.user(userMsg('u1', 'hi'))
    b.stepEnd()
    b.turnEnd()
    expect(continuationDuty(b.log, null)).toBeNull()
    expect(continuationDuty(b.log, 1)).toBeNull()
  })

  it('a turn killed after its claim and before admission carries the claimed batch, steering first, with the original ids', () => {
    const b = new LogBuilder()
    deliver(b, [userMsg('p1', 'first'), userMsg('p2', 'queued')])
    deliver(b, [userMsg('s1', 'steer')], 'next-step')
    b.turnStart()
    claim(b)
    const t = repair(b)
    const duty = continuationDuty(b.log, t)!
    expect(duty).toMatchObject({ turn: 1, failedContinuations: 0 })
    expect(ids(duty.carried)).toEqual(['s1', 'p1'])
    // the queued prompt is not carried: it stays in next-turn for a later turn
    expect(ids(b.s.inbox.nextTurn)).toEqual(['p2'])
    // the owed turn must be the log's last turn
    expect(continuationDuty(b.log, 2)).toBeNull()
  })

  it('admitted messages are not carried; step-boundary claims after admission are', () => {
    const b = new LogBuilder()
    deliver(b, [userMsg('p1', 'first')])
    b.turnStart()
    claim(b)
    b.stepStart()
    b.user(userMsg('p1', 'first'))
    answered(b)
    b.stepEnd()
    deliver(b, [userMsg('c1', 'context')], 'next-step')
    claim(b, false)
    const t = repair(b)
    expect(ids(continuationDuty(b.log, t)!.carried)).toEqual(['c1'])
  })

  it('a cancelling removal is not a claim', () => {
    const b = new LogBuilder()
    deliver(b, [userMsg('p1', 'first')])
    b.turnStart()
    claim(b)
    b.stepStart()
    b.user(userMsg('p1', 'first'))
    deliver(b, [userMsg('x', 'steer')], 'next-step')
    b.splice({ target: 'next-step', start: 0, removedCount: 1, inserted: [], outcome: 'canceled' })
    expect(continuationDuty(b.log, repair(b))!.carried).toEqual([])
  })

  it('a continuation killed before admitting inherits what it carried; once admitted nothing is carried again, and the crash-loop count grows only with unanswered continuations', () => {
    const b = new LogBuilder()
    deliver(b, [userMsg('p1', 'first')])
    b.turnStart()
    claim(b)
    repair(b)
    // continuation 2 of 1 dies before its step: it inherits p1
    b.add('turn/start', { turn: 2, continues: 1 })
    deliver(b, [userMsg('s2', 'steer')], 'next-step')
    claim(b, false)
    let duty = continuationDuty(b.log, repair(b))!
    expect(duty.turn).toBe(2)
    expect(ids(duty.carried)).toEqual(['p1', 's2'])
    expect(duty.failedContinuations).toBe(1)
    // continuation 3 of 2 admits both, then dies before an answer
    b.add('turn/start', { turn: 3, continues: 2 })
    b.stepStart()
    b.user(userMsg('p1', 'first'))
    b.user(userMsg('s2', 'steer'))
    duty = continuationDuty(b.log, repair(b))!
    expect(duty.carried).toEqual([])
    // API.md §19: what the chain of interrupted turns claimed, admitted or not, for the continuation's trace links
    expect(ids(duty.inputs).sort()).toEqual(['p1', 's2'])
    expect(duty.failedContinuations).toBe(2)
    expect(decideContinuation(duty, { limit: 2, cancelPending: false, runState: 'running' })).toBe('crash-loop')
    expect(decideContinuation(duty, { limit: 3, cancelPending: false, runState: 'running' })).toBe('continue')
    // continuation 4 of 3 settles an answer and then dies in a tool: the loop count starts again
    b.add('turn/start', { turn: 4, continues: 3 })
    b.stepStart()
    answered(b)
    duty = continuationDuty(b.log, repair(b))!
    expect(duty.failedContinuations).toBe(0)
    expect(decideContinuation(duty, { limit: 2, cancelPending: false, runState: 'running' })).toBe('continue')
  })

  it('an ordinary turn interrupted after a failed continuation is not part of the loop', () => {
    const b = new LogBuilder()
    deliver(b, [userMsg('p1', 'first'), userMsg('p2', 'second')])
    b.turnStart()
    claim(b)
    repair(b)
    b.add('turn/start', { turn: 2, continues: 1 })
    repair(b)
    b.turnStart()
    claim(b)
    const duty = continuationDuty(b.log, repair(b))!
    expect(duty).toMatchObject({ turn: 3, failedContinuations: 0 })
    expect(ids(duty.carried)).toEqual(['p2'])
  })
})

describe('decideContinuation (SPEC §19.5)', () => {
  const duty = { turn: 1, carried: [], inputs: [], failedContinuations: 0 }
  it('continues unless turned off, cancelled or already spent', () => {
    expect(decideContinuation(duty, { limit: 2, cancelPending: false, runState: 'running' })).toBe('continue')
    expect(decideContinuation(duty, { limit: 2, cancelPending: false, runState: 'wanted' })).toBe('continue')
    expect(decideContinuation(duty, { limit: 0, cancelPending: false, runState: 'running' })).toBe('disabled')
    expect(decideContinuation(duty, { limit: 2, cancelPending: true, runState: 'running' })).toBe('cancelled')
    expect(decideContinuation(duty, { limit: 2, cancelPending: false, runState: 'idle' })).toBe('spent')
    expect(decideContinuation({ ...duty, failedContinuations: 1 }, { limit: 1, cancelPending: false, runState: 'running' })).toBe('crash-loop')
  })

  it('the first continuation of a crash opens at once; from the second in a row the backoff doubles and is bounded; a duty that will be declined does not wait', () => {
    expect([0, 1, 2, 3, 4, 5, 9].map((n) => continuationDelayMs({ ...duty, failedContinuations: n }, 100))).toEqual([0, 1000, 2000, 4000, 8000, 10000, 10000])
    expect(continuationDelayMs({ ...duty, failedContinuations: 1 }, 2)).toBe(1000)
    expect(continuationDelayMs({ ...duty, failedContinuations: 2 }, 2)).toBe(0)
    expect(continuationDelayMs(duty, 0)).toBe(0)
  })
})
