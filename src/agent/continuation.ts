// Crash-transparent continuation (SPEC §19), as pure functions of the log: whether a continuation
// is owed after crash repair, which messages it carries, and whether it may run. Everything is
// computed from the events, so the answer is the same whichever process repaired the turn and
// however often repair was retried.

import { applySplice, emptyInbox, type SessionEvent, type SplicedData, type TurnEndReason, type UserMessage } from '../session/index.js'

/** What one turn of the log did, as far as §19 cares. */
interface TurnRecord {
  turn: number
  continues?: number
  end?: TurnEndReason['kind']
  /** it settled an assistant/message */
  answered: boolean
  /** messages its claim splices removed, in claim order */
  claimed: UserMessage[]
  /** ids it admitted as user/message */
  admitted: Set<string>
}

/** A continuation owed for crash-interrupted turn `turn` (SPEC §19.3). */
export interface ContinuationDuty {
  /** the crash-interrupted turn the continuation continues */
  turn: number
  /** SPEC §19.2: claimed by that turn (or inherited from the turn it continued) and never admitted */
  carried: UserMessage[]
  /** everything that turn and the turns it continued claimed, admitted or not: their requests are linked from the continuation's span (API.md §19) */
  inputs: UserMessage[]
  /** how many turns, counted back from `turn`, are crash-interrupted continuations that settled no assistant/message */
  failedContinuations: number
}

export type ContinuationDecision = 'continue' | 'disabled' | 'cancelled' | 'crash-loop' | 'spent'

/**
 * The duty the log states for turn `owedTurn` (the turn crash repair closed, from the row): null
 * when the log's last turn is not that turn or did not end interrupted (a later turn ran, or
 * nothing was repaired).
 */
export function continuationDuty(events: readonly SessionEvent[], owedTurn: number | null): ContinuationDuty | null {
  if (owedTurn === null) return null
  const turns = new Map<number, TurnRecord>()
  const inbox = emptyInbox()
  const everAdmitted = new Set<string>()
  let open: TurnRecord | undefined
  let last: TurnRecord | undefined
  for (const e of events) {
    const d = e.data as Record<string, unknown>
    if (e.type === 'turn/start') {
      open = { turn: d.turn as number, answered: false, claimed: [], admitted: new Set() }
      if (typeof d.continues === 'number') open.continues = d.continues
      turns.set(open.turn, open)
      last = open
    } else if (e.type === 'turn/end') {
      if (open) open.end = (d.reason as TurnEndReason).kind
      open = undefined
    } else if (e.type === 'agent/inbox/spliced') {
      const removed = applySplice(inbox, d as unknown as SplicedData)
      // a claim is a pure deletion without outcome (SPEC §4.5); cancelling removals say 'canceled'
      if (open && !d.outcome) open.claimed.push(...removed)
    } else if (e.type === 'user/message') {
      const id = (d as unknown as UserMessage).id
      everAdmitted.add(id)
      open?.admitted.add(id)
    } else if (e.type === 'assistant/message' && open) open.answered = true
  }
  if (!last || last.turn !== owedTurn || last.end !== 'interrupted' || open) return null
  const carriedOf = (t: TurnRecord, depth: number): UserMessage[] => {
    const inherited = t.continues !== undefined && depth < 10_000 ? (turns.get(t.continues) ? carriedOf(turns.get(t.continues)!, depth + 1) : []) : []
    return [...inherited, ...t.claimed].filter((m) => !t.admitted.has(m.id))
  }
  const seen = new Set<string>()
  const carried = carriedOf(last, 0).filter((m) => {
    // SPEC §19.3 / invariant 16: a message is admitted at most once in the whole log
    if (everAdmitted.has(m.id) || seen.has(m.id)) return false
    seen.add(m.id)
    return true
  })
  const inputIds = new Set<string>()
  const inputs: UserMessage[] = []
  for (let t: TurnRecord | undefined = last, depth = 0; t && depth < 10_000; t = t.continues !== undefined ? turns.get(t.continues) : undefined, depth++) {
    for (const m of t.claimed) if (!inputIds.has(m.id)) inputIds.add(m.id) && inputs.push(m)
  }
  let failedContinuations = 0
  for (let t: TurnRecord | undefined = last; t && t.continues !== undefined && t.end === 'interrupted' && !t.answered; t = turns.get(t.turn - 1)) failedContinuations++
  return { turn: last.turn, carried, inputs, failedContinuations }
}

/**
 * SPEC §19.5: whether the owed continuation runs. `limit` is AGENTD_CONTINUE_AFTER_CRASH (0: off);
 * `cancelPending` and `runState` are the row's flags at the moment the turn would open.
 */
export function decideContinuation(duty: ContinuationDuty, o: { limit: number; cancelPending: boolean; runState: string }): ContinuationDecision {
  if (o.runState === 'idle') return 'spent' // the crashed holder's wake was spent (§19.3)
  if (o.limit <= 0) return 'disabled'
  if (o.cancelPending) return 'cancelled'
  if (duty.failedContinuations >= o.limit) return 'crash-loop'
  return 'continue'
}

/**
 * How long after attach an owed continuation waits before it opens without new input. The first
 * continuation of a crash opens at once, right after the repair's closers (SPEC §19.3 sets no
 * delay); from the second in a row (the continuation before it crashed too, unanswered) a backoff
 * that doubles (1 s, 2 s, 4 s, … at most 10 s), so a crash the work itself causes does not hammer
 * every process at once. `limit` is AGENTD_CONTINUE_AFTER_CRASH.
 */
export function continuationDelayMs(duty: ContinuationDuty, limit: number): number {
  // a duty that will be declined (continuation off, the crash-loop limit reached) waits for nothing
  if (limit <= 0 || duty.failedContinuations >= limit || duty.failedContinuations === 0) return 0
  return Math.min(10_000, 1000 * 2 ** Math.min(duty.failedContinuations - 1, 4))
}
