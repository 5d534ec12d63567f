// A turn's tool calls as the span fold (span.ts) sees them: the calls still without a result, in log
// order (which is model order), the items they show as, and where each result shows.
//
// Which calls wait is not in the log: tool/call carries no kind, and the kind comes from the session's
// tool settings (execution `client`, `approval: always`). The fold takes it from `toolKind`, which the
// caller builds from the session's settings as they stand (kindsOf). A settings change that turns a
// tool that was called into another kind would re-fold older spans differently; API.md §4 applies
// settings from the next step, so that needs a tool renamed in place. A call that first waits for an
// approval and then, allowed, for a client (a client tool with `approval: always`) shows as an approval
// only: the second wait leaves no event to fold.

import type { ContentBlock } from '../session/index.js'
import type { Span, SpanOp, ToolCallItem, ToolKind, ToolResult, ToolResultItem, WaitKind } from './items.js'
import { addItem } from './span-attempt.js'

/** What kindsOf reads of a ToolSpec (API.md §4). */
export interface ToolSpecLike {
  name: string
  approval?: string
  execution?: { type?: string }
}

/** The tool kinds of a session's ToolSpecs: `approval: always` waits for an approver, `client` execution for the client. */
export function kindsOf(tools: readonly ToolSpecLike[] | undefined): (name: string) => ToolKind {
  const kinds = new Map<string, ToolKind>()
  for (const t of tools ?? []) kinds.set(t.name, t.approval === 'always' ? 'approval' : t.execution?.type === 'client' ? 'client' : 'server')
  return (name) => kinds.get(name) ?? 'server'
}

export type Wait = { callId: string; name: string; kind: WaitKind }

export class TurnCalls {
  /** calls of the turn still without a result, in log order */
  private readonly open: Array<{ callId: string; name: string; arguments: string; kind: ToolKind }> = []
  /** tool-call items of the turn by call id (their span may be an earlier one) */
  private readonly items = new Map<string, { item: ToolCallItem; span: Span }>()

  constructor(private readonly toolKind: (name: string) => ToolKind) {}

  /** A tool-call item an attempt added for `callId`. */
  shown(callId: string, item: ToolCallItem, span: Span): void {
    this.items.set(callId, { item, span })
  }

  /** A tool/call event. */
  call(d: Record<string, unknown>): void {
    const callId = d.callId as string
    const name = d.name as string
    this.open.push({ callId, name, arguments: d.arguments as string, kind: this.items.get(callId)?.item.kind ?? this.toolKind(name) })
  }

  /**
   * A tool/result event: the call is no longer open; its result shows in `span`, on the call's item when
   * that is in the same span, else as an item of its own. The op to emit, when there is a span.
   */
  result(d: Record<string, unknown>, span: Span | undefined): SpanOp | undefined {
    const message = d.message as { content: Array<{ toolCallId: string; isError: boolean; content: ContentBlock[] }>; source: { callId: string } }
    const callId = message.source.callId
    const block = message.content[0]
    const result: ToolResult = { content: block.content, isError: block.isError }
    if (d.error) result.error = d.error as ToolResult['error']
    const at = this.open.findIndex((c) => c.callId === callId)
    const call = at >= 0 ? this.open.splice(at, 1)[0] : undefined
    const known = this.items.get(callId)
    if (!span) return undefined
    if (known && known.span === span) {
      known.item.result = result
      return { op: 'tool-result', span, item: known.item }
    }
    const item = addItem<ToolResultItem>(span, { type: 'tool-result', callId, name: known?.item.name ?? call?.name ?? '', arguments: known?.item.arguments ?? call?.arguments ?? '', kind: known?.item.kind ?? call?.kind ?? 'server', result, status: 'completed' })
    return { op: 'tool-result', span, item }
  }

  /** The open calls that wait for someone (a client or an approver). */
  waits(): Wait[] {
    return this.open.filter((c) => c.kind !== 'server').map((c) => ({ callId: c.callId, name: c.name, kind: c.kind as WaitKind }))
  }

  /** Whether the first call without a result waits for someone: nothing after it can run (SPEC §11.6). */
  get blocked(): boolean {
    const first = this.open[0]
    return first !== undefined && first.kind !== 'server'
  }
}
