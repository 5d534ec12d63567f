// API.md §19: the tracer facade the rest of agentd calls. The driver asks for a TurnTrace, which
// opens the turn's `invoke_agent` span, a ChatTrace per model attempt and a tool span per call; the
// intake stamps a durable input with the traceparent of the request that queued it, and the turn
// that claims it links to it. Outgoing calls ask for traceHeaders(). With tracing off every call
// answers a shared no-op at once: no span, no context, no allocation worth measuring.

import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type Context, type Link, type Span, type SpanContext } from '@opentelemetry/api'
import * as A from './attributes.js'
import { tracingRuntime } from './setup.js'

export { startTracing, tracingRuntime, type TracingRuntime } from './setup.js'
export { httpTracing } from './http.js'
/** the span and attribute names, for the few spans other folders open themselves (traceSpan) */
export * as TRACE_ATTRIBUTES from './attributes.js'

const tracer = () => trace.getTracer('agentd')

/** What a turn span says of its session (gen_ai.conversation.id is the session id). */
export interface TurnInfo {
  sessionId: string
  tenantId: string
  turn: number
  continues?: number
  /** the agent the session was made from (API.md §16) */
  agent?: { id: string; version?: number; name?: string }
}

/** A failure as the spans record it: error.type is its agentd code. */
export interface TracedFailure {
  code: string
}

/** How a model attempt settled. */
export interface AttemptEnd {
  /** the finish kind (stop, tool-calls, max-tokens, error, aborted) */
  finish?: string
  usage?: { inputTokens: number; outputTokens: number; cacheReadTokens?: number; cacheWriteTokens?: number }
  failure?: TracedFailure
  /** the settled message's content, recorded only with content capture on */
  output?: () => unknown
}

export interface AttemptTrace {
  /** runs `fn` with the attempt's span active (the model call's traceparent) */
  within<T>(fn: () => Promise<T>): Promise<T>
  /** the request's messages, recorded only with content capture on */
  input(messages: () => unknown): void
  end(o: AttemptEnd): void
}

export interface TurnTrace {
  /** runs `fn` with the turn's span active */
  within<T>(fn: () => Promise<T>): Promise<T>
  /** links the requests that queued these inputs (their source.traceparent) */
  claimed(messages: readonly { id: string; source?: unknown }[]): void
  /** a model attempt of step `step`; `attempt` counts from 1 within the step */
  attempt(o: { provider: string; model: string; step: number; attempt: number; maxTokens?: number }): AttemptTrace
  /** the last attempt failed and agent/request-error retries it: the next attempt's span says so */
  retrying(failure: TracedFailure): void
  end(reason: { kind: string; error?: TracedFailure }): void
}

const run = <T>(fn: () => Promise<T>) => fn()
const NOOP_ATTEMPT: AttemptTrace = { within: run, input() {}, end() {} }
/** The turn trace of a turn not traced (tracing off, or before its span opens). */
export const NOOP_TURN: TurnTrace = { within: run, claimed() {}, attempt: () => NOOP_ATTEMPT, retrying() {}, end() {} }

/** Whether spans are recorded in this process. */
export const tracingOn = (): boolean => tracingRuntime() !== undefined

/** The turn's span: a root of its own trace, linked to the requests whose inputs it claims. */
export function traceTurn(info: TurnInfo, claimed: readonly { id: string; source?: unknown }[]): TurnTrace {
  const rt = tracingRuntime()
  if (!rt) return NOOP_TURN
  const name = info.agent?.name ?? info.agent?.id ?? 'agentd'
  const attributes: Attributes = {
    [A.GEN_AI_OPERATION_NAME]: A.OP_INVOKE_AGENT,
    [A.GEN_AI_AGENT_ID]: info.agent?.id ?? info.sessionId,
    [A.GEN_AI_AGENT_NAME]: name,
    [A.GEN_AI_CONVERSATION_ID]: info.sessionId,
    [A.AGENTD_TENANT_ID]: info.tenantId,
    [A.AGENTD_TURN]: info.turn,
  }
  if (info.continues !== undefined) attributes[A.AGENTD_TURN_CONTINUES] = info.continues
  if (info.agent?.version !== undefined) attributes[A.AGENTD_AGENT_VERSION] = info.agent.version
  // ROOT: a turn started inside a request's context (a local wake) is not that request's child
  const span = tracer().startSpan(`${A.OP_INVOKE_AGENT} ${name}`, { kind: SpanKind.INTERNAL, attributes, links: linksOf(claimed) }, ROOT_CONTEXT)
  const ctx = trace.setSpan(ROOT_CONTEXT, span)
  let retry: { attempt: number; failure: TracedFailure } | undefined
  let lastAttempt = 0
  return {
    within: (fn) => context.with(ctx, fn),
    claimed(messages) {
      const links = linksOf(messages)
      if (links.length) span.addLinks(links)
    },
    attempt(o) {
      const a: Attributes = {
        [A.GEN_AI_OPERATION_NAME]: A.OP_CHAT,
        [A.GEN_AI_PROVIDER_NAME]: o.provider,
        [A.GEN_AI_REQUEST_MODEL]: o.model,
        [A.GEN_AI_CONVERSATION_ID]: info.sessionId,
        [A.AGENTD_TURN]: info.turn,
        [A.AGENTD_STEP]: o.step,
        [A.AGENTD_ATTEMPT]: o.attempt,
      }
      if (o.maxTokens !== undefined) a[A.GEN_AI_REQUEST_MAX_TOKENS] = o.maxTokens
      const s = tracer().startSpan(`${A.OP_CHAT} ${o.model}`, { kind: SpanKind.CLIENT, attributes: a }, ctx)
      if (retry && o.attempt > 1) s.addEvent(A.EVENT_RETRY, { [A.AGENTD_ATTEMPT]: retry.attempt, [A.ERROR_TYPE]: retry.failure.code })
      retry = undefined
      lastAttempt = o.attempt
      return attemptTrace(s, ctx, rt.captureContent)
    },
    retrying(failure) {
      retry = { attempt: lastAttempt, failure }
    },
    end(reason) {
      span.setAttribute(A.AGENTD_TURN_END_REASON, reason.kind)
      if (reason.error) {
        span.setAttribute(A.ERROR_TYPE, reason.error.code)
        span.setStatus({ code: SpanStatusCode.ERROR, message: reason.error.code })
      }
      span.end()
    },
  }
}

function attemptTrace(span: Span, parent: Context, capture: boolean): AttemptTrace {
  const ctx = trace.setSpan(parent, span)
  let ended = false
  return {
    within: (fn) => context.with(ctx, fn),
    input(messages) {
      if (capture) span.setAttribute(A.GEN_AI_INPUT_MESSAGES, json(messages()))
    },
    end(o) {
      if (ended) return
      ended = true
      if (o.finish) span.setAttribute(A.GEN_AI_RESPONSE_FINISH_REASONS, [o.finish])
      if (o.usage) {
        span.setAttribute(A.GEN_AI_USAGE_INPUT_TOKENS, o.usage.inputTokens)
        span.setAttribute(A.GEN_AI_USAGE_OUTPUT_TOKENS, o.usage.outputTokens)
        if (o.usage.cacheReadTokens) span.setAttribute(A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, o.usage.cacheReadTokens)
        if (o.usage.cacheWriteTokens) span.setAttribute(A.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, o.usage.cacheWriteTokens)
      }
      if (o.failure) {
        span.setAttribute(A.ERROR_TYPE, o.failure.code)
        span.setStatus({ code: SpanStatusCode.ERROR, message: o.failure.code })
      }
      if (capture && o.output) span.setAttribute(A.GEN_AI_OUTPUT_MESSAGES, json(o.output()))
      span.end()
    },
  }
}

/** The outcome fields a tool span reads (tools/pipeline.ts ToolOutcome). */
interface ToolResultLike {
  isError: boolean
  error?: { code: string }
  content?: unknown
}

/**
 * A tool call's `execute_tool` span around its execution, a child of the active turn span and active
 * itself while the call runs (an http tool's and an MCP server's traceparent).
 */
export function traceTool<T extends ToolResultLike>(o: { name: string; callId: string; type: string; arguments?: string }, fn: () => Promise<T>): Promise<T> {
  const rt = tracingRuntime()
  if (!rt) return fn()
  const attributes: Attributes = { [A.GEN_AI_OPERATION_NAME]: A.OP_EXECUTE_TOOL, [A.GEN_AI_TOOL_NAME]: o.name, [A.GEN_AI_TOOL_CALL_ID]: o.callId, [A.GEN_AI_TOOL_TYPE]: o.type }
  if (rt.captureContent && o.arguments !== undefined) attributes[A.GEN_AI_TOOL_CALL_ARGUMENTS] = o.arguments
  const span = tracer().startSpan(`${A.OP_EXECUTE_TOOL} ${o.name}`, { kind: SpanKind.INTERNAL, attributes })
  return context.with(trace.setSpan(context.active(), span), async () => {
    try {
      const out = await fn()
      if (out.isError) {
        span.setAttribute(A.ERROR_TYPE, out.error?.code ?? 'TOOL_ERROR')
        span.setStatus({ code: SpanStatusCode.ERROR, message: out.error?.code ?? 'TOOL_ERROR' })
      }
      if (rt.captureContent) span.setAttribute(A.GEN_AI_TOOL_CALL_RESULT, json(out.content ?? null))
      return out
    } catch (e) {
      span.setAttribute(A.ERROR_TYPE, (e as Error)?.name || 'Error')
      span.setStatus({ code: SpanStatusCode.ERROR })
      throw e
    } finally {
      span.end()
    }
  })
}

/** A span of agentd's own (compaction, a webhook delivery) around `fn`, a child of the active span. */
export function traceSpan<T>(name: string, attributes: Attributes, fn: () => Promise<T>, o: { root?: boolean; kind?: SpanKind; failed?: (v: T) => string | undefined } = {}): Promise<T> {
  if (!tracingRuntime()) return fn()
  const parent = o.root ? ROOT_CONTEXT : context.active()
  const span = tracer().startSpan(name, { kind: o.kind ?? SpanKind.INTERNAL, attributes }, parent)
  return context.with(trace.setSpan(parent, span), async () => {
    try {
      const v = await fn()
      const failure = o.failed?.(v)
      if (failure) {
        span.setAttribute(A.ERROR_TYPE, failure)
        span.setStatus({ code: SpanStatusCode.ERROR, message: failure })
      }
      return v
    } catch (e) {
      span.setAttribute(A.ERROR_TYPE, (e as Error)?.name || 'Error')
      span.setStatus({ code: SpanStatusCode.ERROR })
      throw e
    } finally {
      span.end()
    }
  })
}

export { SpanKind }

/** Attributes on the active span (one traceSpan opened); `failed` marks it an error. No-op when off. */
export function annotateSpan(attributes: Attributes, failed = false): void {
  if (!tracingRuntime()) return
  const span = trace.getActiveSpan()
  if (!span) return
  span.setAttributes(attributes)
  if (failed) span.setStatus({ code: SpanStatusCode.ERROR })
}

/**
 * The `traceparent` (and `tracestate`) for an outgoing call made now: the active span's. Undefined
 * with tracing off or outside any span.
 */
export function traceHeaders(): Record<string, string> | undefined {
  if (!tracingRuntime()) return undefined
  const carrier: Record<string, string> = {}
  propagation.inject(context.active(), carrier)
  return carrier.traceparent ? carrier : undefined
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/

/** The active span's context as a W3C traceparent, if tracing is on and a span is active. */
export function currentTraceparent(): string | undefined {
  if (!tracingRuntime()) return undefined
  const sc = trace.getSpanContext(context.active())
  if (!sc || !trace.isSpanContextValid(sc)) return undefined
  return `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, '0')}`
}

/**
 * API.md §19: an input about to become durable, with the traceparent of the request that queues it
 * (the active span: the HTTP server span) in its source, where the turn that claims it — in this
 * process or another, or a crash continuation — finds it. Unchanged with tracing off.
 */
export function stampTraceparent<M extends { source: object }>(message: M): M {
  const tp = currentTraceparent()
  if (!tp) return message
  return Object.freeze({ ...message, source: Object.freeze({ ...message.source, traceparent: tp }) })
}

function parseTraceparent(v: unknown): SpanContext | undefined {
  if (typeof v !== 'string') return undefined
  const m = TRACEPARENT.exec(v)
  if (!m) return undefined
  const sc: SpanContext = { traceId: m[1], spanId: m[2], traceFlags: parseInt(m[3], 16), isRemote: true }
  return trace.isSpanContextValid(sc) ? sc : undefined
}

function linksOf(messages: readonly { id: string; source?: unknown }[]): Link[] {
  const out: Link[] = []
  for (const m of messages) {
    const sc = parseTraceparent((m.source as { traceparent?: unknown } | undefined)?.traceparent)
    if (sc) out.push({ context: sc, attributes: { [A.AGENTD_LINK]: 'input', [A.AGENTD_MESSAGE_ID]: m.id } })
  }
  return out
}

function json(v: unknown): string {
  try {
    return JSON.stringify(v) ?? 'null'
  } catch {
    return '"[unserializable]"'
  }
}
