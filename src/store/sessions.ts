// Session rows: what a session is (model, prompt, tools), where its log stands (next_seq, last_time,
// the inbox projection), its run state and its usage ledger. Leases are in leases.ts.

import type { Inbox, Json, LastTurn, RunState, UsageTotals } from '../session/index.js'
import { statement, type Queryable } from './db.js'
import { COLUMNS, toRow, type Raw, type SessionRow, type SessionSpec } from './rows.js'

export type { RunState }

export type { SessionRow, SessionSpec }

export interface NewSession extends SessionSpec {
  key: string
  tenantId: string
  id: string
  createHash: string
  createdAt: number
  /** API.md §18: the subject creating it, if any */
  owner?: string | null
}

const INSERT_SESSION = statement(
  'session_insert',
  `INSERT INTO sessions (key, tenant_id, id, model, system, tools, max_tokens, reasoning_effort, metadata, create_hash, created_at, updated_at, mcp_servers, agent_id, agent_version, owner)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, $12, $13, $14, $15)
     ON CONFLICT (tenant_id, id) DO NOTHING
     RETURNING ${COLUMNS}`,
)

/** Inserts a session; returns null when the (tenant, id) pair exists already. */
export async function insertSession(db: Queryable, s: NewSession): Promise<SessionRow | null> {
  const { rows } = await db.query<Raw>(
    INSERT_SESSION,
    [s.key, s.tenantId, s.id, s.model, s.system, JSON.stringify(s.tools), s.maxTokens ?? null, s.reasoningEffort ?? null, JSON.stringify(s.metadata), s.createHash, s.createdAt, JSON.stringify(s.mcpServers ?? []), s.agent?.id ?? null, s.agent?.version ?? null, s.owner ?? null],
  )
  return rows[0] ? toRow(rows[0]) : null
}

/** A tenant's session by id; with `inbox`, its pending input too (for a delivery to plan on, as authentication reads it). */
export async function getSession(db: Queryable, tenantId: string, id: string, o: { inbox?: boolean } = {}): Promise<SessionRow | undefined> {
  const { rows } = await db.query<Raw>(o.inbox ? GET_SESSION_INBOX : GET_SESSION, [tenantId, id])
  if (!rows[0]) return undefined
  const row = toRow(rows[0])
  if (o.inbox) row.inbox = JSON.parse(rows[0].inbox as string) as Inbox
  return row
}

export async function getSessionByKey(db: Queryable, key: string): Promise<SessionRow | undefined> {
  const { rows } = await db.query<Raw>(GET_BY_KEY, [key])
  return rows[0] ? toRow(rows[0]) : undefined
}

/** The session row locked FOR UPDATE: the first statement of every session-mutating transaction. */
export async function lockSession(db: Queryable, key: string): Promise<SessionRow | undefined> {
  const { rows } = await db.query<Raw>(LOCK_SESSION, [key])
  return rows[0] ? toRow(rows[0]) : undefined
}

/** The columns a driver append needs, locked FOR UPDATE (the fenced append path). */
export interface LeanRow {
  key: string
  nextSeq: number
  lastTime: number
  updatedAt: number
  runState: RunState
  cancelPending: boolean
  wakeLatched: boolean
  leaseOwner: string | null
  leaseToken: number
  openTurn: number | null
}

const LEAN = 'key, next_seq, last_time, updated_at, run_state, cancel_pending, wake_latched, lease_owner, lease_token, open_turn'
const GET_SESSION = statement('session_get', `SELECT ${COLUMNS} FROM sessions WHERE tenant_id = $1 AND id = $2`)
const GET_SESSION_INBOX = statement('session_get_inbox', `SELECT ${COLUMNS}, inbox FROM sessions WHERE tenant_id = $1 AND id = $2`)
const GET_BY_KEY = statement('session_by_key', `SELECT ${COLUMNS} FROM sessions WHERE key = $1`)
const LOCK_SESSION = statement('session_lock', `SELECT ${COLUMNS} FROM sessions WHERE key = $1 FOR UPDATE`)
const LEAN_READ = statement('session_lean', `SELECT ${LEAN} FROM sessions WHERE key = $1`)
const LEAN_LOCK = statement('session_lean_lock', `SELECT ${LEAN} FROM sessions WHERE key = $1 FOR UPDATE`)
const INTAKE_READ = statement('session_intake', `SELECT ${LEAN}, inbox FROM sessions WHERE key = $1`)
const INTAKE_LOCK = statement('session_intake_lock', `SELECT ${LEAN}, inbox FROM sessions WHERE key = $1 FOR UPDATE`)
const READ_INBOX = statement('session_inbox', 'SELECT inbox FROM sessions WHERE key = $1')
const READ_SETTINGS = statement('session_settings', 'SELECT model, system, tools, mcp_servers, max_tokens, reasoning_effort FROM sessions WHERE key = $1')

function toLean(r: Raw): LeanRow {
  return {
    key: r.key as string,
    nextSeq: r.next_seq as number,
    lastTime: Number(r.last_time),
    updatedAt: Number(r.updated_at),
    runState: r.run_state as RunState,
    cancelPending: r.cancel_pending as boolean,
    wakeLatched: r.wake_latched as boolean,
    leaseOwner: (r.lease_owner as string | null) ?? null,
    leaseToken: Number(r.lease_token),
    openTurn: (r.open_turn as number | null) ?? null,
  }
}

export async function lockLean(db: Queryable, key: string, lock = true): Promise<LeanRow | undefined> {
  const { rows } = await db.query<Raw>(lock ? LEAN_LOCK : LEAN_READ, [key])
  return rows[0] ? toLean(rows[0]) : undefined
}

/**
 * The columns intake needs, with the inbox projection, in one statement: locked FOR UPDATE, or read
 * optimistically (the append is then conditioned on next_seq and the flags it decided on).
 */
export async function readForIntake(db: Queryable, key: string, lock = false): Promise<(LeanRow & { inbox: Inbox }) | undefined> {
  const { rows } = await db.query<Raw>(lock ? INTAKE_LOCK : INTAKE_READ, [key])
  const r = rows[0]
  return r ? { ...toLean(r), inbox: JSON.parse(r.inbox as string) as Inbox } : undefined
}

/** The locked row's inbox projection. */
export async function readInbox(db: Queryable, key: string): Promise<Inbox> {
  const { rows } = await db.query<{ inbox: string }>(READ_INBOX, [key])
  return rows[0] ? (JSON.parse(rows[0].inbox) as Inbox) : { nextTurn: [], nextStep: [] }
}

export interface ListPage {
  sessions: SessionRow[]
  nextCursor: string | null
}

export function encodeCursor(r: { updatedAt: number; key: string }): string {
  return Buffer.from(`${r.updatedAt}:${r.key}`).toString('base64url')
}

export function decodeCursor(c: string): { updatedAt: number; key: string } | null {
  const s = Buffer.from(c, 'base64url').toString('utf8')
  const m = /^(\d+):([0-9a-f-]{36})$/.exec(s)
  return m ? { updatedAt: Number(m[1]), key: m[2] } : null
}

/** Which of a tenant's sessions a list shows (API.md §18): those a subject owns, those named. */
export interface SessionFilter {
  owner?: string
  ids?: readonly string[]
  /** only sessions made from one of these agents */
  agents?: readonly string[]
}

/**
 * The list's statements, one named per combination of its conditions (a cursor, an owner, ids, agents:
 * bit 0 to 3 of the index), so each variant is prepared under its own name. The parameters are the
 * tenant and the limit, then those of the conditions present, in this order.
 */
const LIST_SESSIONS: readonly string[] = Array.from({ length: 16 }, (_, m) => {
  let n = 2
  let where = 'tenant_id = $1'
  if (m & 1) {
    where += ' AND (updated_at, key) < ($3, $4::uuid)'
    n += 2
  }
  if (m & 2) where += ` AND owner = $${++n}`
  if (m & 4) where += ` AND id = ANY($${++n}::text[])`
  if (m & 8) where += ` AND agent_id = ANY($${++n}::text[])`
  const text = `SELECT ${COLUMNS} FROM sessions WHERE ${where} ORDER BY updated_at DESC, key DESC LIMIT $2`
  return statement(`session_list${m & 1 ? '_after' : ''}${m & 2 ? '_owner' : ''}${m & 4 ? '_ids' : ''}${m & 8 ? '_agents' : ''}`, text)
})

/** Newest activity first (updated_at, then key), keyset-paged. */
export async function listSessions(db: Queryable, tenantId: string, limit: number, cursor?: { updatedAt: number; key: string }, filter: SessionFilter = {}): Promise<ListPage> {
  const params: unknown[] = [tenantId, limit + 1]
  let variant = 0
  if (cursor) {
    params.push(cursor.updatedAt, cursor.key)
    variant |= 1
  }
  if (filter.owner !== undefined) {
    params.push(filter.owner)
    variant |= 2
  }
  if (filter.ids !== undefined) {
    params.push([...filter.ids])
    variant |= 4
  }
  if (filter.agents !== undefined) {
    params.push([...filter.agents])
    variant |= 8
  }
  const { rows } = await db.query<Raw>(LIST_SESSIONS[variant], params)
  const list = rows.map(toRow)
  const more = list.length > limit
  if (more) list.pop()
  return { sessions: list, nextCursor: more ? encodeCursor(list[list.length - 1]) : null }
}

/** A session's settings as they stand now (API.md §4: PATCH changes them; the driver reads them before a step after a poke). */
export interface StoredSettings {
  model: string
  system: string
  tools: Json[]
  mcpServers: Json[]
  maxTokens?: number
  reasoningEffort?: string
}

export async function readSettings(db: Queryable, key: string): Promise<StoredSettings | undefined> {
  const { rows } = await db.query<Raw>(READ_SETTINGS, [key])
  const r = rows[0]
  if (!r) return undefined
  const s: StoredSettings = { model: r.model as string, system: r.system as string, tools: JSON.parse(r.tools as string) as Json[], mcpServers: JSON.parse((r.mcp_servers as string | null) ?? '[]') as Json[] }
  if (r.max_tokens !== null && r.max_tokens !== undefined) s.maxTokens = r.max_tokens as number
  if (r.reasoning_effort !== null && r.reasoning_effort !== undefined) s.reasoningEffort = r.reasoning_effort as string
  return s
}

/** What PATCH /v1/sessions/:id writes (API.md §4), every column in one statement. */
export interface SessionPatch {
  title?: string | null
  metadata?: Json
  model?: string
  system?: string
  tools?: Json[]
  mcpServers?: Json[]
  maxTokens?: number
  reasoningEffort?: string
}

const PATCH_COLUMNS: Array<[keyof SessionPatch, string, boolean]> = [
  ['title', 'title', false],
  ['metadata', 'metadata', true],
  ['model', 'model', false],
  ['system', 'system', false],
  ['tools', 'tools', true],
  ['mcpServers', 'mcp_servers', true],
  ['maxTokens', 'max_tokens', false],
  ['reasoningEffort', 'reasoning_effort', false],
]

/**
 * The patch's statement for a set of columns (a mask of PATCH_COLUMNS bits, 1 to 255), named by it and
 * made on its first use: one stable name per set of columns, at most 255 of them.
 */
const PATCH_SESSION = new Map<number, string>()
function patchStatement(mask: number): string {
  let text = PATCH_SESSION.get(mask)
  if (text === undefined) {
    const sets: string[] = []
    PATCH_COLUMNS.forEach(([, column], i) => {
      if (mask & (1 << i)) sets.push(`${column} = $${sets.length + 2}`)
    })
    text = statement(`session_patch_${mask}`, `UPDATE sessions SET ${sets.join(', ')} WHERE key = $1`)
    PATCH_SESSION.set(mask, text)
  }
  return text
}

/** Writes the patch; false when the session is gone. */
export async function patchSession(db: Queryable, key: string, patch: SessionPatch): Promise<boolean> {
  let mask = 0
  const params: unknown[] = [key]
  PATCH_COLUMNS.forEach(([field, , json], i) => {
    const v = patch[field]
    if (v === undefined) return
    params.push(json ? JSON.stringify(v) : v)
    mask |= 1 << i
  })
  if (!mask) return true
  const r = await db.query(patchStatement(mask), params)
  return r.rowCount > 0
}

const DELETE_SESSION = statement('session_delete', 'DELETE FROM sessions WHERE key = $1')

export async function deleteSession(db: Queryable, key: string): Promise<boolean> {
  const r = await db.query(DELETE_SESSION, [key])
  return r.rowCount > 0
}

/** Columns an append may move, besides next_seq and last_time. */
export interface RowPatch {
  inbox?: Inbox
  openTurn?: number | null
  runState?: RunState
  cancelPending?: boolean
  wakeLatched?: boolean
  usage?: UsageTotals
  /** the unit's latest turn/end (API.md §4 lastTurn) */
  lastTurn?: LastTurn
  /** SPEC §19: the turn a continuation is owed for; null once it opened or was declined */
  continueTurn?: number | null
}

