// Tenants and API keys (API.md §3). A key is `agd_<prefix>_<secret>`; we store the prefix for lookup
// and a SHA-256 of the whole key, compared in constant time.

import crypto from 'node:crypto'
import type { Queryable } from './db.js'

export interface Tenant {
  id: string
  name: string
}

export interface Principal {
  tenantId: string
  keyId: string
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

/** The principal of a bearer key, or null for a malformed, unknown or revoked key. */
export async function authenticate(db: Queryable, key: string): Promise<Principal | null> {
  const m = KEY_RE.exec(key)
  if (!m) return null
  const { rows } = await db.query<{ id: string; tenant_id: string; hash: Buffer | Uint8Array }>('SELECT id, tenant_id, hash FROM api_keys WHERE prefix = $1 AND revoked_at IS NULL', [m[1]])
  const row = rows[0]
  if (!row) return null
  const stored = Buffer.from(row.hash)
  const given = sha256(key)
  if (stored.length !== given.length || !crypto.timingSafeEqual(stored, given)) return null
  return { tenantId: row.tenant_id, keyId: row.id }
}
