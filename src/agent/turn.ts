// The driver (SPEC §5.2–§5.3, §6.2): a wake enters running and opens a turn — turn/start and its
// claim in one unit — then turns run one after another; each runs steps until the model owes nothing
// and next-step is empty, and closes with turn/end, whose unit also decides under the row lock
// whether the driver goes on, honours a latched wake, or goes idle.

import { errorChain, hasPending, planClaim, type InboxTarget, type Json, type LlmFailure, type TurnEndReason, type UserMessage } from '../session/index.js'
import { SlotUnavailableError, type RowPatch } from '../store/index.js'
import { closer, FatalAppend, turnContext, type AfterTurn, type Loop, type TurnContext, type TurnEnded } from './context.js'
import { addTurnEnd, EXIT_READS, stepEnd, stepStart } from './ends.js'
import { TurnLlmError } from './errors.js'
import { commitDecision, LeaseLostError, type RowFlag, type UnitInput } from './log.js'
import type { Phase, Phases } from './phases.js'
import { proposeStep, runStep, type StepOutcome } from './step.js'
import { decideContinuation, type ContinuationDecision, type ContinuationDuty } from './continuation.js'
import { traceTurn } from '../tracing/index.js'

/** A turn whose turn/start and first claim committed. */
export interface OpenedTurn {
  turn: number
  /** the first proposal's batch: for a continuation, the carried messages first (SPEC §19.3) */
  claimed: UserMessage[]
  /** what the unit's claim splices removed (agent/inbox/claimed is emitted for these) */
  newlyClaimed: UserMessage[]
  /** SPEC §19.3: the crash-interrupted turn this one continues */
  continues?: number
  /** API.md §19: a continuation's span links the requests of the interrupted turn's inputs too */
  continuedInputs?: UserMessage[]
}

/** What the driver needs of its Agent (agent.ts). */
export interface DriverControl {
  readonly loop: Loop
  /** the Agent's phases, its activity and abort */
  readonly run: Phases
  /** the driver stopped because this process can no longer append (SPEC §5.7) */
  failStop(e: unknown): void
}

/**
 * SPEC §5.2: a wake finding the Agent idle enters running and commits the wake prefix; the driver
 * then runs on as the Agent's activity. If the prefix fails to commit, the Agent is idle again.
 */
export async function wakeDriver(ctl: DriverControl): Promise<void> {
  const run = ctl.run
  run.renew()
  run.phase = 'running'
  const prefix = (async () => {
    let opened: OpenedTurn | null
    try {
      opened = await openTurn(ctl, true)
    } catch (e) {
      run.phase = 'idle'
      throw e
    }
    if (!opened) run.phase = 'idle'
    else run.activity = runDriver(ctl, opened)
  })()
  run.activity = prefix
  try {
    await prefix
  } finally {
    if (run.activity === prefix) run.activity = undefined
    if ((run.phase as Phase) === 'idle') run.set('idle')
  }
}

async function runDriver(ctl: DriverControl, first: OpenedTurn): Promise<void> {
  try {
    await drive(ctl, first)
  } catch (e) {
    ctl.failStop(e)
  } finally {
    ctl.run.activity = undefined
    ctl.run.set('idle')
  }
}

/**
 * turn/start and the claim of next-turn in ONE unit (SPEC §5.2, §6.2). A wake with nothing to do, or
 * one a cancel spent (`first`: the wake request itself), settles the row without a turn: null.
 *
 * A continuation owed after crash repair (SPEC §19.3) comes first: decided under the row lock from
 * the row's flags, it opens as `turn/start {turn, continues}` with a claim of next-step only, in
 * the same kind of unit as any turn opening (so a running-session slot is taken the same way); a
 * declined one is forgotten in the unit that does whatever comes instead.
 */
export async function openTurn(ctl: DriverControl, first: boolean): Promise<OpenedTurn | null> {
  const { loop } = ctl
  const duty = loop.continuation
  // what the decision reads: the inbox, and the flags of a continuation's (decideContinuation) and of
  // a wake request's spending (SPEC §5.5)
  const reads: UnitInput[] = ['inbox', ...(duty ? (['cancelPending', 'runState'] as const) : []), ...(first ? (['cancelPending', 'wakeLatched'] as const) : [])]
  const r = await commitDecision<{ opened: OpenedTurn | null; decision?: ContinuationDecision }, RowFlag>(
    loop.log,
    (u) => {
      const spent: RowPatch = duty ? { continueTurn: null } : {}
      let decision: ContinuationDecision | undefined
      if (duty) {
        decision = loop.state.lastTurn !== duty.turn || loop.state.openTurn !== null ? 'spent' : decideContinuation(duty, { limit: loop.services.continueAfterCrash, cancelPending: u.row.cancelPending, runState: u.row.runState })
        if (decision === 'continue') {
          const turn = loop.state.lastTurn + 1
          u.add({ type: 'turn/start', data: { turn, continues: duty.turn } })
          const { splices, claimed } = planClaim(loop.state.inbox, 'next-step')
          for (const s of splices) u.add({ type: 'agent/inbox/spliced', data: s as unknown as Json })
          return { patch: { runState: 'running', cancelPending: false, wakeLatched: false, ...spent }, value: { decision, opened: { turn, continues: duty.turn, claimed: [...duty.carried, ...claimed], newlyClaimed: claimed, continuedInputs: duty.inputs } } }
        }
      }
      const work = hasPending(loop.state.inbox)
      const idle = { patch: { runState: 'idle', cancelPending: false, wakeLatched: false, ...spent } satisfies RowPatch, value: { decision, opened: null } }
      // SPEC §5.5: a cancel spent this wake request (no later work is armed) unless input latched
      if (first && u.row.cancelPending && !(u.row.wakeLatched && work)) return idle
      if (!work) return idle
      const turn = loop.state.lastTurn + 1
      u.add({ type: 'turn/start', data: { turn } })
      const { splices, claimed } = planClaim(loop.state.inbox, 'next-turn')
      for (const s of splices) u.add({ type: 'agent/inbox/spliced', data: s as unknown as Json })
      return { patch: { runState: 'running', cancelPending: false, wakeLatched: false, ...spent }, value: { decision, opened: { turn, claimed, newlyClaimed: claimed } } }
    },
    // publication order (SPEC §5.2): agent/status running, then turn/start and the claim
    { reads: [...new Set(reads)], beforePublish: (value) => value.opened && ctl.run.announce() },
  ).catch(waitForSlot)
  if (!r) return null
  if (duty && loop.continuation === duty) {
    loop.continuation = null
    continuationSettled(loop, duty, r.value.decision ?? 'spent')
  }
  const opened = r.value.opened
  if (opened) for (const message of opened.newlyClaimed) loop.notify('agent/inbox/claimed', { message, turn: opened.turn })
  return opened
}

/** After the unit that opened or declined a continuation committed: its metric, and CRASH_LOOP (SPEC §19.5). */
function continuationSettled(loop: Loop, duty: ContinuationDuty, decision: ContinuationDecision): void {
  loop.services.metrics?.continuations.inc({ decision })
  if (decision === 'continue') {
    loop.logger.info({ continues: duty.turn, carried: duty.carried.length }, 'continuing a turn interrupted by a crash')
    return
  }
  if (decision !== 'crash-loop') return
  const error: LlmFailure = { message: `turn ${duty.turn} was interrupted by a crash ${duty.failedContinuations + 1} times in a row without an answer; it is not continued again`, code: 'CRASH_LOOP' }
  loop.logger.warn({ turn: duty.turn, failedContinuations: duty.failedContinuations }, 'crash-loop limit: the interrupted turn is not continued')
  loop.notify('agent/error', { turn: duty.turn, step: 0, error })
}

/** API.md §15: no running-session slot was free, so nothing of the unit was written; the session
 * waits, still wanted, for a slot's doorbell. */
function waitForSlot(e: unknown): null {
  if (e instanceof SlotUnavailableError) return null
  throw e
}

/** Runs turns until one stops the driver (SPEC §5.3); throws when this process can no longer append. */
export async function drive(ctl: DriverControl, first: OpenedTurn): Promise<void> {
  let next: OpenedTurn | null = first
  while (next) {
    const after = await runTurn(turnContext(ctl.loop, ctl.run.current!, next.turn, next.continues), next.claimed, next.continuedInputs)
    if (after === 'idle') return
    if (after === 'latched') {
      // leaving the driver makes the Agent idle; the latch wakes it once more
      ctl.run.set('idle')
      ctl.run.phase = 'running'
    }
    ctl.run.renew()
    next = await openTurn(ctl, false)
  }
}

/**
 * A turn inside its `invoke_agent` span (API.md §19), linked to the requests that queued what it
 * claims; the span ends with the turn's end reason, or unended-reason `lost` when this process can no
 * longer append.
 */
export async function runTurn(tc: TurnContext, firstClaim: UserMessage[], continuedInputs: UserMessage[] = []): Promise<AfterTurn> {
  const { loop } = tc
  const linked = continuedInputs.length ? [...continuedInputs, ...firstClaim.filter((m) => !continuedInputs.some((c) => c.id === m.id))] : firstClaim
  tc.trace = traceTurn({ sessionId: loop.id, tenantId: loop.tenantId, turn: tc.turn, ...(tc.continues !== undefined ? { continues: tc.continues } : {}), ...(loop.settings.spec.agent ? { agent: loop.settings.spec.agent } : {}) }, linked)
  let reason: TurnEndReason | { kind: 'lost' } = { kind: 'lost' }
  try {
    return await tc.trace.within(() => turnBody(tc, firstClaim, (r) => (reason = r)))
  } finally {
    tc.trace.end(reason)
  }
}

/** SPEC §6.2, line by line; the turn's first claim came with its turn/start. */
async function turnBody(tc: TurnContext, firstClaim: UserMessage[], decided: (reason: TurnEndReason) => void): Promise<AfterTurn> {
  const { loop, turn } = tc
  const metrics = loop.services.metrics
  const started = process.hrtime.bigint()
  let reason: TurnEndReason | null = null
  let stopped = false
  let park = false
  let exception = false
  let target: InboxTarget = 'next-turn'
  let claimed: UserMessage[] | undefined = firstClaim
  /** set when the last step's step/end unit also ended the turn (endStep) */
  let ended: TurnEnded | undefined
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
      // SPEC §19.3: a continuation's first step is entered even with an empty batch
      if (p.decision.messages.length === 0 && tc.step === 0 && tc.continues === undefined) {
        reason = { kind: 'completed' }
        park = true
        break
      }
      if (p.decision.messages.length === 0 && stopped) break // post-stop input rewritten away
      tc.abort.check()
      // SPEC §7.5: agent/request runs after step/start; without a listener nobody sees the gap, and
      // the step/start stays open for the step's next unit (its first admission, or its end)
      const start = stepStart(turn, proposed)
      if (tc.hooks.count('agent/request') === 0) tc.unit.stage(start)
      else await tc.unit.close(start)
      tc.step = proposed
      metrics?.steps.inc()
      let outcome: StepOutcome | undefined
      try {
        outcome = await runStep(tc, p)
      } finally {
        ended = await endStep(tc, outcome)
      }
      if (ended) {
        reason = ended.reason
        break
      }
      const result = outcome!.result
      if (result === 'max-tokens') tc.sawMaxTokens = true
      stopped = result !== 'continue'
      tc.abort.check()
      if (stopped && loop.state.inbox.nextStep.length === 0) {
        await tc.hooks.runSerial('agent/turn-stopping', { agent: loop.handle(), turn, signal: tc.signal }, { bind: loop.bind })
        tc.abort.check()
      }
      if (stopped && loop.state.inbox.nextStep.length === 0) break
      target = 'next-step'
    }
    if (reason === null) reason = tc.sawMaxTokens ? { kind: 'max-tokens' } : { kind: 'completed' }
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
  decided(reason!)
  const after = ended
    ? ended.after
    : await closer(async () => {
        let after: AfterTurn = 'idle'
        await tc.unit.close({
          reads: EXIT_READS,
          build: (u) => {
            const end = addTurnEnd(tc, u, reason!, exception || park)
            after = end.value
            return end.patch
          },
        })
        return after
      })
  metrics?.turnEnded(reason!.kind, started)
  return after
}

/**
 * The open step's end (SPEC §6.2: `finally: append step/end`), a barrier: it joins what the step left
 * open — a step/start not written yet (a step that failed before its admission), a settlement without
 * calls, the batch's last tool/result — and, after a settlement without calls, the turn/end when the
 * turn ends right there (ends.ts stepEnd): one round trip fewer per step and per turn, the same events
 * in the same order. Returns the turn's end when the unit ended it.
 */
async function endStep(tc: TurnContext, outcome: StepOutcome | undefined): Promise<TurnEnded | undefined> {
  let ended: TurnEnded | undefined
  const set = (e: TurnEnded | undefined) => void (ended = e)
  try {
    await tc.unit.close(stepEnd(tc, outcome?.open === 'message' ? outcome.result : undefined, set))
    return ended
  } catch (e) {
    if (!outcome?.open || e instanceof LeaseLostError) throw new FatalAppend(e)
    // the step's last write failed with its end, so nothing of either is written: the step still
    // closes, alone (SPEC §6.5), and the turn fails with that write's error
    await closer(() => tc.unit.close(stepEnd(tc, undefined, set)))
    throw e
  }
}
