// The keys agentd signs its tokens with (API.md §18): rows hold the public JWK and the sealed private
// one; credentials/ generates, seals and opens them.

import { statement, type Db, type Queryable } from './db.js'
import type { SealedSecret } from './secrets.js'

export interface SigningKeyRow {
  kid: string
  /** the public JWK, as JSON text */
  publicJwk: string
  sealed: SealedSecret
  createdAt: number
  /** signs no token from this time on */
  retireAt: number
  /** verifies no token from this time on; deleted then */
  expiresAt: number
}

/** "sigk" */
const LOCK_KEY = 0x7369676b

type Raw = { kid: string; public_jwk: string; nonce: Uint8Array; ciphertext: Uint8Array; created_at: string | number; retire_at: string | number; expires_at: string | number }

const toRow = (r: Raw): SigningKeyRow => ({
  kid: r.kid,
  publicJwk: r.public_jwk,
  sealed: { nonce: Buffer.from(r.nonce), ciphertext: Buffer.from(r.ciphertext) },
  createdAt: Number(r.created_at),
  retireAt: Number(r.retire_at),
  expiresAt: Number(r.expires_at),
})

const READ_KEYS = statement('signing_keys_read', 'SELECT kid, public_jwk, nonce, ciphertext, created_at, retire_at, expires_at FROM signing_keys WHERE expires_at > $1 ORDER BY created_at DESC, kid')
const LOCK_KEYS = statement('signing_keys_lock', 'SELECT pg_advisory_xact_lock($1)')
const PRUNE_KEYS = statement('signing_keys_prune', 'DELETE FROM signing_keys WHERE expires_at <= $1')
const COUNT_SIGNERS = statement('signing_keys_signers', 'SELECT count(*)::int AS n FROM signing_keys WHERE retire_at > $1')
const INSERT_KEY = statement('signing_key_insert', 'INSERT INTO signing_keys (kid, public_jwk, nonce, ciphertext, created_at, retire_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)')

/** The keys that still verify at `now`, newest first. */
export async function readSigningKeys(db: Queryable, now: number): Promise<SigningKeyRow[]> {
  const { rows } = await db.query<Raw>(READ_KEYS, [now])
  return rows.map(toRow)
}

/**
 * Adds `make()`'s key unless a key that signs until after `signsUntil` exists already, under a lock
 * every process takes, so processes that find no signer at once add one key between them; expired
 * keys are deleted meanwhile. Answers the signing keys as they stand after it, newest first.
 */
export async function addSigningKey(db: Db, now: number, signsUntil: number, make: () => Promise<SigningKeyRow>): Promise<SigningKeyRow[]> {
  return db.transaction(async (tx) => {
    await tx.query(LOCK_KEYS, [LOCK_KEY])
    await tx.query(PRUNE_KEYS, [now])
    const { rows } = await tx.query<{ n: number }>(COUNT_SIGNERS, [signsUntil])
    if (rows[0].n === 0) {
      const k = await make()
      await tx.query(INSERT_KEY, [k.kid, k.publicJwk, k.sealed.nonce, k.sealed.ciphertext, k.createdAt, k.retireAt, k.expiresAt])
    }
    return readSigningKeys(tx, now)
  })
}
