// The one error path of API.md §10: everything a route throws, fastify's own errors (content-type
// parser, router, validation, 404) and Node's HTTP parser errors leave as
// {"error": {"code", "message", "details"?}} with the status §10 gives the code.

import http from 'node:http'
import type { Socket } from 'node:net'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { ApiError, badRequest, type ErrorCode, type ErrorDetail } from '../errors.js'
import { InputError } from '../agent/index.js'
import { DbUnavailableError } from '../store/index.js'

interface AjvError {
  instancePath?: string
  message?: string
  params?: Record<string, unknown>
  keyword?: string
}

function ajvDetails(validation: AjvError[], context: string): ErrorDetail[] {
  return validation.map((v) => {
    const path = `${context}${(v.instancePath ?? '').replace(/\//g, '.')}`
    if (v.keyword === 'additionalProperties' && v.params?.additionalProperty) return { path: `${path}.${String(v.params.additionalProperty)}`, message: 'unknown field' }
    if (v.keyword === 'required' && v.params?.missingProperty) return { path: `${path}.${String(v.params.missingProperty)}`, message: 'is required' }
    return { path, message: v.message ?? 'is invalid' }
  })
}

/** fastify's and Node's statuses without a more precise mapping, as the §10 code of that status */
const CODE_OF_STATUS: Record<number, ErrorCode> = {
  401: 'unauthorized',
  404: 'not-found',
  405: 'not-found',
  413: 'payload-too-large',
  415: 'unsupported-media-type',
  429: 'rate-limited',
  503: 'unavailable',
}

const retryLater = { 'retry-after': '2' }

/** Maps anything thrown while answering a request to API.md §10; never leaks stacks or secrets. */
export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err
  if (err instanceof InputError) return badRequest(err.message, [{ path: err.path ? `body.${err.path}` : 'body', message: err.message }])
  if (err instanceof DbUnavailableError) return new ApiError('unavailable', 'the database is unavailable', undefined, retryLater)
  const e = err as Partial<FastifyError> & { validation?: AjvError[] }
  if (e.validation) {
    const details = ajvDetails(e.validation, e.validationContext ?? 'body')
    return new ApiError('bad-request', `invalid request: ${details.map((d) => `${d.path} ${d.message}`).join('; ')}`, details)
  }
  switch (e.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
    case 'FST_ERR_CTP_EMPTY_TYPE':
    case 'FST_ERR_CTP_INVALID_TYPE':
      return new ApiError('unsupported-media-type', 'bodies must be application/json')
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new ApiError('payload-too-large', 'the body is larger than 1 MiB')
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return badRequest('the body is not valid JSON', [{ path: 'body', message: 'malformed JSON' }])
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return badRequest('the body does not match its content-length', [{ path: 'headers.content-length', message: 'does not match the body' }])
    case 'FST_ERR_BAD_URL':
      return badRequest('the URL is not valid: a malformed percent-encoding', [{ path: 'url', message: 'malformed percent-encoding' }])
    case 'FST_ERR_MAX_PARAM_LENGTH':
      return badRequest('a path parameter is too long', [{ path: 'params', message: 'too long' }])
  }
  const status = typeof e.statusCode === 'number' ? e.statusCode : 500
  if (CODE_OF_STATUS[status]) return new ApiError(CODE_OF_STATUS[status], e.message || http.STATUS_CODES[status] || 'error', undefined, status === 503 ? retryLater : undefined)
  if (status >= 400 && status < 500) return badRequest(e.message || 'bad request')
  return new ApiError('internal', 'internal error')
}

export function errorReply(reply: FastifyReply, e: ApiError): FastifyReply {
  if (e.headers) for (const [k, v] of Object.entries(e.headers)) reply.header(k, v)
  return reply.code(e.status).type('application/json; charset=utf-8').send(JSON.stringify(e.toJSON()))
}

/**
 * A body the client declared this long is still read (and dropped) after an early answer, so the client
 * finishes sending and reads the answer on a connection that stays usable; a longer one closes it.
 */
const DISCARD_LIMIT = 64 * 1024 * 1024

/**
 * The error handler of the root; every scope inherits it. A request whose key was not read yet
 * (req.deferredKey, auth.ts) has it read first: an unknown or revoked key answers 401 whatever else
 * went wrong, as when the auth hook reads it.
 */
export function handleError(err: unknown, req: FastifyRequest, reply: FastifyReply): FastifyReply | Promise<FastifyReply> {
  const deferred = req.deferredKey
  if (deferred) {
    req.deferredKey = undefined
    return deferred.confirm().then(
      () => answerError(err, req, reply),
      (authErr: unknown) => answerError(authErr, req, reply),
    )
  }
  return answerError(err, req, reply)
}

function answerError(err: unknown, req: FastifyRequest, reply: FastifyReply): FastifyReply {
  const e = toApiError(err)
  if (e.code === 'internal') req.log.error({ err }, 'internal error')
  else if (e.code === 'unavailable') req.log.warn({ err: (err as Error)?.message }, 'database unavailable')
  // fastify closes the connection after any body-parser error, and Node then destroys the socket while
  // the client may still be sending: the client sees ECONNRESET instead of this answer. Node frames
  // the rest of the body by its length and skips it, so the connection can stay.
  if ((err as FastifyError)?.code?.startsWith('FST_ERR_CTP_') && reply.getHeader('connection') === 'close' && !req.raw.complete) {
    const declared = Number(req.headers['content-length'] ?? 0)
    if (!(declared > DISCARD_LIMIT)) reply.removeHeader('connection')
  }
  return errorReply(reply, e)
}

/** 404 for a path or method no route has (API.md §10: unknown routes are not-found). */
export function notFound(req: FastifyRequest, reply: FastifyReply): FastifyReply {
  return errorReply(reply, new ApiError('not-found', `no route ${req.method} ${req.url.split('?')[0]}`))
}

/** fastify's router errors (a malformed percent-encoding, an over-long parameter) before any route runs. */
export function frameworkErrors(err: FastifyError, req: FastifyRequest, reply: FastifyReply): void {
  void handleError(err, req, reply)
}

/** Node's HTTP parser errors, timeouts and oversized headers, as §10 answers over the raw socket. */
function clientErrorOf(err: NodeJS.ErrnoException): ApiError {
  if (err.code === 'HPE_HEADER_OVERFLOW') return badRequest('the request headers are too large', [{ path: 'headers', message: 'too large' }])
  if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') return badRequest('the request was not received in time')
  return badRequest('the request is not valid HTTP/1.1', [{ path: 'request', message: 'malformed' }])
}

/** How long a connection closed after a parser error keeps reading (and dropping) what the client still sends. */
const LINGER_MS = 2000
const lingering = new WeakSet<Socket>()

/**
 * The clientError handler: a §10 answer, then a lingering close. Destroying the socket at once (as
 * Node and fastify do) while the client's bytes are still unread makes the kernel reset the
 * connection, and the client may lose the answer; ending it and reading on lets the answer arrive.
 */
export function handleClientError(err: NodeJS.ErrnoException, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed || lingering.has(socket)) return
  lingering.add(socket)
  socket.on('error', () => {})
  const answer = () => {
    if (socket.writable) {
      const e = clientErrorOf(err)
      const body = JSON.stringify(e.toJSON())
      socket.end(`HTTP/1.1 ${e.status} ${http.STATUS_CODES[e.status]}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`)
    }
    socket.resume()
    const timer = setTimeout(() => socket.destroy(), LINGER_MS)
    timer.unref()
    socket.once('end', () => socket.destroy())
    socket.once('close', () => clearTimeout(timer))
  }
  // a request parsed before the bad bytes is answered first (HTTP/1.1 pipelining keeps the order)
  const inFlight = (socket as unknown as { _httpMessage?: http.ServerResponse })._httpMessage
  if (inFlight && !inFlight.writableFinished && inFlight.req?.complete !== false) return void inFlight.once('finish', answer)
  // …unless the error is that request's own: its body timed out, is malformed, or ended early (the
  // client went away mid-body). Its route would wait for the rest forever, so it is answered here
  // (unless it began its own answer, or nobody is left to read one) and the socket closed; the route
  // then sees its request aborted.
  if (inFlight && !inFlight.writableFinished) {
    if (inFlight.headersSent || err.code === 'HPE_INVALID_EOF_STATE') return void socket.destroy()
    const e = clientErrorOf(err)
    const body = JSON.stringify(e.toJSON())
    inFlight.shouldKeepAlive = false
    inFlight.writeHead(e.status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body), connection: 'close' })
    inFlight.end(body)
    socket.resume()
    setTimeout(() => socket.destroy(), LINGER_MS).unref()
    return
  }
  answer()
}

/** The errors plugin: the error and not-found handlers of the scope that registers it (the root). */
export const errorsPlugin = fp(async (app: FastifyInstance) => {
  app.setErrorHandler(handleError)
  app.setNotFoundHandler(notFound)
}, { name: 'agentd-errors' })
