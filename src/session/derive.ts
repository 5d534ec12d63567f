// Deriving model history from surface events without the whole log (SPEC §14): fold the surface by
// its append/replace ops, then project. Used by readers; the driver keeps a SessionState instead.

import { project } from './surface.js'
import type { Message, SessionEvent } from './types.js'

export function deriveFromSurfaceEvents(events: Iterable<SessionEvent>): Message[] {
  const surface: SessionEvent[] = []
  for (const e of events) {
    if (e.surfaceOp === undefined) continue
    if (e.surfaceOp === 'append') surface.push(e)
    else {
      const { start, end } = e.surfaceOp
      const a = surface.findIndex((x) => x.seq === start)
      const b = surface.findIndex((x) => x.seq === end)
      if (a >= 0 && b >= a) surface.splice(a, b - a + 1, e)
    }
  }
  const out: Message[] = []
  for (const e of surface) {
    const m = project(e)
    if (m) out.push(m)
  }
  return out
}
