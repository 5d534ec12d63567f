// The pi-ai adapter (SPEC §8.11): one call = one provider attempt, pi-ai events → StreamChunks, and
// every failure turned into a finish chunk instead of a throw.

import {
  isContextOverflow,
  normalizeContext,
  type Api,
  type AssistantMessage as PiAssistantMessage,
  type AssistantMessageEvent,
  type AssistantMessageEventStream,
  type Context,
  type Model,
  type ProviderEnv,
  type ProviderHeaders,
  type ProviderStreams,
  type SimpleStreamOptions,
  type ThinkingLevel,
  type Usage,
} from '@earendil-works/pi-ai'
import type { Json, LlmFailure, StreamChunk, TokenUsage } from '../session/index.js'
import { buildReplayState } from './convert.js'
import { classifyFailure } from './failures.js'
import { traceHeaders } from '../tracing/index.js'
import { observeHttp, type HttpObservation, type HttpWindow } from './http-observer.js'

/** What one attempt authenticates with: resolved for it alone, never stored. */
export interface RequestAuth {
  apiKey?: string
  headers?: ProviderHeaders
  /** provider-scoped settings that came with the credential (pi-ai's provider env) */
  env?: ProviderEnv
  /** an endpoint the credential decides (pi-ai provider auth may set one) */
  baseUrl?: string
}

export interface AdapterCall {
  model: Model<Api>
  /** the route's context window, for pi-ai's overflow verdict (the model handed to pi-ai has none, service.ts) */
  contextWindow?: number
  /** the pi-ai implementation the model's requests go to */
  streams: ProviderStreams
  /** built lazily, so a conversion problem becomes a finish chunk like any other failure */
  context: Context | (() => Context)
  signal: AbortSignal
  /** resolved when the attempt is dispatched: what to authenticate with, or the failure to report instead */
  auth: () => RequestAuth | { failure: LlmFailure } | Promise<RequestAuth | { failure: LlmFailure }>
  maxTokens?: number
  temperature?: number
  reasoning?: ThinkingLevel
  stop?: readonly string[]
  sessionId?: string
  log?: { debug(obj: object, msg?: string): void }
}

const ABORT = Symbol('abort')

/** Streams one provider attempt as StreamChunks. Never throws; the last chunk is always a finish. */
export async function* runAdapter(call: AdapterCall): AsyncGenerator<StreamChunk, void, undefined> {
  const { signal } = call
  let model = call.model
  let auth: RequestAuth | { failure: LlmFailure }
  try {
    auth = await call.auth()
  } catch (e) {
    // a credential source that broke (pi-ai provider auth rejects with ModelsError): the call cannot authenticate
    auth = { failure: { code: 'AUTH', message: `cannot resolve credentials for provider ${model.provider}: ${errorText(e)}` } }
  }
  if ('failure' in auth && !signal.aborted) {
    yield { type: 'finish', reason: { kind: 'error', failure: auth.failure } }
    return
  }
  const { apiKey, headers, env, baseUrl } = 'failure' in auth ? ({} as RequestAuth) : auth
  if (baseUrl) model = { ...model, baseUrl }
  // every credential the request carries is kept out of failure messages
  const secrets = [apiKey, ...Object.values(headers ?? {})].filter((x): x is string => typeof x === 'string' && x !== '')
  // our own controller ends the provider request when the turn aborts (the listener below forwards
  // it) and when the consumer stops iterating early; one signal for the provider, without
  // AbortSignal.any, whose composite signals cost a weak reference and a registry entry per call
  const local = new AbortController()
  const forward = () => local.abort(signal.reason)
  const http: HttpObservation = {}
  let started = false
  /** the refusal text of an OpenAI Responses answer, once a refusal part began */
  let refusal: string | undefined
  const fail = (message: string, extra: { contextOverflow?: boolean; stopReason?: string; refusal?: boolean } = {}): StreamChunk => {
    const aborted = signal.aborted
    const failure = classifyFailure({ message, aborted, status: http.status, headers: http.headers, streamStarted: started, secrets, ...extra })
    call.log?.debug({ provider: model.provider, model: model.id, code: failure.code, status: failure.status }, 'model call failed')
    return { type: 'finish', reason: aborted ? { kind: 'aborted', failure } : { kind: 'error', failure } }
  }
  if (signal.aborted) {
    yield fail('Request was aborted')
    return
  }

  let events: AsyncIterator<AssistantMessageEvent>
  let window: HttpWindow<AssistantMessageEventStream> | undefined
  signal.addEventListener('abort', forward, { once: true })
  try {
    const options: SimpleStreamOptions & { stop?: readonly string[] } = {
      signal: local.signal,
      maxRetries: 0, // retries are durable llm/retry events (DESIGN.md §3)
      // SPEC §8.10: the request is rebuilt from the log every time; no server-side continuation state
      // (Anthropic message threads) may stand in for part of it, and nothing is kept per session
      disableContinuation: true,
      // and no cached WebSocket that sends only new items (openai-codex-responses' default transport)
      transport: 'sse',
      onResponse: (r) => {
        http.status = r.status
        http.headers = lowerKeys(r.headers)
      },
    }
    if (apiKey !== undefined) options.apiKey = apiKey
    // API.md §19: the attempt's chat span (not a credential: added after the secrets were listed)
    const trace = traceHeaders()
    if (headers !== undefined || trace) options.headers = { ...headers, ...trace }
    if (env !== undefined) options.env = env
    if (call.maxTokens !== undefined) options.maxTokens = call.maxTokens
    if (call.temperature !== undefined) options.temperature = call.temperature
    if (call.reasoning !== undefined) options.reasoning = call.reasoning
    if (call.sessionId !== undefined) options.sessionId = call.sessionId
    if (call.stop && call.stop.length > 0) {
      options.stop = call.stop
      options.onPayload = (payload) => withStop(model.api, payload, call.stop!)
    }
    // a Responses answer can say it refuses in a content part of its own, which pi-ai hands over as the
    // message's text: the raw events tell it apart (a refusal is a terminal failure, not a reply)
    if (RESPONSES_APIS.has(model.api)) options.onProviderStreamEvent = (raw) => void (refusal = refusalOf(raw, refusal))
    const context = normalizeContext(typeof call.context === 'function' ? call.context() : call.context)
    // the implementation is called directly, not through a pi-ai Models collection: agentd resolved the
    // credentials itself, and pi-ai's telemetry (which only Models.stream* runs) stays off the path
    window = observeHttp(http, model.baseUrl, () => call.streams.streamSimple(model, context, options))
    events = window.value[Symbol.asyncIterator]()
  } catch (e) {
    window?.close()
    signal.removeEventListener('abort', forward)
    yield fail(errorText(e))
    return
  }

  let aborted!: () => void
  const abortSeen = new Promise<typeof ABORT>((r) => (aborted = () => r(ABORT)))
  signal.addEventListener('abort', aborted, { once: true })
  const t = new Translator()
  let finished = false
  let released = false
  // Everything the call holds on the turn's signal and the provider. Run before the last chunks are
  // yielded, not only in `finally`: a consumer stops pulling once it has the finish chunk, so a
  // generator suspended at that yield never reaches its `finally`, and each attempt of a turn would
  // leave its listeners on the turn's signal.
  const release = () => {
    if (released) return
    released = true
    window!.close()
    signal.removeEventListener('abort', aborted)
    signal.removeEventListener('abort', forward)
    if (!finished || signal.aborted) local.abort()
    void events.return?.()?.catch(() => {})
  }
  try {
    for (;;) {
      // chunks are computed inside the try and yielded outside it, so even a translation bug ends
      // the iteration with a finish chunk instead of a throw
      let out: StreamChunk[]
      let last = true
      try {
        // a provider that ignores the signal must not hold the turn: the abort wins the race
        const pending = events.next()
        pending.catch(() => {}) // it may lose the race; never leave it unhandled
        const next = await Promise.race([pending, abortSeen])
        // the provider's request exists by its first event: nothing more to observe (http-observer.ts)
        window.close()
        if (next === ABORT) out = [fail('Request was aborted')]
        else if (next.done) out = [fail('the provider stream ended without a result')]
        else {
          const ev = next.value
          if (ev.type === 'start') started = true
          if (ev.type === 'error') {
            const usage = toUsage(ev.error.usage)
            out = usage.inputTokens > 0 || usage.outputTokens > 0 ? [{ type: 'usage', usage }] : []
            out.push(fail(ev.error.errorMessage ?? 'model call failed', { contextOverflow: isContextOverflow(ev.error, call.contextWindow), stopReason: ev.error.rawStopReason }))
          } else if (ev.type === 'done' && refusal !== undefined) {
            out = [{ type: 'usage', usage: toUsage(ev.message.usage) }, fail(refusal || 'the model refused', { refusal: true })]
          } else if (ev.type === 'done') out = t.done(ev.message, ev.reason)
          else {
            out = t.event(ev)
            last = false
          }
        }
      } catch (e) {
        out = [fail(errorText(e))]
        last = true
      }
      if (last) {
        finished = true
        release()
      }
      for (const c of out) yield c
      if (last) return
    }
  } finally {
    release()
  }
}

/** Maps pi-ai content events onto our dense block indexes. */
class Translator {
  private next = 0
  /** pi-ai contentIndex → our block index, once the block became visible */
  private ours = new Map<number, number>()
  private named = new Set<number>()
  private hidden = new Set<number>()

  /** The block-start of pi-ai block `ci` the first time it becomes visible, else nothing. */
  private open(ci: number, blockType: 'text' | 'reasoning' | 'tool-call'): StreamChunk[] {
    if (this.ours.has(ci)) return []
    const index = this.next++
    this.ours.set(ci, index)
    return [{ type: 'block-start', index, blockType }]
  }

  event(ev: AssistantMessageEvent): StreamChunk[] {
    switch (ev.type) {
      case 'text_delta':
      case 'thinking_delta': {
        // empty deltas (OpenAI's opening `content: ''`) carry nothing; a block appears with its first text
        if (ev.delta === '' || this.hidden.has(ev.contentIndex)) return []
        const reasoning = ev.type === 'thinking_delta'
        const out = this.open(ev.contentIndex, reasoning ? 'reasoning' : 'text')
        const index = this.ours.get(ev.contentIndex)!
        out.push(reasoning ? { type: 'reasoning-delta', index, text: ev.delta } : { type: 'text-delta', index, text: ev.delta })
        return out
      }
      case 'thinking_start': {
        const b = ev.partial.content[ev.contentIndex]
        // redacted reasoning has placeholder text only; it travels in replay state, not as content
        if (b?.type === 'thinking' && b.redacted) this.hidden.add(ev.contentIndex)
        return []
      }
      case 'text_end':
      case 'thinking_end': {
        if (this.hidden.has(ev.contentIndex)) return []
        const reasoning = ev.type === 'thinking_end'
        const out: StreamChunk[] = []
        if (!this.ours.has(ev.contentIndex)) {
          if (ev.content === '') return []
          // a provider that delivered the block whole, without deltas
          out.push(...this.open(ev.contentIndex, reasoning ? 'reasoning' : 'text'))
          const index = this.ours.get(ev.contentIndex)!
          out.push(reasoning ? { type: 'reasoning-delta', index, text: ev.content } : { type: 'text-delta', index, text: ev.content })
        }
        const index = this.ours.get(ev.contentIndex)!
        out.push({ type: 'block-end', index, block: reasoning ? { type: 'reasoning', text: ev.content } : { type: 'text', text: ev.content } })
        return out
      }
      case 'toolcall_start':
        return this.open(ev.contentIndex, 'tool-call')
      case 'toolcall_delta': {
        if (ev.delta === '') return []
        const out = this.open(ev.contentIndex, 'tool-call')
        const index = this.ours.get(ev.contentIndex)!
        const b = ev.partial.content[ev.contentIndex]
        const chunk: StreamChunk = { type: 'tool-call-delta', index, id: b?.type === 'toolCall' ? b.id : '', argumentsDelta: ev.delta }
        // SPEC §9.4: the name rides on the first delta of a call only
        if (!this.named.has(index) && b?.type === 'toolCall' && b.name) {
          chunk.name = b.name
          this.named.add(index)
        }
        out.push(chunk)
        return out
      }
      case 'toolcall_end': {
        const out = this.open(ev.contentIndex, 'tool-call')
        const index = this.ours.get(ev.contentIndex)!
        const tc = ev.toolCall
        out.push({ type: 'block-end', index, block: { type: 'tool-call', id: tc.id, name: tc.name, arguments: JSON.stringify(tc.arguments ?? {}) } })
        return out
      }
      default:
        return []
    }
  }

  done(message: PiAssistantMessage, reason: 'stop' | 'length' | 'toolUse' | 'deferred'): StreamChunk[] {
    const usage: StreamChunk = { type: 'usage', usage: toUsage(message.usage) }
    if (this.next === 0 && reason === 'stop') {
      return [usage, { type: 'finish', reason: { kind: 'error', failure: { code: 'EMPTY_RESPONSE', message: 'the model returned no content' } } }]
    }
    const hasToolCalls = message.content.some((b) => b.type === 'toolCall')
    // some servers say finish_reason "stop" while calling tools; the calls decide
    const kind = reason === 'length' ? 'max-tokens' : reason === 'toolUse' || hasToolCalls ? 'tool-calls' : 'stop'
    const replay = buildReplayState(message, (i) => this.ours.has(i))
    const finish: StreamChunk = { type: 'finish', reason: { kind } }
    if (replay) finish.replayState = replay as unknown as Json
    return [usage, finish]
  }
}

/** pi-ai Usage → TokenUsage; optional fields only when nonzero (events must not hold undefined). */
export function toUsage(u: Usage | undefined): TokenUsage {
  const n = (x: unknown) => (typeof x === 'number' && Number.isFinite(x) && x > 0 ? x : 0)
  const out: TokenUsage = { inputTokens: n(u?.input), outputTokens: n(u?.output) }
  if (n(u?.cacheRead)) out.cacheReadTokens = n(u?.cacheRead)
  if (n(u?.cacheWrite)) out.cacheWriteTokens = n(u?.cacheWrite)
  // API.md §4: the part of outputTokens spent reasoning, where the provider reports it
  if (n(u?.reasoning)) out.reasoningTokens = n(u?.reasoning)
  if (n(u?.cost?.total)) out.costUsd = n(u?.cost?.total)
  return out
}

/** The APIs whose streams speak OpenAI Responses events (refusal parts included). */
const RESPONSES_APIS = new Set(['openai-responses', 'azure-openai-responses', 'openai-codex-responses'])

/** Follows a raw Responses event: a refusal part starts the refusal text, its deltas grow it. */
function refusalOf(raw: unknown, sofar: string | undefined): string | undefined {
  const e = raw as { type?: unknown; part?: { type?: unknown }; delta?: unknown; refusal?: unknown }
  if (e?.type === 'response.content_part.added' && e.part?.type === 'refusal') return sofar ?? ''
  if (e?.type === 'response.refusal.delta' && typeof e.delta === 'string') return (sofar ?? '') + e.delta
  if (e?.type === 'response.refusal.done' && typeof e.refusal === 'string') return e.refusal
  return sofar
}

/** pi-ai has no stop-sequence option; it is added to the payload of the APIs that take one. */
function withStop(api: string, payload: unknown, stop: readonly string[]): unknown {
  const p = payload as Record<string, any>
  if (api === 'openai-completions') return { ...p, stop: [...stop] }
  if (api === 'anthropic-messages') return { ...p, stop_sequences: [...stop] }
  if (api === 'google-generative-ai' || api === 'google-vertex') return { ...p, config: { ...p.config, stopSequences: [...stop] } }
  return undefined
}

/** The APIs whose requests can carry stop sequences (see withStop), plus faux/echo. */
export const STOP_APIS = new Set(['openai-completions', 'anthropic-messages', 'google-generative-ai', 'google-vertex', 'agentd-faux'])

function errorText(e: unknown): string {
  return e instanceof Error ? e.message : typeof e === 'string' ? e : JSON.stringify(e)
}

function lowerKeys(h: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {}
  for (const [k, v] of Object.entries(h)) out[k.toLowerCase()] = v
  return out
}
