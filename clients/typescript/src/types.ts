// The client's public types. HTTP bodies are aliases of the types generated from openapi/openapi.json
// (types.gen.ts), addressed by route, so a regenerated document changes them without changing these
// names. What the document leaves as `unknown` — event data, messages, stream frames — is written here
// from the contract: SPEC §3 (events, messages, chunks), §9 (stream frames), API.md §6 (SSE frames).

import type { paths } from './types.gen.js'

// ---- wire bodies, from the OpenAPI document -------------------------------------------------------

type Json200<P extends keyof paths, M extends keyof paths[P], S extends number> = paths[P][M] extends { responses: infer R }
  ? S extends keyof R
    ? R[S] extends { content: { 'application/json': infer B } }
      ? B
      : never
    : never
  : never
type JsonBody<P extends keyof paths, M extends keyof paths[P]> = paths[P][M] extends { requestBody?: { content: { 'application/json': infer B } } } ? B : never

/** The session object of API.md §4. */
export type Session = Json200<'/v1/sessions/{id}', 'get', 200>
export type SessionUsage = Session['usage']
/** How the session's latest turn ended (`Session.lastTurn`, `null` before the first turn ends). */
export type LastTurn = NonNullable<Session['lastTurn']>
/** One page of `GET /v1/sessions`. */
export type SessionPage = Json200<'/v1/sessions', 'get', 200>
/** `POST /v1/sessions` body; every field optional. */
export type CreateSessionInput = NonNullable<JsonBody<'/v1/sessions', 'post'>>
export type ToolSpec = NonNullable<CreateSessionInput['tools']>[number]
/** An MCP server of a session (API.md §12); its tools are offered as `<name>__<tool>`. */
export type McpServer = NonNullable<CreateSessionInput['mcpServers']>[number]
/** An agent version (API.md §16): a named, versioned set of session settings. */
export type Agent = Json200<'/v1/agents/{id}', 'get', 200>
/** One page of `GET /v1/agents`. */
export type AgentPage = Json200<'/v1/agents', 'get', 200>
/** `POST /v1/agents` body: `name` and `model` required. */
export type CreateAgentInput = JsonBody<'/v1/agents', 'post'>
/** `PATCH /v1/agents/:id` body: the fields to change; `null` removes description, maxTokens or reasoningEffort. */
export type UpdateAgentInput = NonNullable<JsonBody<'/v1/agents/{id}', 'patch'>>
/** A tenant secret as `GET /v1/secrets` lists it: never its value (API.md §13). */
export type SecretInfo = Json200<'/v1/secrets', 'get', 200>['secrets'][number]
/** `PATCH /v1/sessions/:id` body. */
export type UpdateSessionInput = NonNullable<JsonBody<'/v1/sessions/{id}', 'patch'>>
/** `202 {messageId, seq}` of followup, steer and inject (API.md §5). */
export type Accepted = Json200<'/v1/sessions/{id}/followup', 'post', 202>
/** Content of a delivery: text, or content blocks (text, image). */
export type InputContent = JsonBody<'/v1/sessions/{id}/followup', 'post'>['content'] | ContentBlock[]
export type CancelResult = Json200<'/v1/sessions/{id}/cancel', 'post', 202>
export type CompactResult = Json200<'/v1/sessions/{id}/compact', 'post', 202>
/** A tool call waiting for a client or an approver (API.md §7). */
export type PendingCall = Json200<'/v1/sessions/{id}/pending', 'get', 200>['toolCalls'][number]
export type ToolResultInput = Omit<JsonBody<'/v1/sessions/{id}/tool-results', 'post'>, 'content'> & { content: InputContent }
export type ApprovalInput = JsonBody<'/v1/sessions/{id}/approvals/{callId}', 'post'>
export type EventsPage = Omit<Json200<'/v1/sessions/{id}/events', 'get', 200>, 'events'> & { events: SessionEvent[] }
export type TenantCreated = Json200<'/v1/admin/tenants', 'post', 201>
export type KeyCreated = Json200<'/v1/admin/tenants/{tenantId}/keys', 'post', 201>
/** A tenant with its limits (API.md §15). */
export type TenantWithLimits = Json200<'/v1/admin/tenants/{tenantId}', 'get', 200>['tenant']
export type TenantLimits = TenantWithLimits['limits']
/** `PATCH /v1/admin/tenants/:id` limits: a number sets one, `null` removes it. */
export type LimitsInput = JsonBody<'/v1/admin/tenants/{tenantId}', 'patch'>['limits']
/** A tenant's identity provider (API.md §18); `null` removes it. */
export type TenantAuthInput = JsonBody<'/v1/admin/tenants/{tenantId}', 'patch'>['auth']
/** The origins a tenant's browsers may call from (API.md §18); `null` goes back to the deployment's. */
export type TenantCorsInput = JsonBody<'/v1/admin/tenants/{tenantId}', 'patch'>['cors']
/** What a minted token may do (API.md §18). */
export type TokenInput = JsonBody<'/v1/tokens', 'post'>
export type TokenCreated = Json200<'/v1/tokens', 'post', 201>
/** `GET /v1/usage` (API.md §15). */
export type UsageReport = Json200<'/v1/usage', 'get', 200>
export type UsageRow = UsageReport['usage'][number]
/** A webhook (API.md §14); `secret` only in the answer of its creation. */
export type Webhook = Json200<'/v1/webhooks/{id}', 'get', 200>
export type WebhookCreated = Json200<'/v1/webhooks', 'post', 201>
export type CreateWebhookInput = JsonBody<'/v1/webhooks', 'post'>
export type WebhookDelivery = Json200<'/v1/webhooks/{id}/deliveries', 'get', 200>['deliveries'][number]
/** What a webhook receiver gets (API.md §14): the body of one delivery. */
export interface WebhookPayload {
  type: 'turn.completed' | 'turn.failed' | 'turn.cancelled' | 'turn.interrupted' | 'session.requires_action' | 'ping'
  /** when the reported event was written (ISO 8601) */
  timestamp: string
  /** empty for `ping` */
  data: { sessionId: string; turn: number; seq: number; reason?: TurnEndReason; pending?: Array<{ callId: string; name: string; kind: 'client' | 'approval' }> }
}
/** API.md §10. */
export type ErrorBody = Json200<'/v1/sessions/{id}', 'get', 404>

// A status or body shape changed in openapi.json turns an alias into `never`: this stops compiling then.
type Resolved<T> = [T] extends [never] ? false : true
type AllResolved<T extends unknown[]> = { [K in keyof T]: Resolved<T[K]> }[number] extends true ? true : false
type Must<T extends true> = T
type _WireAliasesResolve = Must<AllResolved<[Session, LastTurn, SessionPage, CreateSessionInput, UpdateSessionInput, Accepted, CancelResult, CompactResult, PendingCall, ToolResultInput, ApprovalInput, EventsPage, TenantCreated, KeyCreated, TenantWithLimits, LimitsInput, UsageReport, Webhook, WebhookCreated, CreateWebhookInput, WebhookDelivery, ErrorBody, McpServer, SecretInfo, TenantAuthInput, TenantCorsInput, TokenInput, TokenCreated, Agent, AgentPage, CreateAgentInput, UpdateAgentInput]>>
// the document's TurnEndReason and the one written below from the contract are the same type
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false
type _LastTurnReason = Must<Same<LastTurn['reason'], TurnEndReason>>

// ---- content and messages (SPEC §3.3) ------------------------------------------------------------

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json }

export interface TextBlock { type: 'text'; text: string }
export interface ReasoningBlock { type: 'reasoning'; text: string }
export interface ImageBlock { type: 'image'; mimeType?: string; data?: string; url?: string }
/** `arguments` is the call's JSON text. */
export interface ToolCallBlock { type: 'tool-call'; id: string; name: string; arguments: string }
export interface ToolResultBlock { type: 'tool-result'; toolCallId: string; isError: boolean; content: ContentBlock[] }
export type ContentBlock = TextBlock | ReasoningBlock | ImageBlock | ToolCallBlock | ToolResultBlock

export interface UserMessage { id: string; role: 'user'; content: ContentBlock[]; source: { kind: string; [k: string]: unknown } }
export interface SystemMessage { id: string; role: 'system'; content: ContentBlock[]; source: { kind: 'plugin'; plugin: string } }
export interface AssistantMessage { id: string; role: 'assistant'; content: ContentBlock[]; source: { kind: 'model'; provider: string; model: string; [k: string]: unknown } }
export interface ToolResultMessage { id: string; role: 'user'; content: [ToolResultBlock]; source: { kind: 'tool'; callId: string } }
export type Message = UserMessage | SystemMessage | AssistantMessage | ToolResultMessage

export interface Inbox { nextTurn: UserMessage[]; nextStep: UserMessage[] }

// ---- streaming (SPEC §3.3, §9.4) ----------------------------------------------------------------

export interface TokenUsage { inputTokens: number; outputTokens: number; cacheReadTokens?: number; cacheWriteTokens?: number; reasoningTokens?: number; costUsd?: number }
export interface LlmFailure { message: string; code: string; status?: number; providerRetryAfterMs?: number; requestId?: string }
export type FinishReason = { kind: 'stop' | 'tool-calls' | 'max-tokens' } | { kind: 'error' | 'aborted'; failure: LlmFailure }

export type StreamChunk =
  | { type: 'block-start'; index: number; blockType: 'text' | 'reasoning' | 'tool-call' | 'image' }
  | { type: 'text-delta'; index: number; text: string }
  | { type: 'reasoning-delta'; index: number; text: string }
  | { type: 'tool-call-delta'; index: number; id: string; name?: string; argumentsDelta: string }
  | { type: 'block-end'; index: number; block: ContentBlock }
  | { type: 'usage'; usage: TokenUsage }
  | { type: 'finish'; reason: FinishReason; replayState?: Json }

/** The compact stream of SPEC §9.4: runs of deltas keep one entry per chunk. */
export type AssistantStreamRecord =
  | { type: 'text-chunks' | 'reasoning-chunks'; time0: number; index: number; dt: number[]; texts: string[] }
  | { type: 'tool-call-chunks'; time0: number; index: number; dt: number[]; id: string; name?: string; args: string[] }
  | { type: 'chunk'; time: number; chunk: StreamChunk }

// ---- events (SPEC §3.4, §3.5) ---------------------------------------------------------------------

export type AgentCancelCause = { kind: 'user' | 'parent' | 'disposed' | 'legacy' } | { kind: 'hook'; reason: string }
export type TurnEndReason =
  | { kind: 'completed' | 'blocked' | 'max-tokens' | 'interrupted' }
  | { kind: 'aborted'; reason: AgentCancelCause }
  | { kind: 'error'; error: LlmFailure }

export type SurfaceOp = 'append' | { op: 'replace'; start: number; end: number }

/** Data of the loop's durable events, by type (SPEC §3.4). */
export interface EventDataByType {
  'agent/inbox/spliced': { target: 'next-turn' | 'next-step'; start: number; removedCount?: number; inserted: UserMessage[]; outcome?: 'canceled' }
  'turn/start': { turn: number; continues?: number }
  'turn/end': { turn: number; reason: TurnEndReason }
  'step/start': { turn: number; step: number }
  'step/end': { turn: number; step: number }
  'system/message': { turn: number; step: number; message: SystemMessage }
  'user/message': UserMessage
  'assistant/message': { turn: number; step: number; message: AssistantMessage; stream: AssistantStreamRecord[]; usage?: TokenUsage; interrupted?: true }
  'assistant/attempt': { turn: number; step: number; stream: AssistantStreamRecord[] }
  'tool/call': { turn: number; step: number; callId: string; name: string; arguments: string }
  'tool/result': { turn: number; step: number; message: ToolResultMessage; error?: { name: string; code: string }; meta?: Json }
  'session/end-seed': Record<string, never>
}
export type KnownEventType = keyof EventDataByType

/** A durable event as stored (API.md §6). Narrow on `type` with {@link isEvent}. */
export interface SessionEvent<T extends string = string> {
  seq: number
  /** epoch milliseconds */
  time: number
  type: T
  data: T extends KnownEventType ? EventDataByType[T] : unknown
  surfaceOp?: SurfaceOp
  sourceEventSeqs?: number[]
}

/** Narrows an event to a known type: `if (isEvent(e, 'turn/end')) e.data.reason`. */
export function isEvent<T extends KnownEventType>(e: SessionEvent, type: T): e is SessionEvent<T> {
  return e.type === type
}

// ---- stream frames (API.md §6, SPEC §9.2, §18.11) ------------------------------------------------

export type AssistantStreamFrame =
  | { kind: 'start'; attemptId: string; revision: number; turn: number; step: number }
  | { kind: 'chunk'; attemptId: string; revision: number; index: number; time: number; chunk: StreamChunk }
  | { kind: 'end'; attemptId: string; revision: number; index: number; outcome: { kind: 'committed'; eventType: 'assistant/message' | 'assistant/attempt'; seq: number } | { kind: 'abandoned' } }
  | { kind: 'snapshot'; attemptId: string; revision: number; turn: number; step: number; stream: AssistantStreamRecord[] }

/** What the server sends on `GET …/stream`, by SSE event name. */
export interface ServerFrameData {
  'session/event': SessionEvent
  'stream/ready': { headSeq: number }
  'stream/error': { code: string }
  'agent/status': { status: 'idle' | 'running' }
  'agent/session-start': { source: string }
  'agent/inbox/inserted': { message: UserMessage }
  'agent/inbox/claimed': { message: UserMessage; turn: number }
  'agent/inbox/discarded': { message: UserMessage }
  'agent/assistant-stream': AssistantStreamFrame
  'agent/error': { turn: number; step: number; error: LlmFailure }
}

/** Frames the client itself adds: the stream is about to reconnect (from `after`) in `delayMs`. */
export interface ClientFrameData {
  'client/reconnecting': { after: number; attempt: number; delayMs: number; reason: string }
}

type FrameOf<M> = { [E in keyof M]: E extends 'session/event' ? { event: E; id: number; data: M[E] } : { event: E; data: M[E] } }[keyof M]
/** One frame of {@link AgentdClient.stream}: narrow on `event`. */
export type StreamFrame = FrameOf<ServerFrameData> | FrameOf<ClientFrameData> | { event: 'unknown'; name: string; data: unknown }
