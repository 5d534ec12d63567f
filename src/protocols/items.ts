// The protocol-neutral item model (API.md §17): what a span shows, as every client protocol renders
// it. A span (span.ts) holds items — reasoning, text, tool calls and the results of calls an earlier
// span asked for — and the fold announces each change as one op, in log order, so a protocol module
// is a renderer: it turns ops into its own frames and numbers them, nothing more.
//
// Ops are emitted once, in a fixed order that depends only on the log and the attempts' chunks: a
// renderer that serializes each op when it gets it produces the same frames on every read.

import type { ContentBlock, UserMessage } from '../session/index.js'
import type { UsageTotals } from '../session/index.js'

/** Who answers a tool call: a client (API.md §7), an approver, or the server itself (http, builtin, MCP). */
export type ToolKind = 'client' | 'approval' | 'server'
/** The kinds a turn waits on. */
export type WaitKind = Exclude<ToolKind, 'server'>

export type ItemStatus = 'in_progress' | 'completed' | 'incomplete'

/** A tool's result as the log holds it (tool/result). */
export interface ToolResult {
  content: ContentBlock[]
  isError: boolean
  /** SPEC §3.5 tool codes (TOOL_DENIED, TOOL_ABORTED, …) */
  error?: { name: string; code: string }
}

interface ItemCommon {
  /** stable within the session: the span's id and the item's ordinal in it */
  id: string
  /** 0, 1, 2, … within the span */
  ordinal: number
  status: ItemStatus
}

/** Assistant text: one block of one attempt. */
export interface TextItem extends ItemCommon {
  type: 'text'
  text: string
}

/** Thinking text: one block of one attempt. */
export interface ReasoningItem extends ItemCommon {
  type: 'reasoning'
  text: string
}

/** A tool call the model made in this span; `result` once its tool/result is in the same span. */
export interface ToolCallItem extends ItemCommon {
  type: 'tool-call'
  callId: string
  name: string
  /** JSON text as streamed (complete once the item is done) */
  arguments: string
  kind: ToolKind
  result?: ToolResult
}

/**
 * The result of a call an earlier span made (the span ended waiting for it): the answer of a client,
 * or the outcome of an approved or denied call. Appears in the span the answer opened.
 */
export interface ToolResultItem extends ItemCommon {
  type: 'tool-result'
  callId: string
  name: string
  /** the call's arguments (JSON text, as tool/call logged them) */
  arguments: string
  kind: ToolKind
  result: ToolResult
}

export type SpanItem = TextItem | ReasoningItem | ToolCallItem | ToolResultItem

export type SpanStatus = 'queued' | 'in_progress' | 'completed' | 'incomplete' | 'failed' | 'cancelled'

/** What opened a span (its id is derived from it, span.ts spanId). */
export type SpanOpener =
  /** a delivered message claimed at a turn's start: `seq` is its delivery splice */
  | { kind: 'input'; seq: number; messageId: string }
  /** the answer to the wait the previous span of the turn ended at: `seq` is that span's last event */
  | { kind: 'answer'; seq: number }
  /** a turn that claimed nothing: `seq` is its turn/start */
  | { kind: 'turn'; seq: number }

export interface Span {
  /** stable, derived from the log: `i<seq>`, `w<seq>` or `t<seq>` after its opener */
  id: string
  opener: SpanOpener
  /** the turn it belongs to (0 while queued) */
  turn: number
  status: SpanStatus
  /** true once the span ended (status final, or completed at a wait) */
  ended: boolean
  /** time (epoch ms) of its opener event: the delivery, or the wait's last event */
  createdAt: number
  /** the input it was queued behind other work before its turn claimed it */
  queued: boolean
  /** the messages its opening claim took, then steering admitted into it (user/message) */
  input: UserMessage[]
  items: SpanItem[]
  /** summed over its settled attempts (assistant/message and assistant/attempt) */
  usage: UsageTotals
  /** `provider/model` of its first attempt's request header, else of the latest header before it */
  model?: string
  /** the system text in force when its first step ran (system/message) */
  instructions?: string
  /** failed: the turn's error (`code` as in SPEC §3.5, or `blocked`, `interrupted`) */
  error?: { code: string; message: string }
  /** ended at a wait: the calls it waits on */
  waits: Array<{ callId: string; name: string; kind: WaitKind }>
  /** the id of the span before it in the session, if any */
  previous?: string
  /** the events it covers: from its opener to its end (inclusive); firstSeq is the opener's */
  firstSeq: number
  lastSeq: number
}

/** One change to a span, in log order (items.ts header). */
export type SpanOp =
  /** announced: `status` is queued (input waiting behind other work) or in_progress */
  | { op: 'span-open'; span: Span }
  /** a queued span's input was claimed: in_progress */
  | { op: 'span-start'; span: Span }
  /** a user message admitted into the span: its opening input, or steering (source kind `user`) */
  | { op: 'input'; span: Span; message: UserMessage; opening: boolean }
  | { op: 'item-add'; span: Span; item: SpanItem }
  /** text, reasoning or tool-argument text appended to an item */
  | { op: 'delta'; span: Span; item: TextItem | ReasoningItem | ToolCallItem; delta: string }
  /** an attempt's item ended, when the attempt finished or settled (item.status: completed, or incomplete for a failed, cut or truncated attempt) */
  | { op: 'item-done'; span: Span; item: SpanItem }
  /** a tool call of this span got its result (item.result), or a result item of an earlier call was added */
  | { op: 'tool-result'; span: Span; item: ToolCallItem | ToolResultItem }
  /** the span ended: span.status, span.waits, span.error say how */
  | { op: 'span-end'; span: Span }

/** A plain-JSON copy of a span (for Response objects and tests). */
export const cloneSpan = (s: Span): Span => structuredClone(s)

/** The text of text blocks. */
export const textOf = (content: readonly ContentBlock[]): string =>
  content.map((b) => (b.type === 'text' ? b.text : '')).join('')
