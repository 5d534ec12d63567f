// SessionState: everything the loop needs from a session log, folded one event at a time.
// apply() validates and folds an event and returns its undo, so a unit whose commit fails leaves
// the state exactly as before (SPEC §3.1.4). Nothing here does I/O.

import { applySplice, emptyInbox, InboxError, unapplySplice } from './inbox.js'
import { assertLosslessJson, deepFreeze } from './json.js'
import { checkEventShape, LogError } from './catalogue.js'
import { checkSurfaceEvent, project, SurfaceError, type SurfaceNode } from './surface.js'
import type { ContentBlock, EpochHeader, Inbox, Message, SessionEvent, SplicedData, TokenUsage, ToolCallBlock, UserMessage } from './types.js'

export type Undo = () => void

export function isSnapshotMessage(m: unknown): boolean {
  const s = (m as UserMessage | undefined)?.source as Record<string, unknown> | undefined
  return !!s && s.kind === 'plugin' && s.plugin === 'system-prompt' && s.form === 'snapshot'
}

export interface OpenToolCall {
  callId: string
  name: string
  turn: number
  step: number
  /** seq of its logged tool/call, if any */
  callSeq?: number
}

export interface UsageAnchor {
  seq: number
  usage: TokenUsage
  generation: number
  headerSeq: number | undefined
}

export class SessionState {
  nextSeq = 0
  lastTime = 0
  readonly nodes: SurfaceNode[] = []
  replaceGeneration = 0
  readonly inbox: Inbox = emptyInbox()
  lastTurn = 0
  openTurn: number | null = null
  openStep: number | null = null
  /** seq of the open step's step/start (its nodes are never compacted, SPEC §12.5) */
  openStepSeq: number | undefined
  lastStep = 0
  /** seq of the latest assistant/message */
  lastAssistantSeq: number | undefined
  latestHeader: { seq: number; header: EpochHeader } | undefined
  latestContext: Record<string, unknown> | undefined
  /** Text of the retained runtime-context snapshot; undefined: none retained; null: unknown (repair). */
  snapshot: { seq: number; text: string } | null | undefined
  lastSeedSeq: number | undefined
  /** Whether an event other than a splice follows the last session/end-seed (or the start). */
  nonSpliceSinceSeed = false
  /** Open compaction (compaction/start without end, no later end-seed). */
  openCompaction: string | undefined
  /** Tool calls of the open turn's assistant messages, in model order, still lacking a result. */
  readonly openCalls = new Map<string, OpenToolCall>()
  /** Latest assistant/message with usage (SPEC §12.2 anchor). */
  anchor: UsageAnchor | undefined
  /** llm/retry events of the open step: key → count, and the retryId of the running sequence. */
  readonly retries = new Map<string, { count: number; retryId: string }>()

  get headSeq(): number {
    return this.nextSeq - 1
  }

  /** A log holding nothing but splices (SPEC §13.2). */
  get fresh(): boolean {
    return this.lastSeedSeq === undefined && !this.nonSpliceSinceSeed
  }

  /**
   * The nodes' messages in surface order, kept as nodes are appended; a replacement or an undo drops
   * it, and the next request builds it again. A step's request then copies it instead of walking the
   * whole surface.
   */
  private messages: Message[] | undefined

  /** The ordered model history (SPEC §14.1); a fresh array of shared frozen messages. */
  deriveMessages(): Message[] {
    if (!this.messages) {
      this.messages = []
      for (const n of this.nodes) if (n.message) this.messages.push(n.message)
    }
    return this.messages.slice()
  }

  nodeIndex(seq: number): number {
    return this.nodes.findIndex((n) => n.seq === seq)
  }

  /** Validates and folds one event; returns its undo. Throws without changing anything. */
  apply(e: SessionEvent): Undo {
    if (e.seq !== this.nextSeq) throw new LogError(`event seq ${e.seq} does not follow ${this.headSeq}`)
    if (typeof e.time !== 'number' || e.time < this.lastTime) throw new LogError(`event time ${e.time} decreases (previous ${this.lastTime})`)
    assertLosslessJson(e.data, 'data')
    checkEventShape(e.type, e.data)
    deepFreeze(e.data) // messages are deep-frozen (SPEC §3.3); so are stored events (§3.1.5)
    const range = checkSurfaceEvent(this.nodes, e)
    const undos: Undo[] = []
    const set = <K extends keyof this>(key: K, value: this[K]) => {
      const old = this[key]
      this[key] = value
      undos.push(() => {
        this[key] = old
      })
    }
    const d = e.data as Record<string, unknown>

    // type-specific checks and folds, before the surface changes
    switch (e.type) {
      case 'agent/inbox/spliced': {
        const sd = d as unknown as SplicedData
        let removed: UserMessage[]
        try {
          removed = applySplice(this.inbox, sd)
        } catch (err) {
          throw err instanceof InboxError ? err : new InboxError(String(err))
        }
        undos.push(() => unapplySplice(this.inbox, sd, removed))
        break
      }
      case 'turn/start': {
        if (this.openTurn !== null) throw new LogError(`turn/start while turn ${this.openTurn} is open`)
        if (d.turn !== this.lastTurn + 1) throw new LogError(`turn/start ${String(d.turn)} does not follow turn ${this.lastTurn}`)
        set('openTurn', d.turn as number)
        set('lastTurn', d.turn as number)
        set('lastStep', 0)
        const calls = [...this.openCalls.entries()]
        this.openCalls.clear()
        undos.push(() => {
          this.openCalls.clear()
          for (const [k, v] of calls) this.openCalls.set(k, v)
        })
        break
      }
      case 'turn/end':
        if (this.openTurn === null || d.turn !== this.openTurn) throw new LogError(`turn/end ${String(d.turn)} without that open turn`)
        if (this.openStep !== null) throw new LogError(`turn/end while step ${this.openStep} is open`)
        set('openTurn', null)
        break
      case 'step/start':
        if (this.openTurn === null || d.turn !== this.openTurn) throw new LogError('step/start outside its turn')
        if (this.openStep !== null) throw new LogError(`step/start while step ${this.openStep} is open`)
        if (d.step !== this.lastStep + 1) throw new LogError(`step ${String(d.step)} does not follow step ${this.lastStep}`)
        set('openStep', d.step as number)
        set('openStepSeq', e.seq)
        set('lastStep', d.step as number)
        {
          const saved = [...this.retries.entries()]
          this.retries.clear()
          undos.push(() => {
            this.retries.clear()
            for (const [k, v] of saved) this.retries.set(k, v)
          })
        }
        break
      case 'step/end':
        if (this.openStep === null || d.step !== this.openStep || d.turn !== this.openTurn) throw new LogError('step/end without that open step')
        set('openStep', null)
        set('openStepSeq', undefined)
        break
      case 'system/message':
      case 'assistant/message':
      case 'assistant/attempt':
      case 'tool/call':
        if (this.openStep === null || d.turn !== this.openTurn || d.step !== this.openStep) throw new LogError(`${e.type} must carry the open turn and step`)
        break
      case 'request/header':
        set('latestHeader', { seq: e.seq, header: d.header as unknown as EpochHeader })
        break
      case 'request/context':
        set('latestContext', d)
        break
      case 'session/end-seed':
        set('lastSeedSeq', e.seq)
        set('openCompaction', undefined)
        break
      case 'compaction/start':
        set('openCompaction', d.compactionId as string)
        break
      case 'compaction/end':
        if (this.openCompaction === d.compactionId) set('openCompaction', undefined)
        break
      case 'llm/retry': {
        const key = retryKey(d.provider as string, d.policyKey as string)
        const old = this.retries.get(key)
        this.retries.set(key, { count: (old?.count ?? 0) + 1, retryId: d.retryId as string })
        undos.push(() => (old ? this.retries.set(key, old) : this.retries.delete(key)))
        break
      }
      default:
        break
    }
    if (e.type === 'user/message' && e.surfaceOp === 'append' && this.openStep === null) {
      this.rollback(undos)
      throw new LogError('an appended user/message must sit inside an open step')
    }
    if (e.type === 'tool/result' && e.surfaceOp === 'append' && (this.openStep === null || d.turn !== this.openTurn || d.step !== this.openStep)) {
      this.rollback(undos)
      throw new LogError('an appended tool/result must carry the open turn and step')
    }

    // open tool calls (for crash repair, SPEC §13.1)
    if (e.type === 'assistant/message') {
      set('lastAssistantSeq', e.seq)
      const blocks = ((d.message as { content?: ContentBlock[] })?.content ?? []).filter((b): b is ToolCallBlock => b.type === 'tool-call')
      const added: string[] = []
      for (const b of blocks) {
        if (this.openCalls.has(b.id)) continue
        this.openCalls.set(b.id, { callId: b.id, name: b.name, turn: d.turn as number, step: d.step as number })
        added.push(b.id)
      }
      undos.push(() => added.forEach((id) => this.openCalls.delete(id)))
      if (d.usage) set('anchor', { seq: e.seq, usage: d.usage as unknown as TokenUsage, generation: this.replaceGeneration, headerSeq: this.latestHeader?.seq })
    } else if (e.type === 'tool/call') {
      const id = d.callId as string
      const old = this.openCalls.get(id)
      this.openCalls.set(id, { ...(old ?? { callId: id, name: d.name as string, turn: d.turn as number, step: d.step as number }), callSeq: e.seq })
      undos.push(() => (old ? this.openCalls.set(id, old) : this.openCalls.delete(id)))
    } else if (e.type === 'tool/result' && e.surfaceOp === 'append') {
      const id = ((d.message as { source?: { callId?: string } })?.source?.callId) as string
      if (this.openCalls.has(id)) {
        // the undo restores model order, not just membership
        const before = [...this.openCalls.entries()]
        this.openCalls.delete(id)
        undos.push(() => {
          this.openCalls.clear()
          for (const [k, v] of before) this.openCalls.set(k, v)
        })
      }
    }

    // the surface
    if (range || e.surfaceOp === 'append') {
      const node: SurfaceNode = { seq: e.seq, type: e.type, event: e, message: project(e) }
      if (range) {
        const removed = this.nodes.splice(range.a, range.b - range.a + 1, node)
        const gen = this.replaceGeneration
        this.replaceGeneration = gen + 1
        this.messages = undefined
        undos.push(() => {
          this.nodes.splice(range.a, 1, ...removed)
          this.replaceGeneration = gen
          this.messages = undefined
        })
        // shadowing the retained snapshot clears the tracker (SPEC §7.3)
        if (this.snapshot && removed.some((n) => n.seq === this.snapshot!.seq)) set('snapshot', undefined)
      } else {
        this.nodes.push(node)
        if (node.message) this.messages?.push(node.message)
        undos.push(() => {
          this.nodes.pop()
          this.messages = undefined
        })
      }
      if (e.type === 'user/message' && isSnapshotMessage(e.data)) {
        set('snapshot', { seq: e.seq, text: snapshotText(e.data as unknown as UserMessage) })
      }
    }

    if (e.type !== 'agent/inbox/spliced' && e.type !== 'session/end-seed') set('nonSpliceSinceSeed', true)
    if (e.type === 'session/end-seed') set('nonSpliceSinceSeed', false)
    set('nextSeq', e.seq + 1)
    set('lastTime', e.time)
    return () => this.rollback(undos)
  }

  private rollback(undos: Undo[]): void {
    for (let i = undos.length - 1; i >= 0; i--) undos[i]()
  }

  /** Folds a whole log; throws on the first event that does not fold (a fatal load error). */
  static fromEvents(events: Iterable<SessionEvent>): SessionState {
    const s = new SessionState()
    for (const e of events) s.apply(e)
    s.restoreSnapshotTracker()
    return s
  }

  /** SPEC §7.3 on load: the newest surviving snapshot; a malformed one counts as unknown. */
  restoreSnapshotTracker(): void {
    for (let i = this.nodes.length - 1; i >= 0; i--) {
      const n = this.nodes[i]
      if (n.type === 'user/message' && isSnapshotMessage(n.event.data)) {
        const m = n.event.data as unknown as UserMessage
        const ok = Array.isArray(m.content) && m.content.length > 0 && m.content.every((b) => b.type === 'text')
        this.snapshot = ok ? { seq: n.seq, text: snapshotText(m) } : null
        return
      }
    }
    this.snapshot = undefined
  }
}

export const retryKey = (provider: string, policyKey: string) => `${provider}\u0000${policyKey}`

export function snapshotText(m: UserMessage): string {
  return (m.content ?? []).map((b) => (b.type === 'text' ? b.text : '')).join('')
}

export { SurfaceError, InboxError, LogError }
