// A scripted model: a pi-ai provider (createProvider) that agentd routes to like any other (the
// service's extraProviders): tests queue answers per session and see every request pi-ai was given.
// Requests reach it through agentd's real pi-ai adapter.

import crypto from 'node:crypto'
import {
  createAssistantMessageEventStream,
  createProvider,
  getInitialSystemMessage,
  getSystemMessageText,
  withoutInitialSystemMessage,
  type AssistantMessage,
  type AssistantMessageEventStream,
  type Context,
  type JsonObject,
  type Model,
  type Provider,
  type ProviderStreams,
  type SimpleStreamOptions,
  type ToolCall,
  type TranscriptContext,
} from '@earendil-works/pi-ai'

export interface Step {
  /** text deltas, in order */
  text?: string[]
  reasoning?: string[]
  toolCalls?: Array<{ id: string; name: string; arguments: Record<string, unknown> }>
  /** pi-ai stop reason of a success (default stop, or toolUse with tool calls) */
  stop?: 'stop' | 'length' | 'toolUse'
  /** reasoning: the part of output spent reasoning (pi-ai's Usage.reasoning) */
  usage?: { input: number; output: number; cacheRead?: number; cacheWrite?: number; reasoning?: number; costUsd?: number }
  /** fail with this pi-ai error message (HTTP failures start with the status: "500 …") */
  error?: string
  /** wait until the request is aborted after the deltas (a hung stream) */
  hang?: boolean
  /** wait for this before finishing (after the deltas) */
  gate?: Promise<unknown>
  /** wait for this after `holdAfter` deltas */
  holdAfter?: number
  delayMs?: number
}

export type StepFn = (req: Recorded) => Step | Promise<Step>

export interface Recorded {
  n: number
  sessionId?: string
  model: string
  /** what agentd built: the transcript pi-ai was given, its leading system message as `systemPrompt` and `tools` */
  context: Context
  options: SimpleStreamOptions | undefined
  at: number
  aborted: boolean
}

export interface ScriptedModelDef {
  id: string
  contextWindow?: number
  maxTokens?: number
}

const zeroUsage = () => ({ input: 0, output: 0, cacheRead: 0, cacheWrite: 0, totalTokens: 0, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } })
const tick = () => new Promise<void>((r) => setImmediate(r))

export class ScriptedModels {
  readonly api = `test-scripted-${crypto.randomBytes(3).toString('hex')}`
  readonly requests: Recorded[] = []
  private readonly queues = new Map<string, Array<Step | StepFn>>()
  private readonly fallbacks = new Map<string, Step | StepFn>()
  private readonly waiters = new Set<() => void>()
  /** the pi-ai provider for createLlmService({extraProviders}) */
  readonly provider: Provider
  /** the same implementation as an API a models file can name (createLlmService({extraApis: {[api]: streams}})) */
  readonly streams: ProviderStreams

  constructor(readonly defs: ScriptedModelDef[] = [{ id: 'scripted', contextWindow: 8192, maxTokens: 1024 }]) {
    const stream = (model: Model<string>, context: TranscriptContext, options?: SimpleStreamOptions) => this.stream(model, context, options)
    this.streams = { stream, streamSimple: stream }
    this.provider = createProvider({ id: this.providerId, auth: { apiKey: { name: 'none', resolve: async () => ({ auth: {} }) } }, models: this.models, api: this.streams })
  }

  get providerId(): string {
    return 'test'
  }

  /** the pi-ai models of the provider */
  get models(): Model<string>[] {
    return this.defs.map((d) => ({
      id: d.id,
      name: d.id,
      api: this.api,
      provider: this.providerId,
      baseUrl: '',
      reasoning: false,
      input: ['text'] as ('text' | 'image')[],
      cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
      contextWindow: d.contextWindow ?? 8192,
      maxTokens: d.maxTokens ?? 1024,
    }))
  }

  ref(id = this.defs[0].id): string {
    return `${this.providerId}/${id}`
  }

  script(sessionId: string, ...steps: Array<Step | StepFn>): void {
    const q = this.queues.get(sessionId) ?? []
    q.push(...steps)
    this.queues.set(sessionId, q)
  }

  fallback(sessionId: string, step: Step | StepFn): void {
    this.fallbacks.set(sessionId, step)
  }

  requestsOf(sessionId: string): Recorded[] {
    return this.requests.filter((r) => r.sessionId === sessionId)
  }

  pending(sessionId: string): number {
    return this.queues.get(sessionId)?.length ?? 0
  }

  async waitForRequest(sessionId: string, n = 1, timeoutMs = 10000): Promise<Recorded> {
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const r = this.requestsOf(sessionId)[n - 1]
      if (r) return r
      if (Date.now() > deadline) throw new Error(`no model request #${n} for ${sessionId} within ${timeoutMs} ms`)
      await new Promise<void>((res) => {
        const t = setTimeout(res, 20)
        this.waiters.add(() => {
          clearTimeout(t)
          res()
        })
      })
    }
  }

  close(): void {}

  private stream(model: Model<string>, transcript: TranscriptContext, options?: SimpleStreamOptions): AssistantMessageEventStream {
    const out = createAssistantMessageEventStream()
    const sessionId = options?.sessionId
    const rec: Recorded = { n: this.requests.length + 1, sessionId, model: model.id, context: denormalize(transcript), options, at: Date.now(), aborted: false }
    this.requests.push(rec)
    for (const w of [...this.waiters]) w()
    this.waiters.clear()
    const signal = options?.signal
    signal?.addEventListener('abort', () => (rec.aborted = true), { once: true })
    const message: AssistantMessage = { role: 'assistant', content: [], api: model.api, provider: model.provider, model: model.id, usage: zeroUsage(), stopReason: 'stop', timestamp: Date.now() }
    const fail = (reason: 'error' | 'aborted', text: string) => {
      message.stopReason = reason
      message.errorMessage = text
      out.push({ type: 'error', reason, error: message })
      out.end(message)
    }
    void (async () => {
      await tick()
      const q = sessionId ? this.queues.get(sessionId) : undefined
      let step: Step | StepFn | undefined = q?.shift() ?? (sessionId ? this.fallbacks.get(sessionId) : undefined)
      if (!step) step = { error: `400 no scripted answer for session ${sessionId}` }
      const s: Step = typeof step === 'function' ? await step(rec) : step
      if (s.delayMs) await new Promise((r) => setTimeout(r, s.delayMs))
      if (signal?.aborted) return fail('aborted', 'Request was aborted')
      if (s.error && !s.text?.length) return fail('error', s.error)
      out.push({ type: 'start', partial: message })
      let deltas = 0
      const hold = async () => {
        deltas++
        if (s.holdAfter !== undefined && deltas === s.holdAfter && s.gate) await Promise.race([s.gate, aborted(signal)])
      }
      let index = 0
      if (s.reasoning?.length) {
        const b = { type: 'thinking' as const, thinking: '' }
        message.content.push(b)
        out.push({ type: 'thinking_start', contentIndex: index, partial: message })
        for (const d of s.reasoning) {
          await tick()
          if (signal?.aborted) return fail('aborted', 'Request was aborted')
          b.thinking += d
          out.push({ type: 'thinking_delta', contentIndex: index, delta: d, partial: message })
          await hold()
        }
        out.push({ type: 'thinking_end', contentIndex: index, content: b.thinking, partial: message })
        index++
      }
      if (s.text?.length) {
        const b = { type: 'text' as const, text: '' }
        message.content.push(b)
        out.push({ type: 'text_start', contentIndex: index, partial: message })
        for (const d of s.text) {
          await tick()
          if (signal?.aborted) return fail('aborted', 'Request was aborted')
          b.text += d
          out.push({ type: 'text_delta', contentIndex: index, delta: d, partial: message })
          await hold()
        }
        out.push({ type: 'text_end', contentIndex: index, content: b.text, partial: message })
        index++
      }
      for (const tc of s.toolCalls ?? []) {
        const b: ToolCall = { type: 'toolCall', id: tc.id, name: tc.name, arguments: tc.arguments as JsonObject }
        message.content.push(b)
        out.push({ type: 'toolcall_start', contentIndex: index, partial: message })
        out.push({ type: 'toolcall_delta', contentIndex: index, delta: JSON.stringify(tc.arguments), partial: message })
        out.push({ type: 'toolcall_end', contentIndex: index, toolCall: b, partial: message })
        index++
      }
      if (s.gate && s.holdAfter === undefined) await Promise.race([s.gate, aborted(signal)])
      if (s.hang) await aborted(signal)
      if (signal?.aborted) return fail('aborted', 'Request was aborted')
      if (s.error) return fail('error', s.error)
      const u = s.usage ?? { input: 10, output: 5 }
      message.usage = { ...zeroUsage(), input: u.input, output: u.output, cacheRead: u.cacheRead ?? 0, cacheWrite: u.cacheWrite ?? 0, totalTokens: u.input + u.output }
      if (u.reasoning !== undefined) message.usage.reasoning = u.reasoning
      if (u.costUsd) message.usage.cost = { input: u.costUsd, output: 0, cacheRead: 0, cacheWrite: 0, total: u.costUsd }
      const stop = s.stop ?? (s.toolCalls?.length ? 'toolUse' : 'stop')
      message.stopReason = stop
      out.push({ type: 'done', reason: stop, message })
      out.end(message)
    })()
    return out
  }
}

/** The Context agentd built back from the transcript pi-ai made of it (normalizeContext). */
function denormalize(t: TranscriptContext): Context {
  const head = getInitialSystemMessage(t.messages)
  const ctx: Context = { messages: structuredClone(withoutInitialSystemMessage(t.messages)) }
  if (head) {
    const text = getSystemMessageText(head)
    if (text !== '') ctx.systemPrompt = text
    if (head.toolsAdded?.length) ctx.tools = structuredClone(head.toolsAdded)
  }
  return ctx
}

function aborted(signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    if (!signal) return
    if (signal.aborted) return resolve()
    signal.addEventListener('abort', () => resolve(), { once: true })
  })
}

/** A gate a step can wait on. */
export function gate(): { promise: Promise<void>; open(): void } {
  let open!: () => void
  const promise = new Promise<void>((r) => (open = r))
  return { promise, open }
}
