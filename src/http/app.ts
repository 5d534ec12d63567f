// The fastify app: strict JSON bodies, API.md §10 errors, bearer authentication, rate limits, and the
// routes of API.md §3–§8.

import Fastify, { LogController, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import websocket from '@fastify/websocket'
import type { Logger } from 'pino'
import { ApiError, type ErrorDetail } from '../errors.js'
import { DbUnavailableError, getSession, tenants, type Db, type Principal, type SessionRow } from '../store/index.js'
import type { Config } from '../config.js'
import type { Intake, Sessions } from '../agent/index.js'
import type { Feeds, LiveFrame } from '../bus/index.js'
import type { Metrics } from '../metrics.js'
import { registerSessionRoutes } from './routes.js'
import { registerStreamRoutes } from './stream.js'
import { registerAdminRoutes, registerOpsRoutes } from './ops.js'
import { collectRoutes, type RouteDoc } from './openapi.js'

/** What HTTP needs from the rest of the server; nothing below http/ knows about HTTP. */
export interface HttpDeps {
  config: Config
  db: Db
  log: Logger
  intake: Intake
  sessions: Sessions
  feeds: Feeds
  metrics: Metrics
  /** the in-flight attempt's snapshot frame for late subscribers (API.md §6), if any */
  snapshot(sessionKey: string): LiveFrame | undefined
  /** the driver side: manual compaction, deletion, fork checks */
  driver: DriverControl
  ready(): Promise<boolean>
}

export interface DriverControl {
  /** POST …/compact: runs compaction as maintenance while idle (SPEC §12.7) */
  compact(row: SessionRow): Promise<{ compacted: boolean }>
  /** DELETE …: stops whatever runs for the session in any process */
  deleted(row: SessionRow): Promise<void>
}

declare module 'fastify' {
  interface FastifySchema {
    /** one line for openapi.json */
    summary?: string
  }
  interface FastifyRequest {
    principal?: Principal
    session?: SessionRow
  }
}

function ajvDetails(validation: Array<{ instancePath?: string; message?: string; params?: Record<string, unknown>; keyword?: string }>, context: string): ErrorDetail[] {
  return validation.map((v) => {
    let path = `${context}${(v.instancePath ?? '').replace(/\//g, '.')}`
    if (v.keyword === 'additionalProperties' && v.params?.additionalProperty) return { path: `${path}.${String(v.params.additionalProperty)}`, message: 'unknown field' }
    if (v.keyword === 'required' && v.params?.missingProperty) return { path: `${path}.${String(v.params.missingProperty)}`, message: 'is required' }
    return { path, message: v.message ?? 'is invalid' }
  })
}

export function errorReply(reply: FastifyReply, e: ApiError): FastifyReply {
  if (e.headers) for (const [k, v] of Object.entries(e.headers)) reply.header(k, v)
  return reply.code(e.status).type('application/json').send(JSON.stringify(e.toJSON()))
}

/** Maps anything thrown in a route to API.md §10; never leaks stacks or secrets. */
export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err
  const e = err as { code?: string; statusCode?: number; validation?: unknown[]; validationContext?: string; message?: string }
  if (e.validation) {
    const details = ajvDetails(e.validation as never, e.validationContext ?? 'body')
    return new ApiError('bad-request', `invalid request: ${details.map((d) => `${d.path} ${d.message}`).join('; ')}`, details)
  }
  switch (e.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new ApiError('unsupported-media-type', 'bodies must be application/json')
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new ApiError('payload-too-large', 'the body is larger than 1 MiB')
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new ApiError('bad-request', 'the body is not valid JSON', [{ path: 'body', message: 'malformed JSON' }])
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new ApiError('bad-request', 'invalid content-length')
  }
  if (err instanceof DbUnavailableError) return new ApiError('unavailable', 'the database is unavailable', undefined, { 'retry-after': '2' })
  if (e.statusCode === 413) return new ApiError('payload-too-large', 'the body is larger than 1 MiB')
  if (e.statusCode === 415) return new ApiError('unsupported-media-type', 'bodies must be application/json')
  if (e.statusCode && e.statusCode >= 400 && e.statusCode < 500) return new ApiError('bad-request', e.message ?? 'bad request')
  return new ApiError('internal', 'internal error')
}

/** Per-key token buckets (API.md §1 AGENTD_RATE_LIMIT_PER_MIN); streams are exempt. */
class RateLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>()
  constructor(private readonly perMin: number) {}
  take(key: string): number {
    const now = Date.now()
    const b = this.buckets.get(key) ?? { tokens: this.perMin, at: now }
    b.tokens = Math.min(this.perMin, b.tokens + ((now - b.at) * this.perMin) / 60000)
    b.at = now
    this.buckets.set(key, b)
    if (b.tokens >= 1) {
      b.tokens -= 1
      return 0
    }
    if (this.buckets.size > 100000) this.buckets.clear()
    return Math.ceil(((1 - b.tokens) * 60000) / this.perMin / 1000)
  }
}

export function bearer(req: FastifyRequest, allowQueryToken: boolean): string | undefined {
  const h = req.headers.authorization
  if (typeof h === 'string') {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(h)
    return m ? m[1] : undefined
  }
  if (allowQueryToken) {
    const q = (req.query as Record<string, unknown> | undefined)?.access_token
    if (typeof q === 'string' && q) return q
  }
  return undefined
}

export async function buildHttp(deps: HttpDeps): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: deps.log,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: deps.config.bodyLimit,
    forceCloseConnections: true,
    return503OnClosing: true,
    ajv: { customOptions: { removeAdditional: false, coerceTypes: false, allErrors: true, useDefaults: false } },
    routerOptions: { ignoreTrailingSlash: true },
  }) as unknown as FastifyInstance
  const routes: RouteDoc[] = []
  collectRoutes(app, routes)

  // Only JSON bodies; fastify's text/plain parser would accept what API.md calls 415.
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_req, body, done) => {
    const text = body as string
    if (text.length === 0) return done(null, undefined)
    try {
      done(null, JSON.parse(text))
    } catch {
      done(Object.assign(new Error('malformed JSON'), { code: 'FST_ERR_CTP_INVALID_JSON_BODY', statusCode: 400 }), undefined)
    }
  })

  app.setErrorHandler((err, req, reply) => {
    const e = toApiError(err)
    if (e.code === 'internal') req.log.error({ err }, 'internal error')
    else if (e.code === 'unavailable') req.log.warn({ err: (err as Error).message }, 'database unavailable')
    return errorReply(reply, e)
  })
  app.setNotFoundHandler((req, reply) => errorReply(reply, new ApiError('not-found', `no route ${req.method} ${req.url.split('?')[0]}`)))

  await app.register(websocket, { options: { maxPayload: deps.config.bodyLimit } })

  const limiter = new RateLimiter(deps.config.rateLimitPerMin)

  // API.md §3: tenant keys on /v1 (admin routes excepted); ?access_token on stream and ws
  app.addHook('onRequest', async (req) => {
    const started = process.hrtime.bigint()
    ;(req as unknown as { started: bigint }).started = started
    const url = req.url
    if (!url.startsWith('/v1/') || url.startsWith('/v1/admin/')) return
    const isStream = /^\/v1\/sessions\/[^/]+\/(stream|ws)(\?|$)/.test(url)
    const token = bearer(req, isStream)
    if (!token) throw new ApiError('unauthorized', 'an API key is required: Authorization: Bearer <key>')
    const p = await tenants.authenticate(deps.db, token)
    if (!p) throw new ApiError('unauthorized', 'unknown or revoked API key')
    req.principal = p
    if (!isStream) {
      const wait = limiter.take(p.keyId)
      if (wait) throw new ApiError('rate-limited', 'too many requests for this API key', undefined, { 'retry-after': String(wait) })
    }
  })
  app.addHook('onResponse', async (req, reply) => {
    const started = (req as unknown as { started?: bigint }).started
    deps.metrics.http(req.method, req.routeOptions.url ?? 'unmatched', reply.statusCode, started ? Number(process.hrtime.bigint() - started) / 1e9 : 0)
  })

  /** Loads :id of the caller's tenant into req.session, else 404 (another tenant's looks missing). */
  const loadSession = async (req: FastifyRequest) => {
    const id = (req.params as { id: string }).id
    const row = await getSession(deps.db, req.principal!.tenantId, id)
    if (!row) throw new ApiError('session-not-found', `session ${id} not found`)
    req.session = row
  }

  registerOpsRoutes(app, deps, routes)
  // a worker process (AGENTD_ROLE=worker) drives sessions and answers only the operations routes
  if (deps.config.role !== 'worker') {
    registerAdminRoutes(app, deps)
    registerSessionRoutes(app, deps, loadSession)
    registerStreamRoutes(app, deps, loadSession)
  }
  return app
}
