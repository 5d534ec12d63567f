// Session loading: a route with the fact `session: true` gets the caller's session `:id` in
// req.session before its body is validated; another tenant's session looks missing (API.md §3).

import type { FastifyInstance, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { sessionNotFound } from '../errors.js'
import { publicStatus } from '../session/index.js'
import { getSession, type SessionRow } from '../store/index.js'
import type { HttpDeps } from './deps.js'

/** The status clients see (API.md §4), the same on the session object and the stream's agent/status. */
export const sessionStatus = (row: SessionRow) => publicStatus(row.runState)

/** The loaded session of a `session: true` route. */
export const sessionOf = (req: FastifyRequest): SessionRow => req.session!

/**
 * A request whose key the auth hook did not read (req.deferredKey): reads the key and the session now,
 * as the hooks would have (401, 404), and loads req.session. Once per request; a no-op otherwise.
 */
export async function confirmKey(req: FastifyRequest): Promise<void> {
  const d = req.deferredKey
  if (!d) return
  await d.confirm()
  if (req.routeOptions.config.session) req.session = req.preloadedSession!
}

/**
 * The session a `bodySession` route's body names (the Responses route's conversation), of the caller's
 * tenant, with its pending input: read together with the key when the auth hook did not read that
 * (one statement, as a native input route's authentication reads both). Null: the tenant has none.
 */
export async function sessionNamed(req: FastifyRequest, deps: HttpDeps, id: string): Promise<SessionRow | null> {
  const d = req.deferredKey
  if (!d) return (await getSession(deps.db, req.principal!.tenantId, id, { inbox: true })) ?? null
  await d.confirm(id)
  return req.preloadedSession ?? null
}

export const sessionLoading = fp(async (scope: FastifyInstance, deps: HttpDeps) => {
  scope.addHook('preValidation', async (req) => {
    // a delivery whose key is confirmed in its own statement loads nothing now (auth.ts, inbox.ts)
    if (!req.routeOptions.config.session || req.deferredKey) return
    const id = (req.params as { id: string }).id
    // read by the auth hook together with the key, else here
    const row = req.preloadedSession !== undefined ? req.preloadedSession : await getSession(deps.db, req.principal!.tenantId, id)
    if (!row) throw sessionNotFound(id)
    req.session = row
  })
}, { name: 'agentd-session-loading', dependencies: ['agentd-auth'] })
