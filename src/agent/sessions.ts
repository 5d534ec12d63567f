// Sessions as API.md §4 and §9 describe them: creation with model and tool validation (idempotent
// by client id), the session object, fork, and deletion.

import crypto from 'node:crypto'
import { ApiError, badRequest, type ErrorDetail } from '../errors.js'
import { assertLosslessJson, canonicalJson, emptyInbox, foldInbox, lastTurnOf, planClear, publicStatus, sumUsage, type Draft, type JsonObject, type SessionEvent, type SplicedData, type TurnEndReason, type UsageTotals } from '../session/index.js'
import { copyLogPrefix, getSession, insertSession, lockSession, readEvents, stamp, writeEvents, type Db, type SessionRow, type SessionSpec } from '../store/index.js'
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
  /** API.md §18: the subject that created it, null for a key or a token without subject */
  owner: string | null
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
    owner: r.owner,
  }
}

export interface CreateBody {
  id?: string
  model?: string
  system?: string
  tools?: JsonObject[]
  maxTokens?: number
  reasoningEffort?: string
  metadata?: JsonObject
  mcpServers?: JsonObject[]
}

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
   * POST /v1/sessions: 201 a new session, 200 the existing one for a repeated identical create by the
   * same owner (API.md §18: the subject creating it, null for a tenant key).
   */
  async create(tenantId: string, body: CreateBody, owner: string | null = null): Promise<{ row: SessionRow; created: boolean }> {
    try {
      assertLosslessJson(body)
    } catch (e) {
      throw badRequest(`body is not lossless JSON: ${(e as Error).message}`)
    }
    const model = body.model ?? this.d.models.defaultModel
    if (!this.d.models.resolveModel(model)) throw new ApiError('model-unavailable', `model ${model} does not resolve (models file, then the pi-ai catalogue)`)
    const tools = await this.validateTools(body.tools ?? [])
    const mcpServers = await this.validateMcpServers(body.mcpServers ?? [])
    const spec: SessionSpec = { model, system: body.system ?? '', tools, mcpServers, metadata: body.metadata ?? {} }
    if (body.maxTokens !== undefined) spec.maxTokens = body.maxTokens
    if (body.reasoningEffort !== undefined) spec.reasoningEffort = body.reasoningEffort
    const createHash = crypto.createHash('sha256').update(canonicalJson(body)).digest('hex')
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
      const spec: SessionSpec = { model: source.model, system: source.system, tools: source.tools, mcpServers: source.mcpServers, metadata: source.metadata }
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
