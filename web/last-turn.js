// How a session's last turn ended (API.md §4 `lastTurn`), as a badge for the session list and the
// header: a turn that failed shows its error code, one that was cancelled, blocked or cut short by a
// restart says so; a completed turn shows nothing.

import { h } from './dom.js'
import { fmtReason } from './format.js'

const TONE = { error: 'bad', aborted: 'warn', interrupted: 'warn', blocked: 'warn' }

/** The badge of a session object's `lastTurn`, or null when there is nothing to point out. */
export function lastTurnBadge(lastTurn) {
  const r = lastTurn?.reason
  const tone = r && TONE[r.kind]
  if (!tone) return null
  const text = r.kind === 'error' ? `failed: ${r.error?.code ?? 'UNKNOWN'}` : r.kind
  const when = new Date(lastTurn.endedAt).toLocaleString()
  return h('span', { class: `tag ${tone} last-turn`, dataset: { reason: r.kind }, title: `turn ${lastTurn.turn} ${fmtReason(r)} (${when})`, text })
}
