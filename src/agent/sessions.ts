// Sessions as API.md §4 and §9 describe them: creation with model and tool validation (idempotent
// by client id), the session object, fork, and deletion.

import crypto from 'node:crypto'
import { ApiError, badRequest, type ErrorDetail } from '../errors.js'
import { assertLosslessJson, canonicalJson, emptyInbox, foldInbox, lastTurnOf, planClear, publicStatus, sumUsage, type Draft, type JsonObject, type SessionEvent, type SplicedData, type TurnEndReason, type UsageTotals } from '../session/index.js'
import { agents, copyLogPrefix, getSession, insertSession, lockSession, readEvents, stamp, writeEvents, type AgentVersionRow, type Db, type SessionRow, type SessionSpec } from '../store/index.js'
import { headerProblem } from '../tools/index.js'
import type { KeyedMutex } from './locks.js'
import type { Publisher } from './publish.js'

export interface ToolValidation {
  /** the registered built-in tool of that name, if any */
  builtin(name: string): { description: string; parameters: JsonObject } | undefined
  /** null when allowed, else the reason (API.md §4: refused addresses are 400 at creation) */
  checkUrl(url: string): Promise<string | null>
}

export interface ModelValidation {
  resolveModel(ref: string): unknown | undefined
  readonly defaultModel: string
}

/** API.md §4: a session's settings as they stand now */
export interface SessionSettings {
  model: string
  system: string
  tools: JsonObject[]
  mcpServers: JsonObject[]
  maxTokens: number | null
  reasoningEffort: string | null
}

export interface SessionObject {
  id: string
  title: string | null
  model: string
  status: 'idle' | 'running'
  headSeq: number
  createdAt: string
  updatedAt: string
  metadata: JsonObject
  usage: UsageTotals
  /** API.md §4: the latest turn/end, null before the first turn ends */
  lastTurn: { turn: number; reason: TurnEndReason; endedAt: string } | null
  /** API.md §4, §16: the agent version the session was made from */
  agent: { id: string; version: number } | null
  /** API.md §18: the subject that created it, null for a key or a token without subject */
  owner: string | null
  settings: SessionSettings
}

export function sessionObject(r: SessionRow): SessionObject {
  return {
    id: r.id,
    title: r.title,
    model: r.model,
    status: publicStatus(r.runState),
    headSeq: r.nextSeq - 1,
    createdAt: new Date(r.createdAt).toISOString(),
    updatedAt: new Date(r.updatedAt).toISOString(),
    metadata: r.metadata,
    usage: { ...r.usage, costUsd: Math.round(r.usage.costUsd * 1e9) / 1e9 },
    lastTurn: r.lastTurn ? { turn: r.lastTurn.turn, reason: r.lastTurn.reason, endedAt: new Date(r.lastTurn.time).toISOString() } : null,
    agent: r.agent,
    owner: r.owner,
    settings: settingsShown(r),
  }
}

/** Settings as an answer shows them: every one present, null for an absent limit. */
export function settingsShown(r: { model: string; system: string; tools: JsonObject[]; mcpServers?: JsonObject[]; maxTokens?: number; reasoningEffort?: string }): SessionSettings {
  return { model: r.model, system: r.system, tools: r.tools, mcpServers: r.mcpServers ?? [], maxTokens: r.maxTokens ?? null, reasoningEffort: r.reasoningEffort ?? null }
}

/** The settings of API.md §4 as a body gives them (session create, agent create and PATCH). */
export interface SettingsInput {
  model?: string
  system?: string
  tools?: JsonObject[]
  mcpServers?: JsonObject[]
  maxTokens?: number
  reasoningEffort?: string
}

export interface CreateBody extends SettingsInput {
  id?: string
  /** API.md §4: `id` or `id@version` of an agent (§16) whose settings the session starts from */
  agent?: string
  metadata?: JsonObject
}

/** Every number of a body must survive JSON text unchanged (it is stored and hashed as text). */
export function assertLosslessBody(body: unknown): void {
  try {
    assertLosslessJson(body as JsonObject)
  } catch (e) {
    throw badRequest(`body is not lossless JSON: ${(e as Error).message}`)
  }
}

/** API.md §4: `id` or `id@version`, as the schema lets it through */
export function parseAgentRef(ref: string): { id: string; version?: number } {
  const at = ref.lastIndexOf('@')
  return at < 0 ? { id: ref } : { id: ref.slice(0, at), version: Number(ref.slice(at + 1)) }
}

export const agentNotFound = (id: string, version?: number) => new ApiError('not-found', version === undefined ? `agent ${id} not found` : `agent ${id} has no version ${version}`)

/** API.md §12: at most this many MCP servers per session */
export const MAX_MCP_SERVERS = 16

function headerDetails(headers: Record<string, unknown>, at: string): ErrorDetail[] {
  const out: ErrorDetail[] = []
  for (const [k, v] of Object.entries(headers)) {
    const why = headerProblem(k, v)
    if (why) out.push({ path: `${at}.${k}`, message: why })
  }
  return out
}

export const newSessionId = () => `ses_${crypto.randomBytes(12).toString('base64url')}`

export class Sessions {
  constructor(
    private readonly d: { db: Db; models: ModelValidation; tools: ToolValidation; publisher: Publisher; mutex: KeyedMutex },
  ) {}

  /** Validates and normalizes ToolSpecs (API.md §4); throws 400 listing every problem. */
  async validateTools(specs: JsonObject[]): Promise<JsonObject[]> {
    const details: ErrorDetail[] = []
    const names = new Set<string>()
    const out: JsonObject[] = []
    for (let i = 0; i < specs.length; i++) {
      const s = specs[i] as Record<string, any>
      const at = `body.tools[${i}]`
      if (names.has(s.name)) details.push({ path: `${at}.name`, message: `duplicate tool name ${s.name}` })
      names.add(s.name)
      const ex = s.execution as { type: string; url?: string; timeoutMs?: number; headers?: Record<string, unknown> }
      if (ex.type !== 'http' && (ex.url !== undefined || ex.timeoutMs !== undefined || ex.headers !== undefined)) details.push({ path: `${at}.execution`, message: 'url, timeoutMs and headers belong to execution type http' })
      if (ex.headers) details.push(...headerDetails(ex.headers, `${at}.execution.headers`))
      const spec: Record<string, unknown> = { name: s.name }
      if (ex.type === 'builtin') {
        const reg = this.d.tools.builtin(s.name)
        if (!reg) details.push({ path: `${at}.name`, message: `no built-in tool ${s.name} is registered` })
        if (s.parameters !== undefined) details.push({ path: `${at}.parameters`, message: 'a builtin tool takes the registration\'s parameters; omit them' })
        if (s.description !== undefined) spec.description = s.description
      } else {
        spec.description = s.description ?? ''
        const params = s.parameters ?? { type: 'object', properties: {} }
        if (params.type !== undefined && params.type !== 'object') details.push({ path: `${at}.parameters.type`, message: 'tool parameters must be an object schema' })
        spec.parameters = params
      }
      if (ex.type === 'http') {
        if (typeof ex.url !== 'string') details.push({ path: `${at}.execution.url`, message: 'an http tool needs a url' })
        else {
          const reason = await this.d.tools.checkUrl(ex.url)
          if (reason) details.push({ path: `${at}.execution.url`, message: reason })
        }
      }
      spec.execution = ex
      if (s.concurrency !== undefined) spec.concurrency = s.concurrency
      if (s.approval !== undefined) spec.approval = s.approval
      out.push(spec as JsonObject)
    }
    if (details.length) throw badRequest(details[0].message, details)
    return out
  }

  /** Validates MCP servers (API.md §12): unique names, a URL the address guard allows, well-formed headers. */
  async validateMcpServers(servers: JsonObject[], field = 'body.mcpServers'): Promise<JsonObject[]> {
    const details: ErrorDetail[] = []
    const names = new Set<string>()
    if (servers.length > MAX_MCP_SERVERS) details.push({ path: field, message: `at most ${MAX_MCP_SERVERS} MCP servers` })
    for (let i = 0; i < servers.length; i++) {
      const s = servers[i] as Record<string, any>
      const at = `${field}[${i}]`
      if (names.has(s.name)) details.push({ path: `${at}.name`, message: `duplicate MCP server name ${s.name}` })
      names.add(s.name)
      const reason = await this.d.tools.checkUrl(s.url)
      if (reason) details.push({ path: `${at}.url`, message: reason })
      if (s.headers) details.push(...headerDetails(s.headers, `${at}.headers`))
    }
    if (details.length) throw badRequest(details[0].message, details)
    return servers.map((s) => structuredClone(s))
  }

  /**
   * Validates the settings a body gives as session create does (API.md §4: the model resolves, tools
   * and MCP servers as above); returns them normalized, the absent ones absent.
   */
  async validateSettings(s: SettingsInput): Promise<SettingsInput> {
    if (s.model !== undefined && !this.d.models.resolveModel(s.model)) throw new ApiError('model-unavailable', `model ${s.model} does not resolve (models file, then the pi-ai catalogue)`)
    const out = { ...s }
    if (s.tools !== undefined) out.tools = await this.validateTools(s.tools)
    if (s.mcpServers !== undefined) out.mcpServers = await this.validateMcpServers(s.mcpServers)
    return out
  }

  /**
   * POST /v1/sessions: 201 a new session, 200 the existing one for a repeated identical create by the
   * same owner (API.md §18: the subject creating it, null for a tenant key). The create hash is the
   * body's as sent, `agent` as written: a repeat answers the session it made even after the agent
   * gained versions or was deleted.
   */
  async create(tenantId: string, body: CreateBody, owner: string | null = null): Promise<{ row: SessionRow; created: boolean }> {
    assertLosslessBody(body)
    const createHash = crypto.createHash('sha256').update(canonicalJson(body)).digest('hex')
    let spec: SessionSpec
    try {
      spec = await this.specOf(tenantId, body)
    } catch (e) {
      if (body.id !== undefined && e instanceof ApiError && (e.code === 'not-found' || e.code === 'model-unavailable')) {
        const existing = await getSession(this.d.db, tenantId, body.id)
        if (existing?.createHash === createHash && existing.owner === owner) return { row: existing, created: false }
      }
      throw e
    }
    const id = body.id ?? newSessionId()
    const now = Date.now()
    const row = await insertSession(this.d.db, { ...spec, key: crypto.randomUUID(), tenantId, id, createHash, createdAt: now, owner })
    if (row) return { row, created: true }
    const existing = await getSession(this.d.db, tenantId, id)
    if (!existing) throw new ApiError('session-conflict', `session ${id} was created and deleted concurrently; try again`)
    // another owner's session is not answered: its id is taken, nothing more is said of it
    if (existing.createHash !== createHash || existing.owner !== owner) throw new ApiError('session-conflict', `session ${id} exists with a different body`)
    return { row: existing, created: false }
  }

  /**
   * What a create body makes (API.md §4): the agent version's settings, if any, with every setting the
   * body gives replacing the version's and the body's metadata merged over the version's; validated
   * whole, as an inline create is.
   */
  private async specOf(tenantId: string, body: CreateBody): Promise<SessionSpec> {
    const { id: _id, agent: ref, metadata, ...given } = body
    let base: AgentVersionRow | undefined
    if (ref !== undefined) {
      const { id, version } = parseAgentRef(ref)
      base = await agents.readAgent(this.d.db, tenantId, id, version)
      if (!base) throw agentNotFound(id, version)
    }
    const start: SettingsInput = base
      ? { model: base.model, system: base.system, tools: base.tools, mcpServers: base.mcpServers, ...(base.maxTokens !== undefined ? { maxTokens: base.maxTokens } : {}), ...(base.reasoningEffort !== undefined ? { reasoningEffort: base.reasoningEffort } : {}) }
      : { model: this.d.models.defaultModel, system: '', tools: [], mcpServers: [] }
    const s = await this.validateSettings({ ...start, ...given })
    const spec: SessionSpec = { model: s.model!, system: s.system!, tools: s.tools!, mcpServers: s.mcpServers!, metadata: base ? { ...base.metadata, ...(metadata ?? {}) } : (metadata ?? {}) }
    if (s.maxTokens !== undefined) spec.maxTokens = s.maxTokens
    if (s.reasoningEffort !== undefined) spec.reasoningEffort = s.reasoningEffort
    if (base) spec.agent = { id: base.id, version: base.version }
    return spec
  }

  /**
   * POST …/fork (API.md §9): a new session whose log starts with a verbatim copy of the source up to
   * the boundary, then cancelling splices for input still pending there, then session/end-seed {}.
   */
  async fork(source: SessionRow, atSeq: number | undefined): Promise<SessionRow> {
    const head = source.nextSeq - 1
    if (atSeq !== undefined && (atSeq < 0 || atSeq > head)) throw badRequest(`atSeq ${atSeq} is outside the log (0..${head})`, [{ path: 'body.atSeq', message: `must be within 0..${head}` }])
    const events = await readEvents(this.d.db, source.key, -1, atSeq === undefined ? head + 1 : Number.MAX_SAFE_INTEGER)
    let boundary: number
    if (atSeq === undefined) {
      if (openTurnAt(events, head) !== null) throw new ApiError('fork-unavailable', 'a turn is open at the end of the log')
      boundary = head
    } else {
      const open = openTurnAt(events, atSeq)
      if (open === null) boundary = atSeq
      else {
        const end = events.find((e) => e.seq > atSeq && e.type === 'turn/end' && (e.data as { turn: number }).turn === open)
        if (!end) throw new ApiError('fork-unavailable', `turn ${open} has not ended`)
        boundary = end.seq
      }
    }
    const prefix = events.filter((e) => e.seq <= boundary)
    const inbox = foldInbox(prefix.filter((e) => e.type === 'agent/inbox/spliced').map((e) => e.data as unknown as SplicedData))
    const usage = sumUsage(prefix)
    const lastTurn = lastTurnOf(prefix)
    const now = Date.now()
    const child = await this.d.db.transaction(async (tx) => {
      // API.md §9: the source's current settings, its agent and metadata
      const spec: SessionSpec = { model: source.model, system: source.system, tools: source.tools, mcpServers: source.mcpServers, metadata: source.metadata, agent: source.agent }
      if (source.maxTokens !== undefined) spec.maxTokens = source.maxTokens
      if (source.reasoningEffort !== undefined) spec.reasoningEffort = source.reasoningEffort
      const id = newSessionId()
      const row = await insertSession(tx, { ...spec, key: crypto.randomUUID(), tenantId: source.tenantId, id, createHash: crypto.createHash('sha256').update(`fork:${id}`).digest('hex'), createdAt: now, owner: source.owner })
      if (!row) throw new Error('fork: fresh session id collided')
      if (prefix.length) await copyLogPrefix(tx, source.key, row.key, prefix[prefix.length - 1], { inbox, usage, lastTurn })
      const locked = (await lockSession(tx, row.key))!
      const drafts: Draft[] = planClear(inbox).map((d) => ({ type: 'agent/inbox/spliced', data: d as unknown as Draft['data'] }))
      drafts.push({ type: 'session/end-seed', data: {} })
      await writeEvents(tx, locked, stamp(locked, drafts), { inbox: emptyInbox() })
      return locked
    })
    return child
  }
}

/** The turn open right after `seq`, or null. */
function openTurnAt(events: readonly SessionEvent[], seq: number): number | null {
  let open: number | null = null
  for (const e of events) {
    if (e.seq > seq) break
    if (e.type === 'turn/start') open = (e.data as { turn: number }).turn
    else if (e.type === 'turn/end') open = null
  }
  return open
}
