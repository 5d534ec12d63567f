// OpenAI Responses (API.md §17.1) as a pure projection: a span (span.ts) is a Response object, and the
// span's ops are the Response's streaming events, numbered by `sequence_number` from 0 without gaps.
// Every event is serialized when its op comes, so the same log (and the same attempt chunks) give the
// same bytes on every read: a stream resumed after N is the uninterrupted one's events after N.
//
// Ids: a response is `resp_<session id, base64url>_<span id>`; an item `<prefix>_<session id,
// base64url>_<span id>.<ordinal>` (msg_, rs_, fc_, mcp_); an approval request is named by its call id,
// as its answer names it back (`approval_request_id`).

import type { ContentBlock, UserMessage } from '../session/index.js'
import type { Span, SpanItem, SpanOp, ToolCallItem, ToolResultItem } from './items.js'

const b64 = (s: string) => Buffer.from(s, 'utf8').toString('base64url')

/** The Response id of a span of a session. */
export const responseId = (sessionId: string, spanId: string) => `resp_${b64(sessionId)}_${spanId}`

/** The session id and span id a Response id names, or undefined for a malformed one. */
export function parseResponseId(id: string): { sessionId: string; spanId: string } | undefined {
  const m = /^resp_([A-Za-z0-9_-]+)_([iwt]\d{1,10})$/.exec(id)
  if (!m) return undefined
  const sessionId = Buffer.from(m[1], 'base64url').toString('utf8')
  if (!sessionId || b64(sessionId) !== m[1]) return undefined
  return { sessionId, spanId: m[2] }
}

/** The request fields of the input that opened a span, kept in its message's source (responses-routes.ts). */
export interface ResponseRequestFacts {
  background?: boolean
  metadata?: Record<string, string>
}

/** Where the Responses routes put their request facts in the followup's source (`source.responses`). */
export function requestFacts(span: Span): ResponseRequestFacts {
  if (span.opener.kind !== 'input') return {}
  const m = span.input.find((x) => x.id === (span.opener as { messageId: string }).messageId) ?? span.input[0]
  const r = (m?.source as { responses?: ResponseRequestFacts } | undefined)?.responses
  return r && typeof r === 'object' ? r : {}
}

const contentText = (content: readonly ContentBlock[]) => content.map((b) => (b.type === 'text' ? b.text : '')).join('')

type OutputItem = Record<string, unknown>

function mcpCall(sessionId: string, item: ToolCallItem | ToolResultItem, done: boolean): OutputItem {
  const r = item.result
  const text = r ? contentText(r.content) : null
  return {
    type: 'mcp_call',
    id: `mcp_${b64(sessionId)}_${item.id}`,
    name: item.name,
    arguments: item.arguments,
    server_label: 'agentd',
    output: r && !r.isError ? text : null,
    error: r && r.isError ? text : null,
    status: !done ? 'in_progress' : r ? (r.isError ? 'failed' : 'completed') : 'incomplete',
  }
}

/** An item as a Responses output item; undefined for what Responses shows as input (a client's result). */
export function outputItem(sessionId: string, item: SpanItem): OutputItem | undefined {
  const id = `${b64(sessionId)}_${item.id}`
  switch (item.type) {
    case 'text':
      return { type: 'message', id: `msg_${id}`, status: item.status, role: 'assistant', content: item.status === 'in_progress' && !item.text ? [] : [{ type: 'output_text', text: item.text, annotations: [], logprobs: [] }] }
    case 'reasoning':
      return { type: 'reasoning', id: `rs_${id}`, summary: item.status === 'in_progress' && !item.text ? [] : [{ type: 'summary_text', text: item.text }], status: item.status }
    case 'tool-call':
      if (item.kind === 'client') return { type: 'function_call', id: `fc_${id}`, call_id: item.callId, name: item.name, arguments: item.arguments, status: item.status }
      if (item.kind === 'approval') return { type: 'mcp_approval_request', id: item.callId, name: item.name, arguments: item.arguments, server_label: 'agentd' }
      return mcpCall(sessionId, item, item.result !== undefined || item.status === 'incomplete')
    case 'tool-result':
      return item.kind === 'client' ? undefined : mcpCall(sessionId, item, true)
  }
}

/** The items of a span that are Response output, in order. */
const rendered = (span: Span) => span.items.filter((i) => !(i.type === 'tool-result' && i.kind === 'client'))

function usage(span: Span) {
  const u = span.usage
  const input = u.inputTokens + u.cacheReadTokens + u.cacheWriteTokens
  return { input_tokens: input, input_tokens_details: { cached_tokens: u.cacheReadTokens }, output_tokens: u.outputTokens, output_tokens_details: { reasoning_tokens: u.reasoningTokens }, total_tokens: input + u.outputTokens }
}

/** The Response object of a span as it stands (API.md §17.1). */
export function toResponse(sessionId: string, span: Span): Record<string, unknown> {
  const facts = requestFacts(span)
  const ended = span.ended
  return {
    id: responseId(sessionId, span.id),
    object: 'response',
    created_at: Math.floor(span.createdAt / 1000),
    status: span.status,
    background: facts.background === true,
    error: span.status === 'failed' && span.error ? { code: span.error.code, message: span.error.message } : null,
    incomplete_details: span.status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
    instructions: span.instructions ?? null,
    metadata: facts.metadata ?? {},
    model: span.model ?? '',
    output: rendered(span).map((i) => outputItem(sessionId, i)).filter((x) => x !== undefined),
    parallel_tool_calls: true,
    previous_response_id: span.previous ? responseId(sessionId, span.previous) : null,
    conversation: { id: sessionId },
    store: true,
    text: { format: { type: 'text' } },
    tool_choice: 'auto',
    tools: [],
    usage: ended ? usage(span) : null,
  }
}

/** A Responses stream event: its type and its JSON text (sequence_number included). */
export interface ResponseEvent {
  type: string
  sequence: number
  json: string
}

/** The wire text of an event (SSE, API.md §17.1). */
export const sseText = (e: ResponseEvent) => `event: ${e.type}\ndata: ${e.json}\n\n`

const TERMINAL: Record<string, string> = { completed: 'response.completed', incomplete: 'response.incomplete', failed: 'response.failed', cancelled: 'response.cancelled' }

/**
 * The events of one response, from its span's ops: feed every op of the session's fold (ops of other
 * spans are ignored); each call returns the events it made, numbered on from the last.
 */
export class ResponseProjector {
  private seq = 0
  /** output_index of rendered items, by item id */
  private readonly index = new Map<string, number>()
  /** rendered items whose output_item.added went out and whose .done has not */
  private readonly openItems = new Set<string>()
  done = false

  constructor(readonly sessionId: string, readonly spanId: string) {}

  private ev(out: ResponseEvent[], type: string, body: Record<string, unknown>): void {
    const sequence = this.seq++
    out.push({ type, sequence, json: JSON.stringify({ type, ...body, sequence_number: sequence }) })
  }

  private outputIndex(span: Span, item: SpanItem): number {
    let i = this.index.get(item.id)
    if (i === undefined) {
      i = rendered(span).findIndex((x) => x.id === item.id)
      this.index.set(item.id, i)
    }
    return i
  }

  op(op: SpanOp): ResponseEvent[] {
    if (op.span.id !== this.spanId || this.done) return []
    const out: ResponseEvent[] = []
    const { span } = op
    const sid = this.sessionId
    switch (op.op) {
      case 'span-open':
        this.ev(out, 'response.created', { response: toResponse(sid, span) })
        this.ev(out, span.status === 'queued' ? 'response.queued' : 'response.in_progress', { response: toResponse(sid, span) })
        break
      case 'span-start':
        this.ev(out, 'response.in_progress', { response: toResponse(sid, span) })
        break
      case 'item-add': {
        const item = op.item
        const output_index = this.outputIndex(span, item)
        const o = outputItem(sid, item)!
        this.openItems.add(item.id)
        this.ev(out, 'response.output_item.added', { output_index, item: o })
        if (item.type === 'text') this.ev(out, 'response.content_part.added', { item_id: o.id, output_index, content_index: 0, part: { type: 'output_text', text: '', annotations: [], logprobs: [] } })
        if (item.type === 'reasoning') this.ev(out, 'response.reasoning_summary_part.added', { item_id: o.id, output_index, summary_index: 0, part: { type: 'summary_text', text: '' } })
        break
      }
      case 'delta': {
        const item = op.item
        if (item.type === 'tool-call' && item.kind === 'approval') break
        const output_index = this.outputIndex(span, item)
        const id = outputItem(sid, item)!.id
        if (item.type === 'text') this.ev(out, 'response.output_text.delta', { item_id: id, output_index, content_index: 0, delta: op.delta, logprobs: [] })
        else if (item.type === 'reasoning') this.ev(out, 'response.reasoning_summary_text.delta', { item_id: id, output_index, summary_index: 0, delta: op.delta })
        else if (item.kind === 'client') this.ev(out, 'response.function_call_arguments.delta', { item_id: id, output_index, delta: op.delta })
        else this.ev(out, 'response.mcp_call_arguments.delta', { item_id: id, output_index, delta: op.delta })
        break
      }
      case 'item-done': {
        const item = op.item
        const output_index = this.outputIndex(span, item)
        const o = outputItem(sid, item)
        if (!o) break
        if (item.type === 'text') {
          this.ev(out, 'response.output_text.done', { item_id: o.id, output_index, content_index: 0, text: item.text, logprobs: [] })
          this.ev(out, 'response.content_part.done', { item_id: o.id, output_index, content_index: 0, part: { type: 'output_text', text: item.text, annotations: [], logprobs: [] } })
          this.itemDone(out, output_index, item.id, o)
        } else if (item.type === 'reasoning') {
          this.ev(out, 'response.reasoning_summary_text.done', { item_id: o.id, output_index, summary_index: 0, text: item.text })
          this.ev(out, 'response.reasoning_summary_part.done', { item_id: o.id, output_index, summary_index: 0, part: { type: 'summary_text', text: item.text } })
          this.itemDone(out, output_index, item.id, o)
        } else if (item.type === 'tool-call') {
          if (item.kind === 'approval') {
            // added (in output order, as every item) with its arguments so far; done with all of them
            this.itemDone(out, output_index, item.id, o)
          } else if (item.kind === 'client') {
            this.ev(out, 'response.function_call_arguments.done', { item_id: o.id, output_index, name: item.name, arguments: item.arguments })
            this.itemDone(out, output_index, item.id, o)
          } else {
            this.ev(out, 'response.mcp_call_arguments.done', { item_id: o.id, output_index, arguments: item.arguments })
            // a server call is done when its result comes, unless it will never run
            if (item.status === 'incomplete') this.itemDone(out, output_index, item.id, o)
          }
        }
        break
      }
      case 'tool-result': {
        const item = op.item
        const o = outputItem(sid, item)
        if (!o) break
        const output_index = this.outputIndex(span, item)
        if (item.type === 'tool-result') this.ev(out, 'response.output_item.added', { output_index, item: { ...o, output: null, error: null, status: 'in_progress' } })
        else if (item.kind !== 'server') break
        this.itemDone(out, output_index, item.id, o, true)
        break
      }
      case 'span-end': {
        // a server call still running when the span ended at a wait shows in the next span
        for (const item of rendered(span)) if (this.openItems.has(item.id)) this.itemDone(out, this.outputIndex(span, item), item.id, outputItem(sid, item)!)
        this.ev(out, TERMINAL[span.status] ?? 'response.completed', { response: toResponse(sid, span) })
        this.done = true
        break
      }
      case 'input':
        break
    }
    return out
  }

  private itemDone(out: ResponseEvent[], output_index: number, id: string, o: OutputItem, force = false): void {
    if (!this.openItems.delete(id) && !force) return
    this.ev(out, 'response.output_item.done', { output_index, item: o })
  }
}

/** The input a span admitted, as Responses input items (GET …/input_items). */
export function inputItems(sessionId: string, span: Span): Array<Record<string, unknown>> {
  const out: Array<Record<string, unknown>> = []
  for (const r of span.items) {
    if (r.type !== 'tool-result') continue
    if (r.kind === 'client') out.push({ type: 'function_call_output', id: `fco_${b64(sessionId)}_${r.id}`, call_id: r.callId, output: contentText(r.result.content), status: 'completed' })
    else if (r.kind === 'approval') out.push({ type: 'mcp_approval_response', id: `mcpr_${b64(sessionId)}_${r.id}`, approval_request_id: r.callId, approve: r.result.error?.code !== 'TOOL_DENIED' })
  }
  for (const m of span.input) out.push(messageItem(m))
  return out
}

/** A user message as a Responses input message item. */
export function messageItem(m: UserMessage): Record<string, unknown> {
  const content = m.content.map((b) => (b.type === 'text' ? { type: 'input_text', text: b.text } : b.type === 'image' ? { type: 'input_image', image_url: b.url ?? `data:${b.mimeType};base64,${b.data}`, detail: 'auto' } : { type: 'input_text', text: '' }))
  return { type: 'message', id: m.id, role: 'user', status: 'completed', content }
}
