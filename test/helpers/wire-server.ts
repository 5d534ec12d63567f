// A local HTTP server that speaks the streaming wire formats of Anthropic Messages (`POST …/messages`),
// OpenAI Responses (`POST …/responses`) and OpenAI Chat Completions (`POST …/chat/completions`), so
// pi-ai's real provider clients can be driven end to end. Answers are scripted in a FIFO as the server-sent
// events of a recorded-shape stream (the builders below) or an HTTP error; every request is recorded with
// its body exactly as it arrived, byte for byte.

import http from 'node:http'
import type { AddressInfo } from 'node:net'

/** One server-sent event: `event: <event>` (when given) and `data: <JSON of data>`. */
export interface SseEvent {
  event?: string
  data: unknown
}

export type WireAnswer =
  | { sse: SseEvent[]; headers?: Record<string, string> }
  | { error: { status: number; body?: unknown; headers?: Record<string, string> } }

export interface WireRequest {
  method: string
  path: string
  headers: http.IncomingHttpHeaders
  /** the body as received */
  raw: string
  body: any
}

export interface WireServer {
  /** `http://127.0.0.1:<port>` */
  readonly origin: string
  readonly requests: WireRequest[]
  /** queues answers, each for the next request in arrival order; a function sees the request first */
  script(...answers: Array<WireAnswer | ((r: WireRequest) => WireAnswer)>): void
  pending(): number
  /** resolves with the n-th request (0-based) once it arrived */
  waitForRequest(n: number, timeoutMs?: number): Promise<WireRequest>
  close(): Promise<void>
}

export async function startWireServer(): Promise<WireServer> {
  const queue: Array<WireAnswer | ((r: WireRequest) => WireAnswer)> = []
  const requests: WireRequest[] = []
  const waiters = new Set<() => void>()
  const server = http.createServer(async (req, res) => {
    let raw = ''
    req.setEncoding('utf8')
    for await (const c of req) raw += c
    let body: unknown
    try {
      body = JSON.parse(raw)
    } catch {
      body = undefined
    }
    const rec: WireRequest = { method: req.method ?? '', path: req.url ?? '', headers: req.headers, raw, body }
    requests.push(rec)
    for (const w of [...waiters]) w()
    const next = queue.shift()
    const answer = typeof next === 'function' ? next(rec) : next
    if (!answer) {
      res.writeHead(500, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ type: 'error', error: { type: 'api_error', message: `wire-server: no scripted answer for ${rec.path}` } }))
      return
    }
    if ('error' in answer) {
      const { status, body: payload = { type: 'error', error: { type: 'api_error', message: `scripted ${status}` } }, headers = {} } = answer.error
      res.writeHead(status, { 'content-type': 'application/json', ...headers })
      res.end(typeof payload === 'string' ? payload : JSON.stringify(payload))
      return
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', ...answer.headers })
    for (const e of answer.sse) res.write(`${e.event !== undefined ? `event: ${e.event}\n` : ''}data: ${typeof e.data === 'string' ? e.data : JSON.stringify(e.data)}\n\n`)
    res.end()
  })
  server.keepAliveTimeout = 1000
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  const { port } = server.address() as AddressInfo
  return {
    origin: `http://127.0.0.1:${port}`,
    requests,
    script: (...answers) => void queue.push(...answers),
    pending: () => queue.length,
    waitForRequest(n, timeoutMs = 10000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          if (!requests[n]) return
          waiters.delete(check)
          clearTimeout(timer)
          resolve(requests[n])
        }
        const timer = setTimeout(() => {
          waiters.delete(check)
          reject(new Error(`wire-server: request #${n} did not arrive within ${timeoutMs} ms (${requests.length} arrived)`))
        }, timeoutMs)
        waiters.add(check)
        check()
      })
    },
    async close() {
      server.closeAllConnections()
      await new Promise<void>((r) => server.close(() => r()))
    },
  }
}

/** Splits text into `parts` pieces (the deltas of a stream). */
export function pieces(s: string, parts = 2): string[] {
  if (s === '') return []
  const size = Math.ceil(s.length / Math.max(1, parts))
  const out: string[] = []
  for (let i = 0; i < s.length; i += size) out.push(s.slice(i, i + size))
  return out
}

// ---- Anthropic Messages (https://docs.anthropic.com/en/api/messages-streaming) ----

export type AnthropicBlock =
  | { type: 'thinking'; thinking: string; signature: string }
  | { type: 'redacted_thinking'; data: string }
  | { type: 'text'; text: string }
  | { type: 'tool_use'; id: string; name: string; input: object }

export interface AnthropicReply {
  id: string
  model: string
  blocks: AnthropicBlock[]
  /** `end_turn`, `tool_use`, `max_tokens`, `refusal`, … */
  stopReason: string
  /** message_start's usage (input side) */
  usage: { input_tokens: number; cache_read_input_tokens?: number; cache_creation_input_tokens?: number }
  /** message_delta's usage: output_tokens and whatever else the server reports there */
  deltaUsage: { output_tokens: number; [k: string]: unknown }
  /** message_delta's `stop_details` (a refusal's category and explanation) */
  stopDetails?: unknown
}

/** The event stream Anthropic sends for a reply. */
export function anthropicStream(r: AnthropicReply): SseEvent[] {
  const ev = (data: { type: string }) => ({ event: data.type, data })
  const out: SseEvent[] = [
    ev({
      type: 'message_start',
      message: { id: r.id, type: 'message', role: 'assistant', model: r.model, content: [], stop_reason: null, stop_sequence: null, usage: { cache_creation_input_tokens: 0, cache_read_input_tokens: 0, ...r.usage, output_tokens: 1 } },
    } as { type: string }),
    { event: 'ping', data: { type: 'ping' } },
  ]
  r.blocks.forEach((b, index) => {
    if (b.type === 'thinking') {
      out.push(ev({ type: 'content_block_start', index, content_block: { type: 'thinking', thinking: '', signature: '' } } as { type: string }))
      for (const t of pieces(b.thinking)) out.push(ev({ type: 'content_block_delta', index, delta: { type: 'thinking_delta', thinking: t } } as { type: string }))
      out.push(ev({ type: 'content_block_delta', index, delta: { type: 'signature_delta', signature: b.signature } } as { type: string }))
    } else if (b.type === 'redacted_thinking') {
      out.push(ev({ type: 'content_block_start', index, content_block: { type: 'redacted_thinking', data: b.data } } as { type: string }))
    } else if (b.type === 'text') {
      out.push(ev({ type: 'content_block_start', index, content_block: { type: 'text', text: '' } } as { type: string }))
      for (const t of pieces(b.text)) out.push(ev({ type: 'content_block_delta', index, delta: { type: 'text_delta', text: t } } as { type: string }))
    } else {
      out.push(ev({ type: 'content_block_start', index, content_block: { type: 'tool_use', id: b.id, name: b.name, input: {} } } as { type: string }))
      for (const t of pieces(JSON.stringify(b.input))) out.push(ev({ type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: t } } as { type: string }))
    }
    out.push(ev({ type: 'content_block_stop', index } as { type: string }))
  })
  const delta: Record<string, unknown> = { stop_reason: r.stopReason, stop_sequence: null }
  if (r.stopDetails !== undefined) delta.stop_details = r.stopDetails
  out.push(ev({ type: 'message_delta', delta, usage: r.deltaUsage } as { type: string }))
  out.push(ev({ type: 'message_stop' }))
  return out
}

// ---- OpenAI Responses (https://platform.openai.com/docs/api-reference/responses-streaming) ----

export type ResponsesItem =
  | { type: 'reasoning'; id: string; summary: string[]; encrypted: string }
  | { type: 'message'; id: string; text: string; refusal?: boolean }
  | { type: 'function_call'; id: string; callId: string; name: string; arguments: object }

export interface ResponsesReply {
  id: string
  model: string
  items: ResponsesItem[]
  /** the terminal event: `response.completed` (default) or `response.incomplete` with its reason */
  incomplete?: string
  usage: { input_tokens: number; output_tokens: number; cached_tokens?: number; reasoning_tokens?: number }
}

/** The event stream the Responses API sends for a reply (store: false, encrypted reasoning included). */
export function responsesStream(r: ResponsesReply): SseEvent[] {
  let seq = 0
  const out: SseEvent[] = []
  const ev = (data: Record<string, unknown> & { type: string }) => out.push({ event: data.type, data: { ...data, sequence_number: seq++ } })
  const base = { id: r.id, object: 'response', created_at: 1765000000, model: r.model, output: [] as unknown[], usage: null as unknown, status: 'in_progress', incomplete_details: null, error: null }
  ev({ type: 'response.created', response: { ...base } })
  ev({ type: 'response.in_progress', response: { ...base } })
  const done: unknown[] = []
  r.items.forEach((item, output_index) => {
    if (item.type === 'reasoning') {
      ev({ type: 'response.output_item.added', output_index, item: { id: item.id, type: 'reasoning', summary: [] } })
      item.summary.forEach((text, summary_index) => {
        ev({ type: 'response.reasoning_summary_part.added', item_id: item.id, output_index, summary_index, part: { type: 'summary_text', text: '' } })
        for (const d of pieces(text)) ev({ type: 'response.reasoning_summary_text.delta', item_id: item.id, output_index, summary_index, delta: d })
        ev({ type: 'response.reasoning_summary_text.done', item_id: item.id, output_index, summary_index, text })
        ev({ type: 'response.reasoning_summary_part.done', item_id: item.id, output_index, summary_index, part: { type: 'summary_text', text } })
      })
      const full = { id: item.id, type: 'reasoning', summary: item.summary.map((text) => ({ type: 'summary_text', text })), encrypted_content: item.encrypted }
      ev({ type: 'response.output_item.done', output_index, item: full })
      done.push(full)
    } else if (item.type === 'message') {
      const part = item.refusal ? { type: 'refusal', refusal: '' } : { type: 'output_text', annotations: [], text: '' }
      ev({ type: 'response.output_item.added', output_index, item: { id: item.id, type: 'message', status: 'in_progress', content: [], role: 'assistant' } })
      ev({ type: 'response.content_part.added', item_id: item.id, output_index, content_index: 0, part })
      for (const d of pieces(item.text)) ev({ type: item.refusal ? 'response.refusal.delta' : 'response.output_text.delta', item_id: item.id, output_index, content_index: 0, delta: d })
      const finalPart = item.refusal ? { type: 'refusal', refusal: item.text } : { type: 'output_text', annotations: [], text: item.text }
      if (item.refusal) ev({ type: 'response.refusal.done', item_id: item.id, output_index, content_index: 0, refusal: item.text })
      else ev({ type: 'response.output_text.done', item_id: item.id, output_index, content_index: 0, text: item.text })
      ev({ type: 'response.content_part.done', item_id: item.id, output_index, content_index: 0, part: finalPart })
      const full = { id: item.id, type: 'message', status: 'completed', content: [finalPart], role: 'assistant' }
      ev({ type: 'response.output_item.done', output_index, item: full })
      done.push(full)
    } else {
      const args = JSON.stringify(item.arguments)
      ev({ type: 'response.output_item.added', output_index, item: { id: item.id, type: 'function_call', status: 'in_progress', arguments: '', call_id: item.callId, name: item.name } })
      for (const d of pieces(args)) ev({ type: 'response.function_call_arguments.delta', item_id: item.id, output_index, delta: d })
      ev({ type: 'response.function_call_arguments.done', item_id: item.id, output_index, arguments: args })
      const full = { id: item.id, type: 'function_call', status: 'completed', arguments: args, call_id: item.callId, name: item.name }
      ev({ type: 'response.output_item.done', output_index, item: full })
      done.push(full)
    }
  })
  const u = r.usage
  const usage = {
    input_tokens: u.input_tokens,
    input_tokens_details: { cached_tokens: u.cached_tokens ?? 0 },
    output_tokens: u.output_tokens,
    output_tokens_details: { reasoning_tokens: u.reasoning_tokens ?? 0 },
    total_tokens: u.input_tokens + u.output_tokens,
  }
  if (r.incomplete !== undefined) ev({ type: 'response.incomplete', response: { ...base, status: 'incomplete', incomplete_details: { reason: r.incomplete }, output: done, usage } })
  else ev({ type: 'response.completed', response: { ...base, status: 'completed', output: done, usage } })
  return out
}

// ---- OpenAI Chat Completions (https://platform.openai.com/docs/api-reference/chat-streaming) ----

export interface CompletionsReply {
  id: string
  model: string
  /** `delta.reasoning_content` pieces, sent first */
  reasoning?: string
  text?: string
  toolCalls?: Array<{ id: string; name: string; arguments: object }>
  /** default `tool_calls` with tool calls, else `stop` */
  finish?: string
  usage: { prompt_tokens: number; completion_tokens: number; [k: string]: unknown }
}

export function completionsStream(r: CompletionsReply): SseEvent[] {
  const chunk = (delta: object, finish_reason: string | null = null) => ({ data: { id: r.id, object: 'chat.completion.chunk', created: 1765000000, model: r.model, choices: [{ index: 0, delta, finish_reason }] } })
  const out: SseEvent[] = [chunk({ role: 'assistant', content: '' })]
  for (const t of pieces(r.reasoning ?? '')) out.push(chunk({ reasoning_content: t }))
  for (const t of pieces(r.text ?? '')) out.push(chunk({ content: t }))
  ;(r.toolCalls ?? []).forEach((tc, index) => {
    out.push(chunk({ tool_calls: [{ index, id: tc.id, type: 'function', function: { name: tc.name, arguments: '' } }] }))
    for (const t of pieces(JSON.stringify(tc.arguments))) out.push(chunk({ tool_calls: [{ index, function: { arguments: t } }] }))
  })
  out.push(chunk({}, r.finish ?? (r.toolCalls?.length ? 'tool_calls' : 'stop')))
  out.push({ data: { id: r.id, object: 'chat.completion.chunk', created: 1765000000, model: r.model, choices: [], usage: { total_tokens: r.usage.prompt_tokens + r.usage.completion_tokens, ...r.usage } } })
  out.push({ data: '[DONE]' })
  return out
}

// ---- Google Generative AI (https://ai.google.dev/api/generate-content#method:-models.streamgeneratecontent) ----

export interface GeminiReply {
  text?: string
  /** the candidate's finishReason: `STOP`, `MAX_TOKENS`, `SAFETY`, …; absent with a blocked prompt */
  finishReason?: string
  /** promptFeedback of a prompt Gemini refused to answer at all (no candidates) */
  blockReason?: string
  usage: { promptTokenCount: number; candidatesTokenCount: number; thoughtsTokenCount?: number }
}

/** The server-sent events of `streamGenerateContent?alt=sse`. */
export function geminiStream(r: GeminiReply): SseEvent[] {
  const usageMetadata = { ...r.usage, totalTokenCount: r.usage.promptTokenCount + r.usage.candidatesTokenCount + (r.usage.thoughtsTokenCount ?? 0) }
  if (r.blockReason !== undefined) {
    return [{ data: { promptFeedback: { blockReason: r.blockReason, safetyRatings: [{ category: 'HARM_CATEGORY_DANGEROUS_CONTENT', probability: 'HIGH' }] }, usageMetadata, modelVersion: 'gemini', responseId: 'resp_g' } }]
  }
  const parts = pieces(r.text ?? '')
  return parts.map((text, i) => {
    const last = i === parts.length - 1
    const candidate: Record<string, unknown> = { content: { parts: [{ text }], role: 'model' }, index: 0 }
    if (last && r.finishReason) candidate.finishReason = r.finishReason
    if (last && r.finishReason === 'SAFETY') candidate.safetyRatings = [{ category: 'HARM_CATEGORY_DANGEROUS_CONTENT', probability: 'HIGH', blocked: true }]
    return { data: { candidates: [candidate], ...(last ? { usageMetadata } : {}), modelVersion: 'gemini', responseId: 'resp_g' } }
  })
}
