// The turn loop (SPEC §5.2–§5.3, §6.2): a turn opens with turn/start and its claim in one unit, runs
// steps until the model owes nothing and next-step is empty, and closes with turn/end, whose unit
// also decides under the row lock whether the driver goes on, honours a latched wake, or goes idle.

import { errorChain, planClaim, type InboxTarget, type Json, type LlmFailure, type TurnEndReason, type UserMessage } from '../session/index.js'
import type { RowPatch } from '../store/index.js'
import { closer, FatalAppend, turnContext, type Abort, type Loop, type TurnContext } from './context.js'
import { TurnLlmError } from './errors.js'
import type { UnitBuilder } from './log.js'
import { proposeStep, runStep, type StepResult } from './step.js'

/** A turn whose turn/start and first claim committed. */
export interface OpenedTurn {
  turn: number
  claimed: UserMessage[]
}

type AfterTurn = 'idle' | 'continue' | 'latched'

/** What the turn loop needs of the Agent's lifecycle (agent.ts). */
export interface DriverControl {
  readonly loop: Loop
  /** the running activity's abort */
  current(): Abort
  /** SPEC §5.3: the next turn starts with a fresh controller */
  renew(): Abort
  /** agent/status goes out exactly when the public status changes (SPEC §5.1) */
  announce(): void
  /** SPEC §5.3: leaving the driver for a latched wake makes the Agent idle, then running again */
  relatch(): void
}

const hasWork = (loop: Loop) => loop.state.inbox.nextTurn.length > 0 || loop.state.inbox.nextStep.length > 0

/**
 * turn/start and the claim of next-turn in ONE unit (SPEC §5.2, §6.2). A wake with nothing to do, or
 * one a cancel spent (`first`: the wake request itself), settles the row without a turn: null.
 */
export async function openTurn(ctl: DriverControl, first: boolean): Promise<OpenedTurn | null> {
  const { loop } = ctl
  const r = await loop.log.commit<OpenedTurn | null>(
    (u) => {
      const work = hasWork(loop)
      const idle = { patch: { runState: 'idle', cancelPending: false, wakeLatched: false } satisfies RowPatch, value: null }
      // SPEC §5.5: a cancel spent this wake request (no later work is armed) unless input latched
      if (first && u.row.cancelPending && !(u.row.wakeLatched && work)) return idle
      if (!work) return idle
      const turn = loop.state.lastTurn + 1
      u.add({ type: 'turn/start', data: { turn } })
      const { splices, claimed } = planClaim(loop.state.inbox, 'next-turn')
      for (const s of splices) u.add({ type: 'agent/inbox/spliced', data: s as unknown as Json })
      return { patch: { runState: 'running', cancelPending: false, wakeLatched: false }, value: { turn, claimed } }
    },
    // publication order (SPEC §5.2): agent/status running, then turn/start and the claim
    { beforePublish: (value) => value && ctl.announce() },
  )
  if (r.value) for (const message of r.value.claimed) loop.notify('agent/inbox/claimed', { message, turn: r.value.turn })
  return r.value
}

/** Runs turns until one stops the driver (SPEC §5.3); throws when this process can no longer append. */
export async function drive(ctl: DriverControl, first: OpenedTurn): Promise<void> {
  let next: OpenedTurn | null = first
  while (next) {
    const after = await runTurn(turnContext(ctl.loop, ctl.current(), next.turn), next.claimed)
    if (after === 'idle') return
    if (after === 'latched') ctl.relatch()
    ctl.renew()
    next = await openTurn(ctl, false)
  }
}

/** SPEC §6.2, line by line; the turn's first claim came with its turn/start. */
export async function runTurn(tc: TurnContext, firstClaim: UserMessage[]): Promise<AfterTurn> {
  const { loop, turn } = tc
  const metrics = loop.services.metrics
  let reason: TurnEndReason | null = null
  let sawMaxTokens = false
  let stopped = false
  let park = false
  let exception = false
  let target: InboxTarget = 'next-turn'
  let claimed: UserMessage[] | undefined = firstClaim
  try {
    for (;;) {
      tc.abort.check()
      const proposed = tc.step + 1
      const p = await proposeStep(tc, target, proposed, claimed)
      claimed = undefined
      if (p === 'rejected') {
        reason = { kind: 'blocked' }
        park = true
        break
      }
      if (p.decision.messages.length === 0 && tc.step === 0) {
        reason = { kind: 'completed' }
        park = true
        break
      }
      if (p.decision.messages.length === 0 && stopped) break // post-stop input rewritten away
      tc.abort.check()
      await tc.log.commit((u) => void u.add({ type: 'step/start', data: { turn, step: proposed } }))
      tc.step = proposed
      metrics?.steps.inc()
      let result: StepResult
      try {
        result = await runStep(tc, p)
      } finally {
        await closer(() => tc.log.commit((u) => void u.add({ type: 'step/end', data: { turn, step: tc.step } })))
      }
      if (result === 'max-tokens') sawMaxTokens = true
      stopped = result !== 'continue'
      tc.abort.check()
      if (stopped && loop.state.inbox.nextStep.length === 0) {
        await tc.hooks.runSerial('agent/turn-stopping', { agent: loop.handle(), turn, signal: tc.signal }, { bind: loop.bind })
        tc.abort.check()
      }
      if (stopped && loop.state.inbox.nextStep.length === 0) break
      target = 'next-step'
    }
    if (reason === null) reason = sawMaxTokens ? { kind: 'max-tokens' } : { kind: 'completed' }
  } catch (e) {
    if (e instanceof FatalAppend) throw e.error
    exception = true
    if (tc.signal.aborted) reason = { kind: 'aborted', reason: tc.abort.cause }
    else {
      const error: LlmFailure = e instanceof TurnLlmError ? e.failure : { message: errorChain(e), code: 'UNKNOWN' }
      reason = { kind: 'error', error }
      tc.notify('agent/error', { turn, step: tc.step, error })
      loop.logger.warn({ turn, step: tc.step, code: error.code, err: error.message }, 'turn failed')
    }
  }
  const r = await closer(() =>
    tc.log.commit<AfterTurn>((u) => {
      u.add({ type: 'turn/end', data: { turn, reason } as unknown as Json })
      return endOfTurn(tc, u, exception || park)
    }),
  )
  metrics?.turns.inc({ reason: reason!.kind })
  return r.value
}

/**
 * The driver's exit decision, made under the row lock with the turn/end (so no delivery can slip
 * between "nothing pending" and "idle"): continue with pending work, honour a latched wake, or go idle.
 */
function endOfTurn(tc: TurnContext, u: UnitBuilder, stop: boolean): { patch: RowPatch; value: AfterTurn } {
  const work = hasWork(tc.loop)
  const clear = { cancelPending: false, wakeLatched: false }
  if (tc.loop.disposed) return { patch: { ...clear, runState: work ? 'wanted' : 'idle' }, value: 'idle' }
  if (!stop && work && !u.row.cancelPending && !tc.abort.aborted) return { patch: { ...clear, runState: 'running' }, value: 'continue' }
  if (u.row.wakeLatched && work && !tc.abort.disposing) return { patch: { ...clear, runState: 'running' }, value: 'latched' }
  return { patch: { ...clear, runState: 'idle' }, value: 'idle' }
}
