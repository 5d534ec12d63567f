// Reading a session's log (API.md §6): pages of durable events and the derived model history.

import type { FastifyInstance } from 'fastify'
import { deriveFromSurfaceEvents } from '../session/index.js'
import { getSessionByKey, readEventTexts, readSurfaceEvents } from '../store/index.js'
import type { HttpDeps } from './deps.js'
import { parseAfter } from './feed.js'
import { sessionOf } from './session.js'
import * as S from './schemas.js'

const err = { 400: S.ErrorBody, 401: S.ErrorBody, 403: S.ErrorBody, 404: S.ErrorBody }

export async function eventRoutes(app: FastifyInstance, deps: HttpDeps): Promise<void> {
  app.get('/sessions/:id/events', { config: { session: true }, schema: { operationId: 'listEvents', summary: 'Durable events after a seq', params: S.SessionParams, querystring: S.EventsQuery, response: { 200: S.EventsPage, ...err } } }, async (req, reply) => {
    const q = req.query as { after?: string; limit?: string }
    const after = parseAfter(q.after, 'querystring.after') ?? -1
    const limit = S.queryLimit(q.limit, S.EVENTS_LIMIT.max, S.EVENTS_LIMIT.dflt)
    const row = sessionOf(req)
    const rows = await readEventTexts(deps.db, row.key, after, limit)
    // the head after reading, so that a page is never newer than the head it reports
    const head = (await getSessionByKey(deps.db, row.key))?.nextSeq ?? row.nextSeq
    return reply.type('application/json').send(`{"events":[${rows.map((r) => r.body).join(',')}],"headSeq":${Math.max(head - 1, rows.at(-1)?.seq ?? -1)}}`)
  })

  app.get('/sessions/:id/messages', { config: { session: true }, schema: { operationId: 'getMessages', summary: 'The derived model history (SPEC §14)', params: S.SessionParams, response: { 200: S.MessagesAnswer, ...err } } }, async (req, reply) => {
    const events = await readSurfaceEvents(deps.db, sessionOf(req).key)
    return reply.type('application/json').send(JSON.stringify({ messages: deriveFromSurfaceEvents(events) }))
  })
}
