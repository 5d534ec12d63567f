// The floor: what the database alone costs for the same durable writes. A turn's events are grouped
// into the units agentd committed them in (read from the transaction ids of its log: delivery splice;
// turn/start + claim; step/start; admission; assistant/message; tool/call; tool/result + step/end;
// …; step/end + turn/end), and each unit is written directly with pg / PGlite, with the same event
// bodies (seq and time rewritten), into a session of its own.
// Two shapes:
//   'one'    (the honest floor) ONE round trip per unit: a single statement that moves the session
//            row only if it is still at the expected seq and inserts the rows if it moved
//            (WITH moved AS (UPDATE … RETURNING) INSERT … WHERE EXISTS (moved)), the shape of
//            agentd's best single-statement append (store/events.ts appendConditional), prepared
//            once per connection on PostgreSQL as agentd's statements are;
//   'replay' (the replay reference) one transaction of four round trips per unit:
//            BEGIN; SELECT … FOR UPDATE; INSERT the rows; UPDATE next_seq; COMMIT.

import crypto from 'node:crypto'
import type pg from 'pg'
import type { RawDb } from './lib.js'
import { joinTexts, splitTexts } from '../src/store/db.js'

export interface FloorEvent {
  type: string
  /** the stored wire text, starting with {"seq":N,"time":T, */
  body: string
}

export type Unit = FloorEvent[]

const ADMISSION = new Set(['system/message', 'user/message', 'request/header', 'request/context'])

/**
 * Groups a turn's events (as GET /events returns them) into agentd's commit units. With `txs` (the
 * transaction that wrote each event, writtenBy), exactly as agentd committed them: consecutive events
 * of one transaction are one unit (two units of one session never share a statement). Without, by
 * the types of the units agentd always writes apart.
 */
export function unitsOf(events: Array<{ type: string; data: any }>, bodies: string[], txs?: string[]): Unit[] {
  if (txs) {
    const out: Unit[] = []
    events.forEach((e, i) => {
      const fe = { type: e.type, body: bodies[i] }
      if (i > 0 && txs[i] === txs[i - 1]) out[out.length - 1].push(fe)
      else out.push([fe])
    })
    return out
  }
  const units: Unit[] = []
  let prev: string | undefined
  for (let i = 0; i < events.length; i++) {
    const e = events[i]
    const fe = { type: e.type, body: bodies[i] }
    const claim = e.type === 'agent/inbox/spliced' && (e.data?.removedCount ?? 0) > 0 && !(e.data?.inserted?.length > 0)
    const joins = (claim && (prev === 'turn/start' || prev === 'claim')) || (ADMISSION.has(e.type) && prev !== undefined && ADMISSION.has(prev))
    if (joins && units.length) units[units.length - 1].push(fe)
    else units.push([fe])
    prev = claim ? (prev === 'turn/start' || prev === 'claim' ? 'claim' : e.type) : e.type
  }
  return units
}

/** Shape of a unit list, e.g. "1+2+1+2+1+1+1". */
export const shape = (units: Unit[]) => units.map((u) => u.length).join('+')

const PREFIX = /^\{"seq":-?\d+,"time":\d+,/

export function rebody(body: string, seq: number, time: number): string {
  return body.replace(PREFIX, `{"seq":${seq},"time":${time},`)
}

/** The transaction (xmin) that wrote each of the session's events with these seqs, in their order. */
export async function writtenBy(raw: RawDb, sessionId: string, seqs: number[]): Promise<string[]> {
  const sql = 'SELECT e.seq, e.xmin::text AS tx FROM session_events e JOIN sessions s ON s.key = e.session_key WHERE s.id = $1 AND e.seq = ANY($2::int[])'
  const { rows } = raw.kind === 'pg' ? await raw.pool.query(sql, [sessionId, seqs]) : await raw.pglite.query<any>(sql, [sessionId, seqs])
  const by = new Map(rows.map((r: { seq: number; tx: string }) => [Number(r.seq), r.tx]))
  return seqs.map((q) => {
    const tx = by.get(q)
    if (tx === undefined) throw new Error(`writtenBy: no event ${q} in session ${sessionId}`)
    return tx
  })
}

/** Inserts a bare session row for the floor (same table, same tenant), returns its key. */
export async function floorSession(raw: RawDb, tenantId: string): Promise<string> {
  const key = crypto.randomUUID()
  const now = Date.now()
  const sql = 'INSERT INTO sessions (key, tenant_id, id, model, create_hash, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $6)'
  const params = [key, tenantId, `floor_${key}`, 'faux/echo', 'floor', now]
  if (raw.kind === 'pg') await raw.pool.query(sql, params)
  else await raw.pglite.query(sql, params)
  return key
}

interface Tx {
  query(sql: string, params?: unknown[]): Promise<{ rows: any[] }>
}

async function inTx<T>(raw: RawDb, fn: (tx: Tx) => Promise<T>): Promise<T> {
  if (raw.kind === 'pglite') return raw.pglite.transaction((t) => fn({ query: (s, p) => t.query(s, p) as Promise<{ rows: any[] }> }))
  const client: pg.PoolClient = await raw.pool.connect()
  try {
    await client.query('BEGIN')
    const out = await fn(client)
    await client.query('COMMIT')
    return out
  } catch (e) {
    await client.query('ROLLBACK').catch(() => {})
    throw e
  } finally {
    client.release()
  }
}

export type FloorMode = 'one' | 'replay'

const ONE_SQL = `WITH moved AS (
  UPDATE sessions SET next_seq = $3, last_time = $4, updated_at = $4 WHERE key = $1 AND next_seq = $2 RETURNING 1
), ins AS (
  INSERT INTO session_events (session_key, seq, time, type, body)
  SELECT $1, e.seq, e.time, e.type, e.body FROM unnest($5::int[], $6::bigint[], $7::text[], ${splitTexts('$8')}) AS e(seq, time, type, body)
  WHERE EXISTS (SELECT 1 FROM moved)
  RETURNING 1
) SELECT (SELECT count(*)::int FROM ins) AS n`

/** Appends units to one floor session: one round trip each ('one') or one 4-statement transaction each ('replay'). */
export class FloorWriter {
  /** the row's position, known to the single writer after its first read ('one' mode) */
  private pos?: { next: number; time: number }

  constructor(private readonly raw: RawDb, readonly key: string, readonly mode: FloorMode = 'replay') {}

  /** Commits one unit; returns the stamped bodies (seq, time) it wrote. */
  async commit(unit: Unit): Promise<string[]> {
    return this.mode === 'one' ? this.commitOne(unit) : this.commitReplay(unit)
  }

  private async commitOne(unit: Unit): Promise<string[]> {
    const q = (sql: string, params: unknown[]) => (this.raw.kind === 'pg' ? this.raw.pool.query(sql, params) : this.raw.pglite.query<any>(sql, params))
    if (!this.pos) {
      const { rows } = await q('SELECT next_seq, last_time FROM sessions WHERE key = $1', [this.key])
      this.pos = { next: Number(rows[0].next_seq), time: Number(rows[0].last_time) }
    }
    const next = this.pos.next
    const time = Math.max(Date.now(), this.pos.time)
    const bodies = unit.map((e, i) => rebody(e.body, next + i, time))
    // the bodies as one joined text, as agentd's appends send them (store/db.ts joinTexts)
    const values = [this.key, next, next + unit.length, time, unit.map((_, i) => next + i), unit.map(() => time), unit.map((e) => e.type), joinTexts(bodies)]
    // a named prepared statement, as agentd's appends are (store/db.ts, AGENTD_PG_PREPARE=on)
    const { rows } = this.raw.kind === 'pg' ? await this.raw.pool.query({ text: ONE_SQL, values, name: 'floor_one' }) : await this.raw.pglite.query<any>(ONE_SQL, values)
    if (Number(rows[0]?.n) !== unit.length) throw new Error(`floor: one-statement append wrote ${rows[0]?.n} of ${unit.length} rows`)
    this.pos = { next: next + unit.length, time }
    return bodies
  }

  private async commitReplay(unit: Unit): Promise<string[]> {
    return inTx(this.raw, async (tx) => {
      const { rows } = await tx.query('SELECT next_seq, last_time FROM sessions WHERE key = $1 FOR UPDATE', [this.key])
      const next = Number(rows[0].next_seq)
      const time = Math.max(Date.now(), Number(rows[0].last_time))
      const seqs = unit.map((_, i) => next + i)
      const bodies = unit.map((e, i) => rebody(e.body, next + i, time))
      await tx.query('INSERT INTO session_events (session_key, seq, time, type, body) SELECT $1, * FROM unnest($2::int[], $3::bigint[], $4::text[], $5::text[])', [
        this.key,
        seqs,
        unit.map(() => time),
        unit.map((e) => e.type),
        bodies,
      ])
      await tx.query('UPDATE sessions SET next_seq = $2, last_time = $3, updated_at = $3 WHERE key = $1', [this.key, next + unit.length, time])
      return bodies
    })
  }

  /** Replays a turn's units back to back. */
  async turn(units: Unit[]): Promise<void> {
    for (const u of units) await this.commit(u)
  }
}

/** Bulk-inserts prepared rows into a session (synthetic history) and moves its row. */
export async function bulkInsert(raw: RawDb, key: string, rows: Array<{ seq: number; time: number; type: string; body: string }>, inbox = '{"nextTurn":[],"nextStep":[]}'): Promise<void> {
  const BATCH = 2000
  for (let i = 0; i < rows.length; i += BATCH) {
    const b = rows.slice(i, i + BATCH)
    await inTx(raw, (tx) =>
      tx.query('INSERT INTO session_events (session_key, seq, time, type, body) SELECT $1, * FROM unnest($2::int[], $3::bigint[], $4::text[], $5::text[])', [
        key,
        b.map((r) => r.seq),
        b.map((r) => r.time),
        b.map((r) => r.type),
        b.map((r) => r.body),
      ]),
    )
  }
  const last = rows[rows.length - 1]
  const sql = "UPDATE sessions SET next_seq = $2, last_time = $3, updated_at = $3, inbox = $4, open_turn = NULL, run_state = 'idle' WHERE key = $1"
  const params = [key, last.seq + 1, last.time, inbox]
  if (raw.kind === 'pg') await raw.pool.query(sql, params)
  else await raw.pglite.query(sql, params)
}
