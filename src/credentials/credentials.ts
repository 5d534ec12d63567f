// Credentials for browsers and end users (API.md §18): which tenant and rights a token stands for,
// agentd's own tokens (minted, verified, their keys) and tenants' identity providers and origins.
// A token verified once is trusted from memory until it expires (an end-user token also no longer
// than its provider's keys are cached), so verification reads no database per request.

import crypto from 'node:crypto'
import { isOrigin } from '../config.js'
import { badRequest } from '../errors.js'
import { tenants, type Db, type Principal, type TenantAccess, type TenantAuth, type TenantCors, type TenantRecord } from '../store/index.js'
import { checkToolUrl, type HostPolicy, type Resolver } from '../tools/index.js'
import { IdentityProviders } from './providers.js'
import type { Invalidations } from '../bus/index.js'
import { SigningKeys } from './signing-keys.js'
import { claimsOf, ISSUER, MAX_TOKEN_LENGTH, mintToken, verifyOwnToken, type MintRequest } from './tokens.js'

export interface CredentialsOptions {
  db: Db
  invalidations: Invalidations
  /** AGENTD_SECRET_KEY, or the embedded database's own key */
  secretKey?: Buffer
  /** AGENTD_TOKEN_KEY_ROTATION_DAYS */
  rotationDays: number
  /** the http tools' address guard, which identity providers' key sets are fetched through */
  policy: HostPolicy
  resolve?: Resolver
  /** tests move it across a rotation or an expiry */
  clock?: () => number
  jwksCacheMaxAgeMs?: number
  keyReloadIntervalMs?: number
}

/** A tenant's identity provider as an admin sets it (subjectClaim defaults to `sub`), or null to remove it. */
export type AuthPatch = (Omit<TenantAuth, 'subjectClaim'> & { subjectClaim?: string }) | null

/** the bus topic of a tenant's identity provider and origins: setAccess invalidates it in every process */
const ACCESS_TOPIC = 'tenant-access:'
/** verified tokens and tenants kept in memory; beyond it the oldest goes */
const MAX_ENTRIES = 10_000
/** how long a tenant's access settings are trusted, invalidations aside (a lost NOTIFY) */
const ACCESS_TRUST_MS = 30_000

const tokenId = (token: string) => crypto.createHash('sha256').update(token).digest('base64')

/** Sets a bounded map's entry, dropping the oldest when it is full. */
function remember<K, V>(map: Map<K, V>, k: K, v: V): void {
  map.delete(k)
  if (map.size >= MAX_ENTRIES) map.delete(map.keys().next().value!)
  map.set(k, v)
}

export class Credentials {
  readonly keys: SigningKeys
  readonly providers: IdentityProviders
  private readonly clock: () => number
  private readonly verified = new Map<string, { principal: Principal; until: number }>()
  private readonly accessOf = new Map<string, { access: TenantAccess | undefined; at: number }>()
  /** bumped by every invalidation: a read that started before one fills no cache */
  private generation = 0
  private readonly off: () => void

  constructor(private readonly o: CredentialsOptions) {
    this.clock = o.clock ?? Date.now
    this.keys = new SigningKeys({ db: o.db, invalidations: o.invalidations, secretKey: o.secretKey, rotationMs: o.rotationDays * 86_400_000, clock: this.clock, reloadIntervalMs: o.keyReloadIntervalMs })
    this.providers = new IdentityProviders({ db: o.db, policy: o.policy, resolve: o.resolve, clock: this.clock, jwksCacheMaxAgeMs: o.jwksCacheMaxAgeMs })
    this.off = o.invalidations.on((topic) => {
      if (topic === null) this.forget(null, { providers: true })
      else if (topic.startsWith(ACCESS_TOPIC)) this.forget(topic.slice(ACCESS_TOPIC.length), { providers: true })
    })
  }

  close(): void {
    this.off()
    this.keys.close()
    this.providers.close()
  }

  /**
   * The principal a bearer token stands for, or null when it is not a token in force: too long,
   * not a JWT, not signed by agentd or the provider of the tenant it names, expired, for another
   * audience, or of a tenant that is gone. Never says which.
   */
  async authenticate(token: string): Promise<Principal | null> {
    if (token.length > MAX_TOKEN_LENGTH) return null
    const id = tokenId(token)
    const now = this.clock()
    const hit = this.verified.get(id)
    if (hit && now < hit.until) return hit.principal
    if (hit) this.verified.delete(id)
    const generation = this.generation
    const claims = claimsOf(token)
    if (!claims) return null
    const own = claims.iss === ISSUER
    const v = own ? await verifyOwnToken(this.keys, token, now) : await this.providers.verify(token, claims)
    if (!v) return null
    const access = await this.access(v.tenantId)
    if (!access) return null
    const principal: Principal = { tenantId: v.tenantId, grant: v.grant }
    if (access.requestsPerMin !== undefined) principal.requestsPerMin = access.requestsPerMin
    // an end-user token is trusted no longer than its provider's keys are: a key the provider
    // removed stops being accepted once the cached key set is fetched again
    const until = own ? v.grant.expiresAt : Math.min(v.grant.expiresAt, now + this.providers.jwksCacheMaxAgeMs)
    if (generation === this.generation) remember(this.verified, id, { principal, until })
    return principal
  }

  /** POST /v1/tokens. */
  mint(tenantId: string, req: MintRequest): Promise<{ token: string; expiresAt: number }> {
    return mintToken(this.keys, tenantId, req, this.clock())
  }

  /** GET /.well-known/jwks.json. */
  jwks() {
    return this.keys.jwks()
  }

  /** A tenant's identity provider, origins and request limit; undefined for a tenant that is gone. */
  async access(tenantId: string): Promise<TenantAccess | undefined> {
    const known = this.accessOf.get(tenantId)
    if (known && this.clock() - known.at < ACCESS_TRUST_MS) return known.access
    const generation = this.generation
    const access = await tenants.tenantAccess(this.o.db, tenantId)
    if (generation === this.generation) remember(this.accessOf, tenantId, { access, at: this.clock() })
    return access
  }

  /**
   * PATCH …/admin/tenants/:id {auth, cors}: checks the provider's key-set URL against the address
   * guard and the origins' form, sets both in one statement, and has every process forget what it
   * knew of the tenant before answering. Undefined for an unknown tenant.
   */
  async setAccess(tenantId: string, patch: { auth?: AuthPatch; cors?: TenantCors | null }): Promise<TenantRecord | undefined> {
    let auth: TenantAuth | null | undefined
    if (patch.auth) {
      auth = { ...patch.auth, subjectClaim: patch.auth.subjectClaim ?? 'sub' }
      if (auth.issuer === ISSUER) throw badRequest(`the issuer "${ISSUER}" is agentd's own`, [{ path: 'body.auth.issuer', message: `must not be "${ISSUER}"` }])
      const why = await checkToolUrl(auth.jwksUrl, this.o.policy, this.o.resolve)
      if (why) throw badRequest(`auth.jwksUrl: ${why}`, [{ path: 'body.auth.jwksUrl', message: why }])
    } else auth = patch.auth
    if (patch.cors) {
      const bad = patch.cors.origins.findIndex((o) => !isOrigin(o))
      if (bad >= 0) throw badRequest(`cors.origins[${bad}] is not an origin (scheme://host[:port], nothing after it)`, [{ path: `body.cors.origins[${bad}]`, message: 'must be an origin such as https://app.example.com' }])
    }
    let t: TenantRecord | undefined
    try {
      t = await tenants.updateAccess(this.o.db, tenantId, { auth, cors: patch.cors === undefined ? undefined : patch.cors && { origins: [...new Set(patch.cors.origins)] } })
    } catch (e) {
      if ((e as { code?: string }).code === '23505') throw badRequest('another tenant has an identity provider with this issuer and audience', [{ path: 'body.auth', message: 'issuer and audience are taken' }])
      throw e
    }
    if (!t) return undefined
    this.forget(tenantId, { providers: true })
    await this.o.invalidations.invalidate(`${ACCESS_TOPIC}${tenantId}`)
    return t
  }

  /**
   * What this process knew of a tenant's tokens and settings goes (null: of every tenant); with
   * `providers`, also its identity provider (a changed limit keeps it).
   */
  forget(tenantId: string | null, o: { providers?: boolean } = {}): void {
    this.generation++
    if (o.providers) this.providers.forget(tenantId)
    if (tenantId === null) {
      this.verified.clear()
      this.accessOf.clear()
      return
    }
    this.accessOf.delete(tenantId)
    for (const [id, e] of this.verified) if (e.principal.tenantId === tenantId) this.verified.delete(id)
  }
}
