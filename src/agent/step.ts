// A step (SPEC §6.1): its proposal — claim, prompt assembly, snapshot, agent/pre-step (§4.5,
// §7.2–§7.4) — and, once it opened, its attempts until one settles as a message, retried in the
// open step when agent/request-error says so (§10), then that message's tools (§11).

import { assertLosslessJson, deepFreeze, planClaim, type InboxTarget, type Json, type PreStepDecision, type ToolCallBlock, type ToolSchema, type UserMessage } from '../session/index.js'
import type { Proposal } from './admission.js'
import { runAttempt } from './attempt.js'
import type { AgentSpec, TurnContext } from './context.js'
import { TurnLlmError } from './errors.js'
import { canonicalTools, renderPrompt, snapshotCandidate, type PromptAssembly, type PromptSection } from './prompt.js'
import { runTools } from './tool-effects.js'
import type { McpServerSpec, ToolSpec } from '../tools/index.js'

import type { StepResult } from './ends.js'

export type { StepResult }

/**
 * Proposes step `proposed`: claims `target` (unless the turn's prefix claimed already), assembles the
 * prompt once for the step, and runs agent/pre-step; 'rejected' when the decision rejects.
 */
export async function proposeStep(tc: TurnContext, target: InboxTarget, proposed: number, prefixClaim?: UserMessage[]): Promise<Proposal | 'rejected'> {
  const { loop } = tc
  let claimed = prefixClaim
  if (!claimed) {
    // a barrier: the claim is durable before the prompt's hooks run (SPEC §7.2)
    let c: UserMessage[] = []
    await tc.unit.close({
      reads: ['inbox'],
      build: (u) => {
        const plan = planClaim(loop.state.inbox, target)
        for (const s of plan.splices) u.add({ type: 'agent/inbox/spliced', data: s as unknown as Json })
        c = plan.claimed
      },
    })
    claimed = c
    tc.trace.claimed(claimed)
    for (const message of claimed) tc.notify('agent/inbox/claimed', { message, turn: tc.turn })
  }
  await refreshSettings(tc)
  const sp = loop.services.systemPrompt
  const mcpTools = await listMcpTools(tc, proposed)
  const base: PromptAssembly = {
    sections: [{ name: 'session', text: loop.settings.spec.system, literal: true }, ...sp.sections.map((s) => ({ ...s }))],
    contexts: sp.contexts.map((c) => ({ name: c.name, text: typeof c.text === 'function' ? String(c.text()) : c.text })),
    tools: [...sessionTools(tc), ...mcpTools.map((t) => ({ name: t.name, description: t.description ?? '', parameters: t.parameters as ToolSchema['parameters'] }))],
    variables: {},
  }
  const assembly = await tc.hooks.runWaterfall<PromptAssembly>('system-prompt/assemble', base, (a) => a, { rest: [{ agent: loop.handle(), turn: tc.turn, step: proposed, signal: tc.signal }] })
  if (!assembly || !Array.isArray(assembly.sections)) throw new Error('system-prompt/assemble did not return an assembly')
  const rendered = renderPrompt(assembly as PromptAssembly & { sections: PromptSection[] })
  const tools = canonicalTools(assembly.tools ?? [], assembly.toolOrder)
  const snapshot = snapshotCandidate(loop.state, assembly.contexts ?? [])
  const decision = await tc.hooks.runWaterfall<PreStepDecision>(
    'agent/pre-step',
    { agent: loop.handle(), messages: claimed, turn: tc.turn, step: proposed, ...(tc.continues !== undefined ? { continues: tc.continues } : {}), signal: tc.signal },
    (p: { messages: UserMessage[] }) => ({ kind: 'enter', messages: snapshot ? [...p.messages, snapshot] : [...p.messages] }),
    { bind: loop.bind },
  )
  const checked = checkDecision(decision)
  return checked.kind === 'reject' ? 'rejected' : { decision: checked, rendered, tools, mcpTools }
}

/**
 * API.md §4, §12: before a step is proposed, the session's settings as they stand now, when they may
 * have changed (settings.ts). The step then renders and admits them through the loop's own machinery:
 * a changed system text is a reconciliation (SPEC §8.6), a changed tool list a header change (§8.8), a
 * changed model or limit a config proposed afresh (§7.5) and so a header change.
 */
async function refreshSettings(tc: TurnContext): Promise<void> {
  if (await tc.loop.settings.refresh()) tc.loop.series.configChanged = true
}

/**
 * API.md §12: before the step's request, the tools of the session's MCP servers (the list as
 * refreshSettings last read it). A server that cannot be listed contributes none and, once per outage, is an
 * agent/error MCP_UNAVAILABLE; the turn goes on.
 */
async function listMcpTools(tc: TurnContext, step: number): Promise<ToolSpec[]> {
  const { loop } = tc
  if (!loop.mcp.servers.length) return []
  const { tools, outages } = await loop.mcp.listTools(tc.signal)
  tc.abort.check()
  for (const o of outages) {
    loop.logger.warn({ turn: tc.turn, step, server: o.server, err: o.message }, 'MCP server unavailable')
    tc.notify('agent/error', { turn: tc.turn, step, code: 'MCP_UNAVAILABLE', server: o.server, error: { code: 'MCP_UNAVAILABLE', message: o.message, server: o.server } })
  }
  // a session tool of the same name wins (names are unique in a request)
  const own = new Set(loop.settings.spec.tools.map((t) => t.name))
  return tools.filter((t) => !own.has(t.name))
}

/** The final pre-step decision is authoritative but must be well formed. */
function checkDecision(d: unknown): PreStepDecision {
  const x = d as PreStepDecision
  if (x?.kind === 'reject') return { kind: 'reject' }
  if (x?.kind !== 'enter' || !Array.isArray(x.messages)) throw new Error(`agent/pre-step returned ${JSON.stringify(d)?.slice(0, 200)}; expected {kind:'reject'} or {kind:'enter', messages}`)
  const messages = x.messages.map((m) => {
    assertLosslessJson(m)
    if (m?.role !== 'user' || typeof m.id !== 'string' || !Array.isArray(m.content) || !m.source || typeof m.source.kind !== 'string') throw new Error('agent/pre-step entered something that is not a UserMessage')
    return deepFreeze(structuredClone(m))
  })
  return x.startsRequestSeries === true ? { kind: 'enter', messages, startsRequestSeries: true } : { kind: 'enter', messages }
}

/** The session's ToolSpecs as schemas; a builtin takes its registration's parameters. */
function sessionTools(tc: TurnContext): ToolSchema[] {
  const out: ToolSchema[] = []
  for (const s of tc.loop.settings.spec.tools) {
    if (s.execution.type === 'builtin') {
      const reg = tc.loop.services.registry.get(s.name)
      if (!reg) continue // its plugin left: calls to it become UNKNOWN_TOOL results
      out.push({ name: reg.name, description: s.description ?? reg.description, parameters: reg.parameters })
    } else out.push({ name: s.name, description: s.description ?? '', parameters: s.parameters as ToolSchema['parameters'] })
  }
  return out
}

/**
 * How a step ended, and its last write when that waits in the turn's open unit for the step's end:
 * the settlement of a message without calls, or the batch's last tool/result.
 */
export interface StepOutcome {
  result: StepResult
  open?: 'message' | 'tool-result'
}

/** The open step: attempts until one settles as a message, then its tools (SPEC §8, §10, §11). */
export async function runStep(tc: TurnContext, proposal: Proposal): Promise<StepOutcome> {
  for (let attempt = 1; ; attempt++) {
    const r = await runAttempt(tc, proposal, attempt)
    if (r.kind === 'message') {
      const calls = r.message.content.filter((b): b is ToolCallBlock => b.type === 'tool-call')
      if (!calls.length) return { result: r.finish === 'max-tokens' ? 'max-tokens' : 'completed', open: 'message' }
      const { concludes, open } = await runTools(tc, calls, proposal.mcpTools ?? [], r.appended)
      return { result: concludes ? 'completed' : 'continue', ...(open ? { open: 'tool-result' as const } : {}) }
    }
    // SPEC §10.1 / §18.3: cancellation beats recovery
    tc.abort.check()
    const decision = await tc.hooks.runWaterfall<{ kind?: string } | undefined>(
      'agent/request-error',
      { agent: tc.loop.handle(), turn: tc.turn, step: tc.step, provider: r.provider, failure: r.failure, retryPolicy: r.retryPolicy, signal: tc.signal },
      () => undefined,
      { bind: tc.loop.bind },
    )
    tc.abort.check()
    if (decision?.kind !== 'retry') throw new TurnLlmError(r.failure)
    tc.trace.retrying(r.failure)
  }
}
