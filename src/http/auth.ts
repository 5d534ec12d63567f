// Authentication and authorization of the /v1 scope, in one place (API.md §3, §18): tenant keys,
// tokens (agentd's own and tenants' identity providers'), the admin token on admin routes, the
// `?access_token=` fallback of streams; then what the credential may do — the origin it comes from,
// the route's scope, the sessions and agents it reaches — from the facts each route declares; and the
// rate limit per key, subject or tenant (API.md §1, §15).

import crypto from 'node:crypto'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { ApiError, sessionNotFound } from '../errors.js'
import { getSession, tenants, type Grant, type Principal, type SessionFilter, type SessionRow } from '../store/index.js'
import type { HttpDeps, RouteFacts } from './deps.js'

/** The one answer to any token that is not accepted (API.md §18: no hint of which check failed). */
export const TOKEN_REFUSED = 'the token is not valid here: it is expired, not signed by a key this server trusts, or not meant for it'

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
    const key = p.requestsPerMin !== undefined ? `tenant:${p.tenantId}` : p.keyId !== undefined ? `key:${p.keyId}` : `token:${p.tenantId}:${p.grant!.bucket}`
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
 * deliveries to the sessions it drives (intake.ts deliver, by id): such a delivery is not preceded by a
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

/** The session a token's subject, session list and agent list let it reach (API.md §18). */
export function reaches(g: Grant, row: SessionRow): boolean {
  if (g.sessions && !g.sessions.includes(row.id)) return false
  if (g.subject !== undefined && row.owner !== g.subject) return false
  // a token limited to agents reaches the sessions made from them (API.md §16, §18)
  if (g.agents && !(row.agent && g.agents.includes(row.agent.id))) return false
  return true
}

/** What a list of sessions shows a principal: everything of its tenant for a key, a token's own. */
export function sessionFilter(p: Principal): SessionFilter | null {
  const g = p.grant
  if (!g) return {}
  return { ...(g.subject !== undefined ? { owner: g.subject } : {}), ...(g.sessions ? { ids: g.sessions } : {}), ...(g.agents ? { agents: g.agents } : {}) }
}

/**
 * Why a token may not do what a route (or an operation) needs, from the route's facts (API.md §18):
 * a tenant-key route or a scope it lacks is 403 forbidden, an agent it is not limited to 404 as a
 * missing agent. Undefined when it may; a key (no grant) always may.
 */
export function tokenRefusal(g: Grant | undefined, facts: Pick<RouteFacts, 'access' | 'keyOnly' | 'agent'>, params?: Record<string, unknown>): ApiError | undefined {
  if (!g) return undefined
  if (facts.keyOnly) return new ApiError('forbidden', 'this route takes a tenant API key; a token cannot use it')
  const access = facts.access ?? 'write'
  if (!g.scopes.includes(access)) return new ApiError('forbidden', `this token's scopes (${g.scopes.join(', ')}) do not include ${access}`)
  const agentId = facts.agent ? params?.[facts.agent] : undefined
  if (typeof agentId === 'string' && g.agents && !g.agents.includes(agentId)) return new ApiError('not-found', `agent ${agentId} not found`)
  return undefined
}

/** The WebSocket's input ops need `write` of a token (API.md §18), as the input routes do. */
export function requireAccess(req: FastifyRequest, access: 'read' | 'write'): void {
  const refusal = tokenRefusal(req.principal?.grant, { access })
  if (refusal) throw refusal
}

const isSameOrigin = (origin: string, host: string | undefined) => {
  try {
    return host !== undefined && new URL(origin).host === host
  } catch {
    return false
  }
}

/**
 * The auth plugin of a scope: every route in it is `auth: 'tenant'` unless it says otherwise, and
 * needs `read` of a token for GET, `write` otherwise; one onRequest hook checks what the route's facts
 * ask for. An unknown route is 404 whoever asks.
 */
export const authPlugin = fp(async (scope: FastifyInstance, deps: HttpDeps) => {
  const limiter = new RateLimiter(deps.config.rateLimitPerMin)
  const cache = new PrincipalCache()
  const off = deps.onTenantChanged?.((tenantId) => cache.forget(tenantId))
  if (off) scope.addHook('onClose', async () => off())

  /**
   * Reads the key (and, with `sessionId`, the session with it: session.ts takes it from there), sets
   * req.principal, and remembers the principal for deliveries (PrincipalCache).
   */
  const authenticate = async (req: FastifyRequest, token: string, id: string, sessionId: string | undefined): Promise<Principal> => {
    const facts = req.routeOptions.config
    let p: Principal | null
    if (sessionId !== undefined) {
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

  /** A token's principal (from memory once verified); 401 with the one message for any token refused. */
  const authenticateToken = async (req: FastifyRequest, token: string): Promise<Principal> => {
    const p = await deps.credentials.authenticate(token)
    if (!p) throw new ApiError('unauthorized', TOKEN_REFUSED)
    req.principal = p
    return p
  }

  /**
   * API.md §18: a browser on another origin (its `Origin` names another host than the request's) is
   * let in only from an origin AGENTD_CORS_ORIGINS lists and its tenant's list, if it has one, too.
   * With neither configured, browsers' own rules apply (no preflight is answered).
   */
  const checkOrigin = async (req: FastifyRequest, p: Principal): Promise<void> => {
    const origin = req.headers.origin
    if (typeof origin !== 'string' || isSameOrigin(origin, req.headers.host)) return
    const global = deps.config.corsOrigins
    const own = (await deps.credentials.access(p.tenantId))?.cors?.origins
    if (!global.length && !own) return
    if (!global.includes(origin) || (own && !own.includes(origin))) throw new ApiError('forbidden', `requests from origin ${origin} are not allowed for this tenant`)
  }

  /**
   * The owners of sessions tokens met, by tenant and id with the session's key: a session's owner never
   * changes, and a deleted and recreated id has another key, so a delivery to a session this process
   * drives can be let through without a read (the token fast path, below).
   */
  const owners = new Map<string, { key: string; owner: string | null }>()

  /** A token on a session route: the session, when the token reaches it; else 404 as another tenant's. */
  const loadReached = async (req: FastifyRequest, p: Principal, sessionId: string): Promise<void> => {
    const row = await getSession(deps.db, p.tenantId, sessionId, { inbox: req.routeOptions.config.inbox === true })
    if (row) {
      if (owners.size >= PrincipalCache.MAX) owners.delete(owners.keys().next().value!)
      owners.set(`${p.tenantId}:${sessionId}`, { key: row.key, owner: row.owner })
    }
    req.preloadedSession = row && reaches(p.grant!, row) ? row : null
  }

  /**
   * Whether a token's delivery to session `id` may go without reading the session (as a known key's
   * does, intake.ts deliver): this process drives it, and the token reaches it by what memory holds.
   */
  const reachesLocally = (p: Principal, sessionId: string): boolean => {
    const g = p.grant!
    const key = deps.intake.localKey(sessionId, p.tenantId)
    if (key === undefined || g.agents || (g.sessions && !g.sessions.includes(sessionId))) return false
    if (g.subject === undefined) return true
    const known = owners.get(`${p.tenantId}:${sessionId}`)
    return known?.key === key && known.owner === g.subject
  }

  // a token limited to sessions or agents creates only those it lists (its body is read by now)
  scope.addHook('preValidation', async (req) => {
    const g = req.principal?.grant
    if (!g || !req.routeOptions.config.createsSession) return
    const body = (req.body ?? {}) as { id?: unknown; agent?: unknown }
    if (g.sessions && !(typeof body.id === 'string' && g.sessions.includes(body.id))) throw new ApiError('forbidden', 'this token creates only the sessions it lists: give one of them as id')
    const agent = typeof body.agent === 'string' ? body.agent.split('@')[0] : undefined
    if (g.agents && !(agent !== undefined && g.agents.includes(agent))) throw new ApiError('forbidden', 'this token creates only sessions of the agents it lists: give one of them as agent')
  })

  scope.addHook('onRoute', (r) => {
    const methods = Array.isArray(r.method) ? r.method : [r.method]
    const reads = methods.every((m) => m === 'GET' || m === 'HEAD')
    r.config = Object.assign(r.config ?? {}, { auth: r.config?.auth ?? 'tenant', access: r.config?.access ?? (reads ? 'read' : 'write') })
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
    if (!token) throw new ApiError('unauthorized', 'an API key or a token is required: Authorization: Bearer <credential>')
    const params = req.params as Record<string, unknown> | undefined
    const sessionId = facts.session && typeof params?.id === 'string' ? params.id : undefined
    let p: Principal
    if (!tenants.isKeyShaped(token)) {
      p = await authenticateToken(req, token)
      await checkOrigin(req, p)
      const refusal = tokenRefusal(p.grant, facts, params)
      if (refusal) throw refusal
      if (sessionId !== undefined && facts.inbox && reachesLocally(p, sessionId)) {
        // nothing is read now: the delivery goes in one statement; any other answer loads the session first
        req.deferredKey = {
          confirm: async () => {
            req.deferredKey = undefined
            await loadReached(req, p, sessionId)
            if (req.preloadedSession === null) throw sessionNotFound(sessionId)
          },
        }
      } else if (sessionId !== undefined) await loadReached(req, p, sessionId)
    } else {
      const id = facts.inbox ? PrincipalCache.id(token) : ''
      // input to a session this process drives (or, `bodySession`, to a session the body names), by a
      // key it knows: nothing is read now. The delivery confirms the key in its own statement
      // (deliver.ts); a route that reads its session first reads the key with it (session.ts
      // sessionNamed); any other answer reads the key first (confirmKey, errors.ts)
      const known = facts.inbox && (sessionId !== undefined || facts.bodySession) ? cache.get(id) : undefined
      if (known && (sessionId === undefined || deps.intake.drivesLocally(sessionId, known.tenantId))) {
        p = req.principal = known
        req.deferredKey = {
          keyId: known.keyId,
          confirm: async (named?: string) => {
            req.deferredKey = undefined
            req.principal = undefined
            await authenticate(req, token, id, sessionId ?? named)
            if (sessionId !== undefined && req.preloadedSession === null) throw sessionNotFound(sessionId)
          },
        }
      } else p = await authenticate(req, token, id, sessionId)
      await checkOrigin(req, p)
    }
    if (!facts.unlimited) {
      const wait = limiter.take(p)
      if (wait) throw new ApiError('rate-limited', p.requestsPerMin === undefined ? 'too many requests for this API key' : "too many requests for this tenant's keys (requestsPerMin)", undefined, { 'retry-after': String(wait) })
    }
  })
}, { name: 'agentd-auth' })
