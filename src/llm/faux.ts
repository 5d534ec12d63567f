// agentd's own deterministic models, a pi-ai stream implementation so they take the same path as real
// routes. Both report constant usage and read only the end of the history, so long-session measurements
// are not distorted by a cost that grows with it (DESIGN.md §3); pi-ai's own faux provider estimates
// usage from the whole serialized context on every call.
// - `faux/echo` (API.md §2) answers "echo: <last user text>".
// - `faux/tools` calls the session's tools when the last user message asks with `/call <tool> <JSON
//   arguments>` lines (docs/models.md), then answers with what they returned; anything else it echoes.

import crypto from 'node:crypto'
import {
  createAssistantMessageEventStream,
  type AssistantMessage,
  type AssistantMessageEventStream,
  type JsonObject,
  type Message,
  type Model,
  type ProviderStreams,
  type StreamOptions,
  type TranscriptContext,
} from '@earendil-works/pi-ai'

export const FAUX_ECHO = 'faux/echo'
export const FAUX_TOOLS = 'faux/tools'
export const FAUX_API = 'agentd-faux'
export const FAUX_PROVIDER = 'faux'
/** Token counts every faux call reports, whatever the history. */
export const FAUX_USAGE = Object.freeze({ input: 12, output: 6 })
const MAX_ECHO_CHARS = 200

export const FAUX_ECHO_MODEL: Model<string> = Object.freeze({
  id: 'echo',
  name: 'agentd echo',
  api: FAUX_API,
  provider: FAUX_PROVIDER,
  baseUrl: '',
  reasoning: false,
  input: ['text', 'image'] as ('text' | 'image')[],
  cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
  contextWindow: 128000,
  maxTokens: 4096,
})

export const FAUX_TOOLS_MODEL: Model<string> = Object.freeze({ ...FAUX_ECHO_MODEL, id: 'tools', name: 'agentd tools' })

/** The reply faux/echo gives to a context. */
export function echoReply(context: { messages: TranscriptContext['messages'] }, stop?: readonly string[]): string {
  let text = '(no text)'
  for (let i = context.messages.length - 1; i >= 0; i--) {
    const m = context.messages[i]!
    if (m.role !== 'user') continue
    const t = typeof m.content === 'string' ? m.content : m.content.flatMap((b) => (b.type === 'text' ? [b.text] : [])).join(' ')
    if (t.trim() !== '') text = t.trim()
    break
  }
  return cut(`echo: ${clip(text)}`, stop)
}

const clip = (text: string) => {
  const cps = Array.from(text)
  return cps.length > MAX_ECHO_CHARS ? `${cps.slice(0, MAX_ECHO_CHARS).join('')}…` : text
}

/** The reply up to its first stop sequence. */
function cut(reply: string, stop: readonly string[] | undefined): string {
  for (const s of stop ?? []) {
    const at = s ? reply.indexOf(s) : -1
    if (at >= 0) reply = reply.slice(0, at)
  }
  return reply
}

/** What faux/tools does next: answer with a text, or call tools. */
export type ToolsReply = { text: string } | { calls: Array<{ name: string; arguments: JsonObject }> }

const CALL_RE = /^\/call\s+([^\s{]+)\s*(.*)$/s
const CALL_SYNTAX = 'write one line per call: /call <tool name> <arguments as a JSON object>, such as /call lookup_order {"id": 7}'

/**
 * The reply faux/tools gives to a context: after tool results (the history ends with them), one line per
 * result, `<tool>: <text>`; for a last user message with `/call` lines, those calls; else what faux/echo says.
 */
export function toolsReply(context: { messages: TranscriptContext['messages'] }, stop?: readonly string[]): ToolsReply {
  const msgs = context.messages
  if (msgs.at(-1)?.role === 'toolResult') {
    const lines: string[] = []
    for (let i = msgs.length - 1; i >= 0; i--) {
      const m = msgs[i]!
      if (m.role !== 'toolResult') break
      const text = m.content.map((b) => (b.type === 'text' ? b.text : '(image)')).join(' ').trim()
      lines.unshift(`${m.toolName}${m.isError ? ' failed' : ''}: ${clip(text || '(no output)')}`)
    }
    return { text: cut(lines.join('\n'), stop) }
  }
  const last = lastUser(msgs)
  const text = last === undefined ? '' : typeof last.content === 'string' ? last.content : last.content.flatMap((b) => (b.type === 'text' ? [b.text] : [])).join('\n')
  const asks = text.split('\n').map((l) => l.trim()).filter((l) => l.startsWith('/call'))
  if (asks.length === 0) return { text: echoReply(context, stop) }
  // the session's tools: the leading system message declares them (agentd sends no later tool changes)
  const head = msgs[0]
  const tools = head?.role === 'system' ? (head.toolsAdded ?? []).map((t) => t.name) : []
  const calls: Array<{ name: string; arguments: JsonObject }> = []
  for (const ask of asks) {
    const m = CALL_RE.exec(ask)
    if (!m) return { text: `faux/tools: to call a tool, ${CALL_SYNTAX}` }
    const [, name, argText] = m as unknown as [string, string, string]
    if (!tools.includes(name)) return { text: `faux/tools: this session has no tool named ${JSON.stringify(name)} (its tools: ${tools.join(', ') || 'none'})` }
    let args: unknown = {}
    try {
      if (argText.trim() !== '') args = JSON.parse(argText)
    } catch {
      args = undefined
    }
    if (typeof args !== 'object' || args === null || Array.isArray(args)) return { text: `faux/tools: the arguments of ${name} must be a JSON object; ${CALL_SYNTAX}` }
    calls.push({ name, arguments: args as JsonObject })
  }
  return { calls }
}

function lastUser(msgs: readonly Message[]) {
  for (let i = msgs.length - 1; i >= 0; i--) {
    const m = msgs[i]!
    if (m.role === 'user') return m
  }
  return undefined
}

/** Splits into at most three pieces on code-point boundaries. */
function pieces(text: string): string[] {
  const cps = Array.from(text)
  const size = Math.max(1, Math.ceil(cps.length / 3))
  const out: string[] = []
  for (let i = 0; i < cps.length; i += size) out.push(cps.slice(i, i + size).join(''))
  return out
}

const tick = () => new Promise<void>((r) => setImmediate(r))

function streamFaux(model: Model<string>, context: TranscriptContext, options?: StreamOptions): AssistantMessageEventStream {
  const out = createAssistantMessageEventStream()
  const signal = options?.signal
  const stop = (options as { stop?: string[] } | undefined)?.stop
  const message: AssistantMessage = {
    role: 'assistant',
    content: [],
    api: model.api,
    provider: model.provider,
    model: model.id,
    usage: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, totalTokens: 0, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } },
    stopReason: 'stop',
    timestamp: Date.now(),
  }
  const aborted = () => {
    message.stopReason = 'aborted'
    message.errorMessage = 'Request was aborted'
    out.push({ type: 'error', reason: 'aborted', error: message })
    out.end(message)
  }
  void (async () => {
    await tick()
    if (signal?.aborted) return aborted()
    out.push({ type: 'start', partial: message })
    const reply = model.id === FAUX_TOOLS_MODEL.id ? toolsReply(context, stop) : { text: echoReply(context, stop) }
    const { input, output } = FAUX_USAGE
    if ('calls' in reply) {
      for (const [i, c] of reply.calls.entries()) {
        // ids are unique within a session, which is all a call id must be
        const call = { type: 'toolCall' as const, id: `call_${crypto.randomBytes(8).toString('hex')}`, name: c.name, arguments: c.arguments }
        message.content.push(call)
        out.push({ type: 'toolcall_start', contentIndex: i, partial: message })
        out.push({ type: 'toolcall_delta', contentIndex: i, delta: JSON.stringify(c.arguments), partial: message })
        out.push({ type: 'toolcall_end', contentIndex: i, toolCall: call, partial: message })
      }
      message.usage = { ...message.usage, input, output, totalTokens: input + output }
      message.stopReason = 'toolUse'
      out.push({ type: 'done', reason: 'toolUse', message })
      out.end(message)
      return
    }
    const block = { type: 'text' as const, text: '' }
    message.content.push(block)
    out.push({ type: 'text_start', contentIndex: 0, partial: message })
    for (const piece of pieces(reply.text)) {
      await tick()
      if (signal?.aborted) return aborted()
      block.text += piece
      out.push({ type: 'text_delta', contentIndex: 0, delta: piece, partial: message })
    }
    out.push({ type: 'text_end', contentIndex: 0, content: block.text, partial: message })
    message.usage = { ...message.usage, input, output, totalTokens: input + output }
    out.push({ type: 'done', reason: 'stop', message })
    out.end(message)
  })()
  return out
}

/** The faux models' implementation, dispatched to like any pi-ai API (service.ts). */
export const FAUX_STREAMS: ProviderStreams = Object.freeze({ stream: streamFaux, streamSimple: streamFaux })
