// The compaction plugin (SPEC §12): a pressure trigger in agent/pre-step, an overflow trigger in
// agent/request-error, and manual compaction as maintenance. Summaries replace a contiguous range of
// old history with a checkpoint user/message; a tool call is never split from its result; the head
// and the open step are never touched; failures are logged and never fatal to the turn.

import crypto from 'node:crypto'
import type { Context } from 'cordis'
import { agentOf, errorChain, newMessageId, type Agent, type Compactor } from '../agent/index.js'
import { assembleBlocks, estimateText, nodeTokens, type ContentBlock, type Json, type LlmCallConfig, type LlmFailure, type Message, type SessionState, type StreamChunk, type SurfaceNode, type TokenUsage } from '../session/index.js'
import type { LlmRequest, LlmService } from '../llm/index.js'
import { PRUNER, type Pruner } from './tool-result-pruner.js'
import { annotateSpan, TRACE_ATTRIBUTES as A, traceSpan } from '../tracing/index.js'

export interface CompactionConfig {
  thresholdRatio: number
  retainRatio: number
  retainTokens?: number
  maxTokens: number
  compactionRetries: number
  maxOverflowRetries: number
  summarizationProvider: string
  summarizationModel: string
  auto: boolean
  /** AGENTD_COMPACTION_MODEL (SPEC §18.13), `provider/modelId` */
  model?: string
}

export const COMPACTION_DEFAULTS: CompactionConfig = {
  thresholdRatio: 0.8,
  retainRatio: 0.16,
  maxTokens: 8192,
  compactionRetries: 1,
  maxOverflowRetries: 1,
  summarizationProvider: '',
  summarizationModel: '',
  auto: true,
}

const COMPACTOR = Symbol.for('agentd.compactor')

/**
 * Manual compaction (SPEC §12.7) of the plugin applied under this root, if any: true when something
 * was compacted; AgentBusyError (agent/) when the Agent was not idle.
 */
export function compactorOf(root: Context): Compactor | undefined {
  return (root as unknown as Record<symbol, Compactor | undefined>)[COMPACTOR]
}

export const SUMMARY_INSTRUCTION =
  'Summarize the conversation so far for your own future use: the goals, decisions, facts learned, tool results that still matter, open questions and what was about to happen next. Be concise and specific. Reply with the summary only.'
export const CHECKPOINT_PREAMBLE = 'Earlier parts of this conversation were compacted. This summary stands in for them:'

export const frameSummary = (summary: string) => `${CHECKPOINT_PREAMBLE}\n\n<summary>\n${summary}\n</summary>`

interface Log {
  warn(obj: unknown, msg?: string): void
  info?(obj: unknown, msg?: string): void
}

// ---- the token meter (SPEC §12.2 step 4) ----

/** Pressure of the session's next request, in tokens. */
export function measure(state: SessionState): number {
  const a = state.anchor
  const header = state.latestHeader
  if (a && a.generation === state.replaceGeneration && a.headerSeq === header?.seq) {
    const u = a.usage
    let sum = u.inputTokens + (u.cacheReadTokens ?? 0) + (u.cacheWriteTokens ?? 0) + u.outputTokens
    // no replacement since the anchor (same generation): the nodes after it are the surface's tail
    const nodes = state.nodes
    for (let i = nodes.length - 1; i >= 0 && nodes[i].seq > a.seq; i--) sum += nodeTokens(nodes[i])
    return sum
  }
  let sum = header?.header.tools?.length ? estimateText(JSON.stringify(header.header.tools)) : 0
  for (const n of state.nodes) sum += nodeTokens(n)
  return sum
}

// ---- selection (SPEC §12.5) ----

export interface Selection {
  /** surface indexes [from, to] inclusive */
  from: number
  to: number
  nodes: SurfaceNode[]
}

/** Tool-call ids of an assistant node. */
const callIds = (n: SurfaceNode): string[] => (n.type === 'assistant/message' ? (((n.event.data as unknown as { message: { content: ContentBlock[] } }).message?.content ?? []).filter((b) => b.type === 'tool-call') as Array<{ id: string }>).map((b) => b.id) : [])
const resultId = (n: SurfaceNode): string | undefined => (n.type === 'tool/result' ? (n.event.data as unknown as { message: { source: { callId: string } } }).message?.source?.callId : undefined)

/**
 * The range to summarize: from node 1 to just before keepFrom, where keepFrom is the node whose
 * price makes the retained tail reach the budget (the end of the surface for budget 0), moved
 * headward until no tool call is split from its result, and never into the open step's nodes.
 */
export function selectRange(state: SessionState, retainBudget: number, openStepFirstSeq?: number): Selection | undefined {
  const nodes = state.nodes
  let keepFrom = nodes.length
  if (retainBudget > 0) {
    let sum = 0
    for (let i = nodes.length - 1; i >= 1; i--) {
      sum += nodeTokens(nodes[i])
      if (sum >= retainBudget) {
        keepFrom = i
        break
      }
      keepFrom = 1 // the whole compactable history fits the budget
    }
  }
  if (openStepFirstSeq !== undefined) {
    const first = nodes.findIndex((n) => n.seq >= openStepFirstSeq)
    if (first >= 0 && first < keepFrom) keepFrom = first
  }
  // never split a tool call from its result: move keepFrom to the assistant node whose calls are answered at or after it
  for (let moved = true; moved && keepFrom > 1; ) {
    moved = false
    const kept = new Set<string>()
    for (let i = keepFrom; i < nodes.length; i++) {
      const r = resultId(nodes[i])
      if (r) kept.add(r)
    }
    for (let i = 1; i < keepFrom; i++) {
      if (callIds(nodes[i]).some((id) => kept.has(id))) {
        keepFrom = i
        moved = true
        break
      }
    }
  }
  if (keepFrom <= 1) return undefined
  return { from: 1, to: keepFrom - 1, nodes: nodes.slice(1, keepFrom) }
}

// ---- the summary transaction (SPEC §12.5) ----

export interface SummaryDeps {
  llm: LlmService
  config: CompactionConfig
  log: Log
}

function summaryRoute(state: SessionState, c: CompactionConfig): { provider: string; model: string } | undefined {
  if (c.summarizationProvider && c.summarizationModel) return { provider: c.summarizationProvider, model: c.summarizationModel }
  if (c.model) {
    const i = c.model.indexOf('/')
    return { provider: c.model.slice(0, i), model: c.model.slice(i + 1) }
  }
  const h = state.latestHeader?.header.config
  return h ? { provider: h.provider, model: h.model } : undefined
}

/**
 * The session's own model settings for a summary call: its latest request header's config but the route,
 * the output cap (compaction has its own) and stop sequences (which would cut the summary). Without them a
 * reasoning model on openai-responses gets `reasoning: {effort: "none"}`, which models before gpt-5.1
 * reject, so compaction would fail exactly when the context overflows (issue 34).
 */
function sessionSettings(state: SessionState): Omit<LlmCallConfig, 'provider' | 'model'> {
  const { provider: _p, model: _m, maxTokens: _t, stop: _s, ...settings } = state.latestHeader?.header.config ?? ({} as LlmCallConfig)
  return settings
}

/**
 * Runs one summary over a selected range: compaction/start first (the durable lock), then the
 * summary call, then summary + checkpoint + end in one unit; on failure compaction/end {error}.
 * Returns whether the surface changed.
 */
export async function summarize(agent: Agent, d: SummaryDeps, turn: number | null, retainBudget: number, signal: AbortSignal, openStepFirstSeq?: number): Promise<boolean> {
  // API.md §19: a span of its own, inside the turn's when a turn compacts (its summary call's chat
  // span is the adapter's HTTP call, not a turn attempt)
  const attributes = { [A.GEN_AI_CONVERSATION_ID]: agent.id, ...(turn !== null ? { [A.AGENTD_TURN]: turn } : {}) }
  return traceSpan(A.SPAN_COMPACTION, attributes, () => summarizeRange(agent, d, turn, retainBudget, signal, openStepFirstSeq))
}

async function summarizeRange(agent: Agent, d: SummaryDeps, turn: number | null, retainBudget: number, signal: AbortSignal, openStepFirstSeq?: number): Promise<boolean> {
  const state = agent.state
  const sel = selectRange(state, retainBudget, openStepFirstSeq)
  if (!sel) return false
  const route = summaryRoute(state, d.config)
  if (!route) return false
  // API.md §15: a summary is a model attempt; over the tenant's budget none is made, and nothing is written
  const refused = await agent.services.tenancy?.checkBudget(agent.tenantId)
  if (refused) {
    d.log.warn({ sessionId: agent.id, code: refused.code, err: refused.message }, 'compaction: no summary, the tenant is over its budget')
    return false
  }
  if (signal.aborted) return false
  const compactionId = `cmp_${crypto.randomUUID()}`
  annotateSpan({ [A.AGENTD_COMPACTION_ID]: compactionId, [A.AGENTD_COMPACTION_SHADOWED_TOKENS]: sel.nodes.reduce((s, n) => s + nodeTokens(n), 0) })
  const generation = state.replaceGeneration
  const shadowedSeqs = sel.nodes.map((n) => n.seq)
  const shadowedTokenCount = sel.nodes.reduce((s, n) => s + nodeTokens(n), 0)
  const start = await agent.appendOwned((u) => u.add({ type: 'compaction/start', data: { compactionId, turn } }))
  const startSeq = start.events[0].seq
  try {
    const head = state.nodes[0]?.message
    const prefix: Message[] = [...(head ? [head] : []), ...(sel.nodes.map((n) => n.message).filter(Boolean) as Message[])]
    const instruction: Message = { id: newMessageId(), role: 'user', content: [{ type: 'text', text: SUMMARY_INSTRUCTION }], source: { kind: 'plugin', plugin: 'compaction' } }
    const cap = d.config.maxTokens
    const prepared = await d.llm.prepareCall({ ...sessionSettings(state), provider: route.provider, model: route.model, maxTokens: cap }, signal)
    const tools = state.latestHeader?.header.tools
    const request: LlmRequest = { ...prepared.config, messages: [...prefix, instruction], ...(tools ? { tools } : {}), sessionId: agent.id, signal, purpose: 'compaction' }
    const chunks: StreamChunk[] = []
    for await (const c of prepared.stream(request)) {
      chunks.push(c)
      if (c.type === 'finish') break
    }
    const out = assembleBlocks(chunks)
    if (out.finish?.kind === 'error' || out.finish?.kind === 'aborted') throw new Error(`the summary call failed: ${(out.finish as { failure: LlmFailure }).failure.message}`)
    const summary = out.content.filter((b) => b.type === 'text').map((b) => (b as { text: string }).text).join('').trim()
    if (!summary) throw new Error('the summary call returned no text')
    const framed = frameSummary(summary)
    if (estimateText(JSON.stringify([{ type: 'text', text: framed }])) >= shadowedTokenCount) throw new Error('the summary is not smaller than what it would replace')
    if (state.replaceGeneration !== generation || sel.nodes.some((n, i) => state.nodes[sel.from + i]?.seq !== n.seq)) throw new Error('the surface changed during compaction')
    if (signal.aborted) throw new Error('compaction was cancelled')
    await agent.appendOwned((u) => {
      const s = u.add({
        type: 'compaction/summary',
        data: {
          compactionId,
          summary,
          shadowedRange: { start: shadowedSeqs[0], end: shadowedSeqs[shadowedSeqs.length - 1] },
          shadowedSeqs,
          shadowedTokenCount,
          provider: prepared.config.provider,
          model: prepared.config.model,
          maxTokens: cap,
          ...(out.usage ? { usage: out.usage as unknown as Json } : {}),
        },
      })
      const checkpoint = { id: newMessageId(), role: 'user', content: [{ type: 'text', text: framed }], source: { kind: 'plugin', plugin: 'compaction', form: 'checkpoint' } }
      u.add({
        type: 'user/message',
        data: checkpoint as unknown as Json,
        surfaceOp: { op: 'replace', start: shadowedSeqs[0], end: shadowedSeqs[shadowedSeqs.length - 1] },
        sourceEventSeqs: [startSeq, s.seq, ...shadowedSeqs],
      })
      u.add({ type: 'compaction/end', data: { compactionId, turn } })
    })
    agent.services.metrics?.compactions.inc({ outcome: 'compacted' })
    return true
  } catch (e) {
    annotateSpan({ [A.ERROR_TYPE]: 'COMPACTION_FAILED' }, true)
    d.log.warn({ err: errorChain(e), sessionId: agent.id }, 'compaction failed; the surface stays as it was')
    agent.services.metrics?.compactions.inc({ outcome: 'failed' })
    try {
      await agent.appendOwned((u) => u.add({ type: 'compaction/end', data: { compactionId, turn, error: errorChain(e).slice(0, 2000) } }))
    } catch (e2) {
      d.log.warn({ err: errorChain(e2), sessionId: agent.id }, 'could not record the compaction failure')
    }
    return false
  }
}

export default {
  name: 'compaction',
  apply(ctx: Context, config?: Partial<CompactionConfig>) {
    const c: CompactionConfig = { ...COMPACTION_DEFAULTS, ...(config ?? {}) }
    const root = ctx.root as unknown as Record<string | symbol, unknown>
    const llm = root.llm as LlmService
    const log = ((root.log as Log | undefined) ?? console) as Log
    const deps: SummaryDeps = { llm, config: c, log }
    const pruner = () => root[PRUNER] as Pruner | undefined
    const warned = new Set<string>()
    /** SPEC §12.3 step 3: overflow recoveries per Agent, reset on idle and by any assistant/message */
    const overflows = new WeakMap<Agent, { count: number; amSeq: number | undefined }>()

    const windowOf = (state: SessionState): number | undefined => {
      const h = state.latestHeader?.header.config
      if (!h) return undefined
      const w = llm.contextWindow(h.provider, h.model)
      if (!w) {
        const k = `${h.provider}/${h.model}`
        if (!warned.has(k)) {
          warned.add(k)
          log.warn({ route: k }, 'compaction: no context window is known for this route; it is not compacted')
        }
      }
      return w
    }

    ctx.effect(() => {
      root[COMPACTOR] = (async (agent: Agent) => {
        const w = windowOf(agent.state)
        if (!w) return false
        return agent.runMaintenance(async (signal) => {
          const before = agent.state.replaceGeneration
          await summarize(agent, deps, null, c.retainTokens ?? Math.floor(w * c.retainRatio), signal)
          return agent.state.replaceGeneration > before
        })
      }) satisfies Compactor
      return () => {
        root[COMPACTOR] = undefined
      }
    })

    if (!c.auto) return
    const hooks = (ctx as unknown as { hooks: { waterfall(n: string, f: (p: any, next: () => Promise<unknown>) => unknown): void } }).hooks

    // SPEC §12.2: pressure, before the step opens; always proceeds with next()
    hooks.waterfall('agent/pre-step', async (payload: { agent: unknown; turn: number; signal: AbortSignal }, next) => {
      const agent = agentOf(payload.agent)
      try {
        if (agent && !payload.signal.aborted && agent.state.latestHeader) {
          const w = windowOf(agent.state)
          if (w) {
            const threshold = Math.floor(w * c.thresholdRatio)
            if (measure(agent.state) >= threshold) {
              const prune = pruner()
              if (prune) await prune(agent)
              for (let pass = 0; pass <= c.compactionRetries && measure(agent.state) >= threshold && !payload.signal.aborted; pass++) {
                const ok = await summarize(agent, deps, payload.turn, c.retainTokens ?? Math.floor(w * c.retainRatio), payload.signal)
                if (!ok) break
              }
              if (measure(agent.state) >= threshold) log.warn({ sessionId: agent.id }, 'compaction: still above the threshold after the allowed passes')
            }
          }
        }
      } catch (e) {
        log.warn({ err: errorChain(e) }, 'pressure compaction failed; the step proceeds')
      }
      return next()
    })

    // SPEC §12.3: overflow recovery inside the open step
    hooks.waterfall('agent/request-error', async (payload: { agent: unknown; turn: number; failure: LlmFailure; signal: AbortSignal }, next) => {
      const agent = agentOf(payload.agent)
      if (!agent || payload.failure.code !== 'CONTEXT_WINDOW_EXCEEDED' || payload.signal.aborted) return next()
      if (!agent.state.latestHeader) return next()
      const seen = overflows.get(agent)
      const count = seen && seen.amSeq === agent.state.lastAssistantSeq ? seen.count : 0
      if (count >= c.maxOverflowRetries) return next()
      const g = agent.state.replaceGeneration
      try {
        const prune = pruner()
        if (prune) await prune(agent)
        await summarize(agent, deps, payload.turn, 0, payload.signal, agent.state.openStepSeq)
      } catch (e) {
        log.warn({ err: errorChain(e), sessionId: agent.id }, 'overflow compaction failed')
      }
      if (!payload.signal.aborted && agent.state.replaceGeneration > g) {
        overflows.set(agent, { count: count + 1, amSeq: agent.state.lastAssistantSeq })
        return { kind: 'retry' }
      }
      return next()
    })

    ctx.on('agent/status' as never, ((p: { status: string; agent: unknown }) => {
      const agent = agentOf(p.agent)
      if (agent && p.status === 'idle') overflows.delete(agent)
    }) as never)
  },
}

export type { TokenUsage }
