// Attaching a loop instance to a session (SPEC §13): in ONE transaction with the lease claim, fold
// the log, append deterministic closers for a turn the previous holder left open, and mark where new
// writes begin with session/end-seed.

import { SessionState, type Draft, type SessionEvent } from '../session/index.js'
import { toolResultDraft } from '../tools/index.js'
import { readEvents, stamp, writeEvents, type Db, type Queryable, type SessionRow, type StoredEvent } from '../store/index.js'
import type { KeyedMutex } from './locks.js'
import type { Publisher } from './publish.js'
import type { Lease } from './log.js'
import { mirror } from './mirror.js'
import { continuationDuty, type ContinuationDuty } from './continuation.js'

export const OUTCOME_UNKNOWN_TEXT =
  'Error: the server restarted while this tool call was running, so it may or may not have taken effect; verify its effect before repeating it, especially if it changes anything.'
export const NOT_STARTED_TEXT = 'Error: tool call was not started: the server restarted before it could run.'

/** SPEC §13.1: the closers of an open turn, in order. */
export function planRepair(state: SessionState): Draft[] {
  if (state.openTurn === null) return []
  const out: Draft[] = []
  for (const c of state.openCalls.values()) {
    const logged = c.callSeq !== undefined
    const error = logged ? { name: 'ToolError', code: 'TOOL_OUTCOME_UNKNOWN' } : { name: 'AbortError', code: 'TOOL_NOT_STARTED' }
    out.push(toolResultDraft(c, c.callId, c.callSeq, { content: [{ type: 'text', text: logged ? OUTCOME_UNKNOWN_TEXT : NOT_STARTED_TEXT }], isError: true, error }))
  }
  if (state.openStep !== null) out.push({ type: 'step/end', data: { turn: state.openTurn, step: state.openStep } })
  out.push({ type: 'turn/end', data: { turn: state.openTurn, reason: { kind: 'interrupted' } } })
  return out
}

export interface Attached {
  row: SessionRow
  lease: Lease
  state: SessionState
  events: StoredEvent[]
  /** 'startup' for a fresh log (SPEC §18.6) */
  source: 'startup' | 'resume'
  repaired: boolean
  /** SPEC §19.3: the continuation the log and the row say is owed (whether to run it is decided when the turn would open) */
  continuation: ContinuationDuty | null
}

/**
 * Claims and loads a session. `claim` runs first in the transaction (it locks the row) and returns
 * null when the lease is not to be had. Throws on a log that does not fold (SPEC §4.1: never drive it).
 */
export async function attach(
  d: { db: Db; mutex: KeyedMutex; publisher: Publisher },
  key: string,
  claim: (tx: Queryable) => Promise<{ row: SessionRow; lease: Lease } | null>,
): Promise<Attached | null> {
  return d.mutex.run(key, async () => {
    const out = await d.db.transaction(async (tx) => {
      const c = await claim(tx)
      if (!c) return null
      const log = await readEvents(tx, key)
      const state = SessionState.fromEvents(log)
      const source: Attached['source'] = state.fresh ? 'startup' : 'resume'
      const added: SessionEvent[] = []
      const closers = planRepair(state)
      const closedTurn = state.openTurn
      // closers reuse the last stored time (SPEC §18.13); the marker follows the clock
      for (const draft of closers) {
        const [e] = stamp(state, [draft], state.lastTime)
        state.apply(e)
        added.push(e)
      }
      if (!state.fresh && state.nonSpliceSinceSeed) {
        const [e] = stamp(state, [{ type: 'session/end-seed', data: {} }])
        state.apply(e)
        added.push(e)
      }
      const pos = { key, nextSeq: c.row.nextSeq, lastTime: c.row.lastTime }
      // what the closers imply, as for any unit (the open turn closed, lastTurn interrupted, the slot freed); SPEC §18.10: crash repair deletes the pending calls with them
      // SPEC §19.3: the crashed holder's wake is unspent, so a continuation of the closed turn is owed;
      // the row remembers it until the unit that opens the continuation, or declines it, clears it
      // (a continuation owed while the run state is idle is spent: it is forgotten)
      const idle = c.row.runState === 'idle'
      const owed = closers.length && closedTurn !== null && !idle ? { continueTurn: closedTurn } : idle && c.row.continueTurn !== null ? { continueTurn: null } : {}
      const m = mirror(state, added, owed)
      const events = await writeEvents(tx, pos, added, m.patch, closers.length ? [{ kind: 'pending-delete' }, ...m.side] : m.side)
      c.row.nextSeq = state.nextSeq
      c.row.lastTime = state.lastTime
      c.row.openTurn = state.openTurn
      if (m.patch.continueTurn !== undefined) c.row.continueTurn = m.patch.continueTurn
      const continuation = c.row.continueTurn === null ? null : continuationDuty(added.length ? [...log, ...added] : log, c.row.continueTurn)
      return { row: c.row, lease: c.lease, state, events, source, repaired: closers.length > 0, continuation }
    })
    if (out?.events.length) d.publisher.committed({ key, id: out.row.id, tenantId: out.row.tenantId }, out.events)
    return out
  })
}
