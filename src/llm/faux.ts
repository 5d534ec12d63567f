// `faux/echo` (API.md §2): agentd's own deterministic model, a pi-ai stream implementation so it takes
// the same path as real routes. It answers "echo: <last user text>" and reports constant usage, so
// long-session measurements are not distorted by a cost that grows with the history (DESIGN.md §3);
// pi-ai's own faux provider estimates usage from the whole serialized context on every call.

import {
  createAssistantMessageEventStream,
  type AssistantMessage,
  type AssistantMessageEventStream,
  type Model,
  type ProviderStreams,
  type StreamOptions,
  type TranscriptContext,
} from '@earendil-works/pi-ai'

export const FAUX_ECHO = 'faux/echo'
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
  const cps = Array.from(text)
  let reply = `echo: ${cps.length > MAX_ECHO_CHARS ? `${cps.slice(0, MAX_ECHO_CHARS).join('')}…` : text}`
  for (const s of stop ?? []) {
    const at = s ? reply.indexOf(s) : -1
    if (at >= 0) reply = reply.slice(0, at)
  }
  return reply
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

function streamEcho(model: Model<string>, context: TranscriptContext, options?: StreamOptions): AssistantMessageEventStream {
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
    const reply = echoReply(context, stop)
    const block = { type: 'text' as const, text: '' }
    message.content.push(block)
    out.push({ type: 'text_start', contentIndex: 0, partial: message })
    for (const piece of pieces(reply)) {
      await tick()
      if (signal?.aborted) return aborted()
      block.text += piece
      out.push({ type: 'text_delta', contentIndex: 0, delta: piece, partial: message })
    }
    out.push({ type: 'text_end', contentIndex: 0, content: block.text, partial: message })
    const { input, output } = FAUX_USAGE
    message.usage = { ...message.usage, input, output, totalTokens: input + output }
    out.push({ type: 'done', reason: 'stop', message })
    out.end(message)
  })()
  return out
}

/** The faux models' implementation, dispatched to like any pi-ai API (service.ts). */
export const FAUX_STREAMS: ProviderStreams = Object.freeze({ stream: streamEcho, streamSimple: streamEcho })
