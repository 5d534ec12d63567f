// The unit writer: the ONE module of src/ that writes session_events and moves a session row's log
// position, inbox and run state. A unit — a session's events, the move of its row and its side rows
// (unit-kinds.ts) — is committed by one statement (unit-sql.ts), in three ways:
// - fast: conditioned on the row's expected seq, lease and flags, outside any transaction, and
//   group-committed with other sessions' units that are ready together (UnitCommitter);
// - locked: inside the caller's transaction, whose first statement locked the row (so its conditions
//   hold); a kind that may refuse the unit there (a limited tenant's slot, a revoked key) runs its
//   check after the statement, and its throw rolls the unit back;
// - a fork's prefix: another session's events copied verbatim, then the child's row moved.
// Each commit reports how many webhook deliveries it wrote (the local deliverer's wake-up, app.ts).

import { DbUnavailableError, statement, type Db, type QueryResult, type Queryable } from './db.js'
import type { RowPatch, RunState } from './sessions.js'
import { unitStatement, type Unit, type UnitOutcome } from './unit-sql.js'

export type { Unit, UnitOutcome }
export { KeyRevokedError, type SideRow } from './unit-kinds.js'

type Row = { u: number; run_state: RunState; cancel_pending: boolean; wake_latched: boolean; n: number; w: number }
const outcome = (r: Row | undefined): UnitOutcome => (r ? { runState: r.run_state, cancelPending: r.cancel_pending, wakeLatched: r.wake_latched, n: r.n, deliveries: r.w } : null)

/** A unit committed alone, in its own statement (no transaction: its conditions are its only guard). */
async function alone(db: Queryable, unit: Unit): Promise<UnitOutcome> {
  const { sql, params } = unitStatement([unit])
  return outcome((await db.query<Row>(sql, params)).rows[0])
}

/**
 * The fast path: the unit's row moves only if it is still at `expect.nextSeq`, under the lease and
 * with the flags given, and the side rows' guards hold; its events and side rows are written only if
 * it moved. Null when a condition failed. On a Db (not a transaction) the unit may share its
 * statement with other sessions' units (UnitCommitter). A side row that violates a constraint (a
 * duplicate idempotency record) fails the unit.
 */
export function commitFast(db: Queryable, unit: Unit): Promise<UnitOutcome> {
  return isCommitting(db) ? committer(db).append(unit) : alone(db, unit)
}

/**
 * The locked path, in the caller's transaction whose first statement locked the row at
 * `unit.expect.nextSeq`: one statement, then the checks of the kinds that may refuse the unit.
 */
export async function commitLocked(tx: Queryable, unit: Unit): Promise<NonNullable<UnitOutcome>> {
  const { sql, params, checks } = unitStatement([unit], true)
  const r = outcome((await tx.query<Row>(sql, params)).rows[0])
  if (!r) throw new Error(`the locked row of session ${unit.key} is gone or not at seq ${unit.expect.nextSeq}`)
  for (const check of checks) await check(tx)
  return r
}

const COPY_PREFIX = statement('unit_copy_prefix', 'INSERT INTO session_events (session_key, seq, time, type, body) SELECT $1, seq, time, type, body FROM session_events WHERE session_key = $2 AND seq <= $3')

/**
 * Fork (API.md §9): copies the source's events up to `through` verbatim into the child's log, in the
 * caller's transaction, and moves the child row to the copy's end with the patch.
 */
export async function copyPrefix(tx: Queryable, from: string, to: string, through: { seq: number; time: number }, patch: RowPatch): Promise<void> {
  await tx.query(COPY_PREFIX, [to, from, through.seq])
  await commitLocked(tx, { key: to, expect: { nextSeq: null }, events: [], to: { nextSeq: through.seq + 1, lastTime: through.time }, patch, side: [] })
}

/**
 * groups in flight per database at once (the pool serves the rest of the server meanwhile). Two keep
 * both of PostgreSQL's cores of this kind of machine busy while the units that arrive meanwhile wait
 * for the next group: measured against 4 (bench, same sitting), statements per one-tool turn fell
 * from 6.0 to 3.8 at 10 sessions and 1.2 to 0.6 at 100, server CPU per turn by 8–10 %, turns/s
 * unchanged; with 1, turns/s at 100 sessions fell by a quarter.
 */
const MAX_IN_FLIGHT = 2
/** units per statement at most */
const MAX_GROUP = 64

interface Waiting {
  unit: Unit
  resolve(o: UnitOutcome): void
  reject(e: unknown): void
}

/**
 * Group commit of fast-path units (one per Db, Db.units): units of DIFFERENT sessions that are ready
 * while another group is in flight are written together in ONE statement — one round trip, one
 * transaction, one WAL flush — instead of one each. Each unit keeps its own conditions and learns its
 * own outcome when the statement has committed, so every unit is durable before its caller goes on.
 * Never grouped: two units of one session (one statement may not move one row twice), a session
 * already in a group in flight (concurrent groups never lock the same session rows). A group that
 * fails as a whole for another reason than the database being unreachable is retried unit by unit,
 * so a unit's error is its own.
 */
export class UnitCommitter {
  private queue: Waiting[] = []
  private inFlight = 0
  private readonly busyKeys = new Set<string>()
  private scheduled = false

  constructor(private readonly db: Db) {}

  append(unit: Unit): Promise<UnitOutcome> {
    return new Promise((resolve, reject) => {
      this.queue.push({ unit, resolve, reject })
      // units that become ready in the same tick join one group
      if (!this.scheduled) {
        this.scheduled = true
        queueMicrotask(() => {
          this.scheduled = false
          this.pump()
        })
      }
    })
  }

  private pump(): void {
    while (this.inFlight < MAX_IN_FLIGHT && this.queue.length) {
      const group: Waiting[] = []
      const keys = new Set<string>()
      const rest: Waiting[] = []
      for (const w of this.queue) {
        if (group.length < MAX_GROUP && !keys.has(w.unit.key) && !this.busyKeys.has(w.unit.key)) {
          group.push(w)
          keys.add(w.unit.key)
        } else rest.push(w)
      }
      this.queue = rest
      if (!group.length) return
      for (const k of keys) this.busyKeys.add(k)
      this.inFlight++
      void this.run(group).finally(() => {
        this.inFlight--
        for (const k of keys) this.busyKeys.delete(k)
        this.pump()
      })
    }
  }

  private async run(group: Waiting[]): Promise<void> {
    if (group.length === 1) {
      const [w] = group
      return alone(this.db, w.unit).then(w.resolve, w.reject)
    }
    // a fixed lock order across groups
    group.sort((a, b) => (a.unit.key < b.unit.key ? -1 : a.unit.key > b.unit.key ? 1 : 0))
    let result: QueryResult<Row>
    try {
      const { sql, params } = unitStatement(group.map((w) => w.unit))
      result = await this.db.query<Row>(sql, params)
    } catch (e) {
      if (e instanceof DbUnavailableError) {
        for (const w of group) w.reject(e)
        return
      }
      // nothing of the group was written: each unit alone, so an error is its own
      await Promise.all(group.map((w) => alone(this.db, w.unit).then(w.resolve, w.reject)))
      return
    }
    const byUnit = new Map(result.rows.map((r) => [Number(r.u), r]))
    group.forEach((w, i) => w.resolve(outcome(byUnit.get(i + 1))))
  }
}

/** A Db (pool or PGlite) groups; a transaction's Queryable does not. */
function isCommitting(q: Queryable): q is Db {
  return typeof (q as Db).transaction === 'function'
}

/** The Db's committer, made on its first fast-path unit and owned by the Db object. */
function committer(db: Db): UnitCommitter {
  return (db.units ??= new UnitCommitter(db)) as UnitCommitter
}
