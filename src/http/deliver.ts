// The one entry of every route into a session's inbox (API.md §5, §17): the native input routes, the
// WebSocket's ops and the client protocols (src/protocols, through http/index.ts) call deliverInput;
// none of them knows how many statements a delivery takes. That is decided in Intake.deliver, from what
// the request read: a request the auth hook let through without reading its key or session (auth.ts,
// req.deferredKey) names its session by id only, and the delivery confirms the key itself.

import type { FastifyRequest } from 'fastify'
import type { Accepted, DeliveryRoute, UnreadSession } from '../agent/index.js'
import type { UserMessage } from '../session/index.js'
import type { SessionRow } from '../store/index.js'
import type { HttpDeps } from './deps.js'
import { confirmKey, sessionOf } from './session.js'

export interface InputDelivery {
  /** the session as the route read it; none: the request's own session (`:id` of a session route) */
  row?: SessionRow
  route: DeliveryRoute
  message: UserMessage
  /** the client named the message (API.md §5) */
  idempotency?: { bodyHash: string }
}

/** Delivers input to a session for a request (`req`: none for a caller that holds the row already). */
export async function deliverInput(deps: HttpDeps, req: FastifyRequest | undefined, d: InputDelivery): Promise<Accepted & { replayed: boolean }> {
  const session = d.row ?? (req!.deferredKey ? unread(req!) : sessionOf(req!))
  const accepted = await deps.intake.deliver({ session, route: d.route, message: d.message, ...(d.idempotency ? { idempotency: d.idempotency } : {}) })
  // the delivery's own statement confirmed the key (or load() read it): nothing is left to read
  if (!d.row && req) req.deferredKey = undefined
  return accepted
}

/** The request's session, by id, with what reads the key and the session when the delivery needs them. */
function unread(req: FastifyRequest): UnreadSession {
  const keyId = req.deferredKey!.keyId
  return {
    id: (req.params as { id: string }).id,
    tenantId: req.principal!.tenantId,
    ...(keyId !== undefined ? { keyId } : {}),
    load: async () => {
      await confirmKey(req)
      return sessionOf(req)
    },
  }
}
