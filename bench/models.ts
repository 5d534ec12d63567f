// The bench's own pi-ai provider (createProvider, routed as one of the service's extraProviders), so
// requests take agentd's real adapter path (like faux/echo does):
//   bench/tool   — calls the builtin tool `noop` once when the last message is the user's prompt,
//                  answers text when the last message is the tool result: a one-tool, two-step turn.
//   bench/chunks — answers a prompt "chunks:N" with N text deltas, anything else with 3 (like
//                  faux/echo), one event-loop tick apart: the live chunk source of the fan-out
//                  measurement.

import crypto from 'node:crypto'
import {
  createAssistantMessageEventStream,
  createProvider,
  type AssistantMessage,
  type AssistantMessageEventStream,
  type Model,
  type Provider,
  type SimpleStreamOptions,
  type TranscriptContext,
} from '@earendil-works/pi-ai'
import type { Context as RootContext } from '../src/hooks/index.js'

export const BENCH_API = 'agentd-bench'
export const TOOL_MODEL = 'bench/tool'
export const CHUNKS_MODEL = 'bench/chunks'
export const CHUNKS = 200

/** Deltas bench/chunks streams for a prompt. */
export function chunksFor(prompt: string): number {
  const m = /^chunks:(\d+)$/.exec(prompt.trim())
  return m ? Number(m[1]) : 3
}

const tick = () => new Promise<void>((r) => setImmediate(r))

function model(id: string): Model<string> {
  return {
    id,
    name: id,
    api: BENCH_API,
    provider: 'bench',
    baseUrl: '',
    reasoning: false,
    input: ['text'],
    cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
    contextWindow: 128000,
    maxTokens: 4096,
  }
}

function stream(m: Model<string>, context: TranscriptContext, options?: SimpleStreamOptions): AssistantMessageEventStream {
  const out = createAssistantMessageEventStream()
  const signal = options?.signal
  const message: AssistantMessage = {
    role: 'assistant',
    content: [],
    api: m.api,
    provider: m.provider,
    model: m.id,
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
    const last = context.messages[context.messages.length - 1]
    const text = () => {
      const b = { type: 'text' as const, text: '' }
      message.content.push(b)
      out.push({ type: 'text_start', contentIndex: message.content.length - 1, partial: message })
      return b
    }
    if (m.id === 'tool' && last?.role !== 'toolResult') {
      const b = { type: 'toolCall' as const, id: `call_${crypto.randomBytes(6).toString('hex')}`, name: 'noop', arguments: {} }
      message.content.push(b)
      out.push({ type: 'toolcall_start', contentIndex: 0, partial: message })
      out.push({ type: 'toolcall_delta', contentIndex: 0, delta: '{}', partial: message })
      out.push({ type: 'toolcall_end', contentIndex: 0, toolCall: b, partial: message })
      message.stopReason = 'toolUse'
    } else {
      const prompt = last?.role === 'user' ? (typeof last.content === 'string' ? last.content : last.content.map((b) => (b.type === 'text' ? b.text : '')).join('')) : ''
      const pieces = m.id === 'chunks' ? Array.from({ length: chunksFor(prompt) }, (_, i) => `w${i} `) : ['done']
      const b = text()
      for (const p of pieces) {
        await tick()
        if (signal?.aborted) return aborted()
        b.text += p
        out.push({ type: 'text_delta', contentIndex: 0, delta: p, partial: message })
      }
      out.push({ type: 'text_end', contentIndex: 0, content: b.text, partial: message })
    }
    message.usage = { ...message.usage, input: 12, output: 6, totalTokens: 18 }
    out.push({ type: 'done', reason: message.stopReason === 'toolUse' ? 'toolUse' : 'stop', message })
    out.end(message)
  })()
  return out
}

/** The bench's provider: bench/tool and bench/chunks, keyless. */
export const benchProvider: Provider = createProvider({
  id: 'bench',
  auth: { apiKey: { name: 'none', resolve: async () => ({ auth: {} }) } },
  models: [model('tool'), model('chunks')],
  api: { stream, streamSimple: stream },
})

/** The builtin tool the throughput turns call: a plugin registering `noop`. */
export const noopPlugin = (root: RootContext) =>
  root.plugin({
    name: 'bench',
    apply(ctx: any) {
      ctx.tools.register({
        name: 'noop',
        description: 'does nothing',
        parameters: { type: 'object', properties: {} },
        isConcurrencySafe: () => true,
        execute: async () => ({ content: 'ok' }),
      })
    },
  })

export const NOOP_TOOL_SPEC = { name: 'noop', execution: { type: 'builtin' } }

/**
 * `--tools N`: the session's tool list as real agents carry it, `noop` and N − 1 client tools the model
 * never calls, each with a schema of eight described parameters (about 1.2 KB of JSON per tool). Every
 * step sends the whole list, so its per-step cost shows in the throughput rows.
 */
export function benchToolSpecs(n: number): Array<Record<string, unknown>> {
  const extra = Array.from({ length: Math.max(0, n - 1) }, (_, i) => ({
    name: `unused_${i}`,
    description: `Tool ${i} does something useful; a longer description of its behaviour for the model.`,
    parameters: {
      type: 'object',
      properties: Object.fromEntries(
        Array.from({ length: 8 }, (_, j) => [`field_${j}`, { type: j % 2 ? 'string' : 'integer', description: `The ${j}th parameter of tool ${i}, described in a sentence or two as real tools do.`, ...(j % 3 === 0 ? { enum: ['a', 'b', 'c'] } : {}) }]),
      ),
      required: ['field_0', 'field_1'],
    },
    execution: { type: 'client' },
  }))
  return [NOOP_TOOL_SPEC, ...extra]
}
