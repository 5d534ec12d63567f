// Agents as API.md §16 describes them: named, versioned session settings of a tenant. Create is
// idempotent by client id as session create is; a PATCH makes a new version, and no version changes
// once made; a delete refuses new sessions and leaves the existing ones running.

import crypto from 'node:crypto'
import { ApiError } from '../errors.js'
import { canonicalJson, type JsonObject } from '../session/index.js'
import { agents, type AgentFields, type AgentVersionRow, type Db } from '../store/index.js'
import { agentNotFound, assertLosslessBody, settingsShown, type Sessions, type SessionSettings, type SettingsInput } from './sessions.js'

export interface AgentObject extends SessionSettings {
  id: string
  version: number
  name: string
  description: string | null
  metadata: JsonObject
  /** when the agent was created */
  createdAt: string
  /** when this version was made */
  updatedAt: string
}

export function agentObject(r: AgentVersionRow): AgentObject {
  return {
    id: r.id,
    version: r.version,
    name: r.name,
    description: r.description ?? null,
    ...settingsShown(r),
    metadata: r.metadata,
    createdAt: new Date(r.createdAt).toISOString(),
    updatedAt: new Date(r.versionCreatedAt).toISOString(),
  }
}

export interface CreateAgentBody extends SettingsInput {
  id?: string
  name: string
  model: string
  description?: string
  metadata?: JsonObject
}

/** PATCH: the fields to change; null removes an optional one */
export interface PatchAgentBody extends Omit<SettingsInput, 'maxTokens' | 'reasoningEffort'> {
  name?: string
  description?: string | null
  maxTokens?: number | null
  reasoningEffort?: string | null
  metadata?: JsonObject
}

export const newAgentId = () => `agt_${crypto.randomBytes(12).toString('base64url')}`

/** The fields of a version, in the shape they are stored and compared in. */
function fieldsOf(f: { name: string; description?: string | null; metadata: JsonObject } & SettingsInput): AgentFields {
  const out: AgentFields = { name: f.name, model: f.model!, system: f.system ?? '', tools: f.tools ?? [], mcpServers: f.mcpServers ?? [], metadata: f.metadata }
  if (f.description !== undefined && f.description !== null) out.description = f.description
  if (f.maxTokens !== undefined) out.maxTokens = f.maxTokens
  if (f.reasoningEffort !== undefined) out.reasoningEffort = f.reasoningEffort
  return out
}

const sameFields = (a: AgentFields, b: AgentFields) => canonicalJson(a as unknown as JsonObject) === canonicalJson(b as unknown as JsonObject)

export class Agents {
  constructor(private readonly d: { db: Db; sessions: Sessions }) {}

  /** POST /v1/agents: 201 version 1 (or the next of a deleted id), 200 the agent for a repeated identical create. */
  async create(tenantId: string, body: CreateAgentBody): Promise<{ agent: AgentVersionRow; created: boolean }> {
    assertLosslessBody(body)
    const { id: given, name, description, metadata, ...settings } = body
    const s = await this.d.sessions.validateSettings(settings)
    const fields = fieldsOf({ ...s, name, description, metadata: metadata ?? {} })
    const createHash = crypto.createHash('sha256').update(canonicalJson(body as unknown as JsonObject)).digest('hex')
    const id = given ?? newAgentId()
    const made = await agents.createAgent(this.d.db, { tenantId, id, createHash, fields, now: Date.now() })
    if (made) return { agent: made, created: true }
    const hash = await agents.agentCreateHash(this.d.db, tenantId, id)
    if (hash !== undefined && hash !== createHash) throw new ApiError('idempotency-conflict', `agent ${id} exists with a different body`)
    const existing = await agents.readAgent(this.d.db, tenantId, id)
    if (!existing) throw new ApiError('idempotency-conflict', `agent ${id} was created and deleted concurrently; try again`)
    return { agent: existing, created: false }
  }

  /** GET /v1/agents/:id and …/versions/:version */
  async get(tenantId: string, id: string, version?: number): Promise<AgentVersionRow> {
    const r = await agents.readAgent(this.d.db, tenantId, id, version)
    if (!r) throw agentNotFound(id, version)
    return r
  }

  list(tenantId: string, limit: number, cursor?: agents.AgentCursor) {
    return agents.listAgents(this.d.db, tenantId, limit, cursor)
  }

  /**
   * PATCH /v1/agents/:id: a new version with the given fields changed, validated as session create
   * validates them. A PATCH that changes nothing makes no version, so a repeated PATCH makes one.
   */
  async patch(tenantId: string, id: string, body: PatchAgentBody): Promise<AgentVersionRow> {
    assertLosslessBody(body)
    const { name, description, metadata, maxTokens, reasoningEffort, ...settings } = body
    const s = await this.d.sessions.validateSettings(settings)
    const r = await agents.addAgentVersion(this.d.db, tenantId, id, Date.now(), (latest) => {
      const next = fieldsOf({
        ...latest,
        ...s,
        ...(name !== undefined ? { name } : {}),
        ...(description !== undefined ? { description } : {}),
        ...(metadata !== undefined ? { metadata } : {}),
        maxTokens: maxTokens === undefined ? latest.maxTokens : (maxTokens ?? undefined),
        reasoningEffort: reasoningEffort === undefined ? latest.reasoningEffort : (reasoningEffort ?? undefined),
      })
      return sameFields(next, fieldsOf(latest)) ? null : next
    })
    if (!r) throw agentNotFound(id)
    return r
  }

  /** DELETE /v1/agents/:id: new sessions from it are refused; its versions stay for the sessions made from them. */
  async delete(tenantId: string, id: string): Promise<void> {
    if (!(await agents.deleteAgent(this.d.db, tenantId, id, Date.now()))) throw agentNotFound(id)
  }
}
