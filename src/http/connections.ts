// Connections: every request gets a whole answer. While the server closes, new requests are
// `503 unavailable` (API.md §10) and every answer closes its connection, so in-flight requests finish
// and keep-alive connections end instead of being cut; an HTTP/1.1 request without Host is 400.

import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { ApiError, badRequest } from '../errors.js'

export const connectionsPlugin = fp(async (app: FastifyInstance) => {
  let closing = false
  app.addHook('preClose', async () => {
    closing = true
  })
  app.addHook('onRequest', async (req, reply) => {
    if (closing) {
      reply.header('connection', 'close')
      throw new ApiError('unavailable', 'the server is shutting down; try again', undefined, { 'retry-after': '1' })
    }
    // RFC 9112 §3.2 (Node's own refusal of it has no body)
    if (req.raw.httpVersion === '1.1' && req.headers.host === undefined) throw badRequest('an HTTP/1.1 request needs a Host header', [{ path: 'headers.host', message: 'is required' }])
  })
  app.addHook('onSend', async (_req, reply, payload) => {
    if (closing) reply.header('connection', 'close')
    return payload
  })
}, { name: 'agentd-connections' })
