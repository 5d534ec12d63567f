// Tenants, their limits (API.md §15) and API keys (API.md §3). A key is `agd_<prefix>_<secret>`; we
// store the prefix for lookup and a SHA-256 of the whole key, compared in constant time.

import crypto from 'node:crypto'
import type { Inbox } from '../session/index.js'
import type { Queryable } from './db.js'
import { COLUMNS, toRow, type Raw, type SessionRow } from './rows.js'

export interface Tenant {
  id: string
  name: string
}

export interface Principal {
  tenantId: string
  keyId: string
  /** the tenant's limit on requests per minute (API.md §15), shared by its keys */
  requestsPerMin?: number
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

const TENANT = `id, name, ${Object.values(LIMIT_COLUMNS).join(', ')}`

function toTenant(r: Record<string, unknown>): Tenant & { limits: TenantLimits } {
  const limits: TenantLimits = {}
  for (const [k, col] of Object.entries(LIMIT_COLUMNS) as Array<[keyof TenantLimits, string]>) if (r[col] !== null && r[col] !== undefined) limits[k] = Number(r[col])
  return { id: r.id as string, name: r.name as string, limits }
}

const KEY_RE = /^agd_([0-9a-f]{12})_([0-9A-Za-z_-]{43})$/

const sha256 = (s: string) => crypto.createHash('sha256').update(s).digest()

function newKey(): { prefix: string; key: string } {
  const prefix = crypto.randomBytes(6).toString('hex')
  const secret = crypto.randomBytes(32).toString('base64url')
  return { prefix, key: `agd_${prefix}_${secret}` }
}

export async function createTenant(db: Queryable, name: string): Promise<{ tenant: Tenant; apiKey: string; keyId: string }> {
  const id = crypto.randomUUID()
  await db.query('INSERT INTO tenants (id, name, created_at) VALUES ($1, $2, $3)', [id, name, Date.now()])
  const k = await createKey(db, id)
  return { tenant: { id, name }, apiKey: k.apiKey, keyId: k.keyId }
}

export async function tenantExists(db: Queryable, tenantId: string): Promise<boolean> {
  const { rows } = await db.query('SELECT 1 FROM tenants WHERE id = $1', [tenantId])
  return rows.length > 0
}

export async function getTenant(db: Queryable, tenantId: string): Promise<(Tenant & { limits: TenantLimits }) | undefined> {
  const { rows } = await db.query<Record<string, unknown>>(`SELECT ${TENANT} FROM tenants WHERE id = $1`, [tenantId])
  return rows[0] ? toTenant(rows[0]) : undefined
}

/** Sets the given limits (null removes one) in one statement; undefined for an unknown tenant. */
export async function updateLimits(db: Queryable, tenantId: string, patch: { [K in keyof TenantLimits]?: number | null }): Promise<(Tenant & { limits: TenantLimits }) | undefined> {
  const params: unknown[] = [tenantId]
  const sets = (Object.keys(patch) as Array<keyof TenantLimits>).filter((k) => patch[k] !== undefined).map((k) => {
    params.push(patch[k])
    return `${LIMIT_COLUMNS[k]} = $${params.length}`
  })
  const { rows } = await db.query<Record<string, unknown>>(sets.length ? `UPDATE tenants SET ${sets.join(', ')} WHERE id = $1 RETURNING ${TENANT}` : `SELECT ${TENANT} FROM tenants WHERE id = $1`, params)
  return rows[0] ? toTenant(rows[0]) : undefined
}

export async function countTenants(db: Queryable): Promise<number> {
  const { rows } = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM tenants')
  return rows[0].n
}

export async function createKey(db: Queryable, tenantId: string): Promise<{ keyId: string; apiKey: string }> {
  const keyId = crypto.randomUUID()
  const { prefix, key } = newKey()
  await db.query('INSERT INTO api_keys (id, tenant_id, prefix, hash, created_at) VALUES ($1, $2, $3, $4, $5)', [keyId, tenantId, prefix, sha256(key), Date.now()])
  return { keyId, apiKey: key }
}

/** Revokes a key; false when no such live key exists. */
export async function revokeKey(db: Queryable, keyId: string): Promise<boolean> {
  const r = await db.query('UPDATE api_keys SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL', [keyId, Date.now()])
  return r.rowCount > 0
}

type KeyRow = { auth_key_id: string; auth_tenant_id: string; auth_hash: Buffer | Uint8Array; auth_rpm: number | null }

const AUTH = 'SELECT k.id AS auth_key_id, k.tenant_id AS auth_tenant_id, k.hash AS auth_hash, t.requests_per_min AS auth_rpm'
const AUTH_FROM = 'FROM api_keys k JOIN tenants t ON t.id = k.tenant_id'
// the session columns, qualified (their names do not clash with the auth_ ones)
const SESSION_COLUMNS = COLUMNS.split(',').map((c) => `s.${c.trim()}`).join(', ')

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
  const { rows } = await db.query<KeyRow>(`${AUTH} ${AUTH_FROM} WHERE k.prefix = $1 AND k.revoked_at IS NULL`, [m[1]])
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
  const { rows } = await db.query<KeyRow & Raw>(
    `${AUTH}, ${SESSION_COLUMNS}${o.inbox ? ', s.inbox' : ''} ${AUTH_FROM} LEFT JOIN sessions s ON s.tenant_id = k.tenant_id AND s.id = $2 WHERE k.prefix = $1 AND k.revoked_at IS NULL`,
    [m[1], sessionId],
  )
  const principal = principalOf(key, rows[0])
  if (!principal) return null
  if (rows[0].key === null || rows[0].key === undefined) return { principal, session: null }
  const session = toRow(rows[0])
  if (o.inbox) session.inbox = JSON.parse(rows[0].inbox as string) as Inbox
  return { principal, session }
}
