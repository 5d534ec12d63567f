// Tenants, their limits (API.md §15) and API keys (API.md §3). A key is `agd_<prefix>_<secret>`; we
// store the prefix for lookup and a SHA-256 of the whole key, compared in constant time.

import crypto from 'node:crypto'
import type { Inbox } from '../session/index.js'
import { isDb, statement, type Db, type Queryable } from './db.js'
import { COLUMNS, toRow, type Raw, type SessionRow } from './rows.js'

export interface Tenant {
  id: string
  name: string
}

export interface Principal {
  tenantId: string
  /** the tenant API key's id; absent for a token (API.md §18) */
  keyId?: string
  /** the tenant's limit on requests per minute (API.md §15), shared by its keys */
  requestsPerMin?: number
  /** what a token allows (API.md §18); absent for a tenant key, which may do anything its tenant may */
  grant?: Grant
}

export type Scope = 'read' | 'write'

/** A token's rights (API.md §18): its scopes, its subject and the sessions and agents it is limited to. */
export interface Grant {
  scopes: readonly Scope[]
  /** owns the sessions it creates, and reaches only those */
  subject?: string
  sessions?: readonly string[]
  agents?: readonly string[]
  /** epoch ms from which the token is refused */
  expiresAt: number
  /** what the rate limiter counts it as: its subject, else the token */
  bucket: string
}

/** A tenant's own identity provider (API.md §18): end-user tokens it signs are accepted. */
export interface TenantAuth {
  issuer: string
  audience: string
  jwksUrl: string
  subjectClaim: string
}

/** The origins a tenant's browsers may call from (API.md §18), narrowing AGENTD_CORS_ORIGINS. */
export interface TenantCors {
  origins: string[]
}

/** A tenant's limits (API.md §15); an absent one is no limit. */
export interface TenantLimits {
  maxRunningSessions?: number
  tokensPerDay?: number
  costUsdPerMonth?: number
  requestsPerMin?: number
}

const LIMIT_COLUMNS: Record<keyof TenantLimits, string> = {
  maxRunningSessions: 'max_running_sessions',
  tokensPerDay: 'tokens_per_day',
  costUsdPerMonth: 'cost_usd_per_month',
  requestsPerMin: 'requests_per_min',
}

const ACCESS = 'auth_issuer, auth_audience, auth_jwks_url, auth_subject_claim, cors_origins'
const TENANT = `id, name, ${Object.values(LIMIT_COLUMNS).join(', ')}, ${ACCESS}`

/** A tenant as the admin routes show it: its limits (API.md §15), identity provider and origins (§18). */
export type TenantRecord = Tenant & { limits: TenantLimits; auth: TenantAuth | null; cors: TenantCors | null }

function authOf(r: Record<string, unknown>): TenantAuth | null {
  if (r.auth_issuer === null || r.auth_issuer === undefined) return null
  return { issuer: r.auth_issuer as string, audience: r.auth_audience as string, jwksUrl: r.auth_jwks_url as string, subjectClaim: r.auth_subject_claim as string }
}

const corsOf = (r: Record<string, unknown>): TenantCors | null => (typeof r.cors_origins === 'string' ? { origins: JSON.parse(r.cors_origins) as string[] } : null)

function toTenant(r: Record<string, unknown>): TenantRecord {
  const limits: TenantLimits = {}
  for (const [k, col] of Object.entries(LIMIT_COLUMNS) as Array<[keyof TenantLimits, string]>) if (r[col] !== null && r[col] !== undefined) limits[k] = Number(r[col])
  return { id: r.id as string, name: r.name as string, limits, auth: authOf(r), cors: corsOf(r) }
}

const KEY_RE = /^agd_([0-9a-f]{12})_([0-9A-Za-z_-]{43})$/

/** Whether a bearer credential is shaped like a tenant API key (anything else may be a token, API.md §18). */
export const isKeyShaped = (s: string): boolean => s.startsWith('agd_')

const sha256 = (s: string) => crypto.createHash('sha256').update(s).digest()

function newKey(): { prefix: string; key: string } {
  const prefix = crypto.randomBytes(6).toString('hex')
  const secret = crypto.randomBytes(32).toString('base64url')
  return { prefix, key: `agd_${prefix}_${secret}` }
}

const INSERT_TENANT = statement('tenant_insert', 'INSERT INTO tenants (id, name, created_at) VALUES ($1, $2, $3)')
const TENANT_EXISTS = statement('tenant_exists', 'SELECT 1 FROM tenants WHERE id = $1')

export async function createTenant(db: Queryable, name: string): Promise<{ tenant: Tenant; apiKey: string; keyId: string }> {
  const id = crypto.randomUUID()
  await db.query(INSERT_TENANT, [id, name, Date.now()])
  const k = await createKey(db, id)
  return { tenant: { id, name }, apiKey: k.apiKey, keyId: k.keyId }
}

export async function tenantExists(db: Queryable, tenantId: string): Promise<boolean> {
  const { rows } = await db.query(TENANT_EXISTS, [tenantId])
  return rows.length > 0
}

export async function getTenant(db: Queryable, tenantId: string): Promise<TenantRecord | undefined> {
  const { rows } = await db.query<Record<string, unknown>>(GET_TENANT, [tenantId])
  return rows[0] ? toTenant(rows[0]) : undefined
}

const GET_TENANT = statement('tenant_get', `SELECT ${TENANT} FROM tenants WHERE id = $1`)
const TENANT_ACCESS = statement('tenant_access', `SELECT id, requests_per_min, ${ACCESS} FROM tenants WHERE id = $1`)
const TENANTS_BY_ISSUER = statement('tenants_by_issuer', `SELECT id, requests_per_min, ${ACCESS} FROM tenants WHERE auth_issuer = $1`)

const LIMIT_KEYS = Object.keys(LIMIT_COLUMNS) as Array<keyof TenantLimits>

/**
 * updateLimits' statements, one named per set of limits written (a mask of LIMIT_KEYS bits); the
 * parameters are the tenant, then the limits in LIMIT_KEYS order. No limit: the tenant as it is.
 */
const SET_LIMITS: readonly string[] = Array.from({ length: 1 << LIMIT_KEYS.length }, (_, m) => {
  if (!m) return GET_TENANT
  const sets = LIMIT_KEYS.filter((_, i) => m & (1 << i)).map((k, i) => `${LIMIT_COLUMNS[k]} = $${i + 2}`)
  return statement(`tenant_set_limits_${m}`, `UPDATE tenants SET ${sets.join(', ')} WHERE id = $1 RETURNING ${TENANT}`)
})

/** Sets the given limits (null removes one) in one statement; undefined for an unknown tenant. */
export async function updateLimits(db: Queryable, tenantId: string, patch: { [K in keyof TenantLimits]?: number | null }): Promise<TenantRecord | undefined> {
  const params: unknown[] = [tenantId]
  let mask = 0
  LIMIT_KEYS.forEach((k, i) => {
    if (patch[k] === undefined) return
    params.push(patch[k])
    mask |= 1 << i
  })
  const { rows } = await db.query<Record<string, unknown>>(SET_LIMITS[mask], params)
  return rows[0] ? toTenant(rows[0]) : undefined
}

const AUTH_SET = 'auth_issuer = $2, auth_audience = $3, auth_jwks_url = $4, auth_subject_claim = $5'
/** updateAccess' statements: the identity provider, the origins, or both (the origins' parameter after the provider's). */
const SET_AUTH = statement('tenant_set_auth', `UPDATE tenants SET ${AUTH_SET} WHERE id = $1 RETURNING ${TENANT}`)
const SET_CORS = statement('tenant_set_cors', `UPDATE tenants SET cors_origins = $2 WHERE id = $1 RETURNING ${TENANT}`)
const SET_AUTH_CORS = statement('tenant_set_auth_cors', `UPDATE tenants SET ${AUTH_SET}, cors_origins = $6 WHERE id = $1 RETURNING ${TENANT}`)

/**
 * Sets a tenant's identity provider and origins (null removes one, undefined leaves it) in one
 * statement; undefined for an unknown tenant. An issuer and audience another tenant has already is a
 * unique violation (SQLSTATE 23505), which the caller answers.
 */
export async function updateAccess(db: Queryable, tenantId: string, patch: { auth?: TenantAuth | null; cors?: TenantCors | null }): Promise<TenantRecord | undefined> {
  const params: unknown[] = [tenantId]
  if (patch.auth !== undefined) params.push(patch.auth?.issuer ?? null, patch.auth?.audience ?? null, patch.auth?.jwksUrl ?? null, patch.auth?.subjectClaim ?? null)
  if (patch.cors !== undefined) params.push(patch.cors ? JSON.stringify(patch.cors.origins) : null)
  const sql = patch.auth !== undefined ? (patch.cors !== undefined ? SET_AUTH_CORS : SET_AUTH) : patch.cors !== undefined ? SET_CORS : GET_TENANT
  const { rows } = await db.query<Record<string, unknown>>(sql, params)
  return rows[0] ? toTenant(rows[0]) : undefined
}

/** What authenticating a token of a tenant needs to know of it (API.md §15, §18). */
export interface TenantAccess {
  tenantId: string
  auth: TenantAuth | null
  cors: TenantCors | null
  requestsPerMin?: number
}

const toAccess = (r: Record<string, unknown>): TenantAccess => {
  const a: TenantAccess = { tenantId: r.id as string, auth: authOf(r), cors: corsOf(r) }
  if (r.requests_per_min !== null && r.requests_per_min !== undefined) a.requestsPerMin = Number(r.requests_per_min)
  return a
}

/** A tenant's access settings, or undefined when there is no such tenant. */
export async function tenantAccess(db: Queryable, tenantId: string): Promise<TenantAccess | undefined> {
  const { rows } = await db.query<Record<string, unknown>>(TENANT_ACCESS, [tenantId])
  return rows[0] ? toAccess(rows[0]) : undefined
}

/** The tenants whose identity provider has this issuer (one per audience). */
export async function tenantsByIssuer(db: Queryable, issuer: string): Promise<TenantAccess[]> {
  const { rows } = await db.query<Record<string, unknown>>(TENANTS_BY_ISSUER, [issuer])
  return rows.map(toAccess)
}

export async function countTenants(db: Queryable): Promise<number> {
  const { rows } = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM tenants')
  return rows[0].n
}

/** The first tenant created under this name (the embedded database's `default`), if any. */
export async function firstTenantNamed(db: Queryable, name: string): Promise<string | undefined> {
  const { rows } = await db.query<{ id: string }>('SELECT id FROM tenants WHERE name = $1 ORDER BY created_at, id LIMIT 1', [name])
  return rows[0]?.id
}

const INSERT_KEY = statement('api_key_insert', 'INSERT INTO api_keys (id, tenant_id, prefix, hash, created_at) VALUES ($1, $2, $3, $4, $5)')
const REVOKE_KEY = statement('api_key_revoke', 'UPDATE api_keys SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL')

export async function createKey(db: Queryable, tenantId: string): Promise<{ keyId: string; apiKey: string }> {
  const keyId = crypto.randomUUID()
  const { prefix, key } = newKey()
  await db.query(INSERT_KEY, [keyId, tenantId, prefix, sha256(key), Date.now()])
  return { keyId, apiKey: key }
}

/** Revokes a key; false when no such live key exists. */
export async function revokeKey(db: Queryable, keyId: string): Promise<boolean> {
  const r = await db.query(REVOKE_KEY, [keyId, Date.now()])
  return r.rowCount > 0
}

type KeyRow = { auth_key_id: string; auth_tenant_id: string; auth_hash: Buffer | Uint8Array; auth_rpm: number | null }

const AUTH = 'SELECT k.id AS auth_key_id, k.tenant_id AS auth_tenant_id, k.hash AS auth_hash, t.requests_per_min AS auth_rpm'
const AUTH_FROM = 'FROM api_keys k JOIN tenants t ON t.id = k.tenant_id'
// the session columns, qualified (their names do not clash with the auth_ ones)
const SESSION_COLUMNS = COLUMNS.split(',').map((c) => `s.${c.trim()}`).join(', ')

const AUTH_KEY = statement('auth_key', `${AUTH} ${AUTH_FROM} WHERE k.prefix = $1 AND k.revoked_at IS NULL`)
const AUTH_SESSION_TEXT = (inbox: boolean) =>
  `${AUTH}, ${SESSION_COLUMNS}${inbox ? ', s.inbox' : ''} ${AUTH_FROM} LEFT JOIN sessions s ON s.tenant_id = k.tenant_id AND s.id = $2 WHERE k.prefix = $1 AND k.revoked_at IS NULL`
const AUTH_SESSION = statement('auth_session', AUTH_SESSION_TEXT(false))
const AUTH_SESSION_INBOX = statement('auth_session_inbox', AUTH_SESSION_TEXT(true))
const AUTH_BATCH = statement(
  'auth_batch',
  `${AUTH}, ${SESSION_COLUMNS}, CASE WHEN q.inbox THEN s.inbox END AS inbox, q.i::int AS q
         FROM unnest($1::text[], $2::text[], $3::bool[]) WITH ORDINALITY AS q(prefix, sid, inbox, i)
         JOIN api_keys k ON k.prefix = q.prefix AND k.revoked_at IS NULL JOIN tenants t ON t.id = k.tenant_id
         LEFT JOIN sessions s ON s.tenant_id = k.tenant_id AND s.id = q.sid`,
)

function principalOf(key: string, row: KeyRow | undefined): Principal | null {
  if (!row) return null
  const stored = Buffer.from(row.auth_hash)
  const given = sha256(key)
  if (stored.length !== given.length || !crypto.timingSafeEqual(stored, given)) return null
  return row.auth_rpm === null ? { tenantId: row.auth_tenant_id, keyId: row.auth_key_id } : { tenantId: row.auth_tenant_id, keyId: row.auth_key_id, requestsPerMin: row.auth_rpm }
}

/** The principal of a bearer key, or null for a malformed, unknown or revoked key. */
export async function authenticate(db: Queryable, key: string): Promise<Principal | null> {
  const m = KEY_RE.exec(key)
  if (!m) return null
  const { rows } = await db.query<KeyRow>(AUTH_KEY, [m[1]])
  return principalOf(key, rows[0])
}

/**
 * authenticate() and the key's tenant's session `sessionId`, in ONE statement (a request to a session
 * route needs both): the session is null when the tenant has no such session, and is only returned
 * with a principal (a bad key learns nothing).
 */
export async function authenticateWithSession(db: Queryable, key: string, sessionId: string, o: { inbox?: boolean } = {}): Promise<{ principal: Principal; session: SessionRow | null } | null> {
  const m = KEY_RE.exec(key)
  if (!m) return null
  const inbox = o.inbox === true
  const row = isDb(db) ? await lookups(db).lookup(m[1], sessionId, inbox) : await lookupOne(db, m[1], sessionId, inbox)
  const principal = principalOf(key, row)
  if (!principal || !row) return null
  if (row.key === null || row.key === undefined) return { principal, session: null }
  const session = toRow(row)
  if (o.inbox) session.inbox = JSON.parse(row.inbox as string) as Inbox
  return { principal, session }
}

type AuthRow = KeyRow & Raw & { inbox?: string }

/** One request's key and session row (with the inbox, for the routes that admit against it). */
async function lookupOne(db: Queryable, prefix: string, sessionId: string, inbox: boolean): Promise<AuthRow | undefined> {
  const { rows } = await db.query<AuthRow>(inbox ? AUTH_SESSION_INBOX : AUTH_SESSION, [prefix, sessionId])
  return rows[0]
}

/** lookups in flight per database at once; the requests arriving meanwhile wait and go together */
const LOOKUPS_IN_FLIGHT = 2
const LOOKUPS_PER_STATEMENT = 256

/**
 * The key-and-session lookups of concurrent requests to session routes, batched: while lookups are
 * in flight, the requests that arrive queue, and the next statement reads all of theirs at once
 * (one round trip for a burst of requests, as group commit does for appends). Each request gets
 * exactly the row its own statement would have read, from a statement that started after it arrived.
 */
class AuthLookups {
  private queue: Array<{ prefix: string; sessionId: string; inbox: boolean; resolve(r: AuthRow | undefined): void; reject(e: unknown): void }> = []
  private inFlight = 0

  constructor(private readonly db: Db) {}

  lookup(prefix: string, sessionId: string, inbox: boolean): Promise<AuthRow | undefined> {
    return new Promise((resolve, reject) => {
      this.queue.push({ prefix, sessionId, inbox, resolve, reject })
      this.pump()
    })
  }

  private pump(): void {
    while (this.inFlight < LOOKUPS_IN_FLIGHT && this.queue.length) {
      const batch = this.queue.splice(0, LOOKUPS_PER_STATEMENT)
      this.inFlight++
      void this.run(batch).finally(() => {
        this.inFlight--
        this.pump()
      })
    }
  }

  private async run(batch: AuthLookups['queue']): Promise<void> {
    if (batch.length === 1) {
      const [w] = batch
      await lookupOne(this.db, w.prefix, w.sessionId, w.inbox).then(w.resolve, w.reject)
      return
    }
    try {
      const { rows } = await this.db.query<AuthRow & { q: number }>(
        AUTH_BATCH,
        [batch.map((w) => w.prefix), batch.map((w) => w.sessionId), batch.map((w) => w.inbox)],
      )
      const byIndex = new Map(rows.map((r) => [Number(r.q) - 1, r]))
      batch.forEach((w, i) => w.resolve(byIndex.get(i)))
    } catch (e) {
      for (const w of batch) w.reject(e)
    }
  }
}

/** The Db's batcher, made on its first lookup and owned by the Db object. */
function lookups(db: Db): AuthLookups {
  return (db.lookups ??= new AuthLookups(db)) as AuthLookups
}
