// Admin routes (API.md §3), enabled by AGENTD_ADMIN_TOKEN: tenants and their keys.

import type { FastifyInstance } from 'fastify'
import { ApiError } from '../errors.js'
import { tenants } from '../store/index.js'
import type { HttpDeps } from './deps.js'
import * as S from './schemas.js'

const err = { 400: S.ErrorBody, 401: S.ErrorBody, 404: S.ErrorBody }
const UUID = /^[0-9a-f-]{36}$/

export async function adminRoutes(app: FastifyInstance, deps: HttpDeps): Promise<void> {
  const admin = { auth: 'admin' } as const
  app.post('/admin/tenants', { config: admin, schema: { operationId: 'createTenant', summary: 'Create a tenant and its first key', body: S.TenantBody, response: { 201: S.TenantAnswer, ...err } } }, async (req, reply) => {
    const { name } = req.body as { name: string }
    const r = await tenants.createTenant(deps.db, name)
    return reply.code(201).send({ tenant: r.tenant, apiKey: r.apiKey })
  })
  app.post('/admin/tenants/:tenantId/keys', { config: { ...admin, optionalBody: true }, schema: { operationId: 'createKey', summary: 'Add an API key to a tenant', body: S.EmptyBody, response: { 201: S.KeyAnswer, ...err } } }, async (req, reply) => {
    const { tenantId } = req.params as { tenantId: string }
    if (!UUID.test(tenantId) || !(await tenants.tenantExists(deps.db, tenantId))) throw new ApiError('not-found', `tenant ${tenantId} not found`)
    const k = await tenants.createKey(deps.db, tenantId)
    return reply.code(201).send(k)
  })
  app.delete('/admin/keys/:keyId', { config: admin, schema: { operationId: 'revokeKey', summary: 'Revoke an API key', response: { 204: { type: 'null' }, ...err } } }, async (req, reply) => {
    const { keyId } = req.params as { keyId: string }
    if (!UUID.test(keyId) || !(await tenants.revokeKey(deps.db, keyId))) throw new ApiError('not-found', `key ${keyId} not found`)
    return reply.code(204).send()
  })
}
