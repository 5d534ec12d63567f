// The AI SDK UI message stream (API.md §17.2) as a renderer of the protocol core's span ops
// (../span.ts, ../items.ts): each turn is one assistant UI message, so the spans of one turn — the one
// its input opened and those that answers to its waits opened — render into the same message, whose id
// is derived from the turn's first span. The renderer keeps, per turn, the parts rendered so far (what
// a resumed stream replays, since useChat replaces the message it resumes); the stream (stream.ts)
// decides which span a client is sent.

import type { Span, SpanOp } from './items.js'
import { textOf } from './items.js'

/** One UI message stream part, as `ai`'s `UIMessageChunk` spells it. */
export type UiChunk = { type: string } & Record<string, unknown>

/** The assistant UI message id of the turn a span belongs to. */
export const uiMessageId = (rootSpanId: string) => `agentd-${rootSpanId}`

/** Tool arguments as the UI shows them: the parsed JSON, or the text itself when it does not parse. */
export function parseInput(text: string): unknown {
  if (text.trim() === '') return {}
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}

/** A user message's content as UI parts (text and images as data URLs). */
export function userParts(content: unknown): Array<Record<string, unknown>> {
  if (typeof content === 'string') return [{ type: 'text', text: content }]
  if (!Array.isArray(content)) return []
  return content.flatMap((b: any): Array<Record<string, unknown>> =>
    b?.type === 'text' ? [{ type: 'text', text: b.text }] : b?.type === 'image' ? [{ type: 'file', mediaType: b.mimeType, url: `data:${b.mimeType};base64,${b.data}` }] : [],
  )
}

/** A tool result as the UI's `output`: its text when it is text only, else the content blocks. */
function toolOutput(content: ReadonlyArray<{ type: string }>): unknown {
  return content.every((b) => b.type === 'text') ? textOf(content as never) : content
}

export interface UiSink {
  /** a content part of the message of turn `root` (the id of the turn's first span) */
  content(root: string, chunk: UiChunk, span: Span): void
  /** a user message the span's opening claim admitted */
  userMessage?(root: string, message: { id: string; content: unknown }, span: Span): void
  /** the span ended (span.status, span.waits say how) */
  spanEnd?(root: string, span: Span): void
}

/** Turns span ops into UI parts, grouped by turn. */
export class UiRenderer {
  /** the parts of each turn's message so far, by the turn's root span id */
  readonly parts = new Map<string, UiChunk[]>()
  private readonly roots = new Map<string, string>()

  /** `serverRun(name)`: the tool runs on the server (http, builtin, MCP), also when it asks for approval first */
  constructor(
    private readonly sink: UiSink,
    private readonly serverRun: (name: string) => boolean = () => true,
  ) {}

  /** The id of the first span of the turn `span` belongs to. */
  rootOf(span: Span): string {
    const known = this.roots.get(span.id)
    if (known) return known
    const root = span.opener.kind === 'answer' && span.previous ? (this.roots.get(span.previous) ?? span.previous) : span.id
    this.roots.set(span.id, root)
    return root
  }

  private emit(span: Span, chunk: UiChunk): void {
    const root = this.rootOf(span)
    let list = this.parts.get(root)
    if (!list) this.parts.set(root, (list = []))
    list.push(chunk)
    this.sink.content(root, chunk, span)
  }

  /**
   * A step of the open span started (the log's step/start; span ops have no steps). useChat needs the
   * `start-step` parts: it looks at the last step's tool parts to know when to send tool outputs.
   */
  step(span: Span): void {
    this.emit(span, { type: 'start-step' })
  }

  op(op: SpanOp): void {
    const span = op.span
    switch (op.op) {
      case 'input':
        if (op.opening) this.sink.userMessage?.(this.rootOf(span), { id: op.message.id, content: op.message.content }, span)
        else this.emit(span, { type: 'steering-message', id: op.message.id, parts: userParts(op.message.content) })
        return
      case 'item-add': {
        const item = op.item
        if (item.type === 'text') this.emit(span, { type: 'text-start', id: item.id })
        else if (item.type === 'reasoning') this.emit(span, { type: 'reasoning-start', id: item.id })
        else if (item.type === 'tool-call') this.emit(span, { type: 'tool-input-start', toolCallId: item.callId, toolName: item.name, dynamic: true, ...(this.serverRun(item.name) ? { providerExecuted: true } : {}) })
        return
      }
      case 'delta': {
        const item = op.item
        if (item.type === 'text') this.emit(span, { type: 'text-delta', id: item.id, delta: op.delta })
        else if (item.type === 'reasoning') this.emit(span, { type: 'reasoning-delta', id: item.id, delta: op.delta })
        else this.emit(span, { type: 'tool-input-delta', toolCallId: item.callId, inputTextDelta: op.delta })
        return
      }
      case 'item-done': {
        const item = op.item
        if (item.type === 'text') this.emit(span, { type: 'text-end', id: item.id })
        else if (item.type === 'reasoning') this.emit(span, { type: 'reasoning-end', id: item.id })
        else if (item.type === 'tool-call') {
          const executed = this.serverRun(item.name) ? { providerExecuted: true } : {}
          if (item.status === 'incomplete') this.emit(span, { type: 'tool-input-error', toolCallId: item.callId, toolName: item.name, input: parseInput(item.arguments), errorText: 'the model call ended before the call was complete', dynamic: true, ...executed })
          else this.emit(span, { type: 'tool-input-available', toolCallId: item.callId, toolName: item.name, input: parseInput(item.arguments), dynamic: true, ...executed })
        }
        return
      }
      case 'tool-result': {
        const item = op.item
        const r = item.result
        if (!r) return
        if (r.isError) this.emit(span, { type: 'tool-output-error', toolCallId: item.callId, errorText: textOf(r.content) || (r.error?.code ?? 'tool error'), dynamic: true })
        else this.emit(span, { type: 'tool-output-available', toolCallId: item.callId, output: toolOutput(r.content), dynamic: true })
        return
      }
      case 'span-end':
        this.sink.spanEnd?.(this.rootOf(span), span)
        return
    }
  }
}

/** Whether a session's tool runs on the server: every tool but its `client` ones (its settings as they stand). */
export function serverRun(tools: unknown): (name: string) => boolean {
  const client = new Set((Array.isArray(tools) ? tools : []).filter((t: any) => t?.execution?.type === 'client').map((t: any) => t.name as string))
  return (name) => !client.has(name)
}

/** The parts that end a span's stream (API.md §17.2): at a wait, the approvals it waits on, then `finish`. */
export function endParts(span: Span): UiChunk[] {
  switch (span.status) {
    case 'failed':
      return [{ type: 'error', errorText: span.error?.message ?? span.error?.code ?? 'the turn failed' }]
    case 'cancelled':
      return [{ type: 'abort', reason: 'cancelled' }]
    case 'incomplete':
      return [{ type: 'finish', finishReason: 'length' }]
    default:
      if (!span.waits.length) return [{ type: 'finish', finishReason: 'stop' }]
      return [...span.waits.filter((w) => w.kind === 'approval').map((w) => ({ type: 'tool-approval-request', approvalId: w.callId, toolCallId: w.callId })), { type: 'finish', finishReason: 'tool-calls' }]
  }
}
