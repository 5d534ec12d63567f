// Session leases (SPEC §2.2, §13.3a; DESIGN.md §3 Ownership): a row's owner, fencing token and expiry
// in the database's clock. Every lease statement is here: claim and takeover, renewal, release, the
// idle release, and the takeover scan.

import { statement, type Db, type Queryable } from './db.js'
import { COLUMNS, toRow, type SessionRow } from './rows.js'

/** The database clock in epoch ms: lease times never depend on a process's clock. */
export const NOW_MS = '(extract(epoch from clock_timestamp()) * 1000)::bigint'

const LEASE_PEEK_TEXT = `SELECT lease_owner, (lease_expires_at IS NULL OR lease_expires_at < ${NOW_MS}) AS expired FROM sessions WHERE key = $1 FOR UPDATE`
const LEASE_PEEK = statement('lease_peek', LEASE_PEEK_TEXT)
const LEASE_PEEK_SKIP = statement('lease_peek_skip', `${LEASE_PEEK_TEXT} SKIP LOCKED`)
const LEASE_TAKE = statement('lease_take', `UPDATE sessions SET lease_owner = $2, lease_token = lease_token + 1, lease_expires_at = ${NOW_MS} + $3 WHERE key = $1 RETURNING ${COLUMNS}`)
const LEASE_RENEW = statement(
  'lease_renew',
  `UPDATE sessions s SET lease_expires_at = ${NOW_MS} + $3
     FROM (SELECT key FROM sessions WHERE key = ANY($1::uuid[]) AND lease_owner = $2 ORDER BY key FOR UPDATE) k
     WHERE s.key = k.key RETURNING s.key, s.lease_token`,
)
const LEASE_RELEASE = statement('lease_release', 'UPDATE sessions SET lease_owner = NULL, lease_expires_at = NULL WHERE key = $1 AND lease_owner = $2')
const LEASE_RELEASE_TOKEN = statement('lease_release_token', 'UPDATE sessions SET lease_owner = NULL, lease_expires_at = NULL WHERE key = $1 AND lease_owner = $2 AND lease_token = $3')
const LEASE_IDLE_LOCK = statement('lease_idle_lock', 'SELECT run_state FROM sessions WHERE key = $1 AND lease_owner = $2 AND lease_token = $3 FOR UPDATE')
const LEASE_DROP = statement('lease_drop', 'UPDATE sessions SET lease_owner = NULL, lease_expires_at = NULL WHERE key = $1')
const LEASE_CANDIDATES = statement(
  'lease_candidates',
  `SELECT key FROM sessions WHERE (run_state <> 'idle' OR open_turn IS NOT NULL) AND (lease_owner IS NULL OR lease_expires_at < ${NOW_MS}) ORDER BY lease_expires_at NULLS FIRST LIMIT $1`,
)

/**
 * Claims a session's lease in the caller's transaction, as its first statement (it locks the row):
 * when the lease is free, expired or already `owner`'s, it takes a new fencing token that expires in
 * ttlMs. Null when the row is gone, another owner's lease is live, or (skipLocked) the row is locked.
 * `takeover` says the previous holder was another owner.
 */
export async function claimLease(tx: Queryable, key: string, owner: string, ttlMs: number, o: { skipLocked?: boolean } = {}): Promise<{ row: SessionRow; takeover: boolean } | null> {
  const { rows: cand } = await tx.query<{ lease_owner: string | null; expired: boolean }>(o.skipLocked ? LEASE_PEEK_SKIP : LEASE_PEEK, [key])
  const c = cand[0]
  if (!c) return null
  if (c.lease_owner !== null && c.lease_owner !== owner && !c.expired) return null
  const { rows } = await tx.query<Record<string, unknown>>(LEASE_TAKE, [key, owner, ttlMs])
  return { row: toRow(rows[0]), takeover: c.lease_owner !== null && c.lease_owner !== owner }
}

/** Extends the leases `owner` still holds among `keys`; answers the fencing token of each one held. */
export async function renewLeases(db: Queryable, keys: string[], owner: string, ttlMs: number): Promise<Map<string, number>> {
  // rows locked in key order, one renewal at a time: no lock cycle with other renewals or appends
  const { rows } = await db.query<{ key: string; lease_token: number }>(LEASE_RENEW, [keys, owner, ttlMs])
  return new Map(rows.map((r) => [r.key, Number(r.lease_token)]))
}

/** Releases a lease `owner` holds (only under `token`, when given). */
export async function releaseLease(db: Queryable, key: string, owner: string, token?: number): Promise<void> {
  if (token === undefined) await db.query(LEASE_RELEASE, [key, owner])
  else await db.query(LEASE_RELEASE_TOKEN, [key, owner, token])
}

/**
 * Releases the lease atomically only while the session is idle under it: a delivery that set a wake
 * meanwhile keeps it. `stillIdle` is the holder's own view, asked under the row lock.
 */
export async function releaseIfIdle(db: Db, key: string, owner: string, token: number, stillIdle: () => boolean): Promise<boolean> {
  return db.transaction(async (tx) => {
    const { rows } = await tx.query<{ run_state: string }>(LEASE_IDLE_LOCK, [key, owner, token])
    if (!rows[0] || rows[0].run_state !== 'idle' || !stillIdle()) return false
    await tx.query(LEASE_DROP, [key])
    return true
  })
}

/** SPEC §13.3a: sessions with work or an open turn whose lease is free or expired, oldest expiry first. */
export async function takeoverCandidates(db: Queryable, limit = 50): Promise<string[]> {
  const { rows } = await db.query<{ key: string }>(LEASE_CANDIDATES, [limit])
  return rows.map((r) => r.key)
}
