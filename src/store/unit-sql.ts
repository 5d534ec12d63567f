// The unit statement: ONE statement commits one unit or a group of units of different sessions —
// their events, their session-row moves and their side rows (unit-kinds.ts) — on the fast path
// (conditioned on each row's expected seq, lease and flags) and inside the locked transaction alike
// (the row is locked there, so its conditions hold). The rules that move a session row exist here
// only, in SQL (RULES); the statement's two forms are written from them.
//
// A group's statement: a fixed text per set of side-row kinds it holds (its mask: a bit per kind of
// KINDS), whatever its units, prepared by name (`unit_<mask>`, db.ts statement), where a text written
// out per unit had PostgreSQL parse and plan four CTEs per unit on every group (measured: a 40-unit
// group spent about 10 ms planning and 15 ms parsing against 3–6 ms executing). Its parameters: the
// units as ONE jsonb document (their records, events and side rows as lists of records, read with
// jsonb_to_recordset); the events' bodies as one joined text (db.ts joinTexts: JSON bodies would be
// escaped once more inside a JSON document); when a kind needs it, the time side rows are stamped
// with. One document instead of sixty-odd array parameters: the pg driver serialized and escaped
// every array element of every parameter in JavaScript. Text members (the inbox, the last turn)
// travel as JSON strings, so they are stored exactly as written. `v` is the units; `moved` moves the
// rows whose conditions hold (every rule is in the text; one a unit has no member for leaves its row
// as it is); every other CTE joins `moved`, so nothing of a unit whose row did not move is written.
//
// A unit alone — every unit at one session, most at ten — gets a text per set of kinds and of the
// rules that apply to it (`unit1_<mask>_<rules>`): its members and events are parameters of their own,
// only the columns it changes are set, only its conditions checked, and the document holds just its
// side rows' lists (when it has any). Measured at one session, same sitting: PostgreSQL executed a
// plain unit's group-form text in 0.14 ms, this one in 0.07 (pg_stat_statements); the bench's database
// CPU per turn fell from 2.88 ms with the group form to 2.02 ms (bench/README.md).
// A side CTE is in the text only when some unit has such a row: an empty CTE still costs PostgreSQL
// its executor set-up, the locks and the opened indexes of its table on every execution (measured:
// 0.27 ms a statement with all kinds, 0.12 with none).

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

/** The members of a unit's record `v` and their SQL types; a kind's columns follow. */
const MEMBERS: ReadonlyArray<readonly [name: string, type: string]> = [
  ['ord', 'int'], ['key', 'uuid'], ['expect_seq', 'int'], ['lease_owner', 'text'], ['lease_token', 'bigint'], ['f_run', 'text'], ['f_cancel', 'bool'], ['f_wake', 'bool'],
  ['next_seq', 'int'], ['last_time', 'bigint'], ['inbox', 'text'], ['set_open', 'bool'], ['open_turn', 'int'], ['run_state', 'text'], ['wake_mode', 'int'],
  ['cancel', 'bool'], ['wake', 'bool'], ['last_turn', 'text'], ['set_cont', 'bool'], ['cont', 'int'],
  ['ui', 'bigint'], ['uo', 'bigint'], ['ucr', 'bigint'], ['ucw', 'bigint'], ['urs', 'bigint'], ['uc', 'float8'],
  ...KIND_LIST.flatMap(([, k]) => k.columns ?? []),
]
const TYPE = new Map(MEMBERS)

type Member = (name: string) => string

/**
 * The rules of a row move, each applying when the unit's record has its member `has`: the
 * conditions the row must meet (`when`) and the columns it sets (`set`, over the row `s`). A group's
 * statement holds every rule, one that does not apply to a unit leaving that unit's row as it is; a
 * unit's statement alone holds only the rules that apply to it.
 */
const RULES: ReadonlyArray<{ has: string; when?: (v: Member) => string; set?: (v: Member) => ReadonlyArray<readonly [column: string, value: string]> }> = [
  { has: 'expect_seq', when: (v) => `s.next_seq = ${v('expect_seq')}` },
  { has: 'lease_owner', when: (v) => `s.lease_owner = ${v('lease_owner')} AND s.lease_token = ${v('lease_token')}` },
  { has: 'f_run', when: (v) => `s.run_state = ${v('f_run')}` },
  { has: 'f_cancel', when: (v) => `s.cancel_pending = ${v('f_cancel')}` },
  { has: 'f_wake', when: (v) => `s.wake_latched = ${v('f_wake')}` },
  { has: 'next_seq', set: (v) => [['next_seq', v('next_seq')], ['last_time', v('last_time')], ['updated_at', v('last_time')]] },
  { has: 'inbox', set: (v) => [['inbox', v('inbox')]] },
  { has: 'set_open', set: (v) => [['open_turn', v('open_turn')]] },
  {
    has: 'run_state',
    set: (v) => [
      ['run_state', v('run_state')],
      ['wake_seq', `CASE ${v('wake_mode')} WHEN 1 THEN nextval('session_wake_seq') WHEN 2 THEN CASE WHEN s.run_state = 'idle' THEN nextval('session_wake_seq') ELSE s.wake_seq END ELSE s.wake_seq END`],
    ],
  },
  { has: 'cancel', set: (v) => [['cancel_pending', v('cancel')]] },
  { has: 'wake', set: (v) => [['wake_latched', v('wake')]] },
  { has: 'last_turn', set: (v) => [['last_turn', v('last_turn')]] },
  { has: 'set_cont', set: (v) => [['continue_turn', v('cont')]] },
  {
    has: 'ui',
    set: (v) => [['input_tokens', `s.input_tokens + ${v('ui')}`], ['output_tokens', `s.output_tokens + ${v('uo')}`], ['cache_read_tokens', `s.cache_read_tokens + ${v('ucr')}`],
      ['cache_write_tokens', `s.cache_write_tokens + ${v('ucw')}`], ['reasoning_tokens', `s.reasoning_tokens + ${v('urs')}`], ['cost_usd', `s.cost_usd + ${v('uc')}`]],
  },
]

/** A statement's text and the names of its parameters in order ($1 first). */
interface Sql {
  sql: string
  params: readonly string[]
}

/** Numbers a statement's parameters as its text first uses them, each cast to its type. */
class Placeholders {
  readonly names: string[] = []
  at(name: string, type: string): string {
    let i = this.names.indexOf(name)
    if (i < 0) i = this.names.push(name) - 1
    return `$${i + 1}::${type}`
  }
}

/**
 * The statement for a set of kinds (`mask`, a bit per KIND_LIST entry), for a group (`rules` null:
 * every rule, `v` the units' records) or a unit alone (`rules`: a bit per RULES entry that applies
 * to it, its members as parameters of their own).
 */
function buildUnitSql(mask: number, rules: number | null): Sql {
  const alone = rules !== null
  const ph = new Placeholders()
  const v: Member = alone ? (n) => ph.at(n, TYPE.get(n)!) : (n) => `v.${n}`
  const p = {
    get doc() {
      return ph.at('doc', 'jsonb')
    },
    get time() {
      return ph.at('time', 'bigint')
    },
    v,
  }
  const kinds = KIND_LIST.filter((_, i) => mask & (1 << i)).map(([, k]) => k)
  const applies = RULES.filter((_, i) => !alone || rules & (1 << i))
  const when = (has: string, cond: string) => (alone ? cond : `(v.${has} IS NULL OR (${cond}))`)
  const conds = [
    ...applies.flatMap((r) => (r.when ? [when(r.has, r.when(v))] : [])),
    ...kinds.flatMap((k) => (k.guard ? [when(k.columns![0][0], k.guard(p))] : [])),
  ]
  const sets = applies.flatMap((r) => (r.set ? r.set(v).map(([c, x]) => `${c} = ${alone ? x : `CASE WHEN v.${r.has} IS NULL THEN s.${c} ELSE ${x} END`}`) : []))
  // a group's keys as an array too: the planner then reads the rows by primary key (it expects 100
  // records of jsonb_to_recordset and would hash-join a scan of the whole table, dead row versions included)
  const source = alone ? '' : `v AS (\n  SELECT * FROM jsonb_to_recordset(${p.doc} -> 'u') AS v(${MEMBERS.map(([n, t]) => `${n} ${t}`).join(', ')})\n), `
  const where = alone ? `s.key = ${v('key')}` : 's.key = ANY(ARRAY(SELECT key FROM v)) AND s.key = v.key'
  const columns = alone ? kinds.flatMap((k) => k.columns ?? []).map(([n]) => `, ${v(n)} AS ${n}`) : KIND_LIST.flatMap(([, k]) => k.columns ?? []).map(([n]) => `, v.${n}`)
  const events = alone
    ? `SELECT m.key, e.seq, e.time, e.type, e.body FROM moved m, unnest(${ph.at('seqs', 'int[]')}, ${ph.at('times', 'bigint[]')}, ${ph.at('types', 'text[]')}, ${splitTexts(ph.at('bodies', 'text'))}) AS e(seq, time, type, body)`
    : `SELECT m.key, e.seq, e.time, e.type, b.body
  FROM ROWS FROM (jsonb_to_recordset(${p.doc} -> 'e') AS (ord int, seq int, time bigint, type text)) WITH ORDINALITY AS e(ord, seq, time, type, i)
  JOIN unnest(${splitTexts(ph.at('bodies', 'text'))}) WITH ORDINALITY AS b(body, i) ON b.i = e.i
  JOIN moved m ON m.ord = e.ord`
  let text = `WITH ${source}moved AS (
  UPDATE sessions s SET ${sets.length ? sets.join(',\n    ') : 'next_seq = s.next_seq'}${alone ? '' : '\n  FROM v'}
  WHERE ${[where, ...conds].join('\n    AND ')}
  RETURNING ${alone ? '1' : 'v.ord'} AS ord, s.key, s.tenant_id, s.id, s.run_state, s.cancel_pending, s.wake_latched${columns.join('')}
), ins AS (
  INSERT INTO session_events (session_key, seq, time, type, body)
  ${events}
  RETURNING session_key
)`
  const counted: string[] = []
  for (const k of kinds) {
    text += k.ctes?.(p) ?? ''
    if (k.counted) counted.push(k.counted)
  }
  const w = counted.length ? counted.join(' + ') : '0'
  // a unit alone counts its events without the group's aggregate and join
  text += alone
    ? `\nSELECT 1 AS u, m.run_state, m.cancel_pending, m.wake_latched, (SELECT count(*)::int FROM ins) AS n, ${w} AS w FROM moved m`
    : `\nSELECT m.ord AS u, m.run_state, m.cancel_pending, m.wake_latched, coalesce(n.n, 0) AS n, ${w} AS w
FROM moved m LEFT JOIN (SELECT session_key, count(*)::int AS n FROM ins GROUP BY session_key) n ON n.session_key = m.key`
  const name = alone ? statement(`unit1_${mask}_${rules}`, text) : statement(`unit_${mask}`, text)
  return { sql: name, params: ph.names }
}

/** The statements made so far, by mask (a group's) or mask and rules (a unit's alone): each text is built once, not on every commit. */
const UNIT_SQL = new Map<string, Sql>()

function unitSql(mask: number, rules: number | null): Sql {
  const at = rules === null ? `${mask}` : `${mask}_${rules}`
  let sql = UNIT_SQL.get(at)
  if (sql === undefined) UNIT_SQL.set(at, (sql = buildUnitSql(mask, rules)))
  return sql
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
  const alone = units.length === 1
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
      set_open: patch.openTurn !== undefined ? true : undefined,
      open_turn: patch.openTurn ?? undefined,
      run_state: patch.runState,
      // API.md §15 (slots): a session whose run state leaves idle draws its place in the wake order;
      // one whose driver goes on to another turn draws a new one, behind the sessions already waiting
      wake_mode: patch.runState === undefined ? undefined : patch.runState !== 'idle' ? (patch.openTurn === null ? 1 : 2) : 0,
      cancel: patch.cancelPending,
      wake: patch.wakeLatched,
      last_turn: patch.lastTurn ? JSON.stringify(patch.lastTurn) : undefined,
      set_cont: patch.continueTurn !== undefined ? true : undefined,
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
    }
    u.push(record)
    for (const ev of unit.events) {
      // a unit alone passes its events' seqs, times and types as arrays of their own
      if (!alone) e.push({ ord, seq: ev.seq, time: ev.time, type: ev.type })
      bodies.push(ev.json)
    }
  })
  // a unit alone: the rules that apply to it name its statement, its members are parameters
  const rules = alone ? RULES.reduce((m, r, i) => (u[0][r.has] !== undefined ? m | (1 << i) : m), 0) : null
  const { sql, params } = unitSql(mask, rules)
  const events = units[0].events
  const value = (name: string): unknown => {
    switch (name) {
      case 'doc':
        return JSON.stringify(alone ? lists : { u, e, ...lists })
      case 'bodies':
        return joinTexts(bodies)
      case 'time':
        return Date.now()
      case 'seqs':
        return events.map((x) => x.seq)
      case 'times':
        return events.map((x) => x.time)
      case 'types':
        return events.map((x) => x.type)
      default:
        return u[0][name] ?? null
    }
  }
  return { sql, params: params.map(value), checks }
}

/** A unit's usage as the `v` columns the row's sums add (absent: none). */
function usageColumns(usage: UsageTotals | undefined) {
  if (usage === undefined) return {}
  const u = usageTotals(usage)
  return { ui: u.inputTokens, uo: u.outputTokens, ucr: u.cacheReadTokens, ucw: u.cacheWriteTokens, urs: u.reasoningTokens, uc: u.costUsd }
}
