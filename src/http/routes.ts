// Session, inbox and tool-answer routes (API.md §4, §5, §7).

import type { FastifyInstance, FastifyRequest } from 'fastify'
import { ApiError, badRequest } from '../errors.js'
import { bodyHash, idempotencyMessageId, InputError, normalizeContent, sessionObject, toUserMessage, type DeliveryRoute } from '../agent/index.js'
import { decodeCursor, deleteSession, getSession, listPending, listSessions, patchSession, readInbox, type SessionRow } from '../store/index.js'
import { assertLosslessJson, type JsonObject } from '../session/index.js'
import type { HttpDeps } from './app.js'
import * as S from './schemas.js'

type Load = (req: FastifyRequest) => Promise<void>

/** API.md §10: a route whose body fields are all optional also accepts no body at all. */
export async function emptyBodyIsObject(req: FastifyRequest): Promise<void> {
  if (req.body === undefined || req.body === null) req.body = {}
}

const err = { 400: S.ErrorBody, 401: S.ErrorBody, 404: S.ErrorBody, 409: S.ErrorBody }
const json = (o: unknown) => JSON.stringify(o)

/** API.md §4/§7: `arguments` is the parsed JSON of the raw text ({} for empty), else the text itself. */
export function parseArguments(raw: string): unknown {
  if (raw === '') return {}
  try {
    return JSON.parse(raw)
  } catch {
    return raw
  }
}

export function registerSessionRoutes(app: FastifyInstance, deps: HttpDeps, loadSession: Load): void {
  const withSession = { preValidation: loadSession }
  // API.md §10: a route whose body fields are all optional also accepts no body at all
  const optionalBody = {
    preValidation: [
      loadSession,
      emptyBodyIsObject,
    ],
  }
  const sess = (req: FastifyRequest): SessionRow => req.session!

  app.post('/v1/sessions', { preValidation: emptyBodyIsObject, schema: { summary: 'Create a session', body: S.CreateSessionBody, response: { 200: S.SessionObject, 201: S.SessionObject, 422: S.ErrorBody, ...err } } }, async (req, reply) => {
    const { row, created } = await deps.sessions.create(req.principal!.tenantId, (req.body ?? {}) as never)
    return reply.code(created ? 201 : 200).type('application/json').send(json(sessionObject(row)))
  })

  app.get('/v1/sessions', { schema: { summary: 'List sessions, newest activity first', querystring: S.ListQuery, response: { 200: S.SessionList, ...err } } }, async (req, reply) => {
    const q = req.query as { limit?: string; cursor?: string }
    const limit = q.limit === undefined ? 50 : Number(q.limit)
    if (limit < 1 || limit > 200) throw badRequest('limit must be between 1 and 200', [{ path: 'querystring.limit', message: 'must be between 1 and 200' }])
    let cursor
    if (q.cursor !== undefined) {
      cursor = decodeCursor(q.cursor)
      if (!cursor) throw badRequest('cursor is not one this server gave out', [{ path: 'querystring.cursor', message: 'invalid cursor' }])
    }
    const page = await listSessions(deps.db, req.principal!.tenantId, limit, cursor)
    return reply.type('application/json').send(json({ sessions: page.sessions.map(sessionObject), nextCursor: page.nextCursor }))
  })

  app.get('/v1/sessions/:id', { ...withSession, schema: { summary: 'Get a session', params: S.SessionParams, response: { 200: S.SessionObject, ...err } } }, async (req, reply) => {
    return reply.type('application/json').send(json(sessionObject(sess(req))))
  })

  app.patch('/v1/sessions/:id', { ...withSession, schema: { summary: 'Set title and metadata', params: S.SessionParams, body: S.PatchSessionBody, response: { 200: S.SessionObject, ...err } } }, async (req, reply) => {
    const body = (req.body ?? {}) as { title?: string | null; metadata?: JsonObject }
    if (body.metadata !== undefined) {
      try {
        assertLosslessJson(body.metadata)
      } catch (e) {
        throw badRequest(`metadata is not lossless JSON: ${(e as Error).message}`)
      }
    }
    await patchSession(deps.db, sess(req).key, body)
    const row = await getSession(deps.db, req.principal!.tenantId, sess(req).id)
    if (!row) throw new ApiError('session-not-found', `session ${sess(req).id} not found`)
    return reply.type('application/json').send(json(sessionObject(row)))
  })

  app.delete('/v1/sessions/:id', { ...withSession, schema: { summary: 'Delete a session (cancels any running turn)', params: S.SessionParams, response: { ...err } } }, async (req, reply) => {
    const row = sess(req)
    await deleteSession(deps.db, row.key)
    await deps.driver.deleted(row)
    return reply.code(204).send()
  })

  app.post('/v1/sessions/:id/fork', { ...optionalBody, schema: { summary: 'Fork a session at a seq', params: S.SessionParams, body: S.ForkBody, response: { 201: S.SessionObject, ...err } } }, async (req, reply) => {
    const atSeq = (req.body as { atSeq?: number } | undefined)?.atSeq
    const child = await deps.sessions.fork(sess(req), atSeq)
    return reply.code(201).type('application/json').send(json(sessionObject(child)))
  })

  app.post('/v1/sessions/:id/compact', { ...optionalBody, schema: { summary: 'Compact an idle session now', params: S.SessionParams, body: S.CompactBody, response: { 202: S.CompactAnswer, ...err } } }, async (req, reply) => {
    const row = sess(req)
    if (row.runState !== 'idle') throw new ApiError('session-busy', 'a turn is running; compaction runs while idle')
    const r = await deps.driver.compact(row)
    return reply.code(202).type('application/json').send(json(r))
  })

  // ---- input: the inbox (API.md §5) ----

  for (const route of ['followup', 'steer', 'inject'] as DeliveryRoute[]) {
    app.post(`/v1/sessions/:id/${route}`, { ...withSession, schema: { summary: `Deliver a ${route}`, params: S.SessionParams, body: S.DeliveryBody, response: { 202: S.Accepted, ...err } } }, async (req, reply) => {
      const body = req.body as { content: unknown; id?: string }
      const header = req.headers['idempotency-key']
      let id = body.id
      if (header !== undefined) {
        const derived = idempotencyMessageId(String(header))
        if (id !== undefined && id !== derived) throw badRequest('the id and the Idempotency-Key header disagree', [{ path: 'body.id', message: 'disagrees with the Idempotency-Key header' }])
        id = derived
      }
      let message
      try {
        message = toUserMessage({ content: body.content }, { kind: 'user' }, id)
      } catch (e) {
        if (e instanceof InputError) throw badRequest(e.message, [{ path: `body.${e.path}`, message: e.message }])
        throw e
      }
      const accepted = await deps.intake.deliver(sess(req), route, message, id !== undefined ? { bodyHash: bodyHash(route, { content: body.content }) } : undefined)
      return reply.code(202).type('application/json').send(json({ messageId: accepted.messageId, seq: accepted.seq }))
    })
  }

  app.get('/v1/sessions/:id/inbox', { ...withSession, schema: { summary: 'Pending input', params: S.SessionParams, response: { 200: S.InboxObject, ...err } } }, async (req, reply) => {
    const inbox = await readInbox(deps.db, sess(req).key)
    return reply.type('application/json').send(json(inbox))
  })

  app.delete('/v1/sessions/:id/inbox/:messageId', { ...withSession, schema: { summary: 'Withdraw pending input (a cancelling removal)', response: { ...err } } }, async (req, reply) => {
    await deps.intake.removeFromInbox(sess(req), (req.params as { messageId: string }).messageId)
    return reply.code(204).send()
  })

  app.post('/v1/sessions/:id/cancel', { ...optionalBody, schema: { summary: 'Cancel the running turn', params: S.SessionParams, body: S.CancelBody, response: { 202: S.CancelAnswer, ...err } } }, async (req, reply) => {
    const keepInbox = (req.body as { keepInbox?: boolean } | undefined)?.keepInbox === true
    const r = await deps.intake.cancel(sess(req), keepInbox)
    return reply.code(202).type('application/json').send(json(r))
  })

  // ---- tools that wait for someone (API.md §7) ----

  app.get('/v1/sessions/:id/pending', { ...withSession, schema: { summary: 'Tool calls waiting for a client or an approver', params: S.SessionParams, response: { 200: S.PendingAnswer, ...err } } }, async (req, reply) => {
    const rows = await listPending(deps.db, sess(req).key)
    const toolCalls = rows.map((r) => ({ callId: r.callId, name: r.name, arguments: parseArguments(r.arguments), rawArguments: r.arguments, kind: r.kind }))
    return reply.type('application/json').send(json({ toolCalls }))
  })

  app.post('/v1/sessions/:id/tool-results', { ...withSession, schema: { summary: 'Answer a client tool call', params: S.SessionParams, body: S.ToolResultBody, response: { 202: S.EmptyBody, ...err } } }, async (req, reply) => {
    const body = req.body as { callId: string; content: unknown; isError?: boolean }
    let content
    try {
      content = normalizeContent(body.content)
    } catch (e) {
      if (e instanceof InputError) throw badRequest(e.message, [{ path: `body.${e.path}`, message: e.message }])
      throw e
    }
    await deps.intake.answer(sess(req), body.callId, 'client', { content, isError: body.isError === true })
    return reply.code(202).type('application/json').send('{}')
  })

  app.post('/v1/sessions/:id/approvals/:callId', { ...withSession, schema: { summary: 'Allow or deny a call waiting for approval', body: S.ApprovalBody, response: { 202: S.EmptyBody, ...err } } }, async (req, reply) => {
    const body = req.body as { decision: 'allow' | 'deny'; reason?: string }
    await deps.intake.answer(sess(req), (req.params as { callId: string }).callId, 'approval', body)
    return reply.code(202).type('application/json').send('{}')
  })
}
