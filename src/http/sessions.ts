// Session routes (API.md §4, §9): create, list, read, patch, delete, fork and compact.

import type { FastifyInstance } from 'fastify'
import { ApiError, badRequest, sessionNotFound } from '../errors.js'
import { sessionObject, type SettingsInput } from '../agent/index.js'
import { decodeCursor, deleteSession, getSession, listSessions, patchSession, type SessionRow } from '../store/index.js'
import { assertLosslessJson, type JsonObject } from '../session/index.js'
import type { HttpDeps } from './deps.js'
import { pageQuery } from './paging.js'
import { sessionFilter } from './auth.js'
import { sessionOf } from './session.js'
import * as S from './schemas.js'

const err = { 400: S.ErrorBody, 401: S.ErrorBody, 403: S.ErrorBody, 404: S.ErrorBody, 409: S.ErrorBody }
const json = (o: unknown) => JSON.stringify(o)

/**
 * PATCH of a session (API.md §4): title, metadata and settings, the settings validated whole as session
 * create validates them (nothing is written on a refusal); the session's driver, in whichever process,
 * reads them again before its next step. Also what the client protocols use when a request's settings
 * differ (API.md §17.1). Answers the row as it is now.
 */
export async function changeSession(deps: HttpDeps, tenantId: string, s: SessionRow, body: { title?: string | null; metadata?: JsonObject } & SettingsInput): Promise<SessionRow> {
  const { title, metadata, ...given } = body
  if (metadata !== undefined) {
    try {
      assertLosslessJson(metadata)
    } catch (e) {
      throw badRequest(`metadata is not lossless JSON: ${(e as Error).message}`)
    }
  }
  const settings = Object.keys(given).length ? await deps.sessions.validateSettings(given) : {}
  if (!(await patchSession(deps.db, s.key, { title, metadata, ...settings }))) throw sessionNotFound(s.id)
  // the poke makes the session's driver, in whichever process, read the settings before its next
  // step; the answer waits until it has left, not for the poke window
  if (Object.keys(settings).length) await deps.driver.settingsChanged(s.key)
  const row = await getSession(deps.db, tenantId, s.id)
  if (!row) throw sessionNotFound(s.id)
  return row
}

export async function sessionRoutes(app: FastifyInstance, deps: HttpDeps): Promise<void> {
  app.post('/sessions', { config: { optionalBody: true, createsSession: true }, schema: { operationId: 'createSession', summary: 'Create a session', body: S.CreateSessionBody, response: { 200: S.SessionObject, 201: S.SessionObject, 422: S.ErrorBody, ...err } } }, async (req, reply) => {
    const { row, created } = await deps.sessions.create(req.principal!.tenantId, req.body as never, req.principal!.grant?.subject ?? null)
    return reply.code(created ? 201 : 200).type('application/json').send(json(sessionObject(row)))
  })

  app.get('/sessions', { schema: { operationId: 'listSessions', summary: 'List sessions, newest activity first', querystring: S.ListQuery, response: { 200: S.SessionList, ...err } } }, async (req, reply) => {
    const { limit, cursor } = pageQuery(req.query, decodeCursor)
    // API.md §18: a token lists only what it reaches
    const filter = sessionFilter(req.principal!)
    const page = filter ? await listSessions(deps.db, req.principal!.tenantId, limit, cursor, filter) : { sessions: [], nextCursor: null }
    return reply.type('application/json').send(json({ sessions: page.sessions.map(sessionObject), nextCursor: page.nextCursor }))
  })

  app.get('/sessions/:id', { config: { session: true }, schema: { operationId: 'getSession', summary: 'Get a session', params: S.SessionParams, response: { 200: S.SessionObject, ...err } } }, async (req, reply) => {
    return reply.type('application/json').send(json(sessionObject(sessionOf(req))))
  })

  app.patch('/sessions/:id', { config: { session: true }, schema: { operationId: 'updateSession', summary: "Change a session's title, metadata or settings", params: S.SessionParams, body: S.PatchSessionBody, response: { 200: S.SessionObject, 422: S.ErrorBody, ...err } } }, async (req, reply) => {
    const row = await changeSession(deps, req.principal!.tenantId, sessionOf(req), req.body as { title?: string | null; metadata?: JsonObject } & SettingsInput)
    return reply.type('application/json').send(json(sessionObject(row)))
  })

  app.delete('/sessions/:id', { config: { session: true }, schema: { operationId: 'deleteSession', summary: 'Delete a session (cancels any running turn)', params: S.SessionParams, response: { ...err } } }, async (req, reply) => {
    const row = sessionOf(req)
    await deleteSession(deps.db, row.key)
    await deps.driver.deleted(row)
    return reply.code(204).send()
  })

  app.post('/sessions/:id/fork', { config: { session: true, optionalBody: true }, schema: { operationId: 'forkSession', summary: 'Fork a session at a seq', params: S.SessionParams, body: S.ForkBody, response: { 201: S.SessionObject, ...err } } }, async (req, reply) => {
    const atSeq = (req.body as { atSeq?: number }).atSeq
    const child = await deps.sessions.fork(sessionOf(req), atSeq)
    return reply.code(201).type('application/json').send(json(sessionObject(child)))
  })

  app.post('/sessions/:id/compact', { config: { session: true, optionalBody: true }, schema: { operationId: 'compactSession', summary: 'Compact an idle session now', params: S.SessionParams, body: S.CompactBody, response: { 202: S.CompactAnswer, ...err } } }, async (req, reply) => {
    const row = sessionOf(req)
    if (row.runState !== 'idle') throw new ApiError('session-busy', 'a turn is running; compaction runs while idle')
    const r = await deps.driver.compact(row)
    return reply.code(202).type('application/json').send(json(r))
  })
}
