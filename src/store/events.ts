// The durable log: appending under the session row lock (seq dense from 0, allocated inside the
// appending transaction, DESIGN.md §3) and reading pages of it.

import type { Draft, SessionEvent } from '../session/index.js'
import { rowSets, updateRow, type RowPatch, type RunState } from './sessions.js'
import { sideCtes, sideGuards, writeSideRows, type SideRow } from './side.js'
import { isDb, joinTexts, splitTexts, type Queryable } from './db.js'
import { groupCommitter, type GroupUnit, type UnitOutcome } from './group.js'
import { markDeliveries } from './webhooks.js'

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

/**
 * Writes stamped events of a locked row, moves the row (next_seq, last_time and the patch) and writes
 * the unit's side rows, in the caller's transaction. The events must continue the row's seq exactly.
 */
export async function writeEvents(tx: Queryable, row: LogPosition, events: readonly SessionEvent[], patch: RowPatch = {}, side: readonly SideRow[] = []): Promise<StoredEvent[]> {
  const out = events.map((e) => stored(e))
  if (out.length) {
    if (out[0].seq !== row.nextSeq) throw new Error(`append at seq ${out[0].seq} but the log is at ${row.nextSeq}`)
    await tx.query(
      `INSERT INTO session_events (session_key, seq, time, type, body) SELECT $1, * FROM unnest($2::int[], $3::bigint[], $4::text[], ${splitTexts('$5')})`,
      [row.key, out.map((e) => e.seq), out.map((e) => e.time), out.map((e) => e.type), joinTexts(out.map((e) => e.json))],
    )
    const last = out[out.length - 1]
    await updateRow(tx, row.key, { nextSeq: last.seq + 1, lastTime: last.time }, patch)
    row.nextSeq = last.seq + 1
    row.lastTime = last.time
    row.updatedAt = last.time
  } else await updateRow(tx, row.key, null, patch)
  await writeSideRows(tx, row.key, side)
  return out
}

/**
 * An append in ONE statement, without a transaction of its own: the row moves only if it is still at
 * `expect.nextSeq`, under the given lease (the driver's fence) and with the given flags (what the
 * caller decided on) and the guards of its side rows (side.ts), and the events and the unit's side
 * rows are inserted only if it moved.
 * Returns the row flags, or null when a condition failed: the caller then reads again or takes the
 * locked path. A side row that violates a constraint (a duplicate idempotency record) fails the
 * statement as a whole.
 */
export async function appendConditional(
  db: Queryable,
  key: string,
  expect: { nextSeq: number; lease?: { owner: string; token: number }; flags?: { runState?: RunState; cancelPending?: boolean; wakeLatched?: boolean } },
  events: readonly SessionEvent[],
  patch: RowPatch = {},
  side: readonly SideRow[] = [],
): Promise<{ events: StoredEvent[]; runState: RunState; cancelPending: boolean; wakeLatched: boolean } | null> {
  const out = events.map((e) => stored(e))
  if (!out.length || out[0].seq !== expect.nextSeq) throw new Error('appendConditional needs events that continue the expected seq')
  // outside a transaction, the unit may be group-committed with other sessions' units (group.ts);
  // its settlements apart from its other side rows, as group.ts sums a group's period totals into one upsert
  const settlements = side.filter((r) => r.kind === 'usage')
  const usage = settlements.length === 1 ? settlements[0].entries : []
  const others = settlements.length === 1 ? side.filter((r) => r.kind !== 'usage') : side
  const r = isDb(db)
    ? await groupCommitter(db, (u) => conditionalOne(db, u, [...(u.side ?? []), ...(u.usage ? [{ kind: 'usage' as const, entries: [...u.usage] }] : [])])).append({
        key,
        expect,
        events: out,
        patch,
        ...(usage.length ? { usage } : {}),
        ...(others.length ? { side: others } : {}),
      })
    : await conditionalOne(db, { key, expect, events: out, patch }, side)
  if (!r) return null
  if (r.n !== out.length) throw new Error(`appendConditional inserted ${r.n} of ${out.length} events`)
  return { events: out, runState: r.runState, cancelPending: r.cancelPending, wakeLatched: r.wakeLatched }
}

/** One unit's conditional append, alone in its statement. */
async function conditionalOne(db: Queryable, u: GroupUnit, side: readonly SideRow[]): Promise<UnitOutcome> {
  const { key, expect, events: out, patch } = u
  const last = out[out.length - 1]
  const params: unknown[] = [key, expect.nextSeq]
  let where = 'key = $1 AND next_seq = $2'
  if (expect.lease) {
    params.push(expect.lease.owner, expect.lease.token)
    where += ` AND lease_owner = $${params.length - 1} AND lease_token = $${params.length}`
  }
  const column = { runState: 'run_state', cancelPending: 'cancel_pending', wakeLatched: 'wake_latched' } as const
  for (const [k, v] of Object.entries(expect.flags ?? {})) {
    if (v === undefined) continue
    params.push(v)
    where += ` AND ${column[k as keyof typeof column]} = $${params.length}`
  }
  for (const g of sideGuards(side, params)) where += ` AND ${g}`
  const sets = rowSets({ nextSeq: last.seq + 1, lastTime: last.time }, patch, params)
  const sides = sideCtes(side, params)
  const deliveries = sides.counted.length ? `, (${sides.counted.map((c) => `(SELECT count(*)::int FROM ${c})`).join(' + ')}) AS w` : ''
  params.push(out.map((e) => e.seq), out.map((e) => e.time), out.map((e) => e.type), joinTexts(out.map((e) => e.json)))
  const n = params.length
  const { rows } = await db.query<{ run_state: RunState; cancel_pending: boolean; wake_latched: boolean; n: number; w?: number }>(
    `WITH moved AS (
       UPDATE sessions SET ${sets.join(', ')} WHERE ${where}
       RETURNING run_state, cancel_pending, wake_latched
     ), ins AS (
       INSERT INTO session_events (session_key, seq, time, type, body)
       SELECT $1, e.seq, e.time, e.type, e.body FROM unnest($${n - 3}::int[], $${n - 2}::bigint[], $${n - 1}::text[], ${splitTexts(`$${n}`)}) AS e(seq, time, type, body)
       WHERE EXISTS (SELECT 1 FROM moved)
       RETURNING 1
     )${sides.sql}
     SELECT m.run_state, m.cancel_pending, m.wake_latched, (SELECT count(*)::int FROM ins) AS n${deliveries} FROM moved m`,
    params,
  )
  const r = rows[0]
  if (r?.w) markDeliveries(key, r.w)
  return r ? { runState: r.run_state, cancelPending: r.cancel_pending, wakeLatched: r.wake_latched, n: r.n } : null
}

/** Raw wire texts of events with seq in (after, upTo], ascending, at most limit. */
export async function readEventTexts(db: Queryable, key: string, after: number, limit: number, upTo?: number): Promise<{ seq: number; body: string }[]> {
  const params: unknown[] = [key, after, limit]
  let sql = 'SELECT seq, body FROM session_events WHERE session_key = $1 AND seq > $2'
  if (upTo !== undefined) {
    params.push(upTo)
    sql += ' AND seq <= $4'
  }
  const { rows } = await db.query<{ seq: number; body: string }>(`${sql} ORDER BY seq LIMIT $3`, params)
  return rows
}

/** Events with seq > after (all of them by default), parsed. */
export async function readEvents(db: Queryable, key: string, after = -1, limit = 1_000_000): Promise<StoredEvent[]> {
  const rows = await readEventTexts(db, key, after, limit)
  return rows.map((r) => stored(JSON.parse(r.body) as SessionEvent, r.body))
}

/** The surface-eligible events of a session (for deriving history without the whole log). */
export async function readSurfaceEvents(db: Queryable, key: string): Promise<SessionEvent[]> {
  const { rows } = await db.query<{ body: string }>(
    "SELECT body FROM session_events WHERE session_key = $1 AND type IN ('system/message', 'user/message', 'assistant/message', 'tool/result') ORDER BY seq",
    [key],
  )
  return rows.map((r) => JSON.parse(r.body) as SessionEvent)
}

/**
 * Fork (API.md §9): copies the source's events up to `through` verbatim into the child's log, in the
 * caller's transaction, and moves the child row to the copy's end with the given inbox, usage and last turn.
 */
export async function copyLogPrefix(tx: Queryable, from: string, to: string, through: { seq: number; time: number }, patch: Pick<RowPatch, 'inbox' | 'usage' | 'lastTurn'>): Promise<void> {
  await tx.query('INSERT INTO session_events (session_key, seq, time, type, body) SELECT $1, seq, time, type, body FROM session_events WHERE session_key = $2 AND seq <= $3', [to, from, through.seq])
  // a fresh child's usage is 0, so the ledger's addition sets it
  await updateRow(tx, to, { nextSeq: through.seq + 1, lastTime: through.time }, patch)
}
