// The inbox (SPEC §4): two ordered lists folded from `agent/inbox/spliced` events.

import type { Inbox, InboxTarget, SplicedData, UserMessage } from './types.js'

export class InboxError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'InboxError'
  }
}

export const emptyInbox = (): Inbox => ({ nextTurn: [], nextStep: [] })

/** Whether anything is pending in either list: work for a turn (SPEC §5.3). */
export const hasPending = (inbox: Inbox): boolean => inbox.nextTurn.length > 0 || inbox.nextStep.length > 0

export const listOf = (inbox: Inbox, target: InboxTarget): UserMessage[] => (target === 'next-turn' ? inbox.nextTurn : inbox.nextStep)

/** SPEC §4.2 step 1: array-splice normalization of (start, deleteCount) against a list length. */
export function normalizeSplice(length: number, start: number, deleteCount: number): { start: number; deleteCount: number } {
  // + 0 turns a -0 from truncating (-1, 0) into 0: a logged splice must be lossless JSON
  let s = Number.isNaN(start) ? 0 : Math.trunc(start) + 0
  if (s < 0) s = Math.max(0, length + s)
  if (s > length) s = length
  let d = Number.isNaN(deleteCount) ? 0 : Math.trunc(deleteCount) + 0
  d = Math.min(Math.max(0, d), length - s)
  return { start: s, deleteCount: d }
}

/** Every message id pending in either list. */
export function pendingIds(inbox: Inbox): Set<string> {
  const ids = new Set<string>()
  for (const m of inbox.nextTurn) ids.add(m.id)
  for (const m of inbox.nextStep) ids.add(m.id)
  return ids
}

/**
 * Builds the normalized splice data for a mutation, or null when nothing changes (SPEC §4.2 step 2).
 * Throws InboxError when an inserted id is pending already or repeats within the insertion.
 */
export function planSplice(inbox: Inbox, target: InboxTarget, start: number, deleteCount: number, inserted: UserMessage[], outcome?: 'canceled'): SplicedData | null {
  const list = listOf(inbox, target)
  const n = normalizeSplice(list.length, start, deleteCount)
  if (n.deleteCount === 0 && inserted.length === 0) return null
  const removed = new Set(list.slice(n.start, n.start + n.deleteCount).map((m) => m.id))
  const pending = pendingIds(inbox)
  const seen = new Set<string>()
  for (const m of inserted) {
    if (seen.has(m.id) || (pending.has(m.id) && !removed.has(m.id))) throw new InboxError(`message id ${m.id} is already pending`)
    seen.add(m.id)
  }
  const data: SplicedData = { target, start: n.start, inserted }
  if (n.deleteCount) data.removedCount = n.deleteCount
  if (outcome && n.deleteCount) data.outcome = outcome
  return data
}

/**
 * Applies one splice to the inbox in place (the fold of SPEC §4.1). Throws InboxError on an
 * out-of-range position or a duplicate id: a fatal load error. Returns the removed messages.
 */
export function applySplice(inbox: Inbox, d: SplicedData): UserMessage[] {
  if (d.target !== 'next-turn' && d.target !== 'next-step') throw new InboxError(`unknown inbox target ${String(d.target)}`)
  const list = listOf(inbox, d.target)
  const removedCount = d.removedCount ?? 0
  if (!Number.isInteger(d.start) || d.start < 0 || d.start > list.length) throw new InboxError(`splice start ${d.start} is out of range (length ${list.length})`)
  if (!Number.isInteger(removedCount) || removedCount < 0 || d.start + removedCount > list.length) throw new InboxError(`splice removedCount ${removedCount} is out of range`)
  const inserted = d.inserted ?? []
  const removed = list.slice(d.start, d.start + removedCount)
  const removedIds = new Set(removed.map((m) => m.id))
  const pending = pendingIds(inbox)
  const seen = new Set<string>()
  for (const m of inserted) {
    if (seen.has(m.id) || (pending.has(m.id) && !removedIds.has(m.id))) throw new InboxError(`message id ${m.id} would be pending twice`)
    seen.add(m.id)
  }
  list.splice(d.start, removedCount, ...inserted)
  return removed
}

/** Undoes applySplice (for rolled-back units). */
export function unapplySplice(inbox: Inbox, d: SplicedData, removed: UserMessage[]): void {
  listOf(inbox, d.target).splice(d.start, (d.inserted ?? []).length, ...removed)
}

/** Folds splice data in order into a fresh inbox. */
export function foldInbox(splices: Iterable<SplicedData>): Inbox {
  const inbox = emptyInbox()
  for (const d of splices) applySplice(inbox, d)
  return inbox
}

/** SPEC §4.3 clear(): cancelling removals of all next-step, then all next-turn. */
export function planClear(inbox: Inbox): SplicedData[] {
  const out: SplicedData[] = []
  for (const target of ['next-step', 'next-turn'] as const) {
    const n = listOf(inbox, target).length
    if (n) out.push({ target, start: 0, removedCount: n, inserted: [], outcome: 'canceled' })
  }
  return out
}

/** SPEC §4.5 claim: pure deletions of all next-step, then (turn boundary) the first next-turn item. */
export function planClaim(inbox: Inbox, target: InboxTarget): { splices: SplicedData[]; claimed: UserMessage[] } {
  const splices: SplicedData[] = []
  const claimed: UserMessage[] = []
  if (inbox.nextStep.length) {
    splices.push({ target: 'next-step', start: 0, removedCount: inbox.nextStep.length, inserted: [] })
    claimed.push(...inbox.nextStep)
  }
  if (target === 'next-turn' && inbox.nextTurn.length) {
    splices.push({ target: 'next-turn', start: 0, removedCount: 1, inserted: [] })
    claimed.push(inbox.nextTurn[0])
  }
  return { splices, claimed }
}

/** Index of a pending message: its list and position, or undefined. */
export function findPending(inbox: Inbox, id: string): { target: InboxTarget; index: number; message: UserMessage } | undefined {
  for (const target of ['next-step', 'next-turn'] as const) {
    const list = listOf(inbox, target)
    const index = list.findIndex((m) => m.id === id)
    if (index >= 0) return { target, index, message: list[index] }
  }
  return undefined
}

// ---- delivery (SPEC §4.4) ----

export type DeliveryRoute = 'followup' | 'steer' | 'inject'

export const ROUTE_TARGET: Record<DeliveryRoute, InboxTarget> = { followup: 'next-turn', steer: 'next-step', inject: 'next-step' }
export const ROUTE_WAKES: Record<DeliveryRoute, boolean> = { followup: true, steer: true, inject: false }

/** What the accepting side knows when it routes a delivery. */
export interface DeliveryView {
  /** nothing runs and no wake is wanted yet: a waking delivery records one */
  idle: boolean
  /** maintenance runs: a waking delivery latches (SPEC §5.4) */
  maintenance: boolean
  /** a cancel is pending or its activity still converging: waking input goes to next-turn and latches */
  cancelling: boolean
}

/** A delivery's splice and the row flags it sets: a wake request (`runState: 'wanted'`) or the latch. */
export interface DeliveryPlan {
  target: InboxTarget
  splice: SplicedData
  flags: { runState?: 'wanted'; wakeLatched?: true }
}

/**
 * SPEC §4.4 send(): appends the message to its route's list (next-turn while cancelling, for waking
 * input) and says whether it records a wake or latches. Throws InboxError for an id already pending.
 */
export function planDelivery(inbox: Inbox, route: DeliveryRoute, message: UserMessage, at: DeliveryView): DeliveryPlan {
  const wakes = ROUTE_WAKES[route]
  const target: InboxTarget = wakes && at.cancelling ? 'next-turn' : ROUTE_TARGET[route]
  const splice = planSplice(inbox, target, listOf(inbox, target).length, 0, [message])!
  const flags: DeliveryPlan['flags'] = {}
  // a live, non-aborted driver claims the input itself: nothing to record (SPEC §5.4)
  if (wakes && (at.cancelling || at.maintenance)) flags.wakeLatched = true
  else if (wakes && at.idle) flags.runState = 'wanted'
  return { target, splice, flags }
}
