// Tokens for browsers and end users (API.md §18): minted with a tenant key, verified with the public
// keys GET /.well-known/jwks.json serves.

import type { FastifyInstance } from 'fastify'
import type { MintRequest } from '../credentials/index.js'
import type { HttpDeps } from './deps.js'
import * as S from './schemas.js'

const err = { 400: S.ErrorBody, 401: S.ErrorBody, 403: S.ErrorBody, 409: S.ErrorBody }

export async function tokenRoutes(app: FastifyInstance, deps: HttpDeps): Promise<void> {
  app.post('/tokens', { config: { keyOnly: true }, schema: { operationId: 'createToken', summary: 'Mint a short-lived token for a browser or an end user (tenant key only)', body: S.TokenBody, response: { 201: S.TokenAnswer, ...err } } }, async (req, reply) => {
    const minted = await deps.credentials.mint(req.principal!.tenantId, req.body as MintRequest)
    return reply.code(201).send({ token: minted.token, expiresAt: new Date(minted.expiresAt).toISOString() })
  })
}

/** The public keys of agentd's tokens; needs no credential (a verifier fetches it). */
export async function jwksRoute(app: FastifyInstance, deps: HttpDeps): Promise<void> {
  app.get('/.well-known/jwks.json', { schema: { operationId: 'jwks', summary: "The public keys that sign agentd's tokens (JSON Web Key Set)", response: { 200: S.Jwks } } }, async (_req, reply) => {
    // a verifier may keep them a while; a new key is announced by a kid it has not seen
    return reply.header('cache-control', 'public, max-age=300').send(await deps.credentials.jwks())
  })
}
