// The session data model of SPEC §3: events, messages, content, stream chunks and shared value types.
// Field names here are wire contract (SPEC §1.3); keep them spelled exactly as the spec writes them.

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json }
export type JsonObject = { [key: string]: Json }

// ---- content (SPEC §3.3) ----

export interface TextBlock { type: 'text'; text: string }
export interface ReasoningBlock { type: 'reasoning'; text: string }
/** An attachment reference: inline base64 `data` with its `mimeType`, or a `url`. */
export interface ImageBlock { type: 'image'; mimeType?: string; data?: string; url?: string }
export interface ToolCallBlock { type: 'tool-call'; id: string; name: string; arguments: string }
export interface ToolResultBlock { type: 'tool-result'; toolCallId: string; isError: boolean; content: ContentBlock[] }
export type ContentBlock = TextBlock | ReasoningBlock | ImageBlock | ToolCallBlock | ToolResultBlock

export type MessageId = string

export type UserSource =
  | { kind: 'user'; [k: string]: Json }
  | { kind: 'plugin'; plugin: string; form?: string; [k: string]: Json | undefined }
  | { kind: 'tool'; callId: string; [k: string]: Json }

export interface UserMessage {
  id: MessageId
  role: 'user'
  content: ContentBlock[]
  source: UserSource
}

export interface SystemMessage {
  id: MessageId
  role: 'system'
  content: TextBlock[] | ContentBlock[]
  source: { kind: 'plugin'; plugin: 'system-prompt' }
}

export interface AssistantMessage {
  id: MessageId
  role: 'assistant'
  content: ContentBlock[]
  source: { kind: 'model'; provider: string; model: string; replayState?: Json }
}

export interface ToolResultMessage {
  id: MessageId
  role: 'user'
  content: [ToolResultBlock]
  source: { kind: 'tool'; callId: string }
}

export type Message = UserMessage | SystemMessage | AssistantMessage | ToolResultMessage

// ---- streaming (SPEC §3.3, §9.4) ----

export interface TokenUsage {
  inputTokens: number
  outputTokens: number
  cacheReadTokens?: number
  cacheWriteTokens?: number
  reasoningTokens?: number
  /** Dollar cost of the call when the route knows its prices (agentd's ledger; not part of SPEC's TokenUsage). */
  costUsd?: number
}

export interface LlmFailure {
  message: string
  code: string
  status?: number
  providerRetryAfterMs?: number
  requestId?: string
}

export type FinishReason =
  | { kind: 'stop' | 'tool-calls' | 'max-tokens' }
  | { kind: 'error' | 'aborted'; failure: LlmFailure }

export type BlockType = 'text' | 'reasoning' | 'tool-call' | 'image'

export type StreamChunk =
  | { type: 'block-start'; index: number; blockType: BlockType }
  | { type: 'text-delta'; index: number; text: string }
  | { type: 'reasoning-delta'; index: number; text: string }
  | { type: 'tool-call-delta'; index: number; id: string; name?: string; argumentsDelta: string }
  | { type: 'block-end'; index: number; block: ContentBlock }
  | { type: 'usage'; usage: TokenUsage }
  | { type: 'finish'; reason: FinishReason; replayState?: Json }

export interface TimedChunk { time: number; chunk: StreamChunk }

export type AssistantStreamRecord =
  | { type: 'text-chunks'; time0: number; index: number; dt: number[]; texts: string[] }
  | { type: 'reasoning-chunks'; time0: number; index: number; dt: number[]; texts: string[] }
  | { type: 'tool-call-chunks'; time0: number; index: number; dt: number[]; id: string; name?: string; args: string[] }
  | { type: 'chunk'; time: number; chunk: StreamChunk }

// ---- shared value types (SPEC §3.5) ----

export interface LlmCallConfig {
  provider: string
  model: string
  reasoningEffort?: string
  maxTokens?: number
  temperature?: number
  stop?: string[]
  [k: string]: Json | undefined
}

export interface ToolSchema { name: string; description: string; parameters: JsonObject }

export interface EpochHeader {
  config: LlmCallConfig
  adapterDefaults?: { reasoningEffort?: true; maxTokens?: true }
  tools?: ToolSchema[]
}

export type AgentCancelCause =
  | { kind: 'user' }
  | { kind: 'parent' }
  | { kind: 'hook'; reason: string }
  | { kind: 'disposed' }
  | { kind: 'legacy' }

export type TurnEndReason =
  | { kind: 'completed' }
  | { kind: 'aborted'; reason: AgentCancelCause }
  | { kind: 'blocked' }
  | { kind: 'error'; error: LlmFailure }
  | { kind: 'max-tokens' }
  | { kind: 'interrupted' }

export type PreStepDecision =
  | { kind: 'reject' }
  | { kind: 'enter'; messages: UserMessage[]; startsRequestSeries?: true }

// ---- events (SPEC §3.1, §3.4, §3.6) ----

export type SurfaceOp = 'append' | { op: 'replace'; start: number; end: number }

export const SURFACE_TYPES = new Set(['system/message', 'user/message', 'assistant/message', 'tool/result'])

/** An event as stored and sent on the wire (API.md §6). */
export interface SessionEvent {
  seq: number
  time: number
  type: string
  data: Json
  surfaceOp?: SurfaceOp
  sourceEventSeqs?: number[]
}

/** An event before the log gives it a seq and a time. */
export interface Draft {
  type: string
  data: Json
  surfaceOp?: SurfaceOp
  sourceEventSeqs?: number[]
}

export type InboxTarget = 'next-turn' | 'next-step'

export interface SplicedData {
  target: InboxTarget
  start: number
  removedCount?: number
  inserted: UserMessage[]
  outcome?: 'canceled'
}

export interface Inbox { nextTurn: UserMessage[]; nextStep: UserMessage[] }
