// The effects of tool execution that only the driver writes (SPEC §11.5–§11.8, §18.10): tool/call
// with the pending row of its first wait, the rows of later waits (an approval, then the client's
// result), the wait for an answer, the tool/result with its contexts queued in next-step, and the
// closing of calls never started. The pipeline that decides them is tools/pipeline.ts.

import { planSplice, type AssistantMessage, type Json, type ToolCallBlock } from '../session/index.js'
import { callKind, planToolCalls, runToolCalls, toolResultDraft, type CallKind, type ToolEffects, type ToolEnv, type ToolSpec } from '../tools/index.js'
import type { SideRow } from '../store/index.js'
import type { TurnContext } from './context.js'
import type { UnitBuilder } from './log.js'
import type { Part } from './unit.js'

/** A call whose tool/call was written with its message's settlement (addFirstCall). */
export interface AppendedCall {
  callId: string
  seq: number
  kind: CallKind
}

/**
 * Runs a settled message's tool calls in the open step; reports whether a result concludes the turn,
 * and whether the batch's last tool/result waits in the open unit for the step's end (`open`).
 */
export async function runTools(tc: TurnContext, calls: ToolCallBlock[], mcpTools: readonly ToolSpec[] = [], appended?: AppendedCall): Promise<{ concludes: boolean; open: boolean }> {
  const r = await runToolCalls(calls, toolEnv(tc, mcpTools), toolEffects(tc, appended))
  return { concludes: r.concludes, open: tc.unit.staged }
}

/**
 * SPEC §11.5 step 1 of a settled message's first call, in the settlement's own unit: the scheduler
 * starts the first call at once, with nothing foreign between the settlement and its tool/call, so
 * both commit together (one round trip fewer per tool step). Call callCommitted once the unit committed.
 */
export function addFirstCall(tc: TurnContext, u: UnitBuilder, message: AssistantMessage, mcpTools: readonly ToolSpec[] = []): AppendedCall | undefined {
  const block = message.content.find((b): b is ToolCallBlock => b.type === 'tool-call')
  if (!block) return undefined
  const [plan] = planToolCalls([block])
  const kind = callKind({ specs: stepSpecs(tc, mcpTools), hooks: tc.hooks }, plan)
  return { callId: plan.callId, seq: addCall(tc, u, plan, kind), kind }
}

/** What follows a committed tool/call: the pending row callKind gave it is open. */
export function callCommitted(tc: TurnContext, c: AppendedCall): void {
  if (c.kind.client) tc.loop.pending.opened(c.callId, 'client')
  else if (c.kind.approval) tc.loop.pending.opened(c.callId, 'approval')
}

/**
 * A call's tool/call and the pending row callKind gives it (SPEC §18.10), added to a unit; its seq in
 * the unit as built (what the unit refers to it by; the committed seq is its event's).
 */
function addCall(tc: TurnContext, u: UnitBuilder, p: { callId: string; name: string; rawArguments: string }, kind: CallKind): number {
  const { turn, step } = tc
  const e = u.add({ type: 'tool/call', data: { turn, step, callId: p.callId, name: p.name, arguments: p.rawArguments } })
  const pendingKind = kind.client ? 'client' : kind.approval ? 'approval' : undefined
  if (pendingKind) {
    u.side({ kind: 'pending-insert', call: { callId: p.callId, kind: pendingKind, name: p.name, arguments: p.rawArguments } })
    u.side(requiresAction(turn, e, p, pendingKind))
  }
  return e.seq
}

/** The step's tools: the session's ToolSpecs, then the MCP tools listed for this step (API.md §12). */
const stepSpecs = (tc: TurnContext, mcpTools: readonly ToolSpec[]): readonly ToolSpec[] => (mcpTools.length ? [...tc.loop.settings.spec.tools, ...mcpTools] : tc.loop.settings.spec.tools)

function toolEnv(tc: TurnContext, mcpTools: readonly ToolSpec[]): ToolEnv {
  const { loop } = tc
  return {
    sessionId: loop.id,
    signal: tc.signal,
    specs: stepSpecs(tc, mcpTools),
    mcp: loop.mcp,
    secrets: loop.secrets,
    registry: loop.services.registry,
    hooks: tc.hooks,
    handle: (plugin) => loop.handle(plugin),
    bind: loop.bind,
    policy: loop.services.toolPolicy,
    maxParallel: () => loop.services.maxParallelToolCalls(),
    notify: (name, payload) => tc.notify(name, payload),
    log: loop.logger.child({ turn: tc.turn, step: tc.step }),
    executed: (kind, started) => loop.services.metrics?.toolExecuted(kind, started),
  }
}

/** API.md §14: a call became pending — a delivery for the tenant's webhooks rides with its pending row. */
function requiresAction(turn: number, at: { seq: number; time: number }, p: { callId: string; name: string }, kind: 'client' | 'approval'): SideRow {
  return { kind: 'webhook', event: { type: 'session.requires_action', turn, seq: at.seq, time: at.time, extra: { pending: [{ callId: p.callId, name: p.name, kind }] } } }
}

function toolEffects(tc: TurnContext, appended: AppendedCall | undefined): ToolEffects {
  const { loop, turn, step } = tc
  const at = { turn, step }
  const pending = loop.pending
  const metrics = loop.services.metrics
  const written = (p: { callId: string }) => (appended?.callId === p.callId ? appended.seq : undefined)
  return {
    async appendCall(p, kind) {
      const seq = written(p)
      if (seq !== undefined) return seq
      // a barrier: the call is durable before it is prepared and run (SPEC §11.5)
      let callSeq = -1
      await tc.unit.close({ build: (u) => void addCall(tc, u, p, kind), committed: (events) => void (callSeq = events[0].seq) })
      callCommitted(tc, { callId: p.callId, seq: callSeq, kind })
      return callSeq
    },
    async openPending(p, callSeq, kind) {
      // it rode with the tool/call (callKind); an allowed approval's row is re-opened as the client's,
      // and its delivery rides with it as with any call that becomes pending (API.md §14)
      if (pending.rowKind(p.callId) === kind) return
      await tc.unit.close({
        build: (u) => {
          u.side({ kind: 'pending-insert', call: { callId: p.callId, kind, name: p.name, arguments: p.rawArguments } })
          u.side(requiresAction(turn, { seq: callSeq, time: Date.now() }, p, kind))
        },
      })
      pending.opened(p.callId, kind)
    },
    waitAnswer: (callId, kind) => pending.wait(callId, kind, tc.signal),
    async commitResult(p, callSeq, { outcome, contexts }, last) {
      const part: Part = {
        // contexts are queued at next-step's end: the inbox is an input
        reads: contexts.length ? ['inbox'] : [],
        build: (u) => {
          u.add(toolResultDraft(at, p.callId, callSeq, outcome))
          if (contexts.length) {
            const data = planSplice(loop.state.inbox, 'next-step', loop.state.inbox.nextStep.length, 0, contexts)
            if (data) u.add({ type: 'agent/inbox/spliced', data: data as unknown as Json })
          }
          // settlement deletes the call's pending row (SPEC §18.10) with its result
          if (pending.hasRow(p.callId)) u.side({ kind: 'pending-delete', callIds: [p.callId] })
        },
        committed: () => {
          pending.closed(p.callId)
          for (const message of contexts) tc.notify('agent/inbox/inserted', { message })
          metrics?.toolCalls.inc({ code: outcome.error?.code ?? (outcome.isError ? 'error' : 'ok') })
        },
      }
      // the batch's last result is the step's last write: it stays open for the step's end (turn.ts
      // endStep), as nothing foreign runs between them. Not with contexts, whose agent/inbox/inserted
      // notifications come between the result and the step's end: a barrier.
      if (last && !contexts.length) tc.unit.stage(part)
      else await tc.unit.close(part)
    },
    async abortUnstarted(p, outcome) {
      const seq = written(p)
      await tc.unit.close({
        build: (u) => {
          const callSeq = seq ?? addCall(tc, u, p, { client: false, approval: false })
          u.add(toolResultDraft(at, p.callId, callSeq, outcome))
          if (pending.hasRow(p.callId)) u.side({ kind: 'pending-delete', callIds: [p.callId] })
        },
      })
      pending.closed(p.callId)
      metrics?.toolCalls.inc({ code: 'TOOL_ABORTED_BEFORE_DISPATCH' })
    },
  }
}
