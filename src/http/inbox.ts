// Input (API.md §5): followup, steer and inject, the inbox, withdrawals and cancel.

import type { FastifyInstance } from 'fastify'
import { badRequest } from '../errors.js'
import { bodyHash, idempotencyMessageId, toUserMessage, type DeliveryRoute } from '../agent/index.js'
import { readInbox } from '../store/index.js'
import type { HttpDeps } from './deps.js'
import { deliverInput } from './deliver.js'
import { sessionOf } from './session.js'
import * as S from './schemas.js'

const err = { 400: S.ErrorBody, 401: S.ErrorBody, 403: S.ErrorBody, 404: S.ErrorBody, 409: S.ErrorBody }
const json = (o: unknown) => JSON.stringify(o)

export async function inboxRoutes(app: FastifyInstance, deps: HttpDeps): Promise<void> {
  for (const route of ['followup', 'steer', 'inject'] as DeliveryRoute[]) {
    app.post(`/sessions/:id/${route}`, { config: { session: true, inbox: true }, schema: { operationId: route, summary: `Deliver a ${route}`, params: S.SessionParams, body: S.DeliveryBody, response: { 202: S.Accepted, ...err } } }, async (req, reply) => {
      const body = req.body as { content: unknown; id?: string }
      const header = req.headers['idempotency-key']
      let id = body.id
      if (header !== undefined) {
        const derived = idempotencyMessageId(String(header))
        if (id !== undefined && id !== derived) throw badRequest('the id and the Idempotency-Key header disagree', [{ path: 'body.id', message: 'disagrees with the Idempotency-Key header' }])
        id = derived
      }
      const message = toUserMessage({ content: body.content }, { kind: 'user' }, id)
      const idempotency = id !== undefined ? { bodyHash: bodyHash(route, { content: body.content }) } : undefined
      const accepted = await deliverInput(deps, req, { route, message, ...(idempotency ? { idempotency } : {}) })
      return reply.code(202).type('application/json').send(json({ messageId: accepted.messageId, seq: accepted.seq }))
    })
  }

  app.get('/sessions/:id/inbox', { config: { session: true }, schema: { operationId: 'getInbox', summary: 'Pending input', params: S.SessionParams, response: { 200: S.InboxObject, ...err } } }, async (req, reply) => {
    const inbox = await readInbox(deps.db, sessionOf(req).key)
    return reply.type('application/json').send(json(inbox))
  })

  app.delete('/sessions/:id/inbox/:messageId', { config: { session: true }, schema: { operationId: 'withdrawInput', summary: 'Withdraw pending input (a cancelling removal)', response: { ...err } } }, async (req, reply) => {
    await deps.intake.removeFromInbox(sessionOf(req), (req.params as { messageId: string }).messageId)
    return reply.code(204).send()
  })

  app.post('/sessions/:id/cancel', { config: { session: true, optionalBody: true }, schema: { operationId: 'cancelTurn', summary: 'Cancel the running turn', params: S.SessionParams, body: S.CancelBody, response: { 202: S.CancelAnswer, ...err } } }, async (req, reply) => {
    const keepInbox = (req.body as { keepInbox?: boolean }).keepInbox === true
    const r = await deps.intake.cancel(sessionOf(req), keepInbox)
    return reply.code(202).type('application/json').send(json(r))
  })
}
