// Admin routes of a tenant's settings: read it with its limits (API.md §15), identity provider and
// origins (§18), and set or remove them.

import type { FastifyInstance } from 'fastify'
import { ApiError } from '../errors.js'
import type { AuthPatch } from '../credentials/index.js'
import type { Limits } from '../tenancy/index.js'
import type { HttpDeps } from './deps.js'
import * as S from './schemas.js'

const err = { 400: S.ErrorBody, 401: S.ErrorBody, 404: S.ErrorBody }
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
const notFound = (id: string) => new ApiError('not-found', `tenant ${id} not found`)

export async function limitRoutes(app: FastifyInstance, deps: HttpDeps): Promise<void> {
  const admin = { auth: 'admin' } as const
  app.get('/admin/tenants/:tenantId', { config: admin, schema: { operationId: 'getTenant', summary: 'A tenant and its limits', params: S.TenantParams, response: { 200: S.TenantLimitsAnswer, ...err } } }, async (req) => {
    const { tenantId } = req.params as { tenantId: string }
    const tenant = UUID.test(tenantId) ? await deps.tenancy.tenant(tenantId) : undefined
    if (!tenant) throw notFound(tenantId)
    return { tenant }
  })

  app.patch('/admin/tenants/:tenantId', { config: admin, schema: { operationId: 'updateTenant', summary: "Set or remove a tenant's limits, identity provider and origins", params: S.TenantParams, body: S.PatchTenantBody, response: { 200: S.TenantLimitsAnswer, ...err } } }, async (req) => {
    const { tenantId } = req.params as { tenantId: string }
    const body = req.body as { limits?: { [K in keyof Limits]?: number | null }; auth?: AuthPatch; cors?: { origins: string[] } | null }
    if (!UUID.test(tenantId)) throw notFound(tenantId)
    // the provider and origins first: they are what a PATCH can refuse (a URL the guard refuses, an
    // issuer another tenant has), and a refused PATCH changes nothing
    let tenant = body.auth !== undefined || body.cors !== undefined ? await deps.credentials.setAccess(tenantId, { auth: body.auth, cors: body.cors }) : undefined
    if (body.limits) tenant = await deps.tenancy.setLimits(tenantId, body.limits)
    if (!tenant) throw notFound(tenantId)
    return { tenant }
  })
}
