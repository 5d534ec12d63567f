// The usage ledger (API.md §4 `usage`): which events add usage to a session, and their sums. The
// driver mirrors each unit's sum into the row; a fork sums the copied prefix the same way.

import type { SessionEvent, TokenUsage } from './types.js'

/** A session's usage totals, as the row keeps them. */
export interface UsageTotals {
  inputTokens: number
  outputTokens: number
  cacheReadTokens: number
  cacheWriteTokens: number
  /** the part of outputTokens spent reasoning, where the provider reported it (API.md §4) */
  reasoningTokens: number
  costUsd: number
}

/** Usage an event adds to the ledger: settled attempts and compaction summaries (SPEC §9.3). */
export function usageOf(e: SessionEvent): TokenUsage | undefined {
  const d = e.data as Record<string, unknown>
  if (e.type === 'assistant/message' || e.type === 'compaction/summary') return d.usage as TokenUsage | undefined
  if (e.type === 'assistant/attempt') {
    // a failed attempt's usage lives only in its stream: the last usage chunk
    const records = (d.stream as Array<{ type: string; chunk?: { type: string; usage?: TokenUsage } }>) ?? []
    for (let i = records.length - 1; i >= 0; i--) if (records[i].type === 'chunk' && records[i].chunk?.type === 'usage') return records[i].chunk!.usage
  }
  return undefined
}

/** A usage report as ledger totals (absent fields count 0). */
export function usageTotals(u: TokenUsage | undefined): UsageTotals {
  return {
    inputTokens: u?.inputTokens ?? 0,
    outputTokens: u?.outputTokens ?? 0,
    cacheReadTokens: u?.cacheReadTokens ?? 0,
    cacheWriteTokens: u?.cacheWriteTokens ?? 0,
    reasoningTokens: u?.reasoningTokens ?? 0,
    costUsd: u?.costUsd ?? 0,
  }
}

/** What the events add to the ledger, or undefined when none carries usage. */
export function sumUsage(events: Iterable<SessionEvent>): UsageTotals | undefined {
  let sum: UsageTotals | undefined
  for (const e of events) {
    const u = usageOf(e)
    if (!u) continue
    const l = usageTotals(u)
    if (!sum) sum = l
    else addTotals(sum, l)
  }
  return sum
}

/** Adds `l` into `sum`. */
export function addTotals(sum: UsageTotals, l: UsageTotals): void {
  sum.inputTokens += l.inputTokens
  sum.outputTokens += l.outputTokens
  sum.cacheReadTokens += l.cacheReadTokens
  sum.cacheWriteTokens += l.cacheWriteTokens
  sum.reasoningTokens += l.reasoningTokens
  sum.costUsd += l.costUsd
}

/** The UTC day of an epoch-ms time, `YYYY-MM-DD`: the period of tokensPerDay (API.md §15). */
export const utcDay = (ms: number): string => new Date(ms).toISOString().slice(0, 10)

/** The UTC month of an epoch-ms time, `YYYY-MM`: the period of costUsdPerMonth (API.md §15). */
export const utcMonth = (ms: number): string => new Date(ms).toISOString().slice(0, 7)

/** Tokens a budget counts: input + output + cache (API.md §15 tokensPerDay). */
export const budgetTokens = (u: UsageTotals): number => u.inputTokens + u.outputTokens + u.cacheReadTokens + u.cacheWriteTokens

/** What a unit's settlements add to the tenant's usage ledger on one UTC day for one model. */
export interface LedgerEntry {
  day: string
  /** `provider/modelId` */
  model: string
  usage: UsageTotals
  /** settled attempts */
  attempts: number
}

const SETTLEMENTS = new Set(['assistant/message', 'assistant/attempt', 'compaction/summary'])

/**
 * The ledger entries of a unit's events: every settlement counts one attempt and its usage, on the
 * UTC day of its time, for its model. A failed attempt names no model; `attemptModel` gives the one
 * of the request header it was sent under. Entries are distinct by (day, model).
 */
export function ledgerEntries(events: Iterable<SessionEvent>, attemptModel: () => string | undefined): LedgerEntry[] {
  const out = new Map<string, LedgerEntry>()
  for (const e of events) {
    if (!SETTLEMENTS.has(e.type)) continue
    const d = e.data as Record<string, any>
    const route = e.type === 'assistant/message' ? d.message?.source : e.type === 'compaction/summary' ? d : undefined
    const model = (route ? `${route.provider}/${route.model}` : attemptModel()) ?? 'unknown'
    const day = utcDay(e.time)
    const k = `${day}\n${model}`
    const u = usageTotals(usageOf(e))
    const entry = out.get(k)
    if (!entry) out.set(k, { day, model, usage: u, attempts: 1 })
    else {
      entry.attempts++
      addTotals(entry.usage, u)
    }
  }
  return [...out.values()]
}
