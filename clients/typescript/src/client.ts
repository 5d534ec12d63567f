// AgentdClient: one method per route of API.md §3–§7 and §13–§16, plus the stream, the transcript view and run.
// Sends (followup, steer, inject) always carry an idempotency key, so their retries can never store a
// message twice (API.md §5).

import { Transport, type Repeatable, type TransportOptions } from './http.js'
import { runTurn, type RunOptions, type RunResult } from './run.js'
import { openStream, type SessionStream, type StreamOptions } from './stream.js'
import { newIdempotencyKey } from './keys.js'
import type {
  Accepted,
  Agent,
  AgentPage,
  CreateAgentInput,
  UpdateAgentInput,
  ApprovalInput,
  CancelResult,
  CompactResult,
  CreateSessionInput,
  EventsPage,
  Inbox,
  InputContent,
  KeyCreated,
  LimitsInput,
  Message,
  PendingCall,
  Session,
  SessionEvent,
  SessionPage,
  TenantCreated,
  TenantAuthInput,
  TenantCorsInput,
  TenantWithLimits,
  TokenCreated,
  TokenInput,
  ToolResultInput,
  UpdateSessionInput,
  UsageReport,
  SecretInfo,
  CreateWebhookInput,
  Webhook,
  WebhookCreated,
  WebhookDelivery,
} from './types.js'
import { watchSession, type Watch, type WatchOptions } from './watch.js'

export type AgentdClientOptions = TransportOptions

export interface CallOpts {
  signal?: AbortSignal
}

export interface SendOptions extends CallOpts {
  /** the message's id (API.md §5 client message id); repeats with it are answered, not stored again */
  id?: string
  /** an `Idempotency-Key`; one is generated when neither it nor `id` is given */
  idempotencyKey?: string
}

export type SendRoute = 'followup' | 'steer' | 'inject'

export interface RequestOptions extends CallOpts {
  /** sent as JSON */
  body?: unknown
  query?: Record<string, string | number | undefined>
  headers?: Record<string, string>
  /** an `Idempotency-Key` for a route that honours one; the call is then repeated like a send */
  idempotencyKey?: string
  /** how the call may be repeated; by default GET/HEAD are `safe`, PUT and keyed calls `idempotent`, others `once` */
  repeat?: Repeatable
  /** which credential goes with it (default the API key) */
  auth?: 'key' | 'admin' | 'none'
}

/** What a repeat of a call without a method of its own may do, from HTTP's method semantics (RFC 9110 §9.2). */
function defaultRepeat(method: string, keyed: boolean): Repeatable {
  if (method === 'GET' || method === 'HEAD') return 'safe'
  return keyed || method === 'PUT' ? 'idempotent' : 'once'
}

export { newIdempotencyKey }

const sid = (id: string) => `/v1/sessions/${encodeURIComponent(id)}`
const aid = (id: string) => `/v1/agents/${encodeURIComponent(id)}`

export class AgentdClient {
  /** @internal */
  readonly transport: Transport
  readonly sessions: SessionsApi
  readonly agents: AgentsApi
  readonly admin: AdminApi
  readonly secrets: SecretsApi

  constructor(o: AgentdClientOptions) {
    this.transport = new Transport(o)
    this.sessions = new SessionsApi(this.transport)
    this.agents = new AgentsApi(this.transport)
    this.admin = new AdminApi(this.transport)
    this.secrets = new SecretsApi(this.transport)
  }

  private call<T>(method: string, path: string, repeat: Repeatable, o: { body?: unknown; query?: Record<string, string | number | undefined>; headers?: Record<string, string>; signal?: AbortSignal } = {}): Promise<T> {
    return this.transport.call<T>({ method, path, repeat, ...o })
  }

  /**
   * Any route, for those without a method here yet: the parsed JSON answer (undefined when empty) with
   * the client's auth, errors and the retries `repeat` allows. `path` starts with `/`, e.g. `/v1/…`.
   */
  request<T = unknown>(method: string, path: string, o: RequestOptions = {}): Promise<T> {
    if (!path.startsWith('/')) throw new TypeError(`AgentdClient.request: the path must start with "/", got ${JSON.stringify(path)}`)
    const m = method.toUpperCase()
    const headers = { ...(o.headers ?? {}) }
    if (o.idempotencyKey !== undefined) headers['idempotency-key'] = o.idempotencyKey
    return this.transport.call<T>({ method: m, path, query: o.query, body: o.body, headers, auth: o.auth, repeat: o.repeat ?? defaultRepeat(m, o.idempotencyKey !== undefined), signal: o.signal })
  }

  // ---- input (API.md §5) ----

  /** Queues a prompt for the next turn and wakes the session. */
  followup(sessionId: string, content: InputContent, o?: SendOptions): Promise<Accepted> {
    return this.send('followup', sessionId, content, o)
  }

  /** Adds input to the running turn's next step (or starts a turn), waking the session. */
  steer(sessionId: string, content: InputContent, o?: SendOptions): Promise<Accepted> {
    return this.send('steer', sessionId, content, o)
  }

  /** Adds input to the next step without waking the session. */
  inject(sessionId: string, content: InputContent, o?: SendOptions): Promise<Accepted> {
    return this.send('inject', sessionId, content, o)
  }

  /** One delivery, retried through network failures, 429 and 503 under one idempotency key. */
  send(route: SendRoute, sessionId: string, content: InputContent, o: SendOptions = {}): Promise<Accepted> {
    const headers: Record<string, string> = {}
    if (o.idempotencyKey !== undefined || o.id === undefined) headers['idempotency-key'] = o.idempotencyKey ?? newIdempotencyKey()
    const body = o.id === undefined ? { content } : { content, id: o.id }
    return this.call<Accepted>('POST', `${sid(sessionId)}/${route}`, 'idempotent', { body, headers, signal: o.signal })
  }

  /** Cancels the running turn; `cancelled: false` when nothing was running. */
  cancel(sessionId: string, o: CallOpts & { keepInbox?: boolean } = {}): Promise<CancelResult> {
    return this.call('POST', `${sid(sessionId)}/cancel`, 'idempotent', { body: o.keepInbox === undefined ? {} : { keepInbox: o.keepInbox }, signal: o.signal })
  }

  inbox(sessionId: string, o: CallOpts = {}): Promise<Inbox> {
    return this.call('GET', `${sid(sessionId)}/inbox`, 'safe', o)
  }

  /** Withdraws a queued message (a cancelling removal); `queue-item-not-found` once it was claimed. */
  async removeFromInbox(sessionId: string, messageId: string, o: CallOpts = {}): Promise<void> {
    await this.call('DELETE', `${sid(sessionId)}/inbox/${encodeURIComponent(messageId)}`, 'once', o)
  }

  // ---- tools that wait for someone (API.md §7) ----

  async pending(sessionId: string, o: CallOpts = {}): Promise<PendingCall[]> {
    return (await this.call<{ toolCalls: PendingCall[] }>('GET', `${sid(sessionId)}/pending`, 'safe', o)).toolCalls
  }

  /** Answers a `client` tool call. */
  async submitToolResult(sessionId: string, result: ToolResultInput, o: CallOpts = {}): Promise<void> {
    await this.call('POST', `${sid(sessionId)}/tool-results`, 'once', { body: result, signal: o.signal })
  }

  /** Allows or denies a call waiting for approval. */
  async decide(sessionId: string, callId: string, decision: ApprovalInput, o: CallOpts = {}): Promise<void> {
    await this.call('POST', `${sid(sessionId)}/approvals/${encodeURIComponent(callId)}`, 'once', { body: decision, signal: o.signal })
  }

  // ---- tokens (API.md §18) ----

  /**
   * Mints a token for a browser or an end user (tenant API key only): what it may do (`scopes`), whose it
   * is (`subject`), which sessions or agents it is limited to, how long it lives (`ttlSeconds`, default 900).
   */
  createToken(input: TokenInput, o: CallOpts = {}): Promise<TokenCreated> {
    return this.call('POST', '/v1/tokens', 'once', { body: input, signal: o.signal })
  }

  // ---- usage (API.md §15) ----

  /** The tenant's usage over UTC days `from`..`to` (YYYY-MM-DD; default the current month), by day, model or session, and its limits. */
  usage(o: CallOpts & { from?: string; to?: string; groupBy?: 'day' | 'model' | 'session' } = {}): Promise<UsageReport> {
    return this.call('GET', '/v1/usage', 'safe', { query: { from: o.from, to: o.to, groupBy: o.groupBy }, signal: o.signal })
  }

  // ---- webhooks (API.md §14) ----

  /** Subscribes a URL; the answer's `secret` (for verifyWebhook) is shown only here. */
  createWebhook(input: CreateWebhookInput, o: CallOpts = {}): Promise<WebhookCreated> {
    return this.call('POST', '/v1/webhooks', 'once', { body: input, signal: o.signal })
  }

  async listWebhooks(o: CallOpts = {}): Promise<Webhook[]> {
    return (await this.call<{ webhooks: Webhook[] }>('GET', '/v1/webhooks', 'safe', o)).webhooks
  }

  getWebhook(id: string, o: CallOpts = {}): Promise<Webhook> {
    return this.call('GET', `/v1/webhooks/${encodeURIComponent(id)}`, 'safe', o)
  }

  /** Deletes it; its pending deliveries are dropped. */
  async deleteWebhook(id: string, o: CallOpts = {}): Promise<void> {
    await this.call('DELETE', `/v1/webhooks/${encodeURIComponent(id)}`, 'once', o)
  }

  /** Its deliveries, newest first (`limit` 1–100, default 20). */
  async webhookDeliveries(id: string, o: CallOpts & { limit?: number } = {}): Promise<WebhookDelivery[]> {
    return (await this.call<{ deliveries: WebhookDelivery[] }>('GET', `/v1/webhooks/${encodeURIComponent(id)}/deliveries`, 'safe', { query: { limit: o.limit }, signal: o.signal })).deliveries
  }

  /** Sends a `ping` delivery; returns its id (the `webhook-id` the receiver sees). */
  async testWebhook(id: string, o: CallOpts = {}): Promise<string> {
    return (await this.call<{ deliveryId: string }>('POST', `/v1/webhooks/${encodeURIComponent(id)}/test`, 'once', o)).deliveryId
  }

  // ---- reading (API.md §6) ----

  /** One page of durable events with seq > after. */
  events(sessionId: string, o: CallOpts & { after?: number; limit?: number } = {}): Promise<EventsPage> {
    return this.call('GET', `${sid(sessionId)}/events`, 'safe', { query: { after: o.after, limit: o.limit }, signal: o.signal })
  }

  /** Every durable event with seq > after (default: the whole log) up to the head, page by page. */
  async *allEvents(sessionId: string, o: CallOpts & { after?: number; pageSize?: number } = {}): AsyncGenerator<SessionEvent> {
    let after = o.after ?? -1
    for (;;) {
      const page = await this.events(sessionId, { after, limit: o.pageSize ?? 1000, signal: o.signal })
      for (const e of page.events) yield e
      if (!page.events.length || page.events.at(-1)!.seq >= page.headSeq) return
      after = page.events.at(-1)!.seq
    }
  }

  /** The derived model history (SPEC §14). */
  async messages(sessionId: string, o: CallOpts = {}): Promise<Message[]> {
    return (await this.call<{ messages: Message[] }>('GET', `${sid(sessionId)}/messages`, 'safe', o)).messages
  }

  /** The session's frames, reconnecting by itself; see {@link SessionStream}. */
  stream(sessionId: string, o?: StreamOptions): SessionStream {
    return openStream(this.transport, sessionId, o)
  }

  /** A live transcript view of the session: messages, the partial answer, pending calls, status. */
  watch(sessionId: string, o?: WatchOptions): Watch {
    return watchSession(this, sessionId, o)
  }

  /** Sends a followup and resolves when the turn that took it ends. */
  run(sessionId: string, content: InputContent, o?: RunOptions): Promise<RunResult> {
    return runTurn(this, sessionId, content, o)
  }
}

export class SessionsApi {
  constructor(private readonly t: Transport) {}

  /**
   * Creates a session; with an `id` the create is idempotent (same body → the same session). With
   * `agent` (`"id"` or `"id@version"`) it starts from that agent version's settings, which the body's
   * settings replace (tools as a whole list) and its metadata is merged over (API.md §4, §16).
   */
  create(body: CreateSessionInput = {}, o: CallOpts = {}): Promise<Session> {
    return this.t.call({ method: 'POST', path: '/v1/sessions', body, repeat: body.id === undefined ? 'once' : 'idempotent', signal: o.signal })
  }

  /** One page, newest activity first. */
  page(o: CallOpts & { limit?: number; cursor?: string } = {}): Promise<SessionPage> {
    return this.t.call({ method: 'GET', path: '/v1/sessions', query: { limit: o.limit, cursor: o.cursor }, repeat: 'safe', signal: o.signal })
  }

  /** Every session, newest activity first, following `nextCursor` page by page. */
  async *list(o: CallOpts & { pageSize?: number } = {}): AsyncGenerator<Session> {
    let cursor: string | undefined
    for (;;) {
      const p = await this.page({ limit: o.pageSize, cursor, signal: o.signal })
      yield* p.sessions
      if (!p.nextCursor) return
      cursor = p.nextCursor
    }
  }

  get(id: string, o: CallOpts = {}): Promise<Session> {
    return this.t.call({ method: 'GET', path: sid(id), repeat: 'safe', signal: o.signal })
  }

  /**
   * Changes the title, metadata or settings (model, system, tools, mcpServers, maxTokens,
   * reasoningEffort); settings apply from the session's next step.
   */
  update(id: string, body: UpdateSessionInput, o: CallOpts = {}): Promise<Session> {
    return this.t.call({ method: 'PATCH', path: sid(id), body, repeat: 'idempotent', signal: o.signal })
  }

  async delete(id: string, o: CallOpts = {}): Promise<void> {
    await this.t.call({ method: 'DELETE', path: sid(id), repeat: 'once', signal: o.signal })
  }

  /** A new session starting with a copy of this one's log (API.md §9). */
  fork(id: string, o: CallOpts & { atSeq?: number } = {}): Promise<Session> {
    return this.t.call({ method: 'POST', path: `${sid(id)}/fork`, body: o.atSeq === undefined ? {} : { atSeq: o.atSeq }, repeat: 'once', signal: o.signal })
  }

  /** Manual compaction while idle; `session-busy` while a turn runs. */
  compact(id: string, o: CallOpts = {}): Promise<CompactResult> {
    return this.t.call({ method: 'POST', path: `${sid(id)}/compact`, body: {}, repeat: 'once', signal: o.signal })
  }
}

/** Agents (API.md §16): named, versioned session settings; sessions are made from them with `sessions.create({agent})`. */
export class AgentsApi {
  constructor(private readonly t: Transport) {}

  /** Creates an agent (version 1); with an `id` the create is idempotent (same body → the same agent). */
  create(body: CreateAgentInput, o: CallOpts = {}): Promise<Agent> {
    return this.t.call({ method: 'POST', path: '/v1/agents', body, repeat: body.id === undefined ? 'once' : 'idempotent', signal: o.signal })
  }

  /** One page of agents at their latest version, newest first. */
  page(o: CallOpts & { limit?: number; cursor?: string } = {}): Promise<AgentPage> {
    return this.t.call({ method: 'GET', path: '/v1/agents', query: { limit: o.limit, cursor: o.cursor }, repeat: 'safe', signal: o.signal })
  }

  /** Every agent, newest first, following `nextCursor` page by page. */
  async *list(o: CallOpts & { pageSize?: number } = {}): AsyncGenerator<Agent> {
    let cursor: string | undefined
    for (;;) {
      const p = await this.page({ limit: o.pageSize, cursor, signal: o.signal })
      yield* p.agents
      if (!p.nextCursor) return
      cursor = p.nextCursor
    }
  }

  /** The latest version, or the one named by `version`. */
  get(id: string, o: CallOpts & { version?: number } = {}): Promise<Agent> {
    const path = o.version === undefined ? aid(id) : `${aid(id)}/versions/${encodeURIComponent(String(o.version))}`
    return this.t.call({ method: 'GET', path, repeat: 'safe', signal: o.signal })
  }

  /** Makes the next version with the given fields changed; sessions already made keep theirs. */
  update(id: string, body: UpdateAgentInput, o: CallOpts = {}): Promise<Agent> {
    // a repeat finds nothing left to change and makes no version: safe to repeat
    return this.t.call({ method: 'PATCH', path: aid(id), body, repeat: 'idempotent', signal: o.signal })
  }

  /** Deletes it: new sessions from it are refused; existing ones go on. */
  async delete(id: string, o: CallOpts = {}): Promise<void> {
    await this.t.call({ method: 'DELETE', path: aid(id), repeat: 'once', signal: o.signal })
  }
}

/** Admin routes (API.md §3); they need the client's `adminToken`. */
export class AdminApi {
  constructor(private readonly t: Transport) {}

  createTenant(name: string, o: CallOpts = {}): Promise<TenantCreated> {
    return this.t.call({ method: 'POST', path: '/v1/admin/tenants', body: { name }, auth: 'admin', repeat: 'once', signal: o.signal })
  }

  createKey(tenantId: string, o: CallOpts = {}): Promise<KeyCreated> {
    return this.t.call({ method: 'POST', path: `/v1/admin/tenants/${encodeURIComponent(tenantId)}/keys`, body: {}, auth: 'admin', repeat: 'once', signal: o.signal })
  }

  async deleteKey(keyId: string, o: CallOpts = {}): Promise<void> {
    await this.t.call({ method: 'DELETE', path: `/v1/admin/keys/${encodeURIComponent(keyId)}`, auth: 'admin', repeat: 'once', signal: o.signal })
  }

  /** A tenant and its limits (API.md §15). */
  async tenant(tenantId: string, o: CallOpts = {}): Promise<TenantWithLimits> {
    const r = await this.t.call<{ tenant: TenantWithLimits }>({ method: 'GET', path: `/v1/admin/tenants/${encodeURIComponent(tenantId)}`, auth: 'admin', repeat: 'safe', signal: o.signal })
    return r.tenant
  }

  /** Accepts the end-user tokens of the tenant's own identity provider, or (`null`) no longer (API.md §18). Answers the tenant as it is now. */
  setAuth(tenantId: string, auth: TenantAuthInput, o: CallOpts = {}): Promise<TenantWithLimits> {
    return this.patch(tenantId, { auth }, o)
  }

  /** Narrows the origins the tenant's browsers may call from, or (`null`) goes back to the deployment's (API.md §18). */
  setCors(tenantId: string, cors: TenantCorsInput, o: CallOpts = {}): Promise<TenantWithLimits> {
    return this.patch(tenantId, { cors }, o)
  }

  /** Sets the given limits; `null` removes one, an absent one stays (API.md §15). Answers the tenant as it is now. */
  setLimits(tenantId: string, limits: LimitsInput, o: CallOpts = {}): Promise<TenantWithLimits> {
    return this.patch(tenantId, { limits }, o)
  }

  private async patch(tenantId: string, body: object, o: CallOpts): Promise<TenantWithLimits> {
    // setting the same values twice is the same as once: safe to repeat
    const r = await this.t.call<{ tenant: TenantWithLimits }>({ method: 'PATCH', path: `/v1/admin/tenants/${encodeURIComponent(tenantId)}`, body, auth: 'admin', repeat: 'safe', signal: o.signal })
    return r.tenant
  }
}

/** Tenant secrets (API.md §13): values go in and never come out; tools refer to them as `secret:NAME`. */
export class SecretsApi {
  constructor(private readonly t: Transport) {}

  /** Creates or replaces a secret (`name` matches ^[A-Z0-9_]{1,64}$, `value` at most 16 KiB). */
  async put(name: string, value: string, o: CallOpts = {}): Promise<void> {
    await this.t.call({ method: 'PUT', path: `/v1/secrets/${encodeURIComponent(name)}`, body: { value }, repeat: 'idempotent', signal: o.signal })
  }

  /** The tenant's secret names and times, never their values. */
  async list(o: CallOpts = {}): Promise<SecretInfo[]> {
    return (await this.t.call<{ secrets: SecretInfo[] }>({ method: 'GET', path: '/v1/secrets', repeat: 'safe', signal: o.signal })).secrets
  }

  /** Deletes a secret; `not-found` when there is none of that name. */
  async delete(name: string, o: CallOpts = {}): Promise<void> {
    await this.t.call({ method: 'DELETE', path: `/v1/secrets/${encodeURIComponent(name)}`, repeat: 'once', signal: o.signal })
  }
}
