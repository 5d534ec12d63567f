// Tenants' own identity providers (API.md §18): an end-user token names its issuer and audience, which
// name one tenant; its signature is checked against that provider's JWKS, fetched through the http
// tools' address guard and cached by jose's remote key set. The subject claim names the end user.

import { createRemoteJWKSet, customFetch, jwtVerify, type JWTPayload, type RemoteJWKSet } from 'jose'
import { tenants, type Db, type Grant, type TenantAccess } from '../store/index.js'
import { guardedFetch, type GuardedFetch, type HostPolicy, type Resolver } from '../tools/index.js'

/** API.md §18: end-user tokens are accepted with at most this much leeway on their times. */
export const IDP_LEEWAY_SECONDS = 30
/** asymmetric algorithms only: a symmetric one would let anyone holding the public key sign */
const ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA', 'Ed25519']
/** subjects longer than this are refused: a subject is stored with every session it owns */
export const MAX_SUBJECT_LENGTH = 256
/** issuers whose tenants are kept in memory; beyond it the oldest is read again when met */
const MAX_ISSUERS = 10_000
/** how long an issuer's tenants are trusted before they are read again, invalidations aside */
const ISSUER_TRUST_MS = 30_000

export interface ProvidersOptions {
  db: Db
  policy: HostPolicy
  resolve?: Resolver
  clock: () => number
  /** how long a provider's JWKS is kept before it is fetched again (jose's cacheMaxAge; default 10 min) */
  jwksCacheMaxAgeMs?: number
}

interface Provider {
  access: TenantAccess
  jwks: RemoteJWKSet
  fetch: GuardedFetch
}

export class IdentityProviders {
  private readonly byIssuer = new Map<string, { at: number; providers: Provider[] }>()
  /** bumped by every invalidation: a read that started before one does not fill the map */
  private generation = 0

  constructor(private readonly o: ProvidersOptions) {}

  get jwksCacheMaxAgeMs(): number {
    return this.o.jwksCacheMaxAgeMs ?? 600_000
  }

  /**
   * The tenant and rights of an end-user token whose unverified claims are `claims`, or null when no
   * tenant's provider vouches for it. Read and write scopes, bound to its subject (it reaches only the
   * sessions it owns).
   */
  async verify(token: string, claims: JWTPayload): Promise<{ tenantId: string; grant: Grant } | null> {
    if (typeof claims.iss !== 'string' || !claims.iss) return null
    const auds = typeof claims.aud === 'string' ? [claims.aud] : Array.isArray(claims.aud) ? claims.aud : []
    const provider = (await this.providers(claims.iss)).find((p) => auds.includes(p.access.auth!.audience))
    if (!provider) return null
    const auth = provider.access.auth!
    let payload: JWTPayload
    try {
      ;({ payload } = await jwtVerify(token, provider.jwks, { algorithms: ALGORITHMS, issuer: auth.issuer, audience: auth.audience, clockTolerance: IDP_LEEWAY_SECONDS, currentDate: new Date(this.o.clock()), requiredClaims: ['exp'] }))
    } catch {
      // a bad token, and also a provider that cannot be reached or answers no usable key set
      return null
    }
    const subject = payload[auth.subjectClaim]
    if (typeof subject !== 'string' || !subject || subject.length > MAX_SUBJECT_LENGTH) return null
    return { tenantId: provider.access.tenantId, grant: { scopes: ['read', 'write'], subject, expiresAt: (payload.exp! + IDP_LEEWAY_SECONDS) * 1000, bucket: `sub:${subject}` } }
  }

  /** The providers of an issuer's tenants, read when not known or no longer trusted. */
  private async providers(issuer: string): Promise<Provider[]> {
    const known = this.byIssuer.get(issuer)
    if (known && this.o.clock() - known.at < ISSUER_TRUST_MS) return known.providers
    const generation = this.generation
    const rows = await tenants.tenantsByIssuer(this.o.db, issuer)
    const providers = rows.filter((a) => a.auth).map((access) => this.provider(access, known?.providers))
    if (generation === this.generation) {
      this.drop(issuer, providers)
      if (this.byIssuer.size >= MAX_ISSUERS) this.drop(this.byIssuer.keys().next().value!)
      this.byIssuer.set(issuer, { at: this.o.clock(), providers })
    }
    return providers
  }

  /** A provider of this configuration: the one held already (its cached keys), else a new key set. */
  private provider(access: TenantAccess, held: Provider[] = []): Provider {
    const same = held.find((p) => p.access.tenantId === access.tenantId && JSON.stringify(p.access.auth) === JSON.stringify(access.auth))
    if (same) return { ...same, access }
    const url = new URL(access.auth!.jwksUrl)
    const fetch = guardedFetch(url, this.o.policy, this.o.resolve)
    const jwks = createRemoteJWKSet(url, {
      cacheMaxAge: this.jwksCacheMaxAgeMs,
      cooldownDuration: Math.min(30_000, this.jwksCacheMaxAgeMs),
      [customFetch]: (u, init) => fetch.fetch(u, init as RequestInit),
    })
    return { access, jwks, fetch }
  }

  /** Forgets an issuer's providers, closing the connections of those not kept. */
  private drop(issuer: string, keep: Provider[] = []): void {
    const gone = this.byIssuer.get(issuer)
    this.byIssuer.delete(issuer)
    for (const p of gone?.providers ?? []) if (!keep.some((k) => k.fetch === p.fetch)) void p.fetch.close()
  }

  /** A tenant's provider changed (null: anything may have): its issuers are read again when next met. */
  forget(tenantId: string | null): void {
    this.generation++
    // an issuer known to have no tenant goes too: it may be the one the tenant moved to
    for (const [issuer, e] of [...this.byIssuer]) if (tenantId === null || !e.providers.length || e.providers.some((p) => p.access.tenantId === tenantId)) this.drop(issuer)
  }

  close(): void {
    for (const issuer of [...this.byIssuer.keys()]) this.drop(issuer)
  }
}
