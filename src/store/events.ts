// The durable log: stamping events (seq dense from 0, DESIGN.md §3) and reading pages of it, and the
// doors the agent code appends through (writeEvents, appendConditional, copyLogPrefix), onto the unit
// writer (unit.ts), the only code that writes the log.

import type { Draft, SessionEvent } from '../session/index.js'
import type { RowPatch, RunState } from './sessions.js'
import { statement, type Queryable } from './db.js'
import { commitFast, commitLocked, copyPrefix, type SideRow } from './unit.js'

/** What an append needs of the locked row; writeEvents moves it forward. */
export interface LogPosition {
  key: string
  nextSeq: number
  lastTime: number
  updatedAt?: number
}

/** The wire form of an event (API.md §6): fixed member order, absent members omitted. */
export function eventJson(e: SessionEvent): string {
  let s = `{"seq":${e.seq},"time":${e.time},"type":${JSON.stringify(e.type)},"data":${JSON.stringify(e.data)}`
  if (e.surfaceOp !== undefined) s += `,"surfaceOp":${JSON.stringify(e.surfaceOp)}`
  if (e.sourceEventSeqs !== undefined) s += `,"sourceEventSeqs":${JSON.stringify(e.sourceEventSeqs)}`
  return `${s}}`
}

/** A committed event with its wire text, so fan-out serializes it once. */
export interface StoredEvent extends SessionEvent {
  readonly json: string
  /** on a unit's last event: the webhook deliveries its commit wrote (deliveriesWritten), when any */
  readonly deliveries?: number
}

export function stored(e: SessionEvent, json = eventJson(e)): StoredEvent {
  Object.defineProperty(e, 'json', { value: json, enumerable: false })
  return e as StoredEvent
}

/** Gives drafts their seq and time (SPEC §3.1.2: time = max(now, previous time)), in order. */
export function stamp(row: { nextSeq: number; lastTime: number }, drafts: readonly Draft[], time?: number): SessionEvent[] {
  const t = time ?? Math.max(Date.now(), row.lastTime)
  return drafts.map((d, i) => {
    const e: SessionEvent = { seq: row.nextSeq + i, time: t, type: d.type, data: d.data }
    if (d.surfaceOp !== undefined) e.surfaceOp = d.surfaceOp
    if (d.sourceEventSeqs !== undefined) e.sourceEventSeqs = d.sourceEventSeqs
    return e
  })
}

/** The webhook deliveries a unit's commit wrote, carried on its last event (deliveriesWritten). */
function carryDeliveries(events: readonly StoredEvent[], n: number): void {
  if (n > 0 && events.length) Object.defineProperty(events[events.length - 1], 'deliveries', { value: n, enumerable: false, configurable: true, writable: true })
}

/**
 * How many webhook deliveries the commit of these events wrote (the local deliverer's wake-up,
 * app.ts): the unit writer leaves the count on each unit's last event, so it travels with the
 * committed events to the commit observers.
 */
export function deliveriesWritten(events: readonly SessionEvent[]): number {
  let n = 0
  for (const e of events) n += (e as { deliveries?: number }).deliveries ?? 0
  return n
}

/**
 * Writes stamped events of a locked row, moves the row (next_seq, last_time and the patch) and writes
 * the unit's side rows, in the caller's transaction (unit.ts commitLocked). The events must continue
 * the row's seq exactly.
 */
export async function writeEvents(tx: Queryable, row: LogPosition, events: readonly SessionEvent[], patch: RowPatch = {}, side: readonly SideRow[] = []): Promise<StoredEvent[]> {
  const out = events.map((e) => stored(e))
  if (out.length && out[0].seq !== row.nextSeq) throw new Error(`append at seq ${out[0].seq} but the log is at ${row.nextSeq}`)
  const r = await commitLocked(tx, { key: row.key, expect: { nextSeq: row.nextSeq }, events: out, patch, side })
  if (out.length) {
    const last = out[out.length - 1]
    row.nextSeq = last.seq + 1
    row.lastTime = last.time
    row.updatedAt = last.time
  }
  carryDeliveries(out, r.deliveries)
  return out
}

/**
 * An append in ONE statement, without a transaction of its own (unit.ts commitFast): the row moves
 * only if it is still at `expect.nextSeq`, under the given lease (the driver's fence) and with the
 * given flags (what the caller decided on) and the guards of its side rows, and the events and the
 * unit's side rows are written only if it moved.
 * Returns the row flags and the webhook deliveries written, or null when a condition failed: the
 * caller then reads again or takes the locked path. A side row that violates a constraint (a
 * duplicate idempotency record) fails the statement as a whole.
 */
export async function appendConditional(
  db: Queryable,
  key: string,
  expect: { nextSeq: number; lease?: { owner: string; token: number }; flags?: { runState?: RunState; cancelPending?: boolean; wakeLatched?: boolean } },
  events: readonly SessionEvent[],
  patch: RowPatch = {},
  side: readonly SideRow[] = [],
): Promise<{ events: StoredEvent[]; runState: RunState; cancelPending: boolean; wakeLatched: boolean; deliveries: number } | null> {
  const out = events.map((e) => stored(e))
  if (!out.length || out[0].seq !== expect.nextSeq) throw new Error('appendConditional needs events that continue the expected seq')
  const r = await commitFast(db, { key, expect, events: out, patch, side })
  if (!r) return null
  if (r.n !== out.length) throw new Error(`appendConditional inserted ${r.n} of ${out.length} events`)
  carryDeliveries(out, r.deliveries)
  return { events: out, runState: r.runState, cancelPending: r.cancelPending, wakeLatched: r.wakeLatched, deliveries: r.deliveries }
}

const READ_AFTER = statement('events_after', 'SELECT seq, body FROM session_events WHERE session_key = $1 AND seq > $2 ORDER BY seq LIMIT $3')
const READ_BETWEEN = statement('events_between', 'SELECT seq, body FROM session_events WHERE session_key = $1 AND seq > $2 AND seq <= $4 ORDER BY seq LIMIT $3')
const READ_SURFACE = statement(
  'events_surface',
  "SELECT body FROM session_events WHERE session_key = $1 AND type IN ('system/message', 'user/message', 'assistant/message', 'tool/result') ORDER BY seq",
)

/** Raw wire texts of events with seq in (after, upTo], ascending, at most limit. */
export async function readEventTexts(db: Queryable, key: string, after: number, limit: number, upTo?: number): Promise<{ seq: number; body: string }[]> {
  const { rows } = await db.query<{ seq: number; body: string }>(upTo === undefined ? READ_AFTER : READ_BETWEEN, upTo === undefined ? [key, after, limit] : [key, after, limit, upTo])
  return rows
}

/** Events with seq > after (all of them by default), parsed. */
export async function readEvents(db: Queryable, key: string, after = -1, limit = 1_000_000): Promise<StoredEvent[]> {
  const rows = await readEventTexts(db, key, after, limit)
  return rows.map((r) => stored(JSON.parse(r.body) as SessionEvent, r.body))
}

/** The surface-eligible events of a session (for deriving history without the whole log). */
export async function readSurfaceEvents(db: Queryable, key: string): Promise<SessionEvent[]> {
  const { rows } = await db.query<{ body: string }>(READ_SURFACE, [key])
  return rows.map((r) => JSON.parse(r.body) as SessionEvent)
}

/**
 * Fork (API.md §9): copies the source's events up to `through` verbatim into the child's log, in the
 * caller's transaction, and moves the child row to the copy's end with the given inbox, usage and last
 * turn (unit.ts copyPrefix; a fresh child's usage is 0, so the ledger's addition sets it).
 */
export async function copyLogPrefix(tx: Queryable, from: string, to: string, through: { seq: number; time: number }, patch: Pick<RowPatch, 'inbox' | 'usage' | 'lastTurn'>): Promise<void> {
  await copyPrefix(tx, from, to, through, patch)
}
