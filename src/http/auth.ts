// Authentication of the /v1 scope (API.md §3): tenant keys, the admin token on admin routes, the
// `?access_token=` fallback of streams, and the rate limit per key or per tenant (API.md §1, §15).

import crypto from 'node:crypto'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { ApiError, sessionNotFound } from '../errors.js'
import { tenants, type Principal } from '../store/index.js'
import type { HttpDeps } from './deps.js'

/**
 * Token buckets (API.md §1 AGENTD_RATE_LIMIT_PER_MIN): one per key at the default rate, or one per
 * tenant that has requestsPerMin (API.md §15), shared by its keys in this process; streams are exempt.
 */
class RateLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number; perMin: number }>()
  constructor(private readonly perMin: number) {}
  /** 0 when the request may go, else the seconds to wait */
  take(p: Principal): number {
    const perMin = p.requestsPerMin ?? this.perMin
    const key = p.requestsPerMin === undefined ? `key:${p.keyId}` : `tenant:${p.tenantId}`
    const now = Date.now()
    let b = this.buckets.get(key)
    // a changed limit starts the bucket over
    if (!b || b.perMin !== perMin) b = { tokens: perMin, at: now, perMin }
    b.tokens = Math.min(perMin, b.tokens + ((now - b.at) * perMin) / 60000)
    b.at = now
    this.buckets.set(key, b)
    if (b.tokens >= 1) {
      b.tokens -= 1
      return 0
    }
    if (this.buckets.size > 100000) this.buckets.clear()
    return Math.ceil(((1 - b.tokens) * 60000) / perMin / 1000)
  }
}

/**
 * Principals this process authenticated, by the SHA-256 of their key (never the key itself), for
 * deliveries to the sessions it drives (intake.ts deliverLocal): such a delivery is not preceded by a
 * read of the key, it confirms the key in its own statement, and any answer but its success reads the
 * key first (req.deferredKey: session.ts confirmKey, errors.ts handleError). Nothing else is answered
 * from this cache. An entry lives a minute, and a tenant's changed limits (its requestsPerMin) drop its
 * entries in every process.
 */
export class PrincipalCache {
  static readonly TTL_MS = 60_000
  static readonly MAX = 10_000
  private readonly entries = new Map<string, { p: Principal; at: number }>()

  static id(token: string): string {
    return crypto.createHash('sha256').update(token).digest('base64')
  }

  get(id: string, now = Date.now()): Principal | undefined {
    const e = this.entries.get(id)
    if (!e) return undefined
    if (now - e.at > PrincipalCache.TTL_MS) {
      this.entries.delete(id)
      return undefined
    }
    return e.p
  }

  set(id: string, p: Principal, now = Date.now()): void {
    if (this.entries.size >= PrincipalCache.MAX) this.entries.clear()
    this.entries.set(id, { p, at: now })
  }

  delete(id: string): void {
    this.entries.delete(id)
  }

  /** Drops a tenant's entries (its limits changed), or every entry (null: the cross-process channel dropped). */
  forget(tenantId: string | null): void {
    if (tenantId === null) return this.entries.clear()
    for (const [id, e] of this.entries) if (e.p.tenantId === tenantId) this.entries.delete(id)
  }
}

/** The bearer token of the Authorization header, else (where the route allows it) of ?access_token. */
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

/** Constant-time comparison of the admin token. */
function isAdmin(given: string | undefined, token: string): boolean {
  if (!given) return false
  const a = crypto.createHash('sha256').update(given).digest()
  const b = crypto.createHash('sha256').update(token).digest()
  return crypto.timingSafeEqual(a, b)
}

/**
 * The auth plugin of a scope: every route in it is `auth: 'tenant'` unless it says otherwise; one
 * onRequest hook checks what the route's facts ask for. An unknown route is 404 whoever asks.
 */
export const authPlugin = fp(async (scope: FastifyInstance, deps: HttpDeps) => {
  const limiter = new RateLimiter(deps.config.rateLimitPerMin)
  const cache = new PrincipalCache()
  const off = deps.onTenantChanged?.((tenantId) => cache.forget(tenantId))
  if (off) scope.addHook('onClose', async () => off())

  /**
   * Reads the key (and, on a session route, the session with it: session.ts takes it from there),
   * sets req.principal, and remembers the principal for deliveries (PrincipalCache).
   */
  const authenticate = async (req: FastifyRequest, token: string, id: string): Promise<Principal> => {
    const facts = req.routeOptions.config
    const sessionId = facts.session ? (req.params as { id?: unknown } | undefined)?.id : undefined
    let p: Principal | null
    if (typeof sessionId === 'string') {
      const a = await tenants.authenticateWithSession(deps.db, token, sessionId, { inbox: facts.inbox === true })
      p = a?.principal ?? null
      if (a) req.preloadedSession = a.session
    } else p = await tenants.authenticate(deps.db, token)
    if (!p) {
      cache.delete(id)
      throw new ApiError('unauthorized', 'unknown or revoked API key')
    }
    if (facts.inbox) cache.set(id, p)
    req.principal = p
    return p
  }

  scope.addHook('onRoute', (r) => {
    r.config = Object.assign(r.config ?? {}, { auth: r.config?.auth ?? 'tenant' })
  })
  scope.addHook('onRequest', async (req) => {
    if (req.is404) return
    const facts = req.routeOptions.config
    if (facts.auth === 'admin') {
      if (!deps.config.adminToken) throw new ApiError('not-found', 'admin routes are disabled (AGENTD_ADMIN_TOKEN is not set)')
      if (!isAdmin(bearer(req, false), deps.config.adminToken)) throw new ApiError('unauthorized', 'the admin token is required')
      return
    }
    if (facts.auth !== 'tenant') return
    const token = bearer(req, facts.queryToken === true)
    if (!token) throw new ApiError('unauthorized', 'an API key is required: Authorization: Bearer <key>')
    const id = facts.inbox ? PrincipalCache.id(token) : ''
    // a delivery to a session this process drives, by a key it knows: nothing is read now; the
    // delivery confirms the key in its own statement, and any other answer reads the key first
    const sessionId = (req.params as { id?: unknown } | undefined)?.id
    const known = facts.inbox && typeof sessionId === 'string' ? cache.get(id) : undefined
    let p: Principal
    if (known && deps.intake.drivesLocally(sessionId as string, known.tenantId)) {
      p = req.principal = known
      req.deferredKey = {
        keyId: known.keyId,
        confirm: async () => {
          req.deferredKey = undefined
          req.principal = undefined
          await authenticate(req, token, id)
          if (req.preloadedSession === null) throw sessionNotFound(sessionId as string)
        },
      }
    } else p = await authenticate(req, token, id)
    if (!facts.unlimited) {
      const wait = limiter.take(p)
      if (wait) throw new ApiError('rate-limited', p.requestsPerMin === undefined ? 'too many requests for this API key' : "too many requests for this tenant's keys (requestsPerMin)", undefined, { 'retry-after': String(wait) })
    }
  })
}, { name: 'agentd-auth' })
