// Synchronous admission (SPEC §8.1 A3, §8.5–§8.8) as a pure plan: from the step's state — the folded
// log, the step's proposal, the attempt, its prepared route and what the loop instance remembers — to
// the drafts the admission unit commits: prompt reconciliation, the entered users (attempt 1 only),
// the header and the route context. Also the request config an attempt proposes (§7.5).

import { canonicalJson, jsonEqual, type Draft, type EpochHeader, type Json, type LlmCallConfig, type PreStepDecision, type SessionState, type ToolSchema } from '../session/index.js'
import { splitModelRef, type PreparedCall } from '../llm/index.js'
import { promptDraft, reconcile, systemNodes } from './prompt.js'
import type { ToolSpec } from '../tools/index.js'
import type { AgentSpec } from './context.js'
import type { Series } from './settings.js'

/** A step's proposal (SPEC §7.2–§7.4), kept for every attempt of the step (§10.3). */
export interface Proposal {
  decision: Extract<PreStepDecision, { kind: 'enter' }>
  rendered: string
  tools: ToolSchema[]
  /** the MCP tools listed for this step (API.md §12), as ToolSpecs of execution type mcp */
  mcpTools?: ToolSpec[]
}

export interface AdmissionInput {
  state: SessionState
  proposal: Proposal
  attempt: number
  turn: number
  step: number
  /** the config the attempt runs with: the prepared one, else the proposed one (NO_ADAPTER) */
  config: LlmCallConfig
  prepared?: Pick<PreparedCall, 'adapterDefaults' | 'systemPromptUpdate' | 'context'>
  /** what the loop instance remembers of its series (settings.ts Series) */
  series: Readonly<Pick<Series, 'headerLogged' | 'capturedGeneration'>>
}

/**
 * Canonical JSON texts, made once per object (a header folded from the log, a step's tool list): the
 * header and tool comparisons of every attempt are string comparisons, and a step's tool schemas,
 * however large, are serialized once rather than four times per attempt. Canonical text equality is
 * jsonEqual (keys sorted, undefined members absent).
 */
const canonical = new WeakMap<object, string>()
function canonicalOf(v: object): string {
  let c = canonical.get(v)
  if (c === undefined) canonical.set(v, (c = canonicalJson(v)))
  return c
}

/**
 * The canonical text of a step's tool list. Each step builds its list anew, so the text made for the
 * last step's list is not found by identity; but most steps propose the tools the latest header
 * already holds, and comparing the two structures (jsonEqual: no key sorting, no strings) costs about
 * an eighth of writing the text again (30 tools with 37 KB of schemas, measured in one run).
 * Equal structures have the same canonical text, so the header's, made once, serves.
 */
function toolsText(tools: readonly ToolSchema[], logged: readonly ToolSchema[] | undefined): string {
  return logged && jsonEqual(tools, logged) ? canonicalOf(logged) : canonicalOf(tools)
}

/** The drafts of admission step A3, in the order SPEC §8.1 gives them. */
export function planAdmission(a: AdmissionInput): Draft[] {
  const { state, proposal, prepared, series } = a
  const latest = state.latestHeader?.header
  const tools = proposal.tools.length ? toolsText(proposal.tools, latest?.tools) : undefined
  const toolsChanged = (tools ?? '[]') !== (latest?.tools ? canonicalOf(latest.tools) : '[]')
  const byDecision = a.attempt === 1 && proposal.decision.startsRequestSeries === true
  // SPEC §8.7 startsSeries, and §8.8 seriesBreak: the same rule, read before and after reconciliation
  const breaks = (generation: number) => byDecision || series.capturedGeneration !== generation || toolsChanged
  const commits = reconcile(systemNodes(state), proposal.rendered, prepared?.systemPromptUpdate === 'in-history', breaks(state.replaceGeneration))
  const out: Draft[] = commits.map((c) => promptDraft(c, a.turn, a.step))
  if (a.attempt === 1) for (const m of proposal.decision.messages) out.push({ type: 'user/message', data: m as unknown as Json, surfaceOp: 'append' })
  // every replacement bumps the generation (SPEC §8.6)
  const seriesBreak = breaks(state.replaceGeneration + commits.filter((c) => c.kind === 'replace').length)
  const defaults = prepared?.adapterDefaults && Object.keys(prepared.adapterDefaults).length ? prepared.adapterDefaults : undefined
  // the header's canonical text, its members in key order: adapterDefaults, config, tools
  const text = `{${defaults ? `"adapterDefaults":${canonicalJson(defaults)},` : ''}"config":${canonicalJson(a.config)}${tools ? `,"tools":${tools}` : ''}}`
  const header = () => JSON.parse(text) as EpochHeader
  if (!series.headerLogged) out.push(headerDraft({ header: header(), reason: latest ? 'resume' : 'initial' }))
  else if (!latest || text !== canonicalOf(latest)) out.push(headerDraft({ header: header(), reason: 'change', ...(seriesBreak ? { startsSeries: true } : {}) }))
  else if (seriesBreak) out.push(headerDraft({ header: header(), reason: 'series' }))
  const ctx: Record<string, Json> = { provider: a.config.provider, model: a.config.model }
  if (prepared?.context.contextWindow !== undefined) ctx.contextWindow = prepared.context.contextWindow
  if (prepared?.systemPromptUpdate) ctx.systemPromptUpdate = prepared.systemPromptUpdate
  if (!jsonEqual(ctx, state.latestContext)) out.push({ type: 'request/context', data: ctx })
  return out
}

const headerDraft = (data: { header: EpochHeader; reason: string; startsSeries?: true }): Draft => ({ type: 'request/header', data: data as unknown as Json })

/** SPEC §7.5: the config an attempt proposes to agent/request. */
export function proposeConfig(spec: AgentSpec, state: SessionState, headerLogged: boolean): LlmCallConfig {
  const ref = splitModelRef(spec.model)
  if (!ref) throw new Error(`the session's model ${spec.model} is not provider/model`)
  const { provider, model } = ref
  const h = state.latestHeader?.header
  if (!headerLogged || !h) {
    // the first request of the loop instance: the Agent's options, or the latest header's explicit effort on the same route
    const c: LlmCallConfig = { provider, model }
    if (spec.maxTokens !== undefined) c.maxTokens = spec.maxTokens
    if (spec.reasoningEffort !== undefined) c.reasoningEffort = spec.reasoningEffort
    else if (h && h.config.provider === provider && h.config.model === model && h.config.reasoningEffort !== undefined && !h.adapterDefaults?.reasoningEffort) c.reasoningEffort = h.config.reasoningEffort
    return c
  }
  // later: the latest header's config minus what the adapter defaulted
  const c: LlmCallConfig = { ...h.config }
  if (h.adapterDefaults?.maxTokens) delete c.maxTokens
  if (h.adapterDefaults?.reasoningEffort) delete c.reasoningEffort
  return c
}
