// The boundaries of a step and of a turn (SPEC §6.2: step/start, `finally: append step/end`, then
// turn/end), each added by ONE function here, as parts of the turn's open unit (unit.ts): the turn
// code decides which unit they join; the driver's exit decision is made with the turn/end.

import { hasPending, type Json, type TurnEndReason } from '../session/index.js'
import type { RowPatch } from '../store/index.js'
import type { AfterTurn, TurnContext, TurnEnded } from './context.js'
import type { UnitBuilder } from './log.js'
import type { Part } from './unit.js'

/** How a step ended (step.ts runStep): the model stopped, hit its token limit, or is owed tool results. */
export type StepResult = 'completed' | 'max-tokens' | 'continue'

/** The only writer of step/start. */
export function stepStart(turn: number, step: number): Part {
  return { build: (u) => void u.add({ type: 'step/start', data: { turn, step } }) }
}

/**
 * The only writer of step/end: the open step's end and, when `result` says the step stopped
 * naturally and the turn therefore ends right after — next-step empty, no agent/turn-stopping
 * listener to await, no cancellation — the turn/end with the exit decision: nothing foreign runs
 * between them, so they share the unit. Decided in the build, against the state the unit is written
 * on (a delivery that committed meanwhile makes the fenced append read it, and the turn goes on).
 * `ended` learns the turn's end when the unit ends it.
 */
export function stepEnd(tc: TurnContext, result: StepResult | undefined, ended: (e: TurnEnded | undefined) => void): Part<ExitFlag> {
  const { loop, turn, step } = tc
  return {
    // the exit decision's inputs, when the turn may end here
    reads: result !== undefined && result !== 'continue' ? EXIT_READS : [],
    build: (u) => {
      ended(undefined)
      u.add({ type: 'step/end', data: { turn, step } })
      const endsTurn = result !== undefined && result !== 'continue' && !tc.signal.aborted && loop.state.inbox.nextStep.length === 0 && tc.hooks.count('agent/turn-stopping') === 0
      if (!endsTurn) return
      const reason: TurnEndReason = tc.sawMaxTokens || result === 'max-tokens' ? { kind: 'max-tokens' } : { kind: 'completed' }
      const end = addTurnEnd(tc, u, reason, false)
      ended({ reason, after: end.value })
      return end.patch
    },
  }
}

/** What the driver's exit decision reads (endOfTurn): a unit ending a turn declares them. */
export type ExitFlag = 'cancelPending' | 'wakeLatched'
export const EXIT_READS: readonly (ExitFlag | 'inbox')[] = ['cancelPending', 'wakeLatched', 'inbox']

/** The only writer of turn/end, with the driver's exit decision (endOfTurn); its unit reads EXIT_READS. */
export function addTurnEnd(tc: TurnContext, u: UnitBuilder<ExitFlag>, reason: TurnEndReason, stop: boolean): { patch: RowPatch; value: AfterTurn } {
  u.add({ type: 'turn/end', data: { turn: tc.turn, reason } as unknown as Json })
  return endOfTurn(tc, u, stop)
}

/**
 * The driver's exit decision, made under the row lock with the turn/end (so no delivery can slip
 * between "nothing pending" and "idle"): continue with pending work, honour a latched wake, or go idle.
 */
function endOfTurn(tc: TurnContext, u: UnitBuilder<ExitFlag>, stop: boolean): { patch: RowPatch; value: AfterTurn } {
  const work = hasPending(tc.loop.state.inbox)
  const clear = { cancelPending: false, wakeLatched: false }
  if (tc.loop.disposed) return { patch: { ...clear, runState: work ? 'wanted' : 'idle' }, value: 'idle' }
  if (!stop && work && !u.row.cancelPending && !tc.abort.aborted) return { patch: { ...clear, runState: 'running' }, value: 'continue' }
  if (u.row.wakeLatched && work && !tc.abort.disposing) return { patch: { ...clear, runState: 'running' }, value: 'latched' }
  return { patch: { ...clear, runState: 'idle' }, value: 'idle' }
}
