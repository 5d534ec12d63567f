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

/** Deeper JSON than this is refused: the checks that walk a value recurse, and no field needs more. */
export const MAX_JSON_DEPTH = 128

/** The deepest nesting of arrays and objects in JSON text (brackets inside strings do not count). */
function jsonDepth(text: string): number {
  let depth = 0
  let max = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 92) i++ // a backslash escapes the next character
      else if (c === 34) inString = false
    } else if (c === 34) inString = true
    else if (c === 123 || c === 91) max = Math.max(max, ++depth)
    else if (c === 125 || c === 93) depth--
  }
  return max
}

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
    let value: unknown
    try {
      value = JSON.parse(text)
    } catch {
      return done(malformed('the body is not valid JSON', 'malformed JSON'), undefined)
    }
    if (jsonDepth(text) > MAX_JSON_DEPTH) return done(malformed(`the body nests deeper than ${MAX_JSON_DEPTH} levels`, `nested deeper than ${MAX_JSON_DEPTH} levels`), undefined)
    done(null, value)
  })

  app.addHook('onRequest', async (req, reply) => {
    // an unknown route is 404 whatever its body: answer before fastify's 404 route parses one
    if (req.is404) return notFound(req, reply)
    // the query's percent-encodings must be UTF-8, as the path's are (fastify refuses those)
    const q = req.url.indexOf('?')
    if (q >= 0) {
      try {
        decodeURIComponent(req.url.slice(q + 1))
      } catch {
        throw badRequest('the query string is not valid: a malformed percent-encoding', [{ path: 'querystring', message: 'malformed percent-encoding' }])
      }
    }
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
