// Side rows (DESIGN.md §3 "Side rows ride in the commit"): what must exist exactly when a unit's
// events are durable — a pending call (SPEC §18.10), an idempotency record (API.md §5), the usage
// ledger and a running-session slot (API.md §15), a webhook delivery (API.md §14). Callers name
// them; store/ writes them in the SAME statement as the events on the fast path (CTEs conditioned on
// the row move; in a group commit, group.ts's arrays) and in the SAME transaction on the locked path.
// A new kind is one member of SideRow plus one statement builder in SIDE_SQL; until group.ts gives it
// a place in its arrays, a unit that carries it commits alone (group.ts groupable).

import type { Queryable } from './db.js'
import { idempotencySql, type IdempotencyRecord } from './idempotency.js'
import { pendingDeleteSql, pendingInsertSql, type PendingKind } from './pending.js'
import { slotFreeSql, slotTakeGuard, slotTakeSql, takeSlotLocked } from './slots.js'
import { usageSql } from './usage.js'
import { markDeliveries, webhookSql, type WebhookEvent } from './webhooks.js'
import type { LedgerEntry } from '../session/index.js'

export type SideRow =
  | { kind: 'pending-insert'; call: { callId: string; kind: PendingKind; name: string; arguments: string } }
  /** without callIds: every pending call of the session (crash repair) */
  | { kind: 'pending-delete'; callIds?: string[] }
  | ({ kind: 'idempotency' } & IdempotencyRecord)
  /** a unit's settlements in the tenant's usage ledger (API.md §15) */
  | { kind: 'usage'; entries: LedgerEntry[] }
  /** turn/start takes a running-session slot, turn/end frees it (API.md §15) */
  | { kind: 'slot-take' }
  | { kind: 'slot-free' }
  /** a delivery for each of the tenant's webhooks subscribed to the event (API.md §14) */
  | { kind: 'webhook'; event: WebhookEvent }
  /**
   * no row: the unit moves only while this API key exists unrevoked (a delivery authenticated from the
   * process's memory confirms its key in its own statement, API.md §3 "stops working at once")
   */
  | { kind: 'key-live'; keyId: string }

/**
 * Data-modifying statements on the session whose key is the placeholder `key` (one, or several in
 * order), run only when the SQL condition `when` holds; their parameters are pushed onto `params`.
 * The same text is a CTE of the fast path (alone or in a group, group.ts) and a statement alone.
 */
type SideSql<R> = (row: R, params: unknown[], when: string, key: string) => string | readonly string[]

const SIDE_SQL: { [K in SideRow['kind']]: SideSql<Extract<SideRow, { kind: K }>> } = {
  'pending-insert': (r, params, when, key) => pendingInsertSql(r.call, params, when, key),
  'pending-delete': (r, params, when, key) => pendingDeleteSql(r.callIds, params, when, key),
  idempotency: (r, params, when, key) => idempotencySql(r, params, when, key),
  usage: (r, params, when, key) => usageSql(r.entries, params, when, key),
  'slot-take': (_r, params, when, key) => slotTakeSql(params, when, key),
  'slot-free': (_r, _params, when, key) => slotFreeSql(when, key),
  webhook: (r, params, when, key) => webhookSql(r.event, params, when, key),
  'key-live': () => [],
}

/** Conditions a kind puts on the fast path's row move (its parameters pushed onto `params`): when one fails, the unit does not move. */
const SIDE_GUARD: { [K in SideRow['kind']]?: (row: Extract<SideRow, { kind: K }>, params: unknown[]) => string } = {
  'slot-take': () => slotTakeGuard(),
  'key-live': (r, params) => {
    params.push(r.keyId)
    return keyLiveGuard(`$${params.length}`)
  },
}

/** The condition of a 'key-live' side row: the key with this id exists and is not revoked. */
export const keyLiveGuard = (keyId: string): string => `EXISTS (SELECT 1 FROM api_keys k WHERE k.id = ${keyId} AND k.revoked_at IS NULL)`

/** Kinds the locked path writes with statements of their own, which may refuse the unit by throwing. */
const SIDE_LOCKED: { [K in SideRow['kind']]?: (tx: Queryable, key: string, row: Extract<SideRow, { kind: K }>) => Promise<void> } = {
  'slot-take': (tx, key) => takeSlotLocked(tx, key),
  'key-live': async (tx, _key, r) => {
    const { rows } = await tx.query(`SELECT 1 AS live WHERE ${keyLiveGuard('$1')}`, [r.keyId])
    if (!rows.length) throw new KeyRevokedError(r.keyId)
  },
}

/** A unit written on the locked path whose 'key-live' key is gone or revoked: nothing of it is written. */
export class KeyRevokedError extends Error {
  constructor(readonly keyId: string) {
    super(`API key ${keyId} is revoked or gone`)
    this.name = 'KeyRevokedError'
  }
}

function statements(row: SideRow, params: unknown[], when: string, key = '$1'): readonly string[] {
  const sql = (SIDE_SQL[row.kind] as SideSql<SideRow>)(row, params, when, key)
  return typeof sql === 'string' ? [sql] : sql
}

/**
 * The fast path's side rows as CTEs of one statement whose row move is the CTE `moved` (in a group:
 * the unit's move CTE, its key placeholder and a prefix for the CTE names), and the names of the
 * CTEs whose rows the caller counts (webhook deliveries: markDeliveries).
 */
export function sideCtes(rows: readonly SideRow[], params: unknown[], o: { moved?: string; key?: string; prefix?: string } = {}): { sql: string; counted: string[] } {
  const counted: string[] = []
  const prefix = o.prefix ?? 'side'
  let i = 0
  let sql = ''
  for (const r of rows) {
    for (const s of statements(r, params, `EXISTS (SELECT 1 FROM ${o.moved ?? 'moved'})`, o.key)) {
      if (r.kind === 'webhook') counted.push(`${prefix}${i}`)
      sql += `, ${prefix}${i++} AS (${s})`
    }
  }
  return { sql, counted }
}

/** The fast path's extra conditions on the row move, from its side rows (their parameters pushed onto `params`). */
export function sideGuards(rows: readonly SideRow[], params: unknown[]): string[] {
  const out = new Set<string>()
  for (const r of rows) {
    const g = SIDE_GUARD[r.kind] as ((row: SideRow, params: unknown[]) => string) | undefined
    if (g) out.add(g(r, params))
  }
  return [...out]
}

/** The locked path's side rows, in the caller's transaction (the row is locked and moved). */
export async function writeSideRows(tx: Queryable, key: string, rows: readonly SideRow[]): Promise<void> {
  for (const r of rows) {
    const locked = SIDE_LOCKED[r.kind] as ((tx: Queryable, key: string, row: SideRow) => Promise<void>) | undefined
    if (locked) {
      await locked(tx, key, r)
      continue
    }
    const params: unknown[] = [key]
    // several statements share their parameters: one statement of CTEs
    const list = statements(r, params, 'true')
    const res = await tx.query(list.length === 1 ? list[0] : `WITH ${list.map((sql, i) => `s${i} AS (${sql})`).join(', ')} SELECT 1`, params)
    if (r.kind === 'webhook') markDeliveries(key, res.rowCount)
  }
}
