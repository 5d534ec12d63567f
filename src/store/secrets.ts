// Tenant secrets (API.md §13): rows hold only ciphertext and its nonce; tenancy/ encrypts and decrypts.

import type { Queryable } from './db.js'

export interface SealedSecret {
  nonce: Buffer
  ciphertext: Buffer
}

export interface SecretInfo {
  name: string
  createdAt: number
  updatedAt: number
}

/** Creates or replaces a secret; created_at stays that of the first write. */
export async function putSecret(db: Queryable, tenantId: string, name: string, sealed: SealedSecret, now: number): Promise<void> {
  await db.query(
    `INSERT INTO secrets (tenant_id, name, nonce, ciphertext, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $5)
     ON CONFLICT (tenant_id, name) DO UPDATE SET nonce = EXCLUDED.nonce, ciphertext = EXCLUDED.ciphertext, updated_at = EXCLUDED.updated_at`,
    [tenantId, name, sealed.nonce, sealed.ciphertext, now],
  )
}

/** The tenant's secret names and times, by name; never a value. */
export async function listSecrets(db: Queryable, tenantId: string): Promise<SecretInfo[]> {
  const { rows } = await db.query<{ name: string; created_at: string | number; updated_at: string | number }>('SELECT name, created_at, updated_at FROM secrets WHERE tenant_id = $1 ORDER BY name', [tenantId])
  return rows.map((r) => ({ name: r.name, createdAt: Number(r.created_at), updatedAt: Number(r.updated_at) }))
}

export async function deleteSecret(db: Queryable, tenantId: string, name: string): Promise<boolean> {
  const r = await db.query('DELETE FROM secrets WHERE tenant_id = $1 AND name = $2', [tenantId, name])
  return r.rowCount > 0
}

/** The sealed values of the named secrets of one tenant that exist. */
export async function readSecrets(db: Queryable, tenantId: string, names: readonly string[]): Promise<Map<string, SealedSecret>> {
  const out = new Map<string, SealedSecret>()
  if (!names.length) return out
  const { rows } = await db.query<{ name: string; nonce: Uint8Array; ciphertext: Uint8Array }>('SELECT name, nonce, ciphertext FROM secrets WHERE tenant_id = $1 AND name = ANY($2::text[])', [tenantId, [...names]])
  for (const r of rows) out.set(r.name, { nonce: Buffer.from(r.nonce), ciphertext: Buffer.from(r.ciphertext) })
  return out
}
