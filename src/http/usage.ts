// The tenant's usage (API.md §15): its usage ledger over UTC days, by day, model or session, and its limits.

import type { FastifyInstance } from 'fastify'
import type { HttpDeps } from './deps.js'
import * as S from './schemas.js'

const err = { 400: S.ErrorBody, 401: S.ErrorBody, 403: S.ErrorBody }
/** API.md §18: the tenant's own business, for its keys; a token is 403 */
const keyOnly = { keyOnly: true } as const

export async function usageRoutes(app: FastifyInstance, deps: HttpDeps): Promise<void> {
  app.get('/usage', { config: keyOnly, schema: { operationId: 'getUsage', summary: "The tenant's usage by day, model or session, and its limits", querystring: S.UsageQuery, response: { 200: S.UsageAnswer, ...err } } }, async (req) => {
    const q = req.query as { from?: string; to?: string; groupBy?: 'day' | 'model' | 'session' }
    return deps.tenancy.usage(req.principal!.tenantId, q)
  })
}
