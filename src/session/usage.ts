// The usage ledger (API.md §4 `usage`): which events add usage to a session, and their sums. The
// driver mirrors each unit's sum into the row; a fork sums the copied prefix the same way.

import type { SessionEvent, TokenUsage } from './types.js'

/** A session's usage totals, as the row keeps them. */
export interface UsageTotals {
  inputTokens: number
  outputTokens: number
  cacheReadTokens: number
  cacheWriteTokens: number
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
    else {
      sum.inputTokens += l.inputTokens
      sum.outputTokens += l.outputTokens
      sum.cacheReadTokens += l.cacheReadTokens
      sum.cacheWriteTokens += l.cacheWriteTokens
      sum.costUsd += l.costUsd
    }
  }
  return sum
}
