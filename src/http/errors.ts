// The one error path of API.md §10: everything a route throws, fastify's own errors (content-type
// parser, router, validation, 404) and Node's HTTP parser errors leave as
// {"error": {"code", "message", "details"?}} with the status §10 gives the code.

import http from 'node:http'
import type { Socket } from 'node:net'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { ApiError, badRequest, mustBeOneOf, type ErrorCode, type ErrorDetail } from '../errors.js'
import { InputError } from '../agent/index.js'
import { DbUnavailableError } from '../store/index.js'

/** One failure of ajv's (with `verbose`, so it carries the failing schema and its parent). */
interface AjvError {
  instancePath: string
  schemaPath: string
  keyword: string
  params: Record<string, unknown>
  message?: string
  schema?: unknown
  parentSchema?: Record<string, unknown>
}

type Schema = Record<string, unknown>

/**
 * A schema violation as API.md §10 `details`, one per field, saying what the field would have to be:
 * the allowed values of a fixed set, the bounds of a number, a length or a list, the type. A union's
 * branches are judged together: when the value has the type of one branch, that branch's complaints
 * are the answer; otherwise the union names its alternatives.
 */
export function schemaDetails(errors: AjvError[], context: string, root: unknown): ErrorDetail[] {
  const out: ErrorDetail[] = []
  for (const { pointer, message } of explain(errors)) {
    const path = fieldPath(context, pointer, root)
    if (!out.some((d) => d.path === path && d.message === message)) out.push({ path, message })
  }
  return out
}

const isUnion = (e: AjvError) => e.keyword === 'anyOf' || e.keyword === 'oneOf'
const inside = (e: AjvError, union: AjvError) => e !== union && e.schemaPath.startsWith(`${union.schemaPath}/`)
/** errors that say the value is of another kind than the branch wants */
const wrongKind = (e: AjvError, at: string) => e.instancePath === at && (e.keyword === 'type' || e.keyword === 'const' || e.keyword === 'enum')

function explain(errors: AjvError[]): Array<{ pointer: string; message: string }> {
  const out: Array<{ pointer: string; message: string }> = []
  for (const e of errors) {
    if (errors.some((u) => isUnion(u) && inside(e, u))) continue
    if (!isUnion(e)) {
      out.push(describe(e))
      continue
    }
    const branches = new Map<string, AjvError[]>()
    for (const x of errors.filter((x) => inside(x, e))) {
      const branch = x.schemaPath.slice(e.schemaPath.length + 1).split('/')[0]
      branches.set(branch, [...(branches.get(branch) ?? []), x])
    }
    const fitting = [...branches.values()].find((b) => !b.some((x) => wrongKind(x, e.instancePath)))
    out.push(...(fitting ? explain(fitting) : [{ pointer: e.instancePath, message: `must be ${alternatives(e.schema)}` }]))
  }
  return out
}

function describe(e: AjvError): { pointer: string; message: string } {
  const p = e.params ?? {}
  const parent = e.parentSchema ?? {}
  const at = e.instancePath
  switch (e.keyword) {
    case 'additionalProperties':
      return { pointer: `${at}/${String(p.additionalProperty)}`, message: 'unknown field' }
    case 'required':
      return { pointer: `${at}/${String(p.missingProperty)}`, message: 'is required' }
    case 'type':
      return { pointer: at, message: `must be ${[p.type].flat().map((t) => KIND[String(t)] ?? String(t)).join(' or ')}` }
    case 'const':
      return { pointer: at, message: `must be ${JSON.stringify(p.allowedValue)}` }
    case 'enum':
      return { pointer: at, message: mustBeOneOf(p.allowedValues as unknown[]) }
    case 'minimum':
    case 'maximum':
    case 'exclusiveMinimum':
    case 'exclusiveMaximum':
      return { pointer: at, message: `must be ${KIND[String(parent.type)] ?? 'a number'} ${bounds(parent)}` }
    case 'minLength':
    case 'maxLength':
      return { pointer: at, message: sized(parent.minLength, parent.maxLength, 'characters long') }
    case 'minItems':
    case 'maxItems':
      return { pointer: at, message: sized(parent.minItems, parent.maxItems, 'items', 'have') }
    case 'minProperties':
    case 'maxProperties':
      return { pointer: at, message: sized(parent.minProperties, parent.maxProperties, 'fields', 'have') }
    case 'pattern':
      // a pattern's schema says in its description what it wants (a test holds every route to it)
      return { pointer: at, message: typeof parent.description === 'string' ? `must be ${parent.description}` : `must match the pattern ${String(p.pattern)}` }
  }
  return { pointer: at, message: e.message ?? 'is invalid' }
}

const KIND: Record<string, string> = { string: 'a string', integer: 'an integer', number: 'a number', boolean: 'a boolean', object: 'an object', array: 'an array', null: 'null' }

/** `from 1 to 100`, `greater than 0 and at most 5`, `of at least 0` */
function bounds(s: Schema): string {
  const lo = typeof s.minimum === 'number' ? { n: s.minimum, words: 'at least' } : typeof s.exclusiveMinimum === 'number' ? { n: s.exclusiveMinimum, words: 'greater than' } : undefined
  const hi = typeof s.maximum === 'number' ? { n: s.maximum, words: 'at most' } : typeof s.exclusiveMaximum === 'number' ? { n: s.exclusiveMaximum, words: 'less than' } : undefined
  if (lo?.words === 'at least' && hi?.words === 'at most') return `from ${lo.n} to ${hi.n}`
  const one = lo && hi ? undefined : (lo ?? hi)
  if (one) return `${one.words.startsWith('at ') ? 'of ' : ''}${one.words} ${one.n}`
  return [lo, hi].filter((b) => b !== undefined).map((b) => `${b.words} ${b.n}`).join(' and ')
}

/** `must be 1 to 200 characters long`, `must have at most 20 items`, `must not be empty` */
function sized(min: unknown, max: unknown, unit: string, verb = 'be'): string {
  const lo = typeof min === 'number' && min > 0 ? min : undefined
  const hi = typeof max === 'number' ? max : undefined
  if (lo !== undefined && hi !== undefined) return `must ${verb} ${lo} to ${hi} ${unit}`
  if (hi !== undefined) return `must ${verb} at most ${hi} ${unit}`
  if (lo === 1) return 'must not be empty'
  return `must ${verb} at least ${lo} ${unit}`
}

/** What a union accepts: `one of "day", "model", "session"`, `a string or an array`, `"x" or null` */
function alternatives(branches: unknown): string {
  const list = Array.isArray(branches) ? (branches as Schema[]) : []
  if (list.length && list.every((b) => 'const' in b)) return mustBeOneOf(list.map((b) => b.const)).slice('must be '.length)
  const words = list.map((b) => ('const' in b ? JSON.stringify(b.const) : KIND[String(b.type)] ?? 'another value'))
  return words.length > 1 ? `${words.slice(0, -1).join(', ')} or ${words.at(-1)}` : (words[0] ?? 'another value')
}

/** A JSON Pointer into the request part, as API.md §10 paths name fields: `body.tools[0].name`. */
function fieldPath(context: string, pointer: string, root: unknown): string {
  let path = context
  let at = root
  for (const raw of pointer.split('/').slice(1)) {
    const key = raw.replace(/~1/g, '/').replace(/~0/g, '~')
    path += Array.isArray(at) ? `[${key}]` : `.${key}`
    at = at !== null && typeof at === 'object' ? (at as Record<string, unknown>)[key] : undefined
  }
  return path
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

/** The part of a request a schema checked, as fastify names it in validationContext. */
function partOf(req: FastifyRequest | undefined, context: string): unknown {
  if (!req) return undefined
  return context === 'querystring' ? req.query : context === 'params' ? req.params : context === 'headers' ? req.headers : req.body
}

/** Maps anything thrown while answering a request to API.md §10; never leaks stacks or secrets. */
export function toApiError(err: unknown, req?: FastifyRequest): ApiError {
  if (err instanceof ApiError) return err
  if (err instanceof InputError) return badRequest(err.message, [{ path: err.path ? `body.${err.path}` : 'body', message: err.message }])
  if (err instanceof DbUnavailableError) return new ApiError('unavailable', 'the database is unavailable', undefined, retryLater)
  const e = err as Partial<FastifyError> & { validation?: AjvError[] }
  if (e.validation) {
    const context = e.validationContext ?? 'body'
    const details = schemaDetails(e.validation, context, partOf(req, context))
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
  const e = toApiError(err, req)
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

/** How long a connection the server closes keeps reading (and dropping) what the client still sends. */
const LINGER_MS = 2000
/** sockets closing in stages, and those whose parser error is being answered */
const staged = new WeakSet<Socket>()
const answered = new WeakSet<Socket>()

/**
 * RFC 9112 §9.6's close in stages: the last answer and a FIN now, then what the client still sends (the
 * rest of a body it was uploading) is read and dropped until it closes too, or LINGER_MS pass. A socket
 * destroyed with the client's bytes unread makes the kernel reset the connection, and the reset can
 * erase the answer before the client reads it. `last` is written before the FIN.
 */
export function closeInStages(socket: Socket, last?: string): void {
  if (socket.destroyed || staged.has(socket)) return
  staged.add(socket)
  socket.on('error', () => {})
  if (socket.writable && last !== undefined) socket.end(last)
  else if (socket.writable) socket.end()
  socket.resume()
  const timer = setTimeout(() => socket.destroy(), LINGER_MS)
  timer.unref()
  socket.once('end', () => socket.destroy())
  socket.once('close', () => clearTimeout(timer))
}

/**
 * The clientError handler: a §10 answer, then a close in stages (Node and fastify would destroy the
 * socket at once, resetting a client still sending).
 */
export function handleClientError(err: NodeJS.ErrnoException, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed || answered.has(socket) || staged.has(socket)) return
  answered.add(socket)
  const answer = () => {
    const e = clientErrorOf(err)
    const body = JSON.stringify(e.toJSON())
    closeInStages(socket, `HTTP/1.1 ${e.status} ${http.STATUS_CODES[e.status]}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`)
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
    inFlight.once('finish', () => closeInStages(socket))
    return
  }
  answer()
}

/** The errors plugin: the error and not-found handlers of the scope that registers it (the root). */
export const errorsPlugin = fp(async (app: FastifyInstance) => {
  app.setErrorHandler(handleError)
  app.setNotFoundHandler(notFound)
}, { name: 'agentd-errors' })
