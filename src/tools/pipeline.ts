// The tool pipeline of SPEC §11: each call of a settled assistant message is planned, classified,
// prepared (tools/pre-execute: allow, deny or ask), executed (tools/execute around the body: http,
// client or builtin), post-processed (tools/post-execute, finalizeContent, tools/result) and mapped
// onto a tool result. Errors become results (§11.7). It decides only: whatever must be written —
// tool/call, pending rows, tool/result — goes through the driver's ToolEffects, in the scheduler's
// order (scheduler.ts).

import { errorChain, assertLosslessJson, newMessageId, toUserMessage, type ContentBlock, type Draft, type Json, type JsonObject, type MessageInput, type ToolCallBlock, type UserMessage } from '../session/index.js'
import { callHttpTool } from './http.js'
import { MissingSecretError, resolveHeaders, type SecretResolver } from './headers.js'
import type { HostPolicy } from './hosts.js'
import type { RegisteredTool } from './registry.js'
import { parseToolArguments, runToolBatch, type PrepareDecision, type ToolCallPlan } from './scheduler.js'
import { traceTool } from '../tracing/index.js'

/** A session's tool as API.md §4 defines it (validated at creation). */
export interface ToolSpec {
  name: string
  description?: string
  parameters?: JsonObject
  /** `mcp` is never given by a client: a session's MCP tools are specs of that type, listed per step (API.md §12) */
  execution: { type: 'http' | 'client' | 'builtin' | 'mcp'; url?: string; timeoutMs?: number; headers?: Record<string, string>; server?: string; tool?: string }
  concurrency?: 'parallel' | 'exclusive'
  approval?: 'always' | 'never'
}

/** The outcome of one call: what its tool/result will carry (SPEC §3.4, §11.6). */
export interface ToolOutcome {
  content: ContentBlock[]
  isError: boolean
  error?: { name: string; code: string }
  concludesTurn?: boolean
  additionalContexts?: MessageInput[]
  meta?: unknown
  /** the plugin whose tool produced it (default source of its contexts) */
  plugin?: string
}

/** What the pipeline reads of the session it runs in. */
export interface ToolEnv {
  readonly sessionId: string
  /** the turn's signal */
  readonly signal: AbortSignal
  readonly specs: readonly ToolSpec[]
  readonly registry: { get(name: string): RegisteredTool | undefined }
  readonly hooks: {
    runWaterfall<T>(name: string, payload: unknown, innermost: (payload: any) => T | Promise<T>, opts?: { bind?: (payload: any, plugin: string) => any }): Promise<T>
    /** listeners of a hook; without it, every hook may have some */
    count?(name: string): number
  }
  /** the Agent handle payloads carry; a builtin's body gets its own plugin's */
  handle(plugin?: string): unknown
  /** rebinds `agent` in a payload to the listening plugin's handle */
  readonly bind: (payload: any, plugin: string) => any
  readonly policy: HostPolicy
  /** SPEC §11.4 maxParallelToolCalls, re-read per group */
  maxParallel(): number
  /** a live notification (tools/result) */
  notify(name: string, payload: Record<string, unknown>): void
  readonly log: { warn(o: object, msg: string): void }
  /** the session's MCP servers (API.md §12) */
  readonly mcp?: { call(server: string, tool: string, args: unknown, signal: AbortSignal, timeoutMs?: number): Promise<ToolOutcome> }
  /** the tenant's secrets, for `secret:NAME` header values (API.md §13) */
  readonly secrets?: SecretResolver
  /** a call's execution that began at `started` (hrtime) ended; `kind` is toolKind's (metrics) */
  executed?(kind: string, started: bigint): void
}

/** A call's post-processed outcome and its additional contexts as messages, ready to commit. */
export interface FinishedCall {
  outcome: ToolOutcome
  contexts: UserMessage[]
}

/** What only the driver does: the durable writes of a call and the waits on pending rows. */
export interface ToolEffects {
  /** SPEC §11.5 step 1: append tool/call; a pending row rides with it as callKind says (§18.10) */
  appendCall(plan: ToolCallPlan, opts: CallKind): Promise<number>
  /**
   * the call starts waiting (its tool/call is at `callSeq`): an `ask` for the approver, or a client
   * call's execution for its result. Writes the call's pending row as `kind` (re-opening one an
   * earlier phase left) with its session.requires_action delivery, unless the row is open as `kind`
   */
  openPending(plan: ToolCallPlan, callSeq: number, kind: 'client' | 'approval'): Promise<void>
  /** the answer to a pending call, or undefined once the turn is cancelled */
  waitAnswer(callId: string, kind: 'client' | 'approval'): Promise<unknown>
  /** SPEC §11.6: append tool/result and queue its contexts in next-step; `last` as in ToolHost.commit */
  commitResult(plan: ToolCallPlan, callSeq: number, call: FinishedCall, last: boolean): Promise<void>
  /** SPEC §11.8: tool/call then this result, for a call never started */
  abortUnstarted(plan: ToolCallPlan, outcome: ToolOutcome): Promise<void>
}

export const ABORTED_BEFORE_DISPATCH: ToolOutcome = { content: [{ type: 'text', text: 'Error: tool call aborted before dispatch' }], isError: true, error: { name: 'AbortError', code: 'TOOL_ABORTED_BEFORE_DISPATCH' } }

/** SPEC §11.7, §18.13: an isError result whose one-line text starts `Error: `. */
export function errorResult(code: string, text: string, name = 'ToolError'): ToolOutcome {
  return { content: [{ type: 'text', text: `Error: ${text.replace(/\s*\n\s*/g, ' ')}` }], isError: true, error: { name, code } }
}

/** SPEC §11.2: the plans of a message's tool calls, in model order. */
export function planToolCalls(calls: readonly ToolCallBlock[]): ToolCallPlan[] {
  return calls.map((c, index) => ({ callId: c.id, name: c.name, rawArguments: c.arguments, arguments: parseToolArguments(c.arguments), index }))
}

/** Runs a message's tool calls through the scheduler; reports whether a committed result concludes the turn. */
export async function runToolCalls(calls: readonly ToolCallBlock[], env: ToolEnv, fx: ToolEffects): Promise<{ concludes: boolean }> {
  return runToolBatch<ToolOutcome>(planToolCalls(calls), {
    signal: env.signal,
    maxParallel: () => env.maxParallel(),
    isParallel: (p) => isParallel(env, p),
    appendCall: (p) => fx.appendCall(p, callKind(env, p)),
    prepare: (p, callSeq) => prepareCall(env, fx, p, callSeq),
    // API.md §19: the call's execute_tool span, active while it runs (an http tool's and an MCP server's traceparent)
    execute: (p, callSeq) => traceTool({ name: p.name, callId: p.callId, type: toolKind(env, p.name), arguments: p.rawArguments }, () => timed(env, p, () => executeCall(env, fx, p, callSeq))),
    notRun: (_p, decision) => notRun(decision),
    commit: async (p, callSeq, outcome, last) => {
      const finished = await finishCall(env, p, outcome)
      await fx.commitResult(p, callSeq, finished, last)
      return { concludes: finished.outcome.concludesTurn === true }
    },
    abortUnstarted: (p) => fx.abortUnstarted(p, ABORTED_BEFORE_DISPATCH),
  })
}

const specOf = (env: { specs: readonly ToolSpec[] }, name: string) => env.specs.find((t) => t.name === name)

/**
 * Which pending row a call's tool/call carries (SPEC §18.10): the row of the call's first wait, when
 * the prepare's answer is certain before tools/pre-execute runs (no listener that could decide
 * otherwise), so the call is pending as soon as it is visible. Otherwise the row is written when the
 * wait begins (openPending), and a client is never asked before its call was allowed (SPEC §11.5).
 */
export interface CallKind {
  /** a client call without approval: the prepare allows, and its execution waits on this row */
  client: boolean
  /** approval 'always' (a client call's too): the prepare asks, and waits on this row */
  approval: boolean
}

export function callKind(env: Pick<ToolEnv, 'specs' | 'hooks'>, p: { name: string }): CallKind {
  const spec = specOf(env, p.name)
  if (env.hooks.count?.('tools/pre-execute') !== 0) return { client: false, approval: false }
  const approval = spec?.approval === 'always'
  return { client: !approval && spec?.execution.type === 'client', approval }
}

/** What kind of tool a call runs, for metrics: its execution type, `unknown` for a name no spec has. */
export const toolKind = (env: Pick<ToolEnv, 'specs'>, name: string): string => specOf(env, name)?.execution.type ?? 'unknown'

async function timed<T>(env: ToolEnv, p: ToolCallPlan, run: () => Promise<T>): Promise<T> {
  const started = process.hrtime.bigint()
  try {
    return await run()
  } finally {
    env.executed?.(toolKind(env, p.name), started)
  }
}
const callView = (p: ToolCallPlan) => ({ callId: p.callId, name: p.name, arguments: p.arguments })

/** SPEC §11.3: parallel only for a parallel ToolSpec or an isConcurrencySafe that answers exactly true. */
export function isParallel(env: Pick<ToolEnv, 'specs' | 'registry'>, p: ToolCallPlan): boolean {
  const spec = specOf(env, p.name)
  if (!spec) return false
  if (spec.execution.type !== 'builtin') return spec.concurrency === 'parallel'
  const reg = env.registry.get(p.name)
  try {
    return reg?.isConcurrencySafe?.(p.arguments) === true
  } catch {
    return false
  }
}

/** tools/pre-execute (allow / deny / ask); `ask` waits for the approval route (SPEC §11.5). */
export async function prepareCall(env: ToolEnv, fx: Pick<ToolEffects, 'openPending' | 'waitAnswer'>, p: ToolCallPlan, callSeq: number): Promise<PrepareDecision> {
  const spec = specOf(env, p.name)
  let d: { kind?: string; reason?: string } | undefined
  try {
    d = await env.hooks.runWaterfall('tools/pre-execute', { call: callView(p), agent: env.handle(), signal: env.signal }, () => (spec?.approval === 'always' ? { kind: 'ask' } : { kind: 'allow' }), { bind: env.bind })
  } catch (e) {
    return { kind: 'deny', reason: `the tool policy failed: ${errorChain(e)}` }
  }
  if (d?.kind === 'allow') return { kind: 'allow' }
  if (d?.kind === 'deny') return { kind: 'deny', reason: typeof d.reason === 'string' && d.reason ? d.reason : 'denied by policy' }
  if (d?.kind !== 'ask') return { kind: 'deny', reason: 'the tool policy gave no decision' }
  await fx.openPending(p, callSeq, 'approval')
  const answer = (await fx.waitAnswer(p.callId, 'approval')) as { decision?: string; reason?: string } | undefined
  if (!answer) return { kind: 'deny', reason: 'the turn was cancelled before an approver answered' }
  if (answer.decision === 'allow') return { kind: 'allow' }
  return { kind: 'deny', reason: answer.reason || 'the approver denied it' }
}

/** The outcome of a call that did not run: denied, or aborted before dispatch. */
export function notRun(decision: Exclude<PrepareDecision, { kind: 'allow' }>): ToolOutcome {
  return decision.kind === 'deny' ? errorResult('TOOL_DENIED', `tool call denied: ${decision.reason}`) : ABORTED_BEFORE_DISPATCH
}

/** tools/execute around the body; failures become results (SPEC §11.7). */
export async function executeCall(env: ToolEnv, fx: Pick<ToolEffects, 'openPending' | 'waitAnswer'>, p: ToolCallPlan, callSeq: number): Promise<ToolOutcome> {
  try {
    const out = await env.hooks.runWaterfall<unknown>('tools/execute', { call: callView(p), agent: env.handle(), signal: env.signal }, () => runBody(env, fx, p, callSeq), { bind: env.bind })
    return toOutcome(out)
  } catch (e) {
    if (env.signal.aborted && (e as Error)?.name === 'AbortError') return errorResult('TOOL_ABORTED', 'tool call aborted', 'AbortError')
    return errorResult('TOOL_ERROR', errorChain(e))
  }
}

/** The body by the spec's execution type: POST to the URL, wait for the client, or the registered builtin. */
async function runBody(env: ToolEnv, fx: Pick<ToolEffects, 'openPending' | 'waitAnswer'>, p: ToolCallPlan, callSeq: number): Promise<ToolOutcome> {
  const spec = specOf(env, p.name)
  if (!spec) return errorResult('UNKNOWN_TOOL', `unknown tool ${p.name}`)
  const ex = spec.execution
  if (ex.type === 'http') {
    let headers: Record<string, string> = {}
    let secrets: string[] = []
    try {
      ;({ headers, secrets } = await resolveHeaders(ex.headers, env.secrets))
    } catch (e) {
      if (e instanceof MissingSecretError) return errorResult('TOOL_ERROR', e.message)
      throw e
    }
    return callHttpTool({ url: ex.url!, timeoutMs: ex.timeoutMs, headers, secrets, body: { sessionId: env.sessionId, callId: p.callId, name: p.name, arguments: p.arguments, rawArguments: p.rawArguments }, signal: env.signal, policy: env.policy })
  }
  if (ex.type === 'mcp') {
    if (!env.mcp) return errorResult('UNKNOWN_TOOL', `unknown tool ${p.name}`)
    return env.mcp.call(ex.server!, ex.tool!, p.arguments, env.signal, ex.timeoutMs)
  }
  if (ex.type === 'client') {
    // the execution of a client call is the wait for its result: the client is asked only now that
    // the prepare allowed it (an approval's row becomes the client's), and not once the turn is cancelled
    if (env.signal.aborted) return errorResult('TOOL_ABORTED', 'tool call aborted', 'AbortError')
    await fx.openPending(p, callSeq, 'client')
    const answer = (await fx.waitAnswer(p.callId, 'client')) as { content?: ContentBlock[]; isError?: boolean } | undefined
    if (!answer) return errorResult('TOOL_ABORTED', 'tool call aborted', 'AbortError')
    return { content: answer.content ?? [], isError: answer.isError === true }
  }
  // a builtin whose plugin left: UNKNOWN_TOOL
  const reg = env.registry.get(p.name)
  if (!reg) return errorResult('UNKNOWN_TOOL', `unknown tool ${p.name}`)
  const value = await reg.execute(p.arguments, { signal: env.signal, callId: p.callId, sessionId: env.sessionId, agent: env.handle(reg.plugin) })
  return { ...toOutcome(value), plugin: reg.plugin }
}

/** A body's value as an outcome; a value of the wrong shape is TOOL_BAD_RESULT. */
export function toOutcome(v: unknown): ToolOutcome {
  const o = v as ToolOutcome & { content: unknown }
  if (!o || typeof o !== 'object') return errorResult('TOOL_BAD_RESULT', 'tool answered an invalid result')
  if (Array.isArray(o.content) && o.error !== undefined) return o as ToolOutcome // already an outcome (http)
  let content: ContentBlock[]
  if (typeof o.content === 'string') content = [{ type: 'text', text: o.content }]
  else if (Array.isArray(o.content) && o.content.every((b) => b && typeof b === 'object' && (b.type === 'text' ? typeof b.text === 'string' : b.type === 'image'))) content = o.content as ContentBlock[]
  else return errorResult('TOOL_BAD_RESULT', 'tool answered an invalid result')
  try {
    assertLosslessJson(content)
    if (o.meta !== undefined) assertLosslessJson(o.meta)
  } catch {
    return errorResult('TOOL_BAD_RESULT', 'tool answered an invalid result')
  }
  const out: ToolOutcome = { content, isError: o.isError === true }
  if (o.concludesTurn === true) out.concludesTurn = true
  if (Array.isArray(o.additionalContexts)) out.additionalContexts = o.additionalContexts
  if (o.meta !== undefined) out.meta = o.meta
  if (o.plugin) out.plugin = o.plugin
  return out
}

/**
 * SPEC §11.6 post-processing, for denied and failed calls too: tools/post-execute (accept, replace,
 * or block), finalizeContent, the tools/result notification; then the contexts as messages.
 */
export async function finishCall(env: ToolEnv, p: ToolCallPlan, outcome: ToolOutcome): Promise<FinishedCall> {
  const call = callView(p)
  let o = outcome
  try {
    const post = await env.hooks.runWaterfall<unknown>('tools/post-execute', { call, result: o, agent: env.handle(), signal: env.signal }, (x: { result: ToolOutcome }) => x.result, { bind: env.bind })
    const b = post as { kind?: string; reason?: string }
    if (b?.kind === 'block') o = errorResult('TOOL_ERROR', `tool result blocked: ${b.reason ?? 'by policy'}`)
    else if (post !== o) o = { ...o, ...toOutcome(post), plugin: o.plugin }
  } catch (e) {
    o = errorResult('TOOL_ERROR', `tool post-processing failed: ${errorChain(e)}`)
  }
  const reg = env.registry.get(p.name)
  if (reg?.finalizeContent && !o.isError) {
    try {
      o = { ...o, content: reg.finalizeContent(o.content) }
    } catch (e) {
      o = errorResult('TOOL_ERROR', `finalizeContent failed: ${errorChain(e)}`)
    }
  }
  env.notify('tools/result', { call, result: o })
  const contexts: UserMessage[] = []
  for (const c of o.additionalContexts ?? []) {
    try {
      contexts.push(toUserMessage(c, { kind: 'plugin', plugin: o.plugin ?? 'agentd' }))
    } catch (e) {
      env.log.warn({ callId: p.callId, err: (e as Error).message }, 'an additional context was not a valid message; dropped')
    }
  }
  return { outcome: o, contexts }
}

/** The tool/result of a call (SPEC §3.4): its message, error and meta, citing the tool/call when logged. */
export function toolResultDraft(at: { turn: number; step: number }, callId: string, callSeq: number | undefined, o: ToolOutcome): Draft {
  const message = { id: newMessageId(), role: 'user', content: [{ type: 'tool-result', toolCallId: callId, isError: o.isError, content: o.content }], source: { kind: 'tool', callId } }
  const data: Record<string, unknown> = { turn: at.turn, step: at.step, message }
  if (o.error) data.error = o.error
  if (o.meta !== undefined) data.meta = o.meta
  return { type: 'tool/result', data: data as Json, surfaceOp: 'append', ...(callSeq !== undefined ? { sourceEventSeqs: [callSeq] } : {}) }
}
