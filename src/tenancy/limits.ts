// A tenant's limits (API.md §15) and why a model attempt may not be made: the budget decision on the
// tenant's settled usage of the UTC day and month, made before every attempt.

import type { LlmFailure } from '../session/index.js'
import type { BudgetState, TenantLimits } from '../store/index.js'

export type Limits = TenantLimits

/** A settled usage at or over a limit spends the budget: the next attempt would exceed it. */
export function budgetRefusal(s: BudgetState, period: { day: string; month: string }): (LlmFailure & { limit: 'tokensPerDay' | 'costUsdPerMonth' }) | null {
  if (s.tokensPerDay !== null && s.dayTokens >= s.tokensPerDay) {
    return { code: 'BUDGET_EXCEEDED', limit: 'tokensPerDay', message: `the tenant's token budget for ${period.day} (UTC) is spent: ${s.dayTokens} of ${s.tokensPerDay} tokens (tokensPerDay)` }
  }
  if (s.costUsdPerMonth !== null && s.monthCostUsd >= s.costUsdPerMonth) {
    return { code: 'BUDGET_EXCEEDED', limit: 'costUsdPerMonth', message: `the tenant's cost budget for ${period.month} (UTC) is spent: $${round(s.monthCostUsd)} of $${s.costUsdPerMonth} (costUsdPerMonth)` }
  }
  return null
}

/** Dollars as people read them, without binary noise. */
const round = (usd: number): number => Math.round(usd * 1e6) / 1e6
