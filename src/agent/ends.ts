// The end of a step and of a turn as drafts of a unit (SPEC §6.2 `finally: append step/end`, then
// turn/end): the step's closing unit (turn.ts closeStep) and, when nothing runs between them, the
// last settlement's unit (attempt.ts) build them alike, with the driver's exit decision.

import { hasPending, type Json, type TurnEndReason } from '../session/index.js'
import type { RowPatch } from '../store/index.js'
import type { AfterTurn, TurnContext, TurnEnded } from './context.js'
import type { UnitBuilder } from './log.js'

/** How a step ended (step.ts runStep): the model stopped, hit its token limit, or is owed tool results. */
export type StepResult = 'completed' | 'max-tokens' | 'continue'

/**
 * Adds the open step's step/end and, when the step stopped naturally and the turn therefore ends
 * right after — next-step empty, no agent/turn-stopping listener to await, no cancellation — the
 * turn/end with the exit decision: nothing foreign runs between them, so they share the unit. Decided
 * in the build, against the state the unit is written on (a delivery that committed meanwhile makes
 * the fenced append read it, and the turn goes on).
 */
export function addStepEnd(tc: TurnContext, u: UnitBuilder, result: StepResult | undefined): { patch?: RowPatch; ended?: TurnEnded } {
  const { loop, turn } = tc
  u.add({ type: 'step/end', data: { turn, step: tc.step } })
  const endsTurn = result !== undefined && result !== 'continue' && !tc.signal.aborted && loop.state.inbox.nextStep.length === 0 && tc.hooks.count('agent/turn-stopping') === 0
  if (!endsTurn) return {}
  const reason: TurnEndReason = tc.sawMaxTokens || result === 'max-tokens' ? { kind: 'max-tokens' } : { kind: 'completed' }
  u.add({ type: 'turn/end', data: { turn, reason } as unknown as Json })
  const end = endOfTurn(tc, u, false)
  return { patch: end.patch, ended: { reason, after: end.value } }
}

/**
 * The driver's exit decision, made under the row lock with the turn/end (so no delivery can slip
 * between "nothing pending" and "idle"): continue with pending work, honour a latched wake, or go idle.
 */
export function endOfTurn(tc: TurnContext, u: UnitBuilder, stop: boolean): { patch: RowPatch; value: AfterTurn } {
  const work = hasPending(tc.loop.state.inbox)
  const clear = { cancelPending: false, wakeLatched: false }
  if (tc.loop.disposed) return { patch: { ...clear, runState: work ? 'wanted' : 'idle' }, value: 'idle' }
  if (!stop && work && !u.row.cancelPending && !tc.abort.aborted) return { patch: { ...clear, runState: 'running' }, value: 'continue' }
  if (u.row.wakeLatched && work && !tc.abort.disposing) return { patch: { ...clear, runState: 'running' }, value: 'latched' }
  return { patch: { ...clear, runState: 'idle' }, value: 'idle' }
}
