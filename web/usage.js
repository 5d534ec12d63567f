// The tenant's usage this month and its limits (API.md §15), in the sidebar: what its settled model
// calls used (tokens, cost, calls), today's tokens, and each limit beside what it bounds. It reads
// `GET /v1/usage` through the SDK's `request()`, with the console's key.

import { reportError, state } from './app.js'
import { $, h, showError } from './dom.js'

const REFRESH_MS = 60_000
const n = (x) => Math.round(x ?? 0).toLocaleString()
const usd = (x) => `$${(x ?? 0).toFixed(4)}`
const tokens = (r) => r.inputTokens + r.outputTokens + r.cacheReadTokens + r.cacheWriteTokens

/** GET /v1/usage by day for the current month, through the SDK: `{usage, limits}`, or a rejection with the API's message. */
async function monthByDay() {
  return state.client.request('GET', '/v1/usage?groupBy=day')
}

function row(label, value, title) {
  return [h('dt', { text: label }), h('dd', { text: value, title })]
}

function render({ usage, limits }) {
  const today = new Date().toISOString().slice(0, 10)
  const month = usage.reduce((a, r) => ({ tokens: a.tokens + tokens(r), costUsd: a.costUsd + r.costUsd, attempts: a.attempts + r.attempts }), { tokens: 0, costUsd: 0, attempts: 0 })
  const day = usage.find((r) => r.day === today)
  const of = (used, limit, fmt) => (limit === undefined ? fmt(used) : `${fmt(used)} of ${fmt(limit)}`)
  $('usage').replaceChildren(
    ...row('tokens', n(month.tokens), 'input + output + cache tokens this month (UTC)'),
    ...row('today', of(day ? tokens(day) : 0, limits.tokensPerDay, n), limits.tokensPerDay === undefined ? 'tokens today (UTC)' : 'tokens today (UTC) of the tokensPerDay limit'),
    ...row('cost', of(month.costUsd, limits.costUsdPerMonth, usd), limits.costUsdPerMonth === undefined ? 'cost this month' : 'cost this month of the costUsdPerMonth limit'),
    ...row('model calls', n(month.attempts), 'settled model attempts this month, retries and compaction summaries included'),
    ...row('running at once', limits.maxRunningSessions === undefined ? 'no limit' : `at most ${n(limits.maxRunningSessions)}`, 'maxRunningSessions'),
    ...row('requests', limits.requestsPerMin === undefined ? 'server default' : `${n(limits.requestsPerMin)} / min`, 'requestsPerMin, for all of the keys together'),
  )
  // a spent budget is worth seeing at once
  const spent = (limits.tokensPerDay !== undefined && (day ? tokens(day) : 0) >= limits.tokensPerDay) || (limits.costUsdPerMonth !== undefined && month.costUsd >= limits.costUsdPerMonth)
  $('usage-panel').dataset.spent = String(spent)
}

let timer = 0

/** Reads and shows the usage of the key's tenant; hides the panel without a key. */
export async function refreshUsage() {
  clearTimeout(timer)
  const key = state.key
  // the tenant's own business takes its key: a token is refused it (API.md §18)
  $('usage-panel').hidden = !key || state.access.token
  if (!key || state.access.token) return
  timer = setTimeout(() => void refreshUsage(), REFRESH_MS)
  try {
    const answer = await monthByDay()
    if (key !== state.key) return // answered for a key no longer in use
    showError($('usage-error'), null)
    render(answer)
  } catch (e) {
    if (key !== state.key) return
    $('usage').replaceChildren()
    reportError($('usage-error'), e)
  }
}

export function initUsage() {
  $('usage-refresh').addEventListener('click', () => void refreshUsage())
  void refreshUsage()
}
