// Side rows (DESIGN.md §3 "Side rows ride in the commit"): what must exist exactly when a unit's
// events are durable — a pending call (SPEC §18.10), an idempotency record (API.md §5). Callers name
// them; store/ writes them in the SAME statement as the events on the fast path (CTEs conditioned on
// the row move) and in the SAME transaction on the locked path. A new kind is one member of SideRow
// plus one statement builder in SIDE_SQL.

import type { Queryable } from './db.js'
import { idempotencySql, type IdempotencyRecord } from './idempotency.js'
import { pendingDeleteSql, pendingInsertSql, type PendingKind } from './pending.js'

export type SideRow =
  | { kind: 'pending-insert'; call: { callId: string; kind: PendingKind; name: string; arguments: string } }
  /** without callIds: every pending call of the session (crash repair) */
  | { kind: 'pending-delete'; callIds?: string[] }
  | ({ kind: 'idempotency' } & IdempotencyRecord)

/**
 * One data-modifying statement on session `$1`, run only when the SQL condition `when` holds; its
 * parameters are pushed onto `params`. The same text is a CTE of the fast path and a statement alone.
 */
type SideSql<R> = (row: R, params: unknown[], when: string) => string

const SIDE_SQL: { [K in SideRow['kind']]: SideSql<Extract<SideRow, { kind: K }>> } = {
  'pending-insert': (r, params, when) => pendingInsertSql(r.call, params, when),
  'pending-delete': (r, params, when) => pendingDeleteSql(r.callIds, params, when),
  idempotency: (r, params, when) => idempotencySql(r, params, when),
}

function statement(row: SideRow, params: unknown[], when: string): string {
  return (SIDE_SQL[row.kind] as SideSql<SideRow>)(row, params, when)
}

/** The fast path's side rows as CTEs of one statement whose row move is the CTE `moved`. */
export function sideCtes(rows: readonly SideRow[], params: unknown[]): string {
  return rows.map((r, i) => `, side${i} AS (${statement(r, params, 'EXISTS (SELECT 1 FROM moved)')})`).join('')
}

/** The locked path's side rows, in the caller's transaction (the row is locked and moved). */
export async function writeSideRows(tx: Queryable, key: string, rows: readonly SideRow[]): Promise<void> {
  for (const r of rows) {
    const params: unknown[] = [key]
    await tx.query(statement(r, params, 'true'), params)
  }
}
