// The session's last turn as its row mirrors it (API.md §4 `lastTurn`): the latest turn/end of a run
// of events, its number, TurnEndReason and time. Every writer of a turn/end derives it from the events
// it writes (the driver's units, crash repair's closers, a fork's copied prefix), so reading the
// session object never scans the log.

import type { SessionEvent, TurnEndReason } from './types.js'

export interface LastTurn {
  turn: number
  reason: TurnEndReason
  /** the turn/end's event time, epoch milliseconds */
  time: number
}

/** The latest turn/end among events in seq order, or undefined when there is none. */
export function lastTurnOf(events: Iterable<SessionEvent>): LastTurn | undefined {
  let last: SessionEvent | undefined
  for (const e of events) if (e.type === 'turn/end') last = e
  if (!last) return undefined
  const d = last.data as unknown as { turn: number; reason: TurnEndReason }
  return { turn: d.turn, reason: d.reason, time: last.time }
}
