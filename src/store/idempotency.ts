// Idempotency records of deliveries (API.md §5): the first answer for a client message id.

import type { Queryable } from './db.js'

export interface IdempotencyRecord {
  messageId: string
  route: string
  bodyHash: string
  seq: number
}

export async function findIdempotency(db: Queryable, key: string, messageId: string): Promise<IdempotencyRecord | undefined> {
  const { rows } = await db.query<{ message_id: string; route: string; body_hash: string; seq: number }>(
    'SELECT message_id, route, body_hash, seq FROM idempotency WHERE session_key = $1 AND message_id = $2',
    [key, messageId],
  )
  const r = rows[0]
  return r ? { messageId: r.message_id, route: r.route, bodyHash: r.body_hash, seq: r.seq } : undefined
}

/**
 * Side row (side.ts): the first answer for a message id, written with its delivery's splice. A
 * duplicate id fails the whole statement (23505): a concurrent delivery won.
 */
export function idempotencySql(r: IdempotencyRecord, params: unknown[], when: string, key = '$1'): string {
  params.push(r.messageId, r.route, r.bodyHash, r.seq, Date.now())
  const n = params.length
  return `INSERT INTO idempotency (session_key, message_id, route, body_hash, seq, created_at) SELECT ${key}, $${n - 4}, $${n - 3}, $${n - 2}, $${n - 1}, $${n} WHERE ${when}`
}

/** Drops records older than maxAgeMs (they are kept at least 24 hours). */
export async function pruneIdempotency(db: Queryable, maxAgeMs: number): Promise<number> {
  const r = await db.query('DELETE FROM idempotency WHERE created_at < $1', [Date.now() - maxAgeMs])
  return r.rowCount
}
