// Side-row kinds (DESIGN.md §3 "Side rows ride in the commit"): what must exist exactly when a unit's
// events are durable — a pending call (SPEC §18.10), an idempotency record (API.md §5), the usage
// ledger and a running-session slot (API.md §15), a webhook delivery (API.md §14). Callers name them
// as SideRow values; the unit writer (unit.ts) writes them in the SAME statement as the events.
//
// Each kind is ONE entry of KINDS below, holding everything about it: its row's TypeScript type, how
// its rows enter the unit statement's document (unit-sql.ts: columns of the unit's record `v`, or
// records of a list of its own, keyed by the unit's `ord`), its CTE over the units whose row moved
// (`moved m`), the condition it puts on its unit's row move, and, for a kind that may refuse a unit
// on the locked path, the check that runs there instead. Adding a kind is adding one entry; nothing
// else in the writer names a kind.

import { statement, type Queryable } from './db.js'
import type { IdempotencyRecord } from './idempotency.js'
import type { PendingKind } from './pending.js'
import { slotTakeGuard, takeSlotLocked } from './slots.js'
import { ledgerUpsert, totalsUpsert, usagePeriods } from './usage.js'
import { DELIVERY_ID_SQL, taskFilterSql, type WebhookEvent } from './webhooks.js'
import type { LedgerEntry } from '../session/index.js'

/** What a kind's rows write into the unit statement's document (unit-sql.ts). */
export interface UnitDoc {
  /** the unit's record in `v`: a kind sets its declared columns here (absent members read as NULL) */
  readonly unit: Record<string, unknown>
  /** adds a record to the kind's list `name` of the document, tied to the unit */
  add(name: string, record: Record<string, unknown>): void
}

/** Where a kind's SQL finds its statement's parameters (unit-sql.ts; they differ between a group's statement and a unit's alone). */
export interface Params {
  /** the document with the kinds' lists (jsonb): `${p.doc} -> 'list'` */
  readonly doc: string
  /** the time side rows are stamped with (bigint) */
  readonly time: string
  /** a member of the unit's record (`v.<name>` in a group, a parameter of its own alone) */
  readonly v: (name: string) => string
}

export interface Kind<R> {
  /** columns the kind adds to the unit's record `v` (name and SQL type), returned by `moved` as `m.<name>`; the first is set exactly when the unit has such a row */
  readonly columns?: ReadonlyArray<readonly [name: string, type: string]>
  /** a condition on the row move (over the sessions row `s`) of a unit with such a row (its first column set) */
  readonly guard?: (p: Params) => string
  /** its CTEs, each `, name AS (…)`, reading `moved m` and its lists */
  readonly ctes?: (p: Params) => string
  /** per moved row `m`: how many webhook deliveries its unit wrote (the commit outcome's `deliveries`) */
  readonly counted?: string
  /** a row enters the unit's document */
  enter(row: R, doc: UnitDoc): void
  /**
   * On the locked path (the row is locked and moved in the caller's transaction) the row does not
   * enter the document: this runs after the unit's statement instead and may refuse the unit by
   * throwing, which rolls the whole unit back.
   */
  locked?(tx: Queryable, key: string, row: R): Promise<void>
}

const kind = <R>(k: Kind<R>): Kind<R> => k

/** A unit written on the locked path whose 'key-live' key is gone or revoked: nothing of it is written. */
export class KeyRevokedError extends Error {
  constructor(readonly keyId: string) {
    super(`API key ${keyId} is revoked or gone`)
    this.name = 'KeyRevokedError'
  }
}

/** The condition of a 'key-live' side row: the key with this id exists and is not revoked. */
const keyLive = (keyId: string): string => `EXISTS (SELECT 1 FROM api_keys k WHERE k.id = ${keyId} AND k.revoked_at IS NULL)`
const KEY_LIVE_CHECK = statement('unit_key_live', `SELECT 1 AS live WHERE ${keyLive('$1::uuid')}`)

/** a tenant's webhook takes every event of the unit; a task's webhook only one (its first) */
const EACH = (col: string) => `CASE WHEN w.task_session_key IS NULL THEN ${col} END`
const hookRecords = (p: Params) => `jsonb_to_recordset(${p.doc} -> 'w') AS h(ord int, type text, turn int, seq int, extra text, time bigint)`

export const KINDS = {
  /** a call starts waiting — a new row, or a re-opened one (SPEC §18.10) */
  'pending-insert': kind<{ call: { callId: string; kind: PendingKind; name: string; arguments: string } }>({
    enter: (r, doc) => doc.add('pi', { call_id: r.call.callId, kind: r.call.kind, name: r.call.name, arguments: r.call.arguments }),
    ctes: (p) => `, pending_ins AS (
  INSERT INTO pending_calls (session_key, call_id, kind, name, arguments, created_at)
  SELECT m.key, p.call_id, p.kind, p.name, p.arguments, ${p.time} FROM jsonb_to_recordset(${p.doc} -> 'pi') AS p(ord int, call_id text, kind text, name text, arguments text)
  JOIN moved m ON m.ord = p.ord
  ON CONFLICT (session_key, call_id) DO UPDATE SET kind = EXCLUDED.kind, answered = false, answer = NULL
)`,
  }),
  /** settlement deletes its calls' rows; without callIds every pending call of the session (crash repair) */
  'pending-delete': kind<{ callIds?: string[] }>({
    enter: (r, doc) => {
      if (r.callIds === undefined) doc.add('pd', { call_id: null })
      else for (const id of r.callIds) doc.add('pd', { call_id: id })
    },
    ctes: (p) => `, pending_del AS (
  DELETE FROM pending_calls c USING jsonb_to_recordset(${p.doc} -> 'pd') AS d(ord int, call_id text), moved m
  WHERE m.ord = d.ord AND c.session_key = m.key AND (d.call_id IS NULL OR c.call_id = d.call_id)
)`,
  }),
  /** the first answer for a message id: a duplicate id fails the whole statement (23505), a concurrent delivery won */
  idempotency: kind<IdempotencyRecord>({
    enter: (r, doc) => doc.add('id', { message_id: r.messageId, route: r.route, body_hash: r.bodyHash, seq: r.seq }),
    ctes: (p) => `, idem AS (
  INSERT INTO idempotency (session_key, message_id, route, body_hash, seq, created_at)
  SELECT m.key, i.message_id, i.route, i.body_hash, i.seq, ${p.time} FROM jsonb_to_recordset(${p.doc} -> 'id') AS i(ord int, message_id text, route text, body_hash text, seq int)
  JOIN moved m ON m.ord = i.ord
)`,
  }),
  /**
   * a unit's settlements in the tenant's usage ledger (API.md §15): its ledger rows (summed by day
   * and model) and the period totals of the whole statement as ONE upsert of the sums over the units
   * that moved, so a tenant's totals row is locked once per group; it runs after `moved` has locked
   * every session row, so session rows are locked before totals rows (usage.ts totalsUpsert's order)
   */
  usage: kind<{ entries: LedgerEntry[] }>({
    enter: (r, doc) => {
      for (const x of r.entries) doc.add('l', { day: x.day, model: x.model, i: x.usage.inputTokens, o: x.usage.outputTokens, cr: x.usage.cacheReadTokens, cw: x.usage.cacheWriteTokens, c: x.usage.costUsd, a: x.attempts })
      for (const [period, a] of usagePeriods(r.entries)) doc.add('p', { period, tokens: a.tokens, cost: a.costUsd })
    },
    ctes: (p) => `, ledger AS (
  ${ledgerUpsert(`SELECT m.tenant_id, l.day::date, l.model, m.key, m.id, sum(l.i), sum(l.o), sum(l.cr), sum(l.cw), sum(l.c), sum(l.a)
    FROM jsonb_to_recordset(${p.doc} -> 'l') AS l(ord int, day text, model text, i bigint, o bigint, cr bigint, cw bigint, c float8, a int)
    JOIN moved m ON m.ord = l.ord GROUP BY m.tenant_id, l.day, l.model, m.key, m.id`)}
), totals AS (
  ${totalsUpsert(`SELECT m.tenant_id, p.period, sum(p.tokens), sum(p.cost) FROM jsonb_to_recordset(${p.doc} -> 'p') AS p(ord int, period text, tokens bigint, cost float8)
    JOIN moved m ON m.ord = p.ord GROUP BY m.tenant_id, p.period`)}
)`,
  }),
  /**
   * turn/start takes a running-session slot (API.md §15): on the fast path only for a tenant without
   * a limit (the guard); a limited tenant's unit takes the locked path, which takes the slot in wake
   * order under the tenant row's lock (slots.ts takeSlotLocked) or refuses the unit
   */
  'slot-take': kind<Record<never, never>>({
    columns: [['slot_take', 'bool']],
    enter: (_r, doc) => void (doc.unit.slot_take = true),
    guard: () => slotTakeGuard('s'),
    ctes: (p) => `, slot_take AS (
  INSERT INTO running_slots (session_key, tenant_id, taken_at) SELECT m.key, m.tenant_id, ${p.time} FROM moved m WHERE m.slot_take
  ON CONFLICT (session_key) DO UPDATE SET taken_at = EXCLUDED.taken_at
)`,
    locked: (tx, key) => takeSlotLocked(tx, key),
  }),
  /** turn/end (crash repair's closers too) frees the session's slot */
  'slot-free': kind<Record<never, never>>({
    columns: [['slot_free', 'bool']],
    enter: (_r, doc) => void (doc.unit.slot_free = true),
    ctes: () => `, slot_free AS (
  DELETE FROM running_slots r USING moved m WHERE m.slot_free AND r.session_key = m.key
)`,
  }),
  /**
   * a delivery for each of the tenant's webhooks subscribed to the event (API.md §14); a task's
   * webhook (an A2A push config) gets one delivery at most, for the first of the unit's events it takes
   */
  webhook: kind<{ event: WebhookEvent }>({
    enter: (r, doc) => doc.add('w', { type: r.event.type, turn: r.event.turn, seq: r.event.seq, extra: JSON.stringify(r.event.extra), time: r.event.time }),
    // hook_rows: the deliveries of the units that moved, one per webhook and event (a task's webhook:
    // one per unit); the insert writes them and each unit counts its own, so the count is the rows written
    ctes: (p) => `, hook_rows AS (
  SELECT DISTINCT ON (w.id, m.ord, ${EACH('h.seq')}, ${EACH('h.type')}) w.id AS webhook_id, h.type, m.ord, m.id AS session_id, h.turn, h.seq, h.extra, h.time
  FROM ${hookRecords(p)} JOIN moved m ON m.ord = h.ord JOIN webhooks w ON w.tenant_id = m.tenant_id AND h.type = ANY(w.events)
  WHERE ${taskFilterSql('m.key', 'h.seq', 'h.turn')}
  ORDER BY w.id, m.ord, ${EACH('h.seq')}, ${EACH('h.type')}, h.seq
), hooks AS (
  INSERT INTO webhook_deliveries (id, webhook_id, type, session_id, turn, seq, extra, event_time, created_at, next_attempt_at)
  SELECT ${DELIVERY_ID_SQL}, x.webhook_id, x.type, x.session_id, x.turn, x.seq, x.extra, x.time, ${p.time}, ${p.time} FROM hook_rows x
)`,
    counted: `(SELECT count(*)::int FROM hook_rows x WHERE x.ord = m.ord)`,
  }),
  /**
   * no row: the unit moves only while this API key exists unrevoked (a delivery authenticated from the
   * process's memory confirms its key in its own statement, API.md §3 "stops working at once")
   */
  'key-live': kind<{ keyId: string }>({
    columns: [['key_id', 'uuid']],
    enter: (r, doc) => void (doc.unit.key_id = r.keyId),
    guard: (p) => keyLive(p.v('key_id')),
    locked: async (tx, _key, r) => {
      if (!(await tx.query(KEY_LIVE_CHECK, [r.keyId])).rows.length) throw new KeyRevokedError(r.keyId)
    },
  }),
}

type RowOf<K> = K extends Kind<infer R> ? R : never

/** A side row: one of KINDS, with its kind's name. */
export type SideRow = { [K in keyof typeof KINDS]: { kind: K } & RowOf<(typeof KINDS)[K]> }[keyof typeof KINDS]

/** The kinds in a fixed order: a kind's bit in a statement's mask is 1 << its index. */
export const KIND_LIST: ReadonlyArray<readonly [name: SideRow['kind'], kind: Kind<SideRow>]> = Object.entries(KINDS) as never
