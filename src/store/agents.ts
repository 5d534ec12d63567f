// Agents (API.md §16): the agent row (its id, latest version, create hash, soft delete) and its
// versions, each written once and never changed. A deleted agent reads as missing; its versions stay
// for the sessions made from them.

import type { JsonObject } from '../session/index.js'
import { statement, type Db, type Queryable } from './db.js'

/** The session settings an agent version holds (API.md §4 settings). */
export interface AgentSettings {
  model: string
  system: string
  tools: JsonObject[]
  mcpServers: JsonObject[]
  maxTokens?: number
  reasoningEffort?: string
}

/** What a version holds besides the settings. */
export interface AgentFields extends AgentSettings {
  name: string
  description?: string
  metadata: JsonObject
}

/** One version of a live agent. */
export interface AgentVersionRow extends AgentFields {
  tenantId: string
  id: string
  version: number
  /** when the agent was created (its id's latest creation) */
  createdAt: number
  /** when this version was made */
  versionCreatedAt: number
}

const VERSION_COLUMNS = `a.tenant_id, a.id, a.created_at, v.version, v.name, v.description, v.model, v.system, v.tools, v.mcp_servers,
  v.max_tokens, v.reasoning_effort, v.metadata, v.created_at AS version_created_at`

type Raw = Record<string, unknown>

function toVersion(r: Raw): AgentVersionRow {
  const row: AgentVersionRow = {
    tenantId: r.tenant_id as string,
    id: r.id as string,
    version: r.version as number,
    name: r.name as string,
    model: r.model as string,
    system: r.system as string,
    tools: JSON.parse(r.tools as string),
    mcpServers: JSON.parse(r.mcp_servers as string),
    metadata: JSON.parse(r.metadata as string),
    createdAt: Number(r.created_at),
    versionCreatedAt: Number(r.version_created_at),
  }
  if (r.description !== null) row.description = r.description as string
  if (r.max_tokens !== null) row.maxTokens = r.max_tokens as number
  if (r.reasoning_effort !== null) row.reasoningEffort = r.reasoning_effort as string
  return row
}

const INSERT_VERSION = statement(
  'agent_version_insert',
  `INSERT INTO agent_versions (tenant_id, agent_id, version, name, description, model, system, tools, mcp_servers, max_tokens, reasoning_effort, metadata, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
)
const CREATE_AGENT = statement(
  'agent_create',
  `INSERT INTO agents AS a (tenant_id, id, version, create_hash, created_at) VALUES ($1, $2, 1, $3, $4)
       ON CONFLICT (tenant_id, id) DO UPDATE SET version = a.version + 1, first_version = a.version + 1, create_hash = EXCLUDED.create_hash, created_at = EXCLUDED.created_at, deleted_at = NULL
         WHERE a.deleted_at IS NOT NULL
       RETURNING version`,
)
const CREATE_HASH = statement('agent_create_hash', 'SELECT create_hash FROM agents WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL')
const ID_USED = statement('agent_id_used', 'SELECT 1 FROM agents WHERE tenant_id = $1 AND id = $2')
const READ_AGENT = statement(
  'agent_read',
  `SELECT ${VERSION_COLUMNS} FROM agents a JOIN agent_versions v ON v.tenant_id = a.tenant_id AND v.agent_id = a.id
     WHERE a.tenant_id = $1 AND a.id = $2 AND a.deleted_at IS NULL AND v.version = coalesce($3::integer, a.version) AND v.version >= a.first_version`,
)
const LIST_TEXT = (where: string) => `SELECT ${VERSION_COLUMNS} FROM agents a JOIN agent_versions v ON v.tenant_id = a.tenant_id AND v.agent_id = a.id AND v.version = a.version
     WHERE ${where} ORDER BY a.created_at DESC, a.id DESC LIMIT $2`
/** listAgents' two statements: the first page, and the pages after a cursor. */
const LIST_AGENTS = statement('agent_list', LIST_TEXT('a.tenant_id = $1 AND a.deleted_at IS NULL'))
const LIST_AGENTS_AFTER = statement('agent_list_after', LIST_TEXT('a.tenant_id = $1 AND a.deleted_at IS NULL AND (a.created_at, a.id) < ($3, $4)'))
const LOCK_AGENT = statement('agent_lock', 'SELECT 1 FROM agents WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL FOR UPDATE')
const SET_VERSION = statement('agent_set_version', 'UPDATE agents SET version = $3 WHERE tenant_id = $1 AND id = $2')
const DELETE_AGENT = statement('agent_delete', 'UPDATE agents SET deleted_at = $3 WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL')

async function insertVersion(db: Queryable, tenantId: string, id: string, version: number, f: AgentFields, now: number): Promise<void> {
  await db.query(
    INSERT_VERSION,
    [tenantId, id, version, f.name, f.description ?? null, f.model, f.system, JSON.stringify(f.tools), JSON.stringify(f.mcpServers), f.maxTokens ?? null, f.reasoningEffort ?? null, JSON.stringify(f.metadata), now],
  )
}

/**
 * Creates the agent: version 1, or for an id whose agent was deleted the next version number (so an
 * id and a version always name the same settings), the deleted agent's versions staying out of reach.
 * Null when a live agent has the id already.
 */
export async function createAgent(db: Db, a: { tenantId: string; id: string; createHash: string; fields: AgentFields; now: number }): Promise<AgentVersionRow | null> {
  return db.transaction(async (tx) => {
    const { rows } = await tx.query<{ version: number }>(CREATE_AGENT, [a.tenantId, a.id, a.createHash, a.now])
    if (!rows[0]) return null
    await insertVersion(tx, a.tenantId, a.id, rows[0].version, a.fields, a.now)
    return { ...a.fields, tenantId: a.tenantId, id: a.id, version: rows[0].version, createdAt: a.now, versionCreatedAt: a.now }
  })
}

/** The create hash of a live agent, or undefined. */
export async function agentCreateHash(db: Queryable, tenantId: string, id: string): Promise<string | undefined> {
  const { rows } = await db.query<{ create_hash: string }>(CREATE_HASH, [tenantId, id])
  return rows[0]?.create_hash
}

/** Whether the tenant ever had an agent of this id, deleted ones included. */
export async function agentIdUsed(db: Queryable, tenantId: string, id: string): Promise<boolean> {
  const { rows } = await db.query(ID_USED, [tenantId, id])
  return rows.length > 0
}

/** A version of a live agent (none of an earlier agent of its id): the named one, else the latest. */
export async function readAgent(db: Queryable, tenantId: string, id: string, version?: number): Promise<AgentVersionRow | undefined> {
  const { rows } = await db.query<Raw>(READ_AGENT, [tenantId, id, version ?? null])
  return rows[0] ? toVersion(rows[0]) : undefined
}

export interface AgentCursor {
  createdAt: number
  id: string
}

export function encodeAgentCursor(c: AgentCursor): string {
  return Buffer.from(`${c.createdAt}:${c.id}`).toString('base64url')
}

export function decodeAgentCursor(c: string): AgentCursor | null {
  const m = /^(\d{1,16}):([A-Za-z0-9_.-]{1,64})$/.exec(Buffer.from(c, 'base64url').toString('utf8'))
  return m ? { createdAt: Number(m[1]), id: m[2] } : null
}

/** Live agents at their latest version, newest first (created_at, then id), keyset-paged. */
export async function listAgents(db: Queryable, tenantId: string, limit: number, cursor?: AgentCursor): Promise<{ agents: AgentVersionRow[]; nextCursor: string | null }> {
  const { rows } = await db.query<Raw>(cursor ? LIST_AGENTS_AFTER : LIST_AGENTS, cursor ? [tenantId, limit + 1, cursor.createdAt, cursor.id] : [tenantId, limit + 1])
  const list = rows.map(toVersion)
  const more = list.length > limit
  if (more) list.pop()
  const last = list[list.length - 1]
  return { agents: list, nextCursor: more ? encodeAgentCursor(last) : null }
}

/**
 * A new version of a live agent, made from the latest under the agent row's lock: `next` gives its
 * fields, or null when they would be the latest's (no version is made). Undefined: no such agent.
 */
export async function addAgentVersion(db: Db, tenantId: string, id: string, now: number, next: (latest: AgentVersionRow) => AgentFields | null): Promise<AgentVersionRow | undefined> {
  return db.transaction(async (tx) => {
    const locked = await tx.query(LOCK_AGENT, [tenantId, id])
    if (!locked.rows.length) return undefined
    const latest = (await readAgent(tx, tenantId, id))!
    const fields = next(latest)
    if (!fields) return latest
    const version = latest.version + 1
    await tx.query(SET_VERSION, [tenantId, id, version])
    await insertVersion(tx, tenantId, id, version, fields, now)
    return { ...fields, tenantId, id, version, createdAt: latest.createdAt, versionCreatedAt: now }
  })
}

/** Marks a live agent deleted; false when there was none. */
export async function deleteAgent(db: Queryable, tenantId: string, id: string, now: number): Promise<boolean> {
  const r = await db.query(DELETE_AGENT, [tenantId, id, now])
  return r.rowCount > 0
}
