// Group commit of fast-path appends (store/events.ts appendConditional): units of DIFFERENT sessions
// that are ready while another group is in flight are written together in ONE statement — one round
// trip, one transaction, one WAL flush — instead of one each. Each unit keeps its own conditions
// (expected seq, lease, flags): its row moves and its events are inserted only if they hold, exactly
// as alone, and each caller learns its own outcome when the statement has committed, so every unit
// is durable before its caller goes on (SPEC's durability points are unchanged).
//
// Settlements (the usage side row, API.md §15) are grouped too: each unit's ledger rows are its own
// CTE (per session, so never touched twice), and the period totals of the whole group are ONE upsert
// of the sums over the units whose rows moved — a tenant's totals row is locked once per group, not
// once per unit, so sessions of one tenant no longer queue on it commit by commit. The totals CTE
// comes last and no other part reads it, so PostgreSQL locks the session rows before the totals rows.
// The other side rows (side.ts: pending calls, idempotency records, running-session slots, webhook
// deliveries) are CTEs of their unit on its own key and row move, exactly as in the unit's statement
// alone; a side row's guard (a tenant with a slot limit) conditions its unit's move only.
// What is never grouped: two units of one session (one statement may not move one row twice), a
// session already in a group in flight (concurrent groups never lock the same session rows), and
// anything inside a transaction.
// A group that fails as a whole for another reason than the database being unreachable is retried
// unit by unit, so a unit's error is its own.

import { DbUnavailableError, type Db, type QueryResult } from './db.js'
import { rowSets, type RowPatch, type RunState } from './sessions.js'
import { sideCtes, sideGuards, type SideRow } from './side.js'
import { ledgerSql, totalsUpsert, usagePeriods } from './usage.js'
import { markDeliveries } from './webhooks.js'
import type { LedgerEntry } from '../session/index.js'

export interface GroupUnit {
  key: string
  expect: { nextSeq: number; lease?: { owner: string; token: number }; flags?: { runState?: RunState; cancelPending?: boolean; wakeLatched?: boolean } }
  /** stamped events with their wire text (events.ts StoredEvent) */
  events: ReadonlyArray<{ seq: number; time: number; type: string; json: string }>
  patch: RowPatch
  /** the unit's settlements (its usage side row), if any */
  usage?: readonly LedgerEntry[]
  /** its other side rows */
  side?: readonly SideRow[]
}

export type UnitOutcome = { runState: RunState; cancelPending: boolean; wakeLatched: boolean; n: number } | null

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

const COLUMN = { runState: 'run_state', cancelPending: 'cancel_pending', wakeLatched: 'wake_latched' } as const

/**
 * One unit's CTEs (u<i>m: the row move, u<i>e: the events, u<i>l: its ledger rows), its rows of the
 * group's period totals and its row of the result, numbered into `params`.
 */
function unitSql(i: number, u: GroupUnit, params: unknown[]): { ctes: string; select: string; totals?: string } {
  params.push(u.key, u.expect.nextSeq)
  const k = `$${params.length - 1}`
  let where = `key = ${k} AND next_seq = $${params.length}`
  if (u.expect.lease) {
    params.push(u.expect.lease.owner, u.expect.lease.token)
    where += ` AND lease_owner = $${params.length - 1} AND lease_token = $${params.length}`
  }
  for (const [f, v] of Object.entries(u.expect.flags ?? {})) {
    if (v === undefined) continue
    params.push(v)
    where += ` AND ${COLUMN[f as keyof typeof COLUMN]} = $${params.length}`
  }
  const side = u.side ?? []
  for (const g of sideGuards(side)) where += ` AND ${g}`
  const last = u.events[u.events.length - 1]
  const sets = rowSets({ nextSeq: last.seq + 1, lastTime: last.time }, u.patch, params)
  params.push(u.events.map((e) => e.seq), u.events.map((e) => e.time), u.events.map((e) => e.type), u.events.map((e) => e.json))
  const n = params.length
  let ctes = `u${i}m AS (UPDATE sessions SET ${sets.join(', ')} WHERE ${where} RETURNING run_state, cancel_pending, wake_latched),
     u${i}e AS (INSERT INTO session_events (session_key, seq, time, type, body)
       SELECT ${k}, e.seq, e.time, e.type, e.body FROM unnest($${n - 3}::int[], $${n - 2}::bigint[], $${n - 1}::text[], $${n}::text[]) AS e(seq, time, type, body)
       WHERE EXISTS (SELECT 1 FROM u${i}m) RETURNING 1)`
  const sides = sideCtes(side, params, { moved: `u${i}m`, key: k, prefix: `u${i}s` })
  ctes += sides.sql
  const w = sides.counted.length ? sides.counted.map((c) => `(SELECT count(*)::int FROM ${c})`).join(' + ') : '0'
  let totals: string | undefined
  if (u.usage?.length) {
    const moved = `EXISTS (SELECT 1 FROM u${i}m)`
    // the ledger statement of usage.ts, on this unit's key; its totals statement is replaced by the group's
    ctes += `,
     u${i}l AS (${ledgerSql(u.usage, params, moved, k)})`
    const list = usagePeriods(u.usage)
    params.push(list.map(([p]) => p), list.map(([, p]) => p.tokens), list.map(([, p]) => p.costUsd))
    const m = params.length
    totals = `SELECT ${k}::uuid AS key, p.period, p.tokens, p.cost FROM unnest($${m - 2}::text[], $${m - 1}::bigint[], $${m}::float8[]) AS p(period, tokens, cost) WHERE ${moved}`
  }
  return { ctes, totals, select: `SELECT ${i} AS u, m.run_state, m.cancel_pending, m.wake_latched, (SELECT count(*)::int FROM u${i}e) AS n, ${w} AS w FROM u${i}m m` }
}

/** The group's period totals: one upsert of the sums, per tenant and period, over the units that moved. */
function totalsCte(parts: ReadonlyArray<{ totals?: string }>): string {
  const rows = parts.flatMap((p) => (p.totals ? [p.totals] : []))
  if (!rows.length) return ''
  return `,
     totals AS (${totalsUpsert(`SELECT s.tenant_id, t.period, sum(t.tokens), sum(t.cost) FROM (${rows.join(' UNION ALL ')}) AS t JOIN sessions s ON s.key = t.key
       GROUP BY s.tenant_id, t.period`)})`
}

interface Waiting {
  unit: GroupUnit
  resolve(o: UnitOutcome): void
  reject(e: unknown): void
}

class GroupCommitter {
  private queue: Waiting[] = []
  private inFlight = 0
  private readonly busyKeys = new Set<string>()
  private scheduled = false

  constructor(private readonly db: Db, private readonly single: (u: GroupUnit) => Promise<UnitOutcome>) {}

  append(unit: GroupUnit): Promise<UnitOutcome> {
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
      await this.single(w.unit).then(w.resolve, w.reject)
      return
    }
    // a fixed lock order across groups
    group.sort((a, b) => (a.unit.key < b.unit.key ? -1 : a.unit.key > b.unit.key ? 1 : 0))
    const params: unknown[] = []
    const parts = group.map((w, i) => unitSql(i, w.unit, params))
    let result: QueryResult<{ u: number; run_state: RunState; cancel_pending: boolean; wake_latched: boolean; n: number; w: number }>
    try {
      result = await this.db.query(`WITH ${parts.map((p) => p.ctes).join(',\n     ')}${totalsCte(parts)}\n     ${parts.map((p) => p.select).join('\n     UNION ALL ')}`, params)
    } catch (e) {
      if (e instanceof DbUnavailableError) {
        for (const w of group) w.reject(e)
        return
      }
      // nothing of the group was written: each unit alone, so an error is its own
      await Promise.all(group.map((w) => this.single(w.unit).then(w.resolve, w.reject)))
      return
    }
    const byUnit = new Map(result.rows.map((r) => [Number(r.u), r]))
    group.forEach((w, i) => {
      const r = byUnit.get(i)
      if (r?.w) markDeliveries(w.unit.key, r.w)
      w.resolve(r ? { runState: r.run_state, cancelPending: r.cancel_pending, wakeLatched: r.wake_latched, n: r.n } : null)
    })
  }
}

const committers = new WeakMap<Db, GroupCommitter>()

/** The group committer of a database (not of a transaction: grouping needs statements of their own). */
export function groupCommitter(db: Db, single: (u: GroupUnit) => Promise<UnitOutcome>): GroupCommitter {
  let c = committers.get(db)
  if (!c) committers.set(db, (c = new GroupCommitter(db, single)))
  return c
}
