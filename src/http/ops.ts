// Operations (API.md §8) and admin routes (API.md §3).

import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { ApiError } from '../errors.js'
import { tenants } from '../store/index.js'
import { bearer, type HttpDeps } from './app.js'
import { emptyBodyIsObject } from './routes.js'
import { openapiDocument, type RouteDoc } from './openapi.js'
import * as S from './schemas.js'

const HERE = path.dirname(fileURLToPath(import.meta.url))
export const WEB_DIR = path.resolve(HERE, '../../web')
const VERSION = (() => {
  try {
    return JSON.parse(fs.readFileSync(path.resolve(HERE, '../../package.json'), 'utf8')).version as string
  } catch {
    return '0.0.0'
  }
})()

const STATIC_TYPES: Record<string, string> = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8', '.svg': 'image/svg+xml' }

export function registerOpsRoutes(app: FastifyInstance, deps: HttpDeps, routes: RouteDoc[]): void {
  app.get('/healthz', { schema: { summary: 'Liveness' } }, async () => ({ ok: true }))
  app.get('/readyz', { schema: { summary: 'Readiness: the database answers and migrations are current', response: { 200: { type: 'object', properties: { ok: { type: 'boolean' } } }, 503: S.ErrorBody } } }, async (_req, reply) => {
    let ok = false
    try {
      ok = await deps.ready()
    } catch {
      ok = false
    }
    if (!ok) reply.header('retry-after', '2')
    return reply.code(ok ? 200 : 503).send(ok ? { ok: true } : { error: { code: 'unavailable', message: 'not ready' } })
  })
  app.get('/metrics', { schema: { summary: 'Prometheus metrics' } }, async (_req, reply) => reply.type('text/plain; version=0.0.4; charset=utf-8').send(deps.metrics.render()))
  let doc: string | undefined
  app.get('/openapi.json', { schema: { summary: 'This document' } }, async (_req, reply) => {
    doc ??= JSON.stringify(openapiDocument(routes, VERSION))
    return reply.type('application/json').send(doc)
  })
  // the web console: static files of web/
  const serve = async (file: string, reply: import('fastify').FastifyReply) => {
    const full = path.resolve(WEB_DIR, file)
    if (!full.startsWith(WEB_DIR + path.sep) || !fs.existsSync(full)) throw new ApiError('not-found', `no file ${file}`)
    return reply.type(STATIC_TYPES[path.extname(full)] ?? 'application/octet-stream').header('cache-control', 'no-cache').send(fs.readFileSync(full))
  }
  app.get('/', { schema: { summary: 'The web console' } }, async (_req, reply) => serve('index.html', reply))
  app.get('/console/:file', { schema: { summary: 'Console assets' } }, async (req, reply) => serve((req.params as { file: string }).file, reply))
}

/** Constant-time comparison of the admin token. */
function isAdmin(req: FastifyRequest, token: string | undefined): boolean {
  const given = bearer(req, false)
  if (!token || !given) return false
  const a = crypto.createHash('sha256').update(given).digest()
  const b = crypto.createHash('sha256').update(token).digest()
  return crypto.timingSafeEqual(a, b)
}

export function registerAdminRoutes(app: FastifyInstance, deps: HttpDeps): void {
  const adminOnly = {
    onRequest: async (req: FastifyRequest) => {
      if (!deps.config.adminToken) throw new ApiError('not-found', 'admin routes are disabled (AGENTD_ADMIN_TOKEN is not set)')
      if (!isAdmin(req, deps.config.adminToken)) throw new ApiError('unauthorized', 'the admin token is required')
    },
  }
  const err = { 400: S.ErrorBody, 401: S.ErrorBody, 404: S.ErrorBody }
  app.post('/v1/admin/tenants', { ...adminOnly, schema: { summary: 'Create a tenant and its first key', body: S.TenantBody, response: { 201: S.TenantAnswer, ...err } } }, async (req, reply) => {
    const { name } = req.body as { name: string }
    const r = await tenants.createTenant(deps.db, name)
    return reply.code(201).send({ tenant: r.tenant, apiKey: r.apiKey })
  })
  app.post('/v1/admin/tenants/:tenantId/keys', { ...adminOnly, preValidation: emptyBodyIsObject, schema: { summary: 'Add an API key to a tenant', body: S.EmptyBody, response: { 201: S.KeyAnswer, ...err } } }, async (req, reply) => {
    const { tenantId } = req.params as { tenantId: string }
    if (!/^[0-9a-f-]{36}$/.test(tenantId) || !(await tenants.tenantExists(deps.db, tenantId))) throw new ApiError('not-found', `tenant ${tenantId} not found`)
    const k = await tenants.createKey(deps.db, tenantId)
    return reply.code(201).send(k)
  })
  app.delete('/v1/admin/keys/:keyId', { ...adminOnly, schema: { summary: 'Revoke an API key', response: { 204: { type: 'null' }, ...err } } }, async (req, reply) => {
    const { keyId } = req.params as { keyId: string }
    if (!/^[0-9a-f-]{36}$/.test(keyId) || !(await tenants.revokeKey(deps.db, keyId))) throw new ApiError('not-found', `key ${keyId} not found`)
    return reply.code(204).send()
  })
}
