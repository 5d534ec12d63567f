// The usage ledger (API.md §15): per tenant, UTC day, model and session, written as a side row of
// each settlement's unit (side.ts), with the per-period totals the budget check reads by primary key;
// and the reads of the usage route.

import { budgetTokens, type LedgerEntry } from '../session/index.js'
import type { Queryable } from './db.js'

/**
 * Side row (side.ts): a unit's ledger entries, as two statements — the ledger rows and the period
 * totals (each UTC day and month touched). Entries are distinct by (day, model), and so are the
 * periods here, as one INSERT … ON CONFLICT may not touch a row twice.
 */
export function usageSql(entries: readonly LedgerEntry[], params: unknown[], when: string, key = '$1'): string[] {
  const ledger = ledgerSql(entries, params, when, key)
  const list = usagePeriods(entries)
  params.push(list.map(([k]) => k), list.map(([, p]) => p.tokens), list.map(([, p]) => p.costUsd))
  const n = params.length
  const totals = totalsUpsert(`SELECT s.tenant_id, p.period, p.tokens, p.cost FROM sessions s, unnest($${n - 2}::text[], $${n - 1}::bigint[], $${n}::float8[]) AS p(period, tokens, cost)
     WHERE s.key = ${key} AND ${when}`)
  return [ledger, totals]
}

/** The ledger statement of usageSql alone, on the session key placeholder `key`. */
export function ledgerSql(entries: readonly LedgerEntry[], params: unknown[], when: string, key: string): string {
  const col = <T>(f: (e: LedgerEntry) => T) => {
    params.push(entries.map(f))
    return `$${params.length}`
  }
  return ledgerUpsert(`SELECT s.tenant_id, e.day::date, e.model, s.key, s.id, e.i, e.o, e.cr, e.cw, e.c, e.a
     FROM sessions s, unnest(${col((e) => e.day)}::text[], ${col((e) => e.model)}::text[], ${col((e) => e.usage.inputTokens)}::bigint[], ${col((e) => e.usage.outputTokens)}::bigint[],
       ${col((e) => e.usage.cacheReadTokens)}::bigint[], ${col((e) => e.usage.cacheWriteTokens)}::bigint[], ${col((e) => e.usage.costUsd)}::float8[], ${col((e) => e.attempts)}::int[]) AS e(day, model, i, o, cr, cw, c, a)
     WHERE s.key = ${key} AND ${when}`)
}

/**
 * The one statement that adds to the ledger, from `rows` (a SELECT of tenant_id, day, model,
 * session_key, session_id and the amounts, distinct by the ledger's key): usageSql's and group.ts's.
 */
export function ledgerUpsert(rows: string): string {
  return `INSERT INTO usage_ledger (tenant_id, day, model, session_key, session_id, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, attempts)
     ${rows}
     ON CONFLICT (tenant_id, day, model, session_key) DO UPDATE SET
       input_tokens = usage_ledger.input_tokens + EXCLUDED.input_tokens, output_tokens = usage_ledger.output_tokens + EXCLUDED.output_tokens,
       cache_read_tokens = usage_ledger.cache_read_tokens + EXCLUDED.cache_read_tokens, cache_write_tokens = usage_ledger.cache_write_tokens + EXCLUDED.cache_write_tokens,
       cost_usd = usage_ledger.cost_usd + EXCLUDED.cost_usd, attempts = usage_ledger.attempts + EXCLUDED.attempts`
}

/**
 * The one statement that adds to the period totals, from `rows` (columns tenant_id, period, tokens,
 * cost; distinct by tenant and period). Every writer of the totals goes through it (this file's
 * usageSql and group.ts), so all lock their rows in one order, (tenant, period) in the "C"
 * collation: sessions of one tenant settle concurrently in several statements, and two of them
 * locking a day and its month in opposite orders deadlock.
 */
export function totalsUpsert(rows: string): string {
  return `INSERT INTO usage_totals (tenant_id, period, tokens, cost_usd)
     SELECT r.tenant_id, r.period, r.tokens, r.cost FROM (${rows}) AS r(tenant_id, period, tokens, cost)
     ORDER BY r.tenant_id, r.period COLLATE "C"
     ON CONFLICT (tenant_id, period) DO UPDATE SET tokens = usage_totals.tokens + EXCLUDED.tokens, cost_usd = usage_totals.cost_usd + EXCLUDED.cost_usd`
}

/** The amounts entries add to each period they touch (each UTC day and month), distinct by period. */
export function usagePeriods(entries: readonly LedgerEntry[]): Array<[string, { tokens: number; costUsd: number }]> {
  const periods = new Map<string, { tokens: number; costUsd: number }>()
  for (const e of entries) {
    for (const period of [e.day, e.day.slice(0, 7)]) {
      const p = periods.get(period) ?? { tokens: 0, costUsd: 0 }
      p.tokens += budgetTokens(e.usage)
      p.costUsd += e.usage.costUsd
      periods.set(period, p)
    }
  }
  return [...periods]
}

/** What the budget check needs (API.md §15), in one statement: the limits and the day's and month's totals. */
export interface BudgetState {
  tokensPerDay: number | null
  costUsdPerMonth: number | null
  maxRunningSessions: number | null
  /** any limit at all, requestsPerMin included */
  hasLimits: boolean
  dayTokens: number
  monthCostUsd: number
}

/** The tenant's budget state for a UTC day and month; undefined for an unknown tenant. */
export async function budgetState(db: Queryable, tenantId: string, day: string, month: string): Promise<BudgetState | undefined> {
  const { rows } = await db.query<{ tokens_per_day: number | null; cost_usd_per_month: number | null; max_running_sessions: number | null; requests_per_min: number | null; day_tokens: number | null; month_cost: number | null }>(
    `SELECT t.tokens_per_day, t.cost_usd_per_month, t.max_running_sessions, t.requests_per_min, d.tokens AS day_tokens, m.cost_usd AS month_cost
     FROM tenants t
     LEFT JOIN usage_totals d ON d.tenant_id = t.id AND d.period = $2
     LEFT JOIN usage_totals m ON m.tenant_id = t.id AND m.period = $3
     WHERE t.id = $1`,
    [tenantId, day, month],
  )
  const r = rows[0]
  if (!r) return undefined
  return {
    tokensPerDay: r.tokens_per_day,
    costUsdPerMonth: r.cost_usd_per_month,
    maxRunningSessions: r.max_running_sessions,
    hasLimits: r.tokens_per_day !== null || r.cost_usd_per_month !== null || r.max_running_sessions !== null || r.requests_per_min !== null,
    dayTokens: Number(r.day_tokens ?? 0),
    monthCostUsd: Number(r.month_cost ?? 0),
  }
}

export type UsageGroup = 'day' | 'model' | 'session'

export interface UsageRow {
  day?: string
  model?: string
  sessionId?: string
  inputTokens: number
  outputTokens: number
  cacheReadTokens: number
  cacheWriteTokens: number
  costUsd: number
  attempts: number
}

const GROUP_SQL: Record<UsageGroup, { select: string; by: string }> = {
  day: { select: "to_char(day, 'YYYY-MM-DD') AS day", by: 'day' },
  model: { select: 'model', by: 'model' },
  // a session id may be reused after a delete: the key keeps the two apart
  session: { select: 'min(session_id) AS session_id', by: 'session_key' },
}

/**
 * The tenant's ledger over UTC days [from, to] (`YYYY-MM-DD`, both included), summed by day, model
 * or session, or in one row without a group; ordered by the group.
 */
export async function usageReport(db: Queryable, tenantId: string, from: string, to: string, groupBy?: UsageGroup): Promise<UsageRow[]> {
  const g = groupBy ? GROUP_SQL[groupBy] : undefined
  const { rows } = await db.query<Record<string, unknown>>(
    `SELECT ${g ? `${g.select}, ` : ''}coalesce(sum(input_tokens), 0) AS i, coalesce(sum(output_tokens), 0) AS o, coalesce(sum(cache_read_tokens), 0) AS cr,
       coalesce(sum(cache_write_tokens), 0) AS cw, coalesce(sum(cost_usd), 0) AS c, coalesce(sum(attempts), 0) AS a
     FROM usage_ledger WHERE tenant_id = $1 AND day BETWEEN $2::date AND $3::date
     ${g ? `GROUP BY ${g.by} ORDER BY ${groupBy === 'session' ? 'min(session_id), session_key' : g.by}` : ''}`,
    [tenantId, from, to],
  )
  return rows.map((r) => {
    // the group's field first, as API.md §15 lists it
    const key: Partial<UsageRow> = groupBy === 'day' ? { day: r.day as string } : groupBy === 'model' ? { model: r.model as string } : groupBy === 'session' ? { sessionId: r.session_id as string } : {}
    return { ...key, inputTokens: Number(r.i), outputTokens: Number(r.o), cacheReadTokens: Number(r.cr), cacheWriteTokens: Number(r.cw), costUsd: Number(r.c), attempts: Number(r.a) }
  })
}
