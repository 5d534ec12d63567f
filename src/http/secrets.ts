// Tenant secrets (API.md §13): write, list by name, delete. A value goes in and never comes out.

import type { FastifyInstance } from 'fastify'
import { ApiError, badRequest } from '../errors.js'
import { MAX_SECRET_BYTES } from '../tenancy/index.js'
import type { HttpDeps } from './deps.js'
import * as S from './schemas.js'

const err = { 400: S.ErrorBody, 401: S.ErrorBody, 403: S.ErrorBody, 404: S.ErrorBody, 409: S.ErrorBody }
/** API.md §18: the tenant's own business, for its keys; a token is 403 */
const keyOnly = { keyOnly: true } as const

export async function secretRoutes(app: FastifyInstance, deps: HttpDeps): Promise<void> {
  app.put('/secrets/:name', { config: keyOnly, schema: { operationId: 'putSecret', summary: 'Create or replace a tenant secret', params: S.SecretParams, body: S.PutSecretBody, response: { 204: { type: 'null' }, ...err } } }, async (req, reply) => {
    const { name } = req.params as { name: string }
    const { value } = req.body as { value: string }
    if (Buffer.byteLength(value, 'utf8') > MAX_SECRET_BYTES) throw badRequest(`a secret value is at most ${MAX_SECRET_BYTES} bytes`, [{ path: 'body.value', message: `must be at most ${MAX_SECRET_BYTES} bytes in UTF-8` }])
    await deps.secrets.put(req.principal!.tenantId, name, value)
    return reply.code(204).send()
  })

  app.get('/secrets', { config: keyOnly, schema: { operationId: 'listSecrets', summary: "The tenant's secret names (never their values)", response: { 200: S.SecretList, ...err } } }, async (req) => {
    const list = await deps.secrets.list(req.principal!.tenantId)
    return { secrets: list.map((s) => ({ name: s.name, createdAt: new Date(s.createdAt).toISOString(), updatedAt: new Date(s.updatedAt).toISOString() })) }
  })

  app.delete('/secrets/:name', { config: keyOnly, schema: { operationId: 'deleteSecret', summary: 'Delete a tenant secret', params: S.SecretParams, response: { ...err } } }, async (req, reply) => {
    const { name } = req.params as { name: string }
    if (!(await deps.secrets.delete(req.principal!.tenantId, name))) throw new ApiError('not-found', `secret ${name} not found`)
    return reply.code(204).send()
  })
}
