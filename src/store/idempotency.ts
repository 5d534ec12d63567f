// Idempotency records of deliveries (API.md §5): the first answer for a client message id.

import { statement, type Queryable } from './db.js'

export interface IdempotencyRecord {
  messageId: string
  route: string
  bodyHash: string
  seq: number
}

const FIND = statement('idempotency_find', 'SELECT message_id, route, body_hash, seq FROM idempotency WHERE session_key = $1 AND message_id = $2')

export async function findIdempotency(db: Queryable, key: string, messageId: string): Promise<IdempotencyRecord | undefined> {
  const { rows } = await db.query<{ message_id: string; route: string; body_hash: string; seq: number }>(FIND, [key, messageId])
  const r = rows[0]
  return r ? { messageId: r.message_id, route: r.route, bodyHash: r.body_hash, seq: r.seq } : undefined
}

const PRUNE = statement('idempotency_prune', 'DELETE FROM idempotency WHERE created_at < $1')

/** Drops records older than maxAgeMs (they are kept at least 24 hours). */
export async function pruneIdempotency(db: Queryable, maxAgeMs: number): Promise<number> {
  const r = await db.query(PRUNE, [Date.now() - maxAgeMs])
  return r.rowCount
}
