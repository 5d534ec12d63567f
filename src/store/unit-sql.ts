// The unit statement: ONE statement commits one unit or a group of units of different sessions —
// their events, their session-row moves and their side rows (unit-kinds.ts) — on the fast path
// (conditioned on each row's expected seq, lease and flags) and inside the locked transaction alike
// (the row is locked there, so its conditions hold). The rules that move a session row exist here
// only, in SQL.
//
// A fixed text per set of side-row kinds the statement holds (its mask: a bit per kind of KINDS) and
// form, whatever its units, prepared by name (`unit_<mask>` for a group, `unit1_<mask>` for a unit
// alone, db.ts statement), where a text written out per
// unit had PostgreSQL parse and plan four CTEs per unit on every group (measured: a 40-unit group
// spent about 10 ms planning and 15 ms parsing against 3–6 ms executing). Its parameters: $1, the
// units as ONE jsonb document (their records, events and side rows as lists of records, read with
// jsonb_to_recordset); $2, the events' bodies as one joined text (db.ts joinTexts: JSON bodies would
// be escaped once more inside a JSON document); $3, when a kind needs it, the time side rows are
// stamped with. One document instead of sixty-odd array parameters: the pg driver serialized and
// escaped every array element of every parameter in JavaScript. Text members (the inbox, the last
// turn) travel as JSON strings, so they are stored exactly as written.
// `v` is the units; `moved` moves the rows whose conditions hold; every other CTE joins `moved`, so
// nothing of a unit whose row did not move is written. The two forms differ in how they read `v` and
// count the events, nothing else: a unit alone — every unit at one session, most at ten — is one
// record (jsonb_to_record), found by its key without the group's array of keys, its events counted
// without grouping by session (measured at one session: 0.14 ms of execution for the group form's
// text, 0.09 for the alone form; pg_stat_statements, same sitting). A side CTE is in the text only when some unit
// has such a row: an empty CTE still costs PostgreSQL its executor set-up, the locks and the opened
// indexes of its table on every execution (measured: 0.27 ms a statement with all kinds, 0.12 with none).

import { joinTexts, splitTexts, statement } from './db.js'
import type { RowPatch, RunState } from './sessions.js'
import { KIND_LIST, type SideRow, type UnitDoc } from './unit-kinds.js'
import { usageTotals, type UsageTotals } from '../session/index.js'

/** One unit as the statement takes it. */
export interface Unit {
  key: string
  /** the row's expected position and state: null `nextSeq` for a row the caller created in its transaction */
  expect: { nextSeq: number | null; lease?: { owner: string; token: number }; flags?: { runState?: RunState; cancelPending?: boolean; wakeLatched?: boolean } }
  /** stamped events with their wire text (events.ts StoredEvent) */
  events: ReadonlyArray<{ seq: number; time: number; type: string; json: string }>
  /** where the log stands after the unit when it has no events of its own (a fork's copied prefix); else its last event */
  to?: { nextSeq: number; lastTime: number }
  patch: RowPatch
  side: readonly SideRow[]
}

/** A unit's outcome: its row's flags after the move and how many webhook deliveries it wrote, or null when its row did not move. */
export type UnitOutcome = { runState: RunState; cancelPending: boolean; wakeLatched: boolean; n: number; deliveries: number } | null

const KIND_COLUMNS = KIND_LIST.flatMap(([, k]) => k.columns ?? [])

/** The statement's head, for a group (`v` a recordset of its units) or a unit alone (`v` one record). */
const head = (alone: boolean) => `WITH v AS (
  SELECT * FROM ${alone ? `jsonb_to_record($1::jsonb -> 'u' -> 0)` : `jsonb_to_recordset($1::jsonb -> 'u')`}
    AS v(ord int, key uuid, expect_seq int, lease_owner text, lease_token bigint, f_run text, f_cancel bool, f_wake bool, next_seq int, last_time bigint,
      inbox text, set_open bool, open_turn int, run_state text, wake_mode int, cancel bool, wake bool, last_turn text, set_cont bool, cont int,
      ui bigint, uo bigint, ucr bigint, ucw bigint, urs bigint, uc float8${KIND_COLUMNS.map(([n, t]) => `, ${n} ${t}`).join('')})
), moved AS (
  UPDATE sessions s SET next_seq = coalesce(v.next_seq, s.next_seq), last_time = coalesce(v.last_time, s.last_time), updated_at = coalesce(v.last_time, s.updated_at),
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
  -- a group's keys as an array too: the planner then reads the rows by primary key (it expects 100
  -- records of jsonb_to_recordset and would hash-join a scan of the whole table, dead row versions included)
  WHERE ${alone ? '' : 's.key = ANY(ARRAY(SELECT key FROM v)) AND '}s.key = v.key AND (v.expect_seq IS NULL OR s.next_seq = v.expect_seq)
    AND (v.lease_owner IS NULL OR (s.lease_owner = v.lease_owner AND s.lease_token = v.lease_token))
    AND (v.f_run IS NULL OR s.run_state = v.f_run) AND (v.f_cancel IS NULL OR s.cancel_pending = v.f_cancel) AND (v.f_wake IS NULL OR s.wake_latched = v.f_wake)`

/** `moved`'s RETURNING and the events' insert, after the guards of the kinds in the statement. */
const TAIL = `
  RETURNING v.ord, s.key, s.tenant_id, s.id, s.run_state, s.cancel_pending, s.wake_latched${KIND_COLUMNS.map(([n]) => `, v.${n}`).join('')}
), ins AS (
  INSERT INTO session_events (session_key, seq, time, type, body)
  SELECT m.key, e.seq, e.time, e.type, b.body
  FROM ROWS FROM (jsonb_to_recordset($1::jsonb -> 'e') AS (ord int, seq int, time bigint, type text)) WITH ORDINALITY AS e(ord, seq, time, type, i)
  JOIN unnest(${splitTexts('$2')}) WITH ORDINALITY AS b(body, i) ON b.i = e.i
  JOIN moved m ON m.ord = e.ord
  RETURNING session_key
)`

/** The statements made so far, by mask and form (a unit alone: the mask's second entry): each text is built once, not on every commit. */
const UNIT_SQL = new Map<number, string>()

/** The statement for a set of kinds (a mask of KIND_LIST bits), for a group or a unit alone. */
function unitSql(mask: number, alone: boolean): string {
  const at = mask * 2 + (alone ? 1 : 0)
  let sql = UNIT_SQL.get(at)
  if (sql === undefined) UNIT_SQL.set(at, (sql = buildUnitSql(mask, alone)))
  return sql
}

function buildUnitSql(mask: number, alone: boolean): string {
  let text = head(alone)
  let ctes = ''
  const counted: string[] = []
  KIND_LIST.forEach(([, k], i) => {
    if (!(mask & (1 << i))) return
    if (k.guard) text += `\n    AND ${k.guard}`
    ctes += k.ctes ?? ''
    if (k.counted) counted.push(k.counted)
  })
  const w = counted.length ? counted.join(' + ') : '0'
  text += TAIL + ctes
  // a unit alone counts its events without the group's aggregate and join
  text += alone
    ? `\nSELECT m.ord AS u, m.run_state, m.cancel_pending, m.wake_latched, (SELECT count(*)::int FROM ins) AS n, ${w} AS w FROM moved m`
    : `\nSELECT m.ord AS u, m.run_state, m.cancel_pending, m.wake_latched, coalesce(n.n, 0) AS n, ${w} AS w
FROM moved m LEFT JOIN (SELECT session_key, count(*)::int AS n FROM ins GROUP BY session_key) n ON n.session_key = m.key`
  return statement(`unit${alone ? '1' : ''}_${mask}`, text)
}

/** Side rows a locked-path unit leaves to their kind's check (unit-kinds.ts Kind.locked), in order. */
export type LockedChecks = Array<(tx: import('./db.js').Queryable) => Promise<void>>

/**
 * The statement and its parameters for units of distinct sessions (ord = index + 1). With `locked`,
 * the kinds with a locked-path check are left out of it and their checks returned.
 */
export function unitStatement(units: readonly Unit[], locked = false): { sql: string; params: unknown[]; checks: LockedChecks } {
  const u: Array<Record<string, unknown>> = []
  const e: Array<Record<string, unknown>> = []
  const lists: Record<string, Array<Record<string, unknown>>> = {}
  const bodies: string[] = []
  const checks: LockedChecks = []
  let mask = 0
  let stamped = false
  units.forEach((unit, i) => {
    const ord = i + 1
    const last = unit.events.length ? unit.events[unit.events.length - 1] : undefined
    const to = last ? { nextSeq: last.seq + 1, lastTime: last.time } : unit.to
    const patch = unit.patch
    const f = unit.expect.flags ?? {}
    // absent members read as NULL (jsonb_to_recordset)
    const record: Record<string, unknown> = {
      ord,
      key: unit.key,
      expect_seq: unit.expect.nextSeq ?? undefined,
      lease_owner: unit.expect.lease?.owner,
      lease_token: unit.expect.lease?.token,
      f_run: f.runState,
      f_cancel: f.cancelPending,
      f_wake: f.wakeLatched,
      next_seq: to?.nextSeq,
      last_time: to?.lastTime,
      inbox: patch.inbox ? JSON.stringify(patch.inbox) : undefined,
      set_open: patch.openTurn !== undefined,
      open_turn: patch.openTurn ?? undefined,
      run_state: patch.runState,
      // API.md §15 (slots): a session whose run state leaves idle draws its place in the wake order;
      // one whose driver goes on to another turn draws a new one, behind the sessions already waiting
      wake_mode: patch.runState !== undefined && patch.runState !== 'idle' ? (patch.openTurn === null ? 1 : 2) : 0,
      cancel: patch.cancelPending,
      wake: patch.wakeLatched,
      last_turn: patch.lastTurn ? JSON.stringify(patch.lastTurn) : undefined,
      set_cont: patch.continueTurn !== undefined,
      cont: patch.continueTurn ?? undefined,
      ...usageColumns(patch.usage),
    }
    const doc: UnitDoc = {
      unit: record,
      add: (name, r) => void (lists[name] ??= []).push({ ord, ...r }),
    }
    for (const row of unit.side) {
      const at = KIND_LIST.findIndex(([name]) => name === row.kind)
      const k = KIND_LIST[at][1]
      if (locked && k.locked) {
        checks.push((tx) => k.locked!(tx, unit.key, row))
        continue
      }
      k.enter(row, doc)
      mask |= 1 << at
      if (k.stamped) stamped = true
    }
    u.push(record)
    for (const ev of unit.events) {
      e.push({ ord, seq: ev.seq, time: ev.time, type: ev.type })
      bodies.push(ev.json)
    }
  })
  const params: unknown[] = [JSON.stringify({ u, e, ...lists }), joinTexts(bodies)]
  if (stamped) params.push(Date.now())
  return { sql: unitSql(mask, units.length === 1), params, checks }
}

/** A unit's usage as the `v` columns the row's sums add (absent: nothing). */
function usageColumns(usage: UsageTotals | undefined) {
  const u = usageTotals(usage)
  return { ui: u.inputTokens, uo: u.outputTokens, ucr: u.cacheReadTokens, ucw: u.cacheWriteTokens, urs: u.reasoningTokens, uc: u.costUsd }
}
