// The tenant's webhooks (API.md §14): create, list, read, delete, their deliveries and a ping.

import type { FastifyInstance } from 'fastify'
import { ApiError } from '../errors.js'
import type { HttpDeps } from './deps.js'
import * as S from './schemas.js'

const err = { 400: S.ErrorBody, 401: S.ErrorBody, 403: S.ErrorBody, 404: S.ErrorBody }
/** API.md §18: the tenant's own business, for its keys; a token is 403 */
const keyOnly = { keyOnly: true } as const

export async function webhookRoutes(app: FastifyInstance, deps: HttpDeps): Promise<void> {
  const hooks = () => {
    if (!deps.webhooks) throw new ApiError('internal', 'webhooks are not configured in this process')
    return deps.webhooks
  }
  const tenant = (req: { principal?: { tenantId: string } }) => req.principal!.tenantId
  const idOf = (req: { params: unknown }) => (req.params as { id: string }).id

  app.post('/webhooks', { config: keyOnly, schema: { operationId: 'createWebhook', summary: 'Subscribe a URL to signed notifications; the secret is shown once', body: S.CreateWebhookBody, response: { 201: S.CreatedWebhook, ...err } } }, async (req, reply) => {
    const created = await hooks().create(tenant(req), req.body as { url: string; events: string[]; description?: string })
    return reply.code(201).send(created)
  })

  app.get('/webhooks', { config: keyOnly, schema: { operationId: 'listWebhooks', summary: "The tenant's webhooks, newest first", response: { 200: S.WebhookList, 401: S.ErrorBody } } }, async (req) => ({ webhooks: await hooks().list(tenant(req)) }))

  app.get('/webhooks/:id', { config: keyOnly, schema: { operationId: 'getWebhook', summary: 'One webhook (without its secret)', params: S.WebhookParams, response: { 200: S.Webhook, ...err } } }, async (req) => hooks().get(tenant(req), idOf(req)))

  app.delete('/webhooks/:id', { config: keyOnly, schema: { operationId: 'deleteWebhook', summary: 'Delete a webhook; its pending deliveries are dropped', params: S.WebhookParams, response: { ...err } } }, async (req, reply) => {
    await hooks().delete(tenant(req), idOf(req))
    return reply.code(204).send()
  })

  app.get('/webhooks/:id/deliveries', { config: keyOnly, schema: { operationId: 'listWebhookDeliveries', summary: "A webhook's deliveries, newest first", params: S.WebhookParams, querystring: S.DeliveriesQuery, response: { 200: S.DeliveryList, ...err } } }, async (req) => {
    const q = req.query as { limit?: string }
    const limit = S.queryLimit(q.limit, S.DELIVERIES_LIMIT.max, S.DELIVERIES_LIMIT.dflt)
    return { deliveries: await hooks().deliveries(tenant(req), idOf(req), limit) }
  })

  app.post('/webhooks/:id/test', { config: { ...keyOnly, optionalBody: true }, schema: { operationId: 'testWebhook', summary: 'Send a ping delivery', params: S.WebhookParams, body: S.EmptyBody, response: { 202: S.PingAnswer, ...err } } }, async (req, reply) => reply.code(202).send(await hooks().ping(tenant(req), idOf(req))))
}
