// What a request may carry (API.md §10), checked before any route runs: JSON bodies only, read as
// strict UTF-8; no body on a route that takes none; no body at all reads as {} where every field is
// optional; and every string of the request that may reach the database (path parameters, query
// values, body strings and object keys at any depth) is text PostgreSQL stores exactly.

import type { FastifyInstance, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { badRequest } from '../errors.js'
import { assertStorableText, JsonValueError } from '../session/index.js'
import { notFound } from './errors.js'

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true })

const malformed = (message: string, detail: string) => badRequest(message, [{ path: 'body', message: detail }])

/** One check for every part of a request: `part` names it in the details (`params.id`, `body.metadata.x`). */
function refuseUnstorable(value: unknown, part: string): void {
  try {
    assertStorableText(value, part)
  } catch (e) {
    if (e instanceof JsonValueError) throw badRequest(`${e.path}: ${e.why}, which PostgreSQL text cannot hold`, [{ path: e.path, message: e.why }])
    throw e
  }
}

/** A body is on its way when its length is declared non-zero or it is chunked (RFC 9112 §6.3). */
const hasBody = (req: FastifyRequest) => req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0

export const inputPlugin = fp(async (app: FastifyInstance) => {
  // Only JSON bodies; fastify's text/plain parser would accept what API.md calls 415.
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_req, body, done) => {
    const bytes = body as Buffer
    if (bytes.length === 0) return done(null, undefined)
    let text: string
    try {
      text = utf8.decode(bytes)
    } catch {
      return done(malformed('the body is not valid UTF-8', 'not UTF-8'), undefined)
    }
    try {
      done(null, JSON.parse(text))
    } catch {
      done(malformed('the body is not valid JSON', 'malformed JSON'), undefined)
    }
  })

  app.addHook('onRequest', async (req, reply) => {
    // an unknown route is 404 whatever its body: answer before fastify's 404 route parses one
    if (req.is404) return notFound(req, reply)
    refuseUnstorable(req.params, 'params')
    refuseUnstorable(req.query, 'querystring')
    if (!req.routeOptions.schema?.body && hasBody(req)) throw badRequest('this route takes no body', [{ path: 'body', message: 'this route takes no body' }])
  })
  app.addHook('preValidation', async (req) => {
    if (req.body === undefined || req.body === null) {
      if (req.routeOptions.config.optionalBody) req.body = {}
      return
    }
    refuseUnstorable(req.body, 'body')
  })
}, { name: 'agentd-input' })
