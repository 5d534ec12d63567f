// agentd's own tokens (API.md §18): JWTs signed with EdDSA by the keys agentd keeps, minted with a
// tenant key for a browser or an end user. jose signs and verifies; this file only says what a
// token claims and what its claims must look like.

import crypto from 'node:crypto'
import { decodeJwt, decodeProtectedHeader, jwtVerify, SignJWT, type JWTPayload } from 'jose'
import { badRequest } from '../errors.js'
import type { Grant, Scope } from '../store/index.js'
import { ALG, MAX_TTL_SECONDS, type SigningKeys } from './signing-keys.js'

/** `iss` and `aud` of agentd's own tokens; a tenant's identity provider may not use this issuer. */
export const ISSUER = 'agentd'
export const AUDIENCE = 'agentd'
export const DEFAULT_TTL_SECONDS = 900
/** Bearer credentials longer than this are refused unread (API.md §18: an oversized token is 401). */
export const MAX_TOKEN_LENGTH = 8192
export const SCOPES: readonly Scope[] = ['read', 'write']

export interface MintRequest {
  subject?: string
  sessions?: string[]
  agents?: string[]
  scopes: Scope[]
  ttlSeconds?: number
}

/** What agentd writes into its tokens besides iss, aud, sub, iat, exp and jti. */
interface OwnClaims extends JWTPayload {
  tenant: string
  /** space-separated, as OAuth scopes are */
  scope: string
  sessions?: string[]
  agents?: string[]
}

/** POST /v1/tokens: a token of `tenantId` with the request's rights, signed now. */
export async function mintToken(keys: SigningKeys, tenantId: string, req: MintRequest, now: number): Promise<{ token: string; expiresAt: number }> {
  const { kid, privateKey } = await keys.signer()
  const iat = Math.floor(now / 1000)
  const exp = iat + (req.ttlSeconds ?? DEFAULT_TTL_SECONDS)
  const claims: OwnClaims = { tenant: tenantId, scope: [...new Set(req.scopes)].join(' ') }
  if (req.sessions) claims.sessions = [...new Set(req.sessions)]
  if (req.agents) claims.agents = [...new Set(req.agents)]
  const jwt = new SignJWT(claims).setProtectedHeader({ alg: ALG, kid, typ: 'JWT' }).setIssuer(ISSUER).setAudience(AUDIENCE).setIssuedAt(iat).setExpirationTime(exp).setJti(crypto.randomBytes(12).toString('base64url'))
  if (req.subject !== undefined) jwt.setSubject(req.subject)
  const token = await jwt.sign(privateKey)
  if (token.length > MAX_TOKEN_LENGTH) throw badRequest(`the token would be ${token.length} characters, over the ${MAX_TOKEN_LENGTH} a server accepts: name fewer or shorter sessions, agents or subject`, [{ path: 'body', message: 'the token would be too long' }])
  return { token, expiresAt: exp * 1000 }
}

const isStringList = (v: unknown): v is string[] => Array.isArray(v) && v.every((x) => typeof x === 'string')

/**
 * The tenant and rights of one of agentd's own tokens, or null for any token that is not one in
 * force: ill-formed, signed by no key agentd keeps, another algorithm, expired (no leeway: agentd
 * is the only clock its tokens know), another issuer or audience, or claims not of agentd's shape.
 */
export async function verifyOwnToken(keys: SigningKeys, token: string, now: number): Promise<{ tenantId: string; grant: Grant } | null> {
  const kid = headerOf(token)?.kid
  if (typeof kid !== 'string') return null
  // outside the try: a database that does not answer is not a bad token
  const key = await keys.verifier(kid)
  if (!key) return null
  let payload: OwnClaims
  try {
    ;({ payload } = await jwtVerify<OwnClaims>(token, key, { algorithms: [ALG], issuer: ISSUER, audience: AUDIENCE, typ: 'JWT', currentDate: new Date(now), clockTolerance: 0, requiredClaims: ['exp', 'iat', 'jti'] }))
  } catch {
    return null
  }
  const scopes = typeof payload.scope === 'string' ? payload.scope.split(' ') : []
  if (typeof payload.tenant !== 'string' || !scopes.length || !scopes.every((s) => (SCOPES as string[]).includes(s))) return null
  if (payload.sub !== undefined && (typeof payload.sub !== 'string' || !payload.sub)) return null
  if ((payload.sessions !== undefined && !isStringList(payload.sessions)) || (payload.agents !== undefined && !isStringList(payload.agents))) return null
  // a token whose lifetime exceeds what agentd mints was not minted by agentd
  if (payload.exp! - payload.iat! > MAX_TTL_SECONDS) return null
  const grant: Grant = { scopes: scopes as Scope[], expiresAt: payload.exp! * 1000, bucket: payload.sub !== undefined ? `sub:${payload.sub}` : `jti:${payload.jti}` }
  if (payload.sub !== undefined) grant.subject = payload.sub
  if (payload.sessions) grant.sessions = payload.sessions
  if (payload.agents) grant.agents = payload.agents
  return { tenantId: payload.tenant, grant }
}

/** A token's protected header, or undefined when it is not a JWS at all. */
export function headerOf(token: string): ReturnType<typeof decodeProtectedHeader> | undefined {
  try {
    return decodeProtectedHeader(token)
  } catch {
    return undefined
  }
}

/** A token's claims unverified (only to choose who verifies it), or undefined when it has none. */
export function claimsOf(token: string): JWTPayload | undefined {
  try {
    return decodeJwt(token)
  } catch {
    return undefined
  }
}
