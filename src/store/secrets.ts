// Tenant secrets (API.md §13): rows hold only ciphertext and its nonce; tenancy/ encrypts and decrypts.

import { statement, type Queryable } from './db.js'

export interface SealedSecret {
  nonce: Buffer
  ciphertext: Buffer
}

export interface SecretInfo {
  name: string
  createdAt: number
  updatedAt: number
}

const PUT_SECRET = statement(
  'secret_put',
  `INSERT INTO secrets (tenant_id, name, nonce, ciphertext, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $5)
     ON CONFLICT (tenant_id, name) DO UPDATE SET nonce = EXCLUDED.nonce, ciphertext = EXCLUDED.ciphertext, updated_at = EXCLUDED.updated_at`,
)
const LIST_SECRETS = statement('secret_list', 'SELECT name, created_at, updated_at FROM secrets WHERE tenant_id = $1 ORDER BY name')
const DELETE_SECRET = statement('secret_delete', 'DELETE FROM secrets WHERE tenant_id = $1 AND name = $2')
const READ_SECRETS = statement('secret_read', 'SELECT name, nonce, ciphertext FROM secrets WHERE tenant_id = $1 AND name = ANY($2::text[])')

/** Creates or replaces a secret; created_at stays that of the first write. */
export async function putSecret(db: Queryable, tenantId: string, name: string, sealed: SealedSecret, now: number): Promise<void> {
  await db.query(PUT_SECRET, [tenantId, name, sealed.nonce, sealed.ciphertext, now])
}

/** The tenant's secret names and times, by name; never a value. */
export async function listSecrets(db: Queryable, tenantId: string): Promise<SecretInfo[]> {
  const { rows } = await db.query<{ name: string; created_at: string | number; updated_at: string | number }>(LIST_SECRETS, [tenantId])
  return rows.map((r) => ({ name: r.name, createdAt: Number(r.created_at), updatedAt: Number(r.updated_at) }))
}

export async function deleteSecret(db: Queryable, tenantId: string, name: string): Promise<boolean> {
  const r = await db.query(DELETE_SECRET, [tenantId, name])
  return r.rowCount > 0
}

/** The sealed values of the named secrets of one tenant that exist. */
export async function readSecrets(db: Queryable, tenantId: string, names: readonly string[]): Promise<Map<string, SealedSecret>> {
  const out = new Map<string, SealedSecret>()
  if (!names.length) return out
  const { rows } = await db.query<{ name: string; nonce: Uint8Array; ciphertext: Uint8Array }>(READ_SECRETS, [tenantId, [...names]])
  for (const r of rows) out.set(r.name, { nonce: Buffer.from(r.nonce), ciphertext: Buffer.from(r.ciphertext) })
  return out
}
