// The usage ledger (API.md §15): per tenant, UTC day, model and session, written as a side row of
// each settlement's unit (unit-kinds.ts usage), with the per-period totals the budget check reads by primary key;
// and the reads of the usage route.

import { budgetTokens, type LedgerEntry } from '../session/index.js'
import { statement, type Queryable } from './db.js'

/**
 * The one statement that adds to the ledger, from `rows` (a SELECT of tenant_id, day, model,
 * session_key, session_id and the amounts, distinct by the ledger's key): the unit statement's (unit-kinds.ts usage).
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
 * cost; distinct by tenant and period). Every writer of the totals goes through it
 * (the unit statement), so all lock their rows in one order, (tenant, period) in the "C"
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

const BUDGET_STATE = statement(
  'budget_state',
  `SELECT t.tokens_per_day, t.cost_usd_per_month, t.max_running_sessions, t.requests_per_min, d.tokens AS day_tokens, m.cost_usd AS month_cost
     FROM tenants t
     LEFT JOIN usage_totals d ON d.tenant_id = t.id AND d.period = $2
     LEFT JOIN usage_totals m ON m.tenant_id = t.id AND m.period = $3
     WHERE t.id = $1`,
)

/** The tenant's budget state for a UTC day and month; undefined for an unknown tenant. */
export async function budgetState(db: Queryable, tenantId: string, day: string, month: string): Promise<BudgetState | undefined> {
  const { rows } = await db.query<{ tokens_per_day: number | null; cost_usd_per_month: number | null; max_running_sessions: number | null; requests_per_min: number | null; day_tokens: number | null; month_cost: number | null }>(BUDGET_STATE, [tenantId, day, month])
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

const usageText = (groupBy?: UsageGroup) => {
  const g = groupBy ? GROUP_SQL[groupBy] : undefined
  return `SELECT ${g ? `${g.select}, ` : ''}coalesce(sum(input_tokens), 0) AS i, coalesce(sum(output_tokens), 0) AS o, coalesce(sum(cache_read_tokens), 0) AS cr,
       coalesce(sum(cache_write_tokens), 0) AS cw, coalesce(sum(cost_usd), 0) AS c, coalesce(sum(attempts), 0) AS a
     FROM usage_ledger WHERE tenant_id = $1 AND day BETWEEN $2::date AND $3::date
     ${g ? `GROUP BY ${g.by} ORDER BY ${groupBy === 'session' ? 'min(session_id), session_key' : g.by}` : ''}`
}
/** usageReport's statements: one row without a group, and one per group. */
const USAGE_TOTAL = statement('usage_report', usageText())
const USAGE_REPORT: Record<UsageGroup, string> = {
  day: statement('usage_report_day', usageText('day')),
  model: statement('usage_report_model', usageText('model')),
  session: statement('usage_report_session', usageText('session')),
}

/**
 * The tenant's ledger over UTC days [from, to] (`YYYY-MM-DD`, both included), summed by day, model
 * or session, or in one row without a group; ordered by the group.
 */
export async function usageReport(db: Queryable, tenantId: string, from: string, to: string, groupBy?: UsageGroup): Promise<UsageRow[]> {
  const { rows } = await db.query<Record<string, unknown>>(groupBy ? USAGE_REPORT[groupBy] : USAGE_TOTAL, [tenantId, from, to])
  return rows.map((r) => {
    // the group's field first, as API.md §15 lists it
    const key: Partial<UsageRow> = groupBy === 'day' ? { day: r.day as string } : groupBy === 'model' ? { model: r.model as string } : groupBy === 'session' ? { sessionId: r.session_id as string } : {}
    return { ...key, inputTokens: Number(r.i), outputTokens: Number(r.o), cacheReadTokens: Number(r.cr), cacheWriteTokens: Number(r.cw), costUsd: Number(r.c), attempts: Number(r.a) }
  })
}
