// Spans (API.md §17 intro): a client protocol's unit of work — a response, a run, a task, a UI
// message — as a pure fold of a session's durable events and, while an attempt streams, of that
// attempt's chunks (the ones the native stream's snapshot carries). No state of its own: the same
// log folds to the same spans and the same ops in the same order, in any process, at any time.
//
// What a span is:
// - It opens at the claim of the input that opened a turn (turn/start and its claim splices), or, in
//   a turn that waited, at the first event after the wait (the answer's effect).
// - It ends at its turn's turn/end, or at a wait: after a tool/call or tool/result, when the first
//   call of the turn still without a result (in log order, which is model order) is one that waits
//   for a client or an approver. Later calls cannot commit a result before it (SPEC §11.6), and no
//   attempt runs while a step's tools do, so nothing the span could still show runs.
// - A crash-interrupted turn (turn/end interrupted) and its continuation (turn/start {continues}) are
//   one span; it fails `interrupted` only when a later turn opens without continuing it.
// - A failed attempt that is retried shows as items that end incomplete, then the retry's items.
//
// Ids are derived from the log: `i<seq>` names the delivery splice of the input that opened the span
// (so a protocol can name the span the moment the input is accepted, before any claim), `w<seq>` the
// last event of the span that ended at the wait it answers, `t<seq>` the turn/start of a turn that
// claimed nothing. Which calls wait: span-calls.ts.

import { applySplice, emptyInbox, usageTotals, type ContentBlock, type SessionEvent, type SplicedData, type TurnEndReason, type UserMessage } from '../session/index.js'
import { textOf, type Span, type SpanOp, type ToolKind } from './items.js'
import { AttemptItems } from './span-attempt.js'
import { TurnCalls, type Wait } from './span-calls.js'
export { attemptSeq } from './span-attempt.js'
export { kindsOf, type ToolSpecLike } from './span-calls.js'

export interface SpanFoldOptions {
  /** who answers a call of this tool name (kindsOf builds it from the session's ToolSpecs) */
  toolKind(name: string): ToolKind
  /** every op, in order, as the fold makes it */
  onOp?(op: SpanOp): void
}

interface TurnState {
  turn: number
  /** between turn/start and the end of its claim: what it claimed */
  opening?: { seq: number; time: number; claimed: UserMessage[]; continues?: number; prompt?: UserMessage }
  /** its tool calls: the open ones, and their items (span-calls.ts) */
  calls: TurnCalls
  /** the span ended at a wait after this event; the next span opens at the next event that is not a tool/call or a splice */
  waited?: { seq: number; time: number }
}

export class SpanFold {
  /** spans in the order they were announced (span-open) */
  readonly spans: Span[] = []
  /** the seq of the last event folded */
  head = -1
  private readonly byId = new Map<string, Span>()
  private readonly inbox = emptyInbox()
  /** delivery splice of each message ever delivered */
  private readonly delivered = new Map<string, { seq: number; time: number }>()
  /** spans of next-turn input not yet claimed, by message id */
  private readonly pending = new Map<string, Span>()
  /** pending spans not announced yet (the event after their delivery decides whether they queued) */
  private unannounced: Span[] = []
  private turn?: TurnState
  private current?: Span
  /** a crash-interrupted span waiting for its continuation */
  private held?: Span
  private lastStarted?: Span
  private lastModel?: string
  private lastSystem?: string
  /** the running attempt's items (span-attempt.ts) */
  private readonly attempts: AttemptItems

  constructor(private readonly opts: SpanFoldOptions) {
    this.attempts = new AttemptItems({
      emit: (op) => this.emit(op),
      toolKind: (name) => opts.toolKind(name),
      called: (callId, item, span) => this.turn?.calls.shown(callId, item, span),
    })
  }

  /** A span by id, announced or still pending (queued, not yet announced). */
  get(id: string): Span | undefined {
    return this.byId.get(id)
  }

  /** The span the session's latest turn started last (what `previous_response_id` continues). */
  get latest(): Span | undefined {
    return this.lastStarted
  }

  /** The span open now: running, or the crash-interrupted one awaiting its continuation. */
  get open(): Span | undefined {
    return this.current ?? this.held
  }

  /** The calls the turn waits on now, when its last span ended at a wait and nothing came after. */
  get waiting(): { span: Span; seq: number; calls: Wait[] } | undefined {
    const t = this.turn
    if (!t?.waited || this.current) return undefined
    const span = this.spans.at(-1)
    if (!span) return undefined
    return { span, seq: t.waited.seq, calls: t.calls.waits() }
  }

  /**
   * A span by id as it stands now; for the id of the span an answer to the current wait opens (that
   * has no event yet), the span as it will open: in progress, nothing in it.
   */
  peek(id: string): Span | undefined {
    const s = this.byId.get(id)
    if (s) return s
    const w = this.waiting
    if (!w || id !== SpanFold.answerId(w.seq)) return undefined
    const span = this.newSpan(id, { kind: 'answer', seq: w.seq }, this.turn!.waited!.time, w.seq + 1)
    span.turn = this.turn!.turn
    span.previous = this.lastStarted?.id
    if (this.lastModel !== undefined) span.model = this.lastModel
    if (this.lastSystem !== undefined) span.instructions = this.lastSystem
    return span
  }

  /** The id the next span of a waiting turn will have (the answer's). */
  static answerId(waitSeq: number): string {
    return `w${waitSeq}`
  }

  /** The id of the span a delivery at `seq` opens. */
  static inputId(seq: number): string {
    return `i${seq}`
  }

  private emit(op: SpanOp): void {
    this.opts.onOp?.(op)
  }

  private announce(span: Span): void {
    this.spans.push(span)
    this.byId.set(span.id, span)
    this.emit({ op: 'span-open', span })
  }

  /** Folds one durable event; events must come in seq order (a repeated one is ignored). */
  event(e: SessionEvent): void {
    if (e.seq <= this.head) return
    this.head = e.seq
    const d = e.data as Record<string, unknown>
    const isSplice = e.type === 'agent/inbox/spliced'
    // the opening claim of a turn is its turn/start's splices; anything else ends it
    if (this.turn?.opening && !(isSplice && isClaim(d as unknown as SplicedData))) this.finishOpening()
    // input delivered and not claimed by the turn/start right after it waited behind other work
    if (this.unannounced.length && e.type !== 'turn/start' && !(this.turn?.opening && isSplice)) this.announceQueued()
    if (!isSplice && e.type !== 'tool/call' && e.type !== 'turn/start' && e.type !== 'session/end-seed') this.resumeAfterWait(e)
    if (this.current) this.current.lastSeq = e.seq
    switch (e.type) {
      case 'agent/inbox/spliced':
        this.splice(e, d as unknown as SplicedData)
        break
      case 'turn/start':
        this.turnStart(e, d)
        break
      case 'turn/end':
        this.turnEnd(e, d.reason as TurnEndReason)
        break
      case 'system/message':
        this.lastSystem = textOf(((d.message as { content: ContentBlock[] }).content) ?? [])
        if (this.current && !this.attempts.has(this.current)) this.current.instructions = this.lastSystem
        break
      case 'request/header': {
        const c = (d.header as { config: { provider: string; model: string } }).config
        this.lastModel = `${c.provider}/${c.model}`
        if (this.current && !this.attempts.has(this.current)) this.current.model = this.lastModel
        break
      }
      case 'user/message':
        if (this.current) {
          const m = d as unknown as UserMessage
          const opening = this.current.input.some((x) => x.id === m.id)
          // steering is a person's input; a plugin's (a compaction checkpoint, injected context) is not the span's
          if (!opening && m.source?.kind !== 'user') break
          if (!opening) this.current.input.push(m)
          this.emit({ op: 'input', span: this.current, message: m, opening })
        }
        break
      case 'assistant/message':
      case 'assistant/attempt':
        this.attempts.settle(e, d, this.current)
        break
      case 'tool/call':
        this.toolCall(e, d)
        break
      case 'tool/result':
        this.toolResult(e, d)
        break
    }
    this.pump()
  }

  /** Folds a live frame of the native stream (agent/assistant-stream start, chunk, snapshot; agent/session-start). */
  frame(event: string, data: unknown): void {
    if (event === 'agent/session-start') this.attempts.restart()
    else if (event === 'agent/assistant-stream' && this.attempts.frame(data)) this.pump()
  }

  /** Feeds the live attempt's chunks to the running span, as far as the log is folded. */
  private pump(): void {
    if (this.current && this.turn) this.attempts.pump(this.head, this.current)
  }

  // ---- input ----

  private splice(e: SessionEvent, d: SplicedData): void {
    const removed = applySplice(this.inbox, d)
    for (const m of d.inserted ?? []) {
      this.delivered.set(m.id, { seq: e.seq, time: e.time })
      if (d.target !== 'next-turn') continue
      const span = this.newSpan(SpanFold.inputId(e.seq), { kind: 'input', seq: e.seq, messageId: m.id }, e.time, e.seq)
      span.status = 'queued'
      span.input = [m]
      this.pending.set(m.id, span)
      this.byId.set(span.id, span)
      this.unannounced.push(span)
    }
    if (!removed.length) return
    if (d.outcome === 'canceled') {
      for (const m of removed) {
        const span = this.pending.get(m.id)
        if (!span) continue
        this.pending.delete(m.id)
        if (this.unannounced.includes(span)) {
          this.unannounced = this.unannounced.filter((s) => s !== span)
          span.queued = true
          this.announce(span)
        }
        span.lastSeq = e.seq
        this.end(span, 'cancelled', e)
      }
      return
    }
    const o = this.turn?.opening
    if (o && !(d.inserted ?? []).length) {
      o.claimed.push(...removed)
      if (d.target === 'next-turn') {
        o.prompt = removed[0]
        this.finishOpening()
      }
    }
  }

  private announceQueued(): void {
    const q = this.unannounced
    this.unannounced = []
    for (const s of q) {
      s.queued = true
      this.announce(s)
    }
  }

  // ---- turns ----

  private turnStart(e: SessionEvent, d: Record<string, unknown>): void {
    const continues = typeof d.continues === 'number' ? d.continues : undefined
    if (this.held && (continues === undefined || this.held.turn !== continues)) {
      const h = this.held
      this.held = undefined
      h.error = { code: 'interrupted', message: 'the turn was interrupted by a crash and not continued' }
      this.end(h, 'failed')
    }
    this.turn = { turn: d.turn as number, opening: { seq: e.seq, time: e.time, claimed: [], continues }, calls: new TurnCalls(this.opts.toolKind) }
  }

  /** The turn's opening claim is complete: its span starts (or, continuing a crashed turn, goes on). */
  private finishOpening(): void {
    const t = this.turn!
    const o = t.opening!
    t.opening = undefined
    if (o.continues !== undefined && this.held?.turn === o.continues) {
      const span = this.held
      this.held = undefined
      span.turn = t.turn
      this.current = span
      return
    }
    let span = o.prompt ? this.pending.get(o.prompt.id) : undefined
    if (span) {
      this.pending.delete(o.prompt!.id)
      span.input = [...o.claimed]
      span.turn = t.turn
      span.status = 'in_progress'
      this.start(span)
      if (this.unannounced.includes(span)) {
        this.unannounced = this.unannounced.filter((s) => s !== span)
        this.announce(span)
      } else this.emit({ op: 'span-start', span })
    } else {
      const first = o.claimed[0]
      const at = first ? this.delivered.get(first.id) : undefined
      span = at && first ? this.newSpan(SpanFold.inputId(at.seq), { kind: 'input', seq: at.seq, messageId: first.id }, at.time, o.seq) : this.newSpan(`t${o.seq}`, { kind: 'turn', seq: o.seq }, o.time, o.seq)
      span.input = [...o.claimed]
      span.turn = t.turn
      this.start(span)
      this.announce(span)
    }
    this.current = span
    if (this.unannounced.length) this.announceQueued()
  }

  private newSpan(id: string, opener: Span['opener'], createdAt: number, firstSeq: number): Span {
    return { id, opener, turn: 0, status: 'in_progress', ended: false, createdAt, queued: false, input: [], items: [], usage: usageTotals(undefined), waits: [], firstSeq, lastSeq: firstSeq }
  }

  /** A span begins running: what it inherits from the log so far. */
  private start(span: Span): void {
    span.status = 'in_progress'
    if (this.lastStarted) span.previous = this.lastStarted.id
    if (this.lastModel !== undefined) span.model = this.lastModel
    if (this.lastSystem !== undefined) span.instructions = this.lastSystem
    this.lastStarted = span
  }

  /** The first event after a wait that is the answer's effect opens the turn's next span. */
  private resumeAfterWait(e: SessionEvent): void {
    const t = this.turn
    if (!t?.waited || this.current) return
    const w = t.waited
    t.waited = undefined
    const span = this.newSpan(SpanFold.answerId(w.seq), { kind: 'answer', seq: w.seq }, w.time, e.seq)
    span.turn = t.turn
    this.start(span)
    this.announce(span)
    this.current = span
  }

  private turnEnd(e: SessionEvent, reason: TurnEndReason): void {
    const span = this.current
    this.attempts.close('incomplete')
    this.turn = undefined
    this.current = undefined
    if (!span) return
    span.lastSeq = e.seq
    switch (reason.kind) {
      case 'interrupted':
        this.held = span
        return
      case 'completed':
        return this.end(span, 'completed')
      case 'max-tokens':
        return this.end(span, 'incomplete')
      case 'aborted':
        return this.end(span, 'cancelled')
      case 'blocked':
        span.error = { code: 'blocked', message: 'a server plugin refused the step' }
        return this.end(span, 'failed')
      case 'error':
        span.error = { code: reason.error.code, message: reason.error.message }
        return this.end(span, 'failed')
    }
  }

  private end(span: Span, status: Span['status'], at?: SessionEvent): void {
    if (at) span.lastSeq = at.seq
    span.status = status
    span.ended = true
    this.emit({ op: 'span-end', span })
  }

  // ---- tools ----

  private toolCall(e: SessionEvent, d: Record<string, unknown>): void {
    if (!this.turn) return
    this.turn.calls.call(d)
    this.checkWait(e)
  }

  private toolResult(e: SessionEvent, d: Record<string, unknown>): void {
    if (!this.turn) return
    const op = this.turn.calls.result(d, this.current)
    if (op) this.emit(op)
    this.checkWait(e)
  }

  /** Ends the span when the first call without a result waits for someone (header). */
  private checkWait(e: SessionEvent): void {
    const t = this.turn
    const span = this.current
    if (!t || !span || t.waited) return
    if (!t.calls.blocked) return
    span.waits = t.calls.waits()
    t.waited = { seq: e.seq, time: e.time }
    this.current = undefined
    this.end(span, 'completed', e)
  }
}

/** A claim: a pure deletion (no insertion, no `outcome`, SPEC §4.5). */
function isClaim(d: SplicedData): boolean {
  return !(d.inserted ?? []).length && d.outcome === undefined && (d.removedCount ?? 0) > 0
}

/** Folds a whole log (a pure function): its spans, in the order they were announced, and the fold. */
export function foldSpans(events: Iterable<SessionEvent>, opts: SpanFoldOptions): SpanFold {
  const fold = new SpanFold(opts)
  for (const e of events) fold.event(e)
  return fold
}
