// Where the span that admitted a message stands (API.md §17 intro), read from the log: not yet
// claimed, running, waiting for a client result or an approval, or ended — with its turn and final text.
// Interim, until the protocol core's span fold (span.ts) is merged: then this becomes a view of it.

import { listPending, readEvents, type Db, type SessionRow } from '../store/index.js'
import type { SessionEvent } from '../session/index.js'

export type OutcomeStatus = 'submitted' | 'working' | 'input-required' | 'completed' | 'failed' | 'canceled'

export interface Outcome {
  status: OutcomeStatus
  /** the turn that claimed the message (null while unclaimed) */
  turn: number | null
  /** the text of the span's last assistant message that has text */
  text?: string
  /** the calls the span waits on (input-required) */
  pending?: Array<{ callId: string; name: string; kind: 'client' | 'approval'; arguments: string }>
  /** the turn's end reason kind (ended spans) */
  reason?: string
  error?: { code?: string; message?: string }
}

const data = (e: SessionEvent) => e.data as Record<string, any>

/** The span of `messageId` as the events from `fromSeq` on show it (pending: the session's unanswered calls). */
export function foldOutcome(events: readonly SessionEvent[], messageId: string, pending: Outcome['pending'] = []): Outcome {
  const claim = events.findIndex((e) => e.type === 'user/message' && data(e).id === messageId)
  if (claim < 0) return { status: 'submitted', turn: null }
  let turn: number | null = null
  for (let i = claim; i >= 0; i--) if (events[i].type === 'turn/start') {
    turn = data(events[i]).turn
    break
  }
  let text: string | undefined
  const calls = new Map<string, boolean>()
  let current = turn
  for (let i = claim + 1; i < events.length; i++) {
    const e = events[i]
    const d = data(e)
    if (e.type === 'assistant/message') {
      const t = ((d.message?.content ?? []) as Array<{ type: string; text?: string }>).filter((b) => b.type === 'text').map((b) => b.text ?? '').join('')
      if (t) text = t
    } else if (e.type === 'tool/call') calls.set(d.callId, false)
    else if (e.type === 'tool/result') calls.set(d.message?.source?.callId, true)
    else if (e.type === 'turn/start' && d.continues === current) current = d.turn
    else if (e.type === 'turn/end' && d.turn === current) {
      const kind = d.reason?.kind as string
      if (kind === 'interrupted') continue // a continuation follows (SPEC §19): the same span
      const status: OutcomeStatus = kind === 'completed' || kind === 'max-tokens' ? 'completed' : kind === 'aborted' ? 'canceled' : 'failed'
      return { status, turn, text, reason: kind, ...(d.reason?.error ? { error: { code: d.reason.error.code, message: d.reason.error.message } } : {}) }
    }
  }
  const open = [...calls].filter(([, done]) => !done).map(([id]) => id)
  const waiting = pending.filter((p) => open.includes(p.callId))
  if (open.length && waiting.length === open.length) return { status: 'input-required', turn, text, pending: waiting }
  return { status: 'working', turn, text }
}

/** The span's outcome now. */
export async function readOutcome(db: Db, row: SessionRow, fromSeq: number, messageId: string): Promise<Outcome> {
  const events = await readEvents(db, row.key, fromSeq - 1)
  const pending = (await listPending(db, row.key)).map((p) => ({ callId: p.callId, name: p.name, kind: p.kind, arguments: p.arguments }))
  return foldOutcome(events, messageId, pending)
}

/** Waits up to `ms` for the span to end (completed, failed, canceled) or wait (input-required). */
export async function waitOutcome(db: Db, row: SessionRow, fromSeq: number, messageId: string, ms: number, signal?: AbortSignal): Promise<Outcome> {
  const deadline = Date.now() + ms
  for (;;) {
    const o = await readOutcome(db, row, fromSeq, messageId)
    if (o.status !== 'submitted' && o.status !== 'working') return o
    if (Date.now() >= deadline || signal?.aborted) return o
    await new Promise((r) => setTimeout(r, Math.min(100, Math.max(1, deadline - Date.now()))))
  }
}
