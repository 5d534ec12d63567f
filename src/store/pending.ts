// Tool calls that wait for a client result or an approval (SPEC §18.10): durable rows any process
// can list and answer.

import { statement, type Queryable } from './db.js'

export type PendingKind = 'client' | 'approval'

export interface PendingCall {
  callId: string
  kind: PendingKind
  name: string
  arguments: string
  answered: boolean
  answer: unknown
}

type Raw = { call_id: string; kind: PendingKind; name: string; arguments: string; answered: boolean; answer: string | null }
const toCall = (r: Raw): PendingCall => ({ callId: r.call_id, kind: r.kind, name: r.name, arguments: r.arguments, answered: r.answered, answer: r.answer === null ? undefined : JSON.parse(r.answer) })

const LIST_ALL = statement('pending_list', 'SELECT call_id, kind, name, arguments, answered, answer FROM pending_calls WHERE session_key = $1 ORDER BY created_at, call_id')
const LIST_UNANSWERED = statement('pending_list_unanswered', 'SELECT call_id, kind, name, arguments, answered, answer FROM pending_calls WHERE session_key = $1 AND NOT answered ORDER BY created_at, call_id')
const GET_PENDING = statement('pending_get', 'SELECT call_id, kind, name, arguments, answered, answer FROM pending_calls WHERE session_key = $1 AND call_id = $2')
const ANSWER_PENDING = statement('pending_answer', 'UPDATE pending_calls SET answered = true, answer = $4 WHERE session_key = $1 AND call_id = $2 AND kind = $3 AND NOT answered')

export async function listPending(db: Queryable, key: string, onlyUnanswered = true): Promise<PendingCall[]> {
  const { rows } = await db.query<Raw>(onlyUnanswered ? LIST_UNANSWERED : LIST_ALL, [key])
  return rows.map(toCall)
}

export async function getPending(db: Queryable, key: string, callId: string): Promise<PendingCall | undefined> {
  const { rows } = await db.query<Raw>(GET_PENDING, [key, callId])
  return rows[0] ? toCall(rows[0]) : undefined
}

/** Marks an unanswered call of that kind answered; false when there is none (409 tool-call-not-pending). */
export async function answerPending(db: Queryable, key: string, callId: string, kind: PendingKind, answer: unknown): Promise<boolean> {
  const r = await db.query(ANSWER_PENDING, [key, callId, kind, JSON.stringify(answer)])
  return r.rowCount > 0
}
