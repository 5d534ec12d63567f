// An attempt's stream as span items (API.md §17 intro), for the span fold (span.ts): the chunks of the
// attempt that runs now, from the native stream's live frames as far as they are contiguous, and, once
// it settles, the rest from its settlement; each block of the stream one item of the span the attempt
// runs in. The fold says which span runs and how far the log is folded; this part keeps the attempt.

import { addTotals, expandStream, usageOf, usageTotals, type AssistantStreamRecord, type SessionEvent, type StreamChunk } from '../session/index.js'
import type { ReasoningItem, Span, SpanItem, SpanOp, TextItem, ToolCallItem, ToolKind } from './items.js'

/** The attempt id's `n` (SPEC §9.1: `<sessionId>:<n>`, n the seq the log would assign next at dispatch). */
export function attemptSeq(attemptId: string): number {
  const n = Number(attemptId.slice(attemptId.lastIndexOf(':') + 1))
  return Number.isInteger(n) ? n : -1
}

/** One attempt's projection: its blocks' items and how many of its chunks were fed. */
interface AttemptState {
  /** the live attempt's `n` (undefined for one projected from its settlement only) */
  n?: number
  fed: number
  blocks: Map<number, TextItem | ReasoningItem | ToolCallItem>
  /** block indexes of tool calls whose first delta has not come yet */
  toolStarts: Set<number>
  span: Span
}

/** The live attempt as frames gave it: its chunks from index 0, as far as they are contiguous. */
interface LiveAttempt {
  attemptId: string
  n: number
  chunks: StreamChunk[]
  /** a chunk was missed: the rest comes from the settlement */
  broken: boolean
}

/** What the attempt's items need of the fold. */
export interface AttemptHost {
  emit(op: SpanOp): void
  toolKind(name: string): ToolKind
  /** a tool-call item was added (the turn finds its result's item by call id) */
  called(callId: string, item: ToolCallItem, span: Span): void
}

/** An item added to a span, numbered in it; `in_progress` unless given. */
export function addItem<T extends SpanItem>(span: Span, item: Omit<T, 'id' | 'ordinal' | 'status'> & { status?: T['status'] }): T {
  const ordinal = span.items.length
  const full = { status: 'in_progress', ...item, id: `${span.id}.${ordinal}`, ordinal } as T
  span.items.push(full)
  return full
}

export class AttemptItems {
  private live?: LiveAttempt
  private attempt?: AttemptState
  /** seq of the last settlement folded: live attempts dispatched before it are settled */
  private settledUpTo = -1

  constructor(private readonly host: AttemptHost) {}

  /** Whether the span shows anything of an attempt yet. */
  has(span: Span): boolean {
    return span.items.length > 0 || this.attempt?.span === span
  }

  /** The session's driver started again (agent/session-start): the live attempt's frames are gone. */
  restart(): void {
    this.live = undefined
  }

  /** An agent/assistant-stream frame (start, chunk, snapshot); true when it may have added chunks to feed. */
  frame(data: unknown): boolean {
    const f = data as { kind: string; attemptId: string; index?: number; chunk?: StreamChunk; stream?: AssistantStreamRecord[] }
    const n = attemptSeq(f.attemptId)
    if (n <= this.settledUpTo) return false
    if (f.kind === 'start') {
      if (this.live?.attemptId !== f.attemptId) this.live = { attemptId: f.attemptId, n, chunks: [], broken: false }
    } else if (f.kind === 'snapshot') {
      const chunks = expandStream(f.stream ?? []).map((c) => c.chunk)
      if (this.live?.attemptId !== f.attemptId) this.live = { attemptId: f.attemptId, n, chunks, broken: false }
      else if (!this.live.broken && chunks.length > this.live.chunks.length) this.live.chunks = chunks
    } else if (f.kind === 'chunk') {
      if (this.live?.attemptId !== f.attemptId) {
        if (f.index !== 0) return false
        this.live = { attemptId: f.attemptId, n, chunks: [], broken: false }
      }
      const live = this.live
      if (live.broken || f.index! < live.chunks.length) return false
      if (f.index! > live.chunks.length) live.broken = true
      else live.chunks.push(f.chunk!)
    } else return false
    return true
  }

  /** Feeds the live attempt's chunks into `span` once every event before its dispatch is folded (`head`). */
  pump(head: number, span: Span): void {
    const live = this.live
    if (!live || live.n <= this.settledUpTo || head < live.n - 1) return
    let att = this.attempt
    if (!att || att.n !== live.n) att = this.attempt = { n: live.n, fed: 0, blocks: new Map(), toolStarts: new Set(), span }
    while (att.fed < live.chunks.length) this.feed(att, live.chunks[att.fed++])
  }

  /** The attempt settled (assistant/message, or its failure): the rest of its stream, then its items end. */
  settle(e: SessionEvent, d: Record<string, unknown>, span: Span | undefined): void {
    this.settledUpTo = e.seq
    if (this.live && this.live.n <= e.seq) this.live = undefined
    if (!span) return
    let att = this.attempt
    if (!att || att.span !== span || att.n === undefined || att.n > e.seq) att = { fed: 0, blocks: new Map(), toolStarts: new Set(), span }
    const chunks = expandStream((d.stream as AssistantStreamRecord[]) ?? [])
    for (let i = att.fed; i < chunks.length; i++) this.feed(att, chunks[i].chunk)
    att.fed = chunks.length
    this.attempt = att
    const u = usageOf(e)
    if (u) addTotals(span.usage, usageTotals(u))
    this.close(e.type === 'assistant/message' && d.interrupted !== true ? 'completed' : 'incomplete')
  }

  /** The attempt settled (or its turn ended): items still open end with `status`. */
  close(status: 'completed' | 'incomplete'): void {
    const att = this.attempt
    this.attempt = undefined
    if (!att) return
    for (const item of att.blocks.values()) this.done(att.span, item, status)
  }

  private done(span: Span, item: SpanItem, status: 'completed' | 'incomplete'): void {
    if (item.status !== 'in_progress') return
    item.status = status
    this.host.emit({ op: 'item-done', span, item })
  }

  private toolItem(att: AttemptState, index: number, callId: string, name: string): ToolCallItem {
    const item = addItem<ToolCallItem>(att.span, { type: 'tool-call', callId, name, arguments: '', kind: this.host.toolKind(name) })
    att.blocks.set(index, item)
    att.toolStarts.delete(index)
    this.host.called(callId, item, att.span)
    this.host.emit({ op: 'item-add', span: att.span, item })
    return item
  }

  private textItem(att: AttemptState, index: number, type: 'text' | 'reasoning'): TextItem | ReasoningItem {
    const item = addItem<TextItem | ReasoningItem>(att.span, { type, text: '' } as TextItem)
    att.blocks.set(index, item)
    this.host.emit({ op: 'item-add', span: att.span, item })
    return item
  }

  /** One chunk of an attempt (SPEC §3.3 StreamChunk) as item ops. */
  private feed(att: AttemptState, c: StreamChunk): void {
    const span = att.span
    switch (c.type) {
      case 'block-start':
        if (att.blocks.has(c.index)) return
        if (c.blockType === 'text' || c.blockType === 'reasoning') this.textItem(att, c.index, c.blockType)
        else if (c.blockType === 'tool-call') att.toolStarts.add(c.index)
        return
      case 'text-delta':
      case 'reasoning-delta': {
        const type = c.type === 'text-delta' ? 'text' : 'reasoning'
        let item = att.blocks.get(c.index)
        if (!item) item = this.textItem(att, c.index, type)
        if (item.type === 'tool-call' || item.status !== 'in_progress') return
        item.text += c.text
        if (c.text) this.host.emit({ op: 'delta', span, item, delta: c.text })
        return
      }
      case 'tool-call-delta': {
        let item = att.blocks.get(c.index)
        if (!item) item = this.toolItem(att, c.index, c.id, c.name ?? '')
        if (item.type !== 'tool-call' || item.status !== 'in_progress') return
        item.arguments += c.argumentsDelta
        if (c.argumentsDelta) this.host.emit({ op: 'delta', span, item, delta: c.argumentsDelta })
        return
      }
      case 'block-end': {
        const b = c.block
        let item = att.blocks.get(c.index)
        if (!item) {
          if (b.type === 'tool-call') item = this.toolItem(att, c.index, b.id, b.name)
          else if (b.type === 'text' || b.type === 'reasoning') item = this.textItem(att, c.index, b.type)
          else return
          // a block that streamed no deltas shows its whole content as one
          const whole = b.type === 'tool-call' ? b.arguments : b.type === 'text' || b.type === 'reasoning' ? b.text : ''
          if (item.type === 'tool-call') item.arguments = whole
          else item.text = whole
          if (whole) this.host.emit({ op: 'delta', span, item, delta: whole })
        }
        if (item.status !== 'in_progress') return
        if (item.type === 'tool-call' && b.type === 'tool-call') item.arguments = b.arguments
        else if (item.type !== 'tool-call' && (b.type === 'text' || b.type === 'reasoning')) item.text = b.text
        // done only when the attempt finishes: a block that ended in an attempt that then failed
        // ends incomplete (API.md §17 intro: a retried attempt's items end incomplete)
        return
      }
      case 'finish': {
        const ok = c.reason.kind === 'stop' || c.reason.kind === 'tool-calls'
        for (const item of att.blocks.values()) this.done(span, item, ok ? 'completed' : 'incomplete')
        return
      }
      default:
        return
    }
  }
}
