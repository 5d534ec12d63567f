// What follows from a unit's events, whichever path writes them (the driver's units, log.ts; crash
// repair, attach.ts): the session row's mirror of them and the side rows they imply.

import { lastTurnOf, ledgerEntries, sumUsage, type SessionEvent, type SessionState } from '../session/index.js'
import type { RowPatch, SideRow, WebhookEventType } from '../store/index.js'

/**
 * What follows from a unit's events, whichever path writes them (the driver's units, crash repair):
 * the row's mirror of them (open turn, inbox projection, usage, last turn) and the side rows they imply (the
 * tenant's usage ledger, running-session slots, webhook deliveries of turn ends). `state` has the events folded already.
 */
export function mirror(state: SessionState, added: readonly SessionEvent[], patch: RowPatch = {}): { patch: RowPatch; side: SideRow[] } {
  const p: RowPatch = { ...patch }
  const side: SideRow[] = []
  for (const e of added) {
    if (e.type === 'turn/start') {
      p.openTurn = (e.data as { turn: number }).turn
      side.push({ kind: 'slot-take' })
    } else if (e.type === 'turn/end') {
      p.openTurn = null
      side.push({ kind: 'slot-free' })
      const hook = turnEndWebhook(e)
      if (hook) side.push(hook)
    } else if (e.type === 'agent/inbox/spliced') p.inbox = state.inbox
  }
  const usage = sumUsage(added)
  if (usage) p.usage = usage
  const lastTurn = lastTurnOf(added)
  if (lastTurn) p.lastTurn = lastTurn
  const entries = ledgerEntries(added, () => {
    const c = state.latestHeader?.header.config
    return c ? `${c.provider}/${c.model}` : undefined
  })
  if (entries.length) side.push({ kind: 'usage', entries })
  return { patch: p, side }
}

/** API.md §14: the webhook type each turn end reason reports (a blocked turn reports none). */
const TURN_END_WEBHOOK: Record<string, WebhookEventType | undefined> = {
  completed: 'turn.completed',
  'max-tokens': 'turn.completed',
  error: 'turn.failed',
  aborted: 'turn.cancelled',
  interrupted: 'turn.interrupted',
}

function turnEndWebhook(e: SessionEvent): SideRow | undefined {
  const data = e.data as { turn: number; reason: { kind: string } }
  const type = TURN_END_WEBHOOK[data.reason.kind]
  return type && { kind: 'webhook', event: { type, turn: data.turn, seq: e.seq, time: e.time, extra: { reason: data.reason } } }
}
