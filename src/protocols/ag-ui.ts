// AG-UI (API.md §17.3) as a renderer of spans (span.ts): a run is a span, each SpanOp becomes the AG-UI
// events that say the same, numbered 0, 1, 2, … per run (the SSE `id:`), so the same log renders the
// same frames on every read and a `Last-Event-ID` resume sends exactly the ones after it — preceded by
// RUN_STARTED and the `*_START` events of whatever the client was inside, so a verifying client accepts
// the resumed stream on its own. Nothing is kept beyond the request.

import type { Span, SpanItem, SpanOp, ToolCallItem, ToolResultItem } from './items.js'
import { textOf } from './items.js'
import type { SpanFold } from './span.js'

export type AgUiEvent = { type: string } & Record<string, unknown>

const resultText = (item: ToolCallItem | ToolResultItem) => textOf(item.result?.content ?? []) || (item.result?.error?.code ?? '')

/** Renders the ops of one span (`spanId`) as the events of one AG-UI run. */
export class AgUiRun {
  readonly events: AgUiEvent[] = []
  done = false
  /** open *_START events by item id, in the order they opened (what a resume re-opens) */
  private readonly open = new Map<string, AgUiEvent[]>()

  constructor(
    private readonly threadId: string,
    private readonly runId: string,
    private readonly spanId: string,
  ) {
    this.push({ type: 'RUN_STARTED', threadId, runId })
  }

  private push(e: AgUiEvent): void {
    this.events.push(e)
  }

  /** What a client that saw events up to `id` needs before the rest: RUN_STARTED and the starts it is inside. */
  reopen(id: number): AgUiEvent[] {
    const inside = new Map<string, AgUiEvent[]>()
    for (const e of this.events.slice(1, id + 1)) {
      const key = (e.messageId ?? e.toolCallId) as string | undefined
      if (!key) continue
      if (e.type === 'TEXT_MESSAGE_START' || e.type === 'TOOL_CALL_START' || e.type === 'REASONING_START') inside.set(key, [e])
      else if (e.type === 'REASONING_MESSAGE_START') inside.get(key)?.push(e)
      else if (e.type === 'TEXT_MESSAGE_END' || e.type === 'TOOL_CALL_END' || e.type === 'REASONING_END') inside.delete(key)
      else if (e.type === 'REASONING_MESSAGE_END') inside.get(key)?.pop()
    }
    return [this.events[0], ...[...inside.values()].flat()]
  }

  op(op: SpanOp): void {
    if (this.done || op.span.id !== this.spanId) return
    switch (op.op) {
      case 'item-add':
        return this.itemAdd(op.item)
      case 'delta': {
        const item = op.item
        if (item.type === 'text') this.push({ type: 'TEXT_MESSAGE_CONTENT', messageId: item.id, delta: op.delta })
        else if (item.type === 'reasoning') this.push({ type: 'REASONING_MESSAGE_CONTENT', messageId: item.id, delta: op.delta })
        else this.push({ type: 'TOOL_CALL_ARGS', toolCallId: item.callId, delta: op.delta })
        return
      }
      case 'item-done': {
        const item = op.item
        if (item.type === 'text') this.push({ type: 'TEXT_MESSAGE_END', messageId: item.id })
        else if (item.type === 'reasoning') {
          this.push({ type: 'REASONING_MESSAGE_END', messageId: item.id })
          this.push({ type: 'REASONING_END', messageId: item.id })
        } else if (item.type === 'tool-call') this.push({ type: 'TOOL_CALL_END', toolCallId: item.callId })
        return
      }
      case 'tool-result': {
        const item = op.item
        // the client sent its own results; the server's (and an approved call's) are news to it
        if (item.kind === 'client' || !item.result) return
        if (item.type === 'tool-result') this.resultCall(item)
        this.push({ type: 'TOOL_CALL_RESULT', messageId: `${item.callId}-result`, toolCallId: item.callId, content: resultText(item), role: 'tool' })
        return
      }
      case 'span-end':
        return this.end(op.span)
    }
  }

  /** A result item of a call an earlier run made: the call is shown again so the result has a parent. */
  private resultCall(item: ToolResultItem): void {
    this.push({ type: 'TOOL_CALL_START', toolCallId: item.callId, toolCallName: item.name })
    if (item.arguments) this.push({ type: 'TOOL_CALL_ARGS', toolCallId: item.callId, delta: item.arguments })
    this.push({ type: 'TOOL_CALL_END', toolCallId: item.callId })
  }

  private itemAdd(item: SpanItem): void {
    if (item.type === 'text') this.push({ type: 'TEXT_MESSAGE_START', messageId: item.id, role: 'assistant' })
    else if (item.type === 'reasoning') {
      this.push({ type: 'REASONING_START', messageId: item.id })
      this.push({ type: 'REASONING_MESSAGE_START', messageId: item.id, role: 'reasoning' })
    } else if (item.type === 'tool-call') this.push({ type: 'TOOL_CALL_START', toolCallId: item.callId, toolCallName: item.name })
    // its arguments come as deltas; a result item comes with its tool-result op
  }

  private end(span: Span): void {
    const base = { threadId: this.threadId, runId: this.runId }
    if (span.status === 'failed') this.push({ type: 'RUN_ERROR', message: span.error?.message ?? 'the run failed', code: span.error?.code ?? 'error' })
    else if (span.status === 'cancelled') this.push({ type: 'RUN_FINISHED', ...base, outcome: { type: 'cancelled' } })
    else {
      const approvals = span.waits.filter((w) => w.kind === 'approval')
      if (approvals.length) this.push({ type: 'RUN_FINISHED', ...base, outcome: { type: 'interrupt', interrupts: approvals.map((w) => ({ id: w.callId, toolCallId: w.callId, reason: 'tool-approval' })) } })
      else this.push({ type: 'RUN_FINISHED', ...base, outcome: { type: 'success', ...(span.waits.length ? { pendingToolCallIds: span.waits.map((w) => w.callId) } : {}) } })
    }
    this.done = true
  }
}

type AgUiMessage = Record<string, unknown> & { id: string; role: string }

/**
 * A thread's history as AG-UI messages (MESSAGES_SNAPSHOT): each span's input as user messages, its
 * text as assistant messages with the tool calls the model made after it, and results as tool
 * messages. `except` leaves a span's output out (the open one, which the connect stream replays live).
 */
export function agUiMessages(fold: SpanFold, except?: string): AgUiMessage[] {
  const out: AgUiMessage[] = []
  for (const span of fold.spans) {
    if (span.status === 'queued') continue
    for (const m of span.input) out.push({ id: agUiUserId(m), role: 'user', content: textOf(m.content) })
    // the open run's input is history; what it makes comes live
    if (span.id === except) continue
    let assistant: AgUiMessage | undefined
    for (const item of span.items) {
      if (item.type === 'text') {
        assistant = { id: item.id, role: 'assistant', content: item.text }
        out.push(assistant)
      } else if (item.type === 'tool-call') {
        if (!assistant) out.push((assistant = { id: item.id, role: 'assistant' }))
        ;((assistant.toolCalls as unknown[]) ??= []).push({ id: item.callId, type: 'function', function: { name: item.name, arguments: item.arguments } })
        if (item.result) out.push({ id: `${item.callId}-result`, role: 'tool', toolCallId: item.callId, content: resultText(item) })
      } else if (item.type === 'tool-result') {
        out.push({ id: `${item.callId}-result`, role: 'tool', toolCallId: item.callId, content: resultText(item) })
        assistant = undefined
      }
    }
  }
  return out
}

/** The AG-UI id of an admitted user message: the client's own, which the input kept in its source. */
export function agUiUserId(m: { id: string; source?: unknown }): string {
  const ids = (m.source as { agui?: { messageIds?: unknown } } | undefined)?.agui?.messageIds
  return Array.isArray(ids) && typeof ids[0] === 'string' ? ids[ids.length - 1] : m.id
}

/** Every AG-UI user message id a thread admitted (the `messages` a client resends are not new). */
export function admittedIds(fold: SpanFold): Set<string> {
  const ids = new Set<string>()
  for (const span of fold.spans)
    for (const m of span.input) {
      ids.add(m.id)
      const more = (m.source as { agui?: { messageIds?: unknown } } | undefined)?.agui?.messageIds
      if (Array.isArray(more)) for (const id of more) if (typeof id === 'string') ids.add(id)
    }
  return ids
}
