// Group commit of fast-path appends (store/events.ts appendConditional): units of DIFFERENT sessions
// that are ready while another group is in flight are written together in ONE statement — one round
// trip, one transaction, one WAL flush — instead of one each. Each unit keeps its own conditions
// (expected seq, lease, flags): its row moves and its events are inserted only if they hold, exactly
// as alone, and each caller learns its own outcome when the statement has committed, so every unit
// is durable before its caller goes on (SPEC's durability points are unchanged).
//
// The statement is a fixed text per set of side-row kinds (groupSql below), whatever units the group
// holds: the units are records of one document, and every kind of side row (side.ts) the group holds
// is a CTE over all units at once, joined to the rows that moved
// — pending calls, idempotency records, running-session slots, webhook deliveries and settlements
// (the usage ledger, API.md §15). A side row's guard (a tenant with a slot limit) conditions its
// unit's move only. The period totals of the whole group are ONE upsert of the sums over the units
// that moved, so a tenant's totals row is locked once per group, not once per unit; it runs after the
// main query has read every moved row, so PostgreSQL locks the session rows before the totals rows.
// What is never grouped: two units of one session (one statement may not move one row twice), a
// session already in a group in flight (concurrent groups never lock the same session rows), a unit
// whose side rows have no place in the arrays (groupable: it commits alone beside the group), and
// anything inside a transaction.
// A group that fails as a whole for another reason than the database being unreachable is retried
// unit by unit, so a unit's error is its own.

import { DbUnavailableError, joinTexts, repeatedText, splitTexts, type Db, type QueryResult } from './db.js'
import type { RowPatch, RunState } from './sessions.js'
import { keyLiveGuard, type SideRow } from './side.js'
import { slotTakeGuard } from './slots.js'
import { ledgerUpsert, totalsUpsert, usagePeriods } from './usage.js'
import { DELIVERY_ID_SQL, markDeliveries, taskFilterSql } from './webhooks.js'
import { usageTotals, type LedgerEntry, type UsageTotals } from '../session/index.js'

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

/**
 * The group's statement: a fixed text per set of side-row kinds the group holds (at most 2^7, a
 * handful in practice), whatever its units. Each is prepared once per connection (db.ts
 * StatementNames) and planned as a handful of joins, where a text written out per unit had PostgreSQL
 * parse and plan four CTEs per unit on every group (measured: a 40-unit group spent about 10 ms
 * planning and 15 ms parsing against 3–6 ms executing, a database core's worth at 100 sessions).
 * Its parameters: $1, the group as ONE jsonb document (its units, events and side rows as lists of
 * records, read with jsonb_to_recordset); $2, the events' bodies as one joined text (db.ts joinTexts:
 * JSON bodies would be escaped once more inside a JSON document); $3, when a side row needs it, the
 * time side rows are stamped with. One document instead of sixty-odd array parameters: the pg driver
 * serialized and escaped every array element of every parameter in JavaScript, about a fifth of what a
 * group cost the server to send. Text members (the inbox, the last turn, a webhook's extra) travel as
 * JSON strings, so they are stored exactly as written.
 * `v` is the units; `moved` moves the rows whose conditions hold (expected seq, lease, flags, the
 * slot guard); every other CTE joins `moved`, so nothing of a unit whose row did not move is written.
 * Units never share a session (the committer sees to it), so no row is touched twice.
 * A side CTE is in the text only when some unit of the group has such a row: an empty CTE still costs
 * PostgreSQL its executor set-up, the locks and the opened indexes of its table on every execution
 * (measured, a group that moves nothing: 0.27 ms a statement with all seven kinds, 0.12 ms with none).
 */
const GROUP_HEAD = `WITH v AS (
  SELECT * FROM jsonb_to_recordset($1::jsonb -> 'u')
    AS v(ord int, key uuid, expect_seq int, lease_owner text, lease_token bigint, f_run text, f_cancel bool, f_wake bool, slot_guard bool, next_seq int, last_time bigint,
      inbox text, set_open bool, open_turn int, run_state text, wake_mode int, cancel bool, wake bool, last_turn text, set_cont bool, cont int,
      ui bigint, uo bigint, ucr bigint, ucw bigint, urs bigint, uc float8, slot_take bool, slot_free bool, wh_type text, wh_turn int, wh_seq int, wh_extra text, wh_time bigint,
      key_id uuid)
), moved AS (
  UPDATE sessions s SET next_seq = v.next_seq, last_time = v.last_time, updated_at = v.last_time,
    inbox = coalesce(v.inbox, s.inbox),
    open_turn = CASE WHEN v.set_open THEN v.open_turn ELSE s.open_turn END,
    run_state = coalesce(v.run_state, s.run_state),
    wake_seq = CASE v.wake_mode WHEN 1 THEN nextval('session_wake_seq') WHEN 2 THEN CASE WHEN s.run_state = 'idle' THEN nextval('session_wake_seq') ELSE s.wake_seq END ELSE s.wake_seq END,
    cancel_pending = coalesce(v.cancel, s.cancel_pending),
    wake_latched = coalesce(v.wake, s.wake_latched),
    last_turn = coalesce(v.last_turn, s.last_turn),
    continue_turn = CASE WHEN v.set_cont THEN v.cont ELSE s.continue_turn END,
    input_tokens = s.input_tokens + v.ui, output_tokens = s.output_tokens + v.uo, cache_read_tokens = s.cache_read_tokens + v.ucr,
    cache_write_tokens = s.cache_write_tokens + v.ucw, reasoning_tokens = s.reasoning_tokens + v.urs, cost_usd = s.cost_usd + v.uc
  FROM v
  WHERE s.key = v.key AND s.next_seq = v.expect_seq
    AND (v.lease_owner IS NULL OR (s.lease_owner = v.lease_owner AND s.lease_token = v.lease_token))
    AND (v.f_run IS NULL OR s.run_state = v.f_run) AND (v.f_cancel IS NULL OR s.cancel_pending = v.f_cancel) AND (v.f_wake IS NULL OR s.wake_latched = v.f_wake)
    AND (NOT v.slot_guard OR ${slotTakeGuard('s')})
    AND (v.key_id IS NULL OR ${keyLiveGuard('v.key_id')})
  RETURNING v.ord, s.key, s.tenant_id, s.id, s.run_state, s.cancel_pending, s.wake_latched, v.slot_take, v.slot_free, v.wh_type, v.wh_turn, v.wh_seq, v.wh_extra, v.wh_time
), ins AS (
  INSERT INTO session_events (session_key, seq, time, type, body)
  SELECT m.key, e.seq, e.time, e.type, b.body
  FROM ROWS FROM (jsonb_to_recordset($1::jsonb -> 'e') AS (ord int, seq int, time bigint, type text)) WITH ORDINALITY AS e(ord, seq, time, type, i)
  JOIN unnest(${splitTexts('$2')}) WITH ORDINALITY AS b(body, i) ON b.i = e.i
  JOIN moved m ON m.ord = e.ord
  RETURNING session_key
)`

/** The kinds of side row a group's statement may hold: bits of its mask (groupSql). */
const SIDE = {
  usage: 1,
  slotTake: 2,
  slotFree: 4,
  hooks: 8,
  pendingIns: 16,
  pendingDel: 32,
  idem: 64,
} as const
/** the kinds whose rows are stamped with $3 */
const STAMPED = SIDE.slotTake | SIDE.hooks | SIDE.pendingIns | SIDE.idem

/** Each kind's CTEs, in the order the statement holds them. */
const GROUP_PARTS: ReadonlyArray<readonly [bit: number, ctes: string]> = [
  [
    SIDE.usage,
    `, ledger AS (
  ${ledgerUpsert(`SELECT m.tenant_id, l.day::date, l.model, m.key, m.id, l.i, l.o, l.cr, l.cw, l.c, l.a
    FROM jsonb_to_recordset($1::jsonb -> 'l') AS l(ord int, day text, model text, i bigint, o bigint, cr bigint, cw bigint, c float8, a int)
    JOIN moved m ON m.ord = l.ord`)}
), totals AS (
  ${totalsUpsert(`SELECT m.tenant_id, p.period, sum(p.tokens), sum(p.cost) FROM jsonb_to_recordset($1::jsonb -> 'p') AS p(ord int, period text, tokens bigint, cost float8)
    JOIN moved m ON m.ord = p.ord GROUP BY m.tenant_id, p.period`)}
)`,
  ],
  [
    SIDE.slotTake,
    `, slot_take AS (
  INSERT INTO running_slots (session_key, tenant_id, taken_at) SELECT m.key, m.tenant_id, $3 FROM moved m WHERE m.slot_take
  ON CONFLICT (session_key) DO UPDATE SET taken_at = EXCLUDED.taken_at
)`,
  ],
  [
    SIDE.slotFree,
    `, slot_free AS (
  DELETE FROM running_slots r USING moved m WHERE m.slot_free AND r.session_key = m.key
)`,
  ],
  [
    SIDE.hooks,
    `, hooks AS (
  INSERT INTO webhook_deliveries (id, webhook_id, type, session_id, turn, seq, extra, event_time, created_at, next_attempt_at)
  SELECT ${DELIVERY_ID_SQL}, w.id, m.wh_type, m.id, m.wh_turn, m.wh_seq, m.wh_extra, m.wh_time, $3, $3
  FROM moved m JOIN webhooks w ON w.tenant_id = m.tenant_id AND m.wh_type = ANY(w.events)
  WHERE m.wh_type IS NOT NULL AND ${taskFilterSql('m.key', 'm.wh_seq', 'm.wh_turn')}
)`,
  ],
  [
    SIDE.pendingIns,
    `, pending_ins AS (
  INSERT INTO pending_calls (session_key, call_id, kind, name, arguments, created_at)
  SELECT m.key, p.call_id, p.kind, p.name, p.arguments, $3 FROM jsonb_to_recordset($1::jsonb -> 'pi') AS p(ord int, call_id text, kind text, name text, arguments text)
  JOIN moved m ON m.ord = p.ord
  ON CONFLICT (session_key, call_id) DO UPDATE SET kind = EXCLUDED.kind, answered = false, answer = NULL
)`,
  ],
  [
    SIDE.pendingDel,
    `, pending_del AS (
  DELETE FROM pending_calls c USING jsonb_to_recordset($1::jsonb -> 'pd') AS d(ord int, call_id text), moved m WHERE m.ord = d.ord AND c.session_key = m.key AND c.call_id = d.call_id
)`,
  ],
  [
    SIDE.idem,
    `, idem AS (
  INSERT INTO idempotency (session_key, message_id, route, body_hash, seq, created_at)
  SELECT m.key, i.message_id, i.route, i.body_hash, i.seq, $3 FROM jsonb_to_recordset($1::jsonb -> 'id') AS i(ord int, message_id text, route text, body_hash text, seq int)
  JOIN moved m ON m.ord = i.ord
)`,
  ],
]

const groupTexts = new Map<number, string>()

/** The group statement for a set of side-row kinds (a SIDE mask), made once per mask. */
function groupSql(mask: number): string {
  let text = groupTexts.get(mask)
  if (text === undefined) {
    text = GROUP_HEAD
    for (const [bit, ctes] of GROUP_PARTS) if (mask & bit) text += ctes
    const deliveries = mask & SIDE.hooks ? `CASE WHEN m.wh_type IS NULL THEN 0 ELSE (SELECT count(*)::int FROM webhooks w WHERE w.tenant_id = m.tenant_id AND m.wh_type = ANY(w.events) AND ${taskFilterSql('m.key', 'm.wh_seq', 'm.wh_turn')}) END` : '0'
    text += `
SELECT m.ord AS u, m.run_state, m.cancel_pending, m.wake_latched, coalesce(n.n, 0) AS n, ${deliveries} AS w
FROM moved m LEFT JOIN (SELECT session_key, count(*)::int AS n FROM ins GROUP BY session_key) n ON n.session_key = m.key`
    groupTexts.set(mask, (text = repeatedText(text)))
  }
  return text
}

/**
 * Whether a unit's side rows have a place in the group's statement: at most one webhook delivery,
 * at most one of slot take and free, pending inserts, pending deletes by call id, idempotency
 * records (its settlements are GroupUnit.usage). Any other unit (crash repair's delete of every
 * pending call, a kind without an array form) commits alone, in its own statement as before.
 */
export function groupable(u: GroupUnit): boolean {
  let hooks = 0
  let slots = 0
  let keys = 0
  for (const r of u.side ?? []) {
    switch (r.kind) {
      case 'webhook':
        hooks++
        break
      case 'key-live':
        keys++
        break
      case 'slot-take':
      case 'slot-free':
        slots++
        break
      case 'pending-insert':
      case 'idempotency':
        break
      case 'pending-delete':
        if (r.callIds === undefined) return false
        break
      default:
        return false
    }
  }
  return hooks <= 1 && slots <= 1 && keys <= 1
}

/** The group's statement (groupSql) and its parameters: its document, its events' bodies and, when a side row needs it, the time side rows are stamped with. */
function groupStatement(units: readonly GroupUnit[]): { sql: string; params: unknown[] } {
  const u: Array<Record<string, unknown>> = []
  const e: Array<Record<string, unknown>> = []
  const l: Array<Record<string, unknown>> = []
  const p: Array<Record<string, unknown>> = []
  const pi: Array<Record<string, unknown>> = []
  const pd: Array<Record<string, unknown>> = []
  const id: Array<Record<string, unknown>> = []
  const bodies: string[] = []
  let mask = 0
  units.forEach((unit, i) => {
    const ord = i + 1
    const last = unit.events[unit.events.length - 1]
    const patch = unit.patch
    const f = unit.expect.flags ?? {}
    let hook: Extract<SideRow, { kind: 'webhook' }> | undefined
    let keyId: string | undefined
    let slotTake = false
    let slotFree = false
    for (const r of unit.side ?? []) {
      if (r.kind === 'webhook') hook = r
      else if (r.kind === 'slot-take') slotTake = true
      else if (r.kind === 'slot-free') slotFree = true
      else if (r.kind === 'pending-insert') pi.push({ ord, call_id: r.call.callId, kind: r.call.kind, name: r.call.name, arguments: r.call.arguments })
      else if (r.kind === 'pending-delete') for (const callId of r.callIds ?? []) pd.push({ ord, call_id: callId })
      else if (r.kind === 'idempotency') id.push({ ord, message_id: r.messageId, route: r.route, body_hash: r.bodyHash, seq: r.seq })
      else if (r.kind === 'key-live') keyId = r.keyId
    }
    if (slotTake) mask |= SIDE.slotTake
    if (slotFree) mask |= SIDE.slotFree
    if (hook) mask |= SIDE.hooks
    // absent members read as NULL (jsonb_to_recordset)
    u.push({
      ord,
      key: unit.key,
      expect_seq: unit.expect.nextSeq,
      lease_owner: unit.expect.lease?.owner,
      lease_token: unit.expect.lease?.token,
      f_run: f.runState,
      f_cancel: f.cancelPending,
      f_wake: f.wakeLatched,
      slot_guard: slotTake,
      next_seq: last.seq + 1,
      last_time: last.time,
      inbox: patch.inbox ? JSON.stringify(patch.inbox) : undefined,
      set_open: patch.openTurn !== undefined,
      open_turn: patch.openTurn ?? undefined,
      run_state: patch.runState,
      wake_mode: patch.runState !== undefined && patch.runState !== 'idle' ? (patch.openTurn === null ? 1 : 2) : 0,
      cancel: patch.cancelPending,
      wake: patch.wakeLatched,
      last_turn: patch.lastTurn ? JSON.stringify(patch.lastTurn) : undefined,
      set_cont: patch.continueTurn !== undefined,
      cont: patch.continueTurn ?? undefined,
      ...usageColumns(patch.usage),
      slot_take: slotTake,
      slot_free: slotFree,
      wh_type: hook?.event.type,
      wh_turn: hook?.event.turn,
      wh_seq: hook?.event.seq,
      wh_extra: hook ? JSON.stringify(hook.event.extra) : undefined,
      wh_time: hook?.event.time,
      key_id: keyId,
    })
    for (const ev of unit.events) {
      e.push({ ord, seq: ev.seq, time: ev.time, type: ev.type })
      bodies.push(ev.json)
    }
    // its settlements: ledger rows and the amounts they add to each period
    for (const x of unit.usage ?? []) l.push({ ord, day: x.day, model: x.model, i: x.usage.inputTokens, o: x.usage.outputTokens, cr: x.usage.cacheReadTokens, cw: x.usage.cacheWriteTokens, c: x.usage.costUsd, a: x.attempts })
    for (const [period, a] of usagePeriods(unit.usage ?? [])) p.push({ ord, period, tokens: a.tokens, cost: a.costUsd })
  })
  if (l.length || p.length) mask |= SIDE.usage
  if (pi.length) mask |= SIDE.pendingIns
  if (pd.length) mask |= SIDE.pendingDel
  if (id.length) mask |= SIDE.idem
  const params: unknown[] = [JSON.stringify({ u, e, l, p, pi, pd, id }), joinTexts(bodies)]
  if (mask & STAMPED) params.push(Date.now())
  return { sql: groupSql(mask), params }
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

  private async run(all: Waiting[]): Promise<void> {
    // a unit without a place in the statement commits alone, beside the group
    const group: Waiting[] = []
    const alone: Waiting[] = []
    for (const w of all) (groupable(w.unit) ? group : alone).push(w)
    if (group.length <= 1) alone.push(...group.splice(0))
    const singles = Promise.all(alone.map((w) => this.single(w.unit).then(w.resolve, w.reject)))
    if (group.length) await this.grouped(group)
    await singles
  }

  private async grouped(group: Waiting[]): Promise<void> {
    // a fixed lock order across groups
    group.sort((a, b) => (a.unit.key < b.unit.key ? -1 : a.unit.key > b.unit.key ? 1 : 0))
    let result: QueryResult<{ u: number; run_state: RunState; cancel_pending: boolean; wake_latched: boolean; n: number; w: number }>
    try {
      const { sql, params } = groupStatement(group.map((w) => w.unit))
      result = await this.db.query(sql, params)
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
      const r = byUnit.get(i + 1)
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

/** A unit's usage as the `v` columns the row's sums add (absent: nothing). */
function usageColumns(usage: UsageTotals | undefined) {
  const u = usageTotals(usage)
  return { ui: u.inputTokens, uo: u.outputTokens, ucr: u.cacheReadTokens, ucw: u.cacheWriteTokens, urs: u.reasoningTokens, uc: u.costUsd }
}
