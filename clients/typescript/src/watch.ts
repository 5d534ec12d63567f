// The transcript view a UI renders, folded from a session's stream: durable events give the messages,
// the inbox, tool calls waiting for a result and turn boundaries; live frames give the status and the
// partial answer while it streams (SPEC §9.2: transient text is dropped when the settlement arrives,
// and rebuilt from the snapshot after a reconnect or a new loop instance). `reduceTranscript` is the
// pure fold; `watchSession` runs it over `client.stream` and asks GET …/pending who a call waits for.

import type { AgentdClient } from './client.js'
import { chunkCount } from './stream.js'
import type { AssistantStreamRecord, Inbox, LlmFailure, Message, PendingCall, SessionEvent, StreamChunk, StreamFrame, TurnEndReason, UserMessage } from './types.js'
import { isEvent } from './types.js'

export interface TranscriptEntry {
  seq: number
  role: 'system' | 'user' | 'assistant' | 'tool'
  message: Message
  /** the turn it belongs to; undefined for messages outside turns (a seeded log) */
  turn?: number
  /** a cancelled answer's visible prefix */
  interrupted?: boolean
  /** seq of the surface event that replaced it (compaction, pruning) */
  shadowedBy?: number
}

export interface PartialToolCall {
  index: number
  id: string
  name: string
  arguments: string
}

export interface PartialAnswer {
  attemptId: string
  turn: number
  step: number
  text: string
  reasoning: string
  toolCalls: PartialToolCall[]
  /** index of the next chunk expected */
  nextIndex: number
  /** a chunk went missing; the durable message will replace this anyway */
  gap: boolean
}

export interface ToolCallView {
  seq: number
  callId: string
  name: string
  /** the call's JSON text */
  arguments: string
  turn: number
  step: number
  /** who it waits for, from GET …/pending; undefined while the server runs it (or not yet known) */
  waitingFor?: 'client' | 'approval'
}

export interface TranscriptView {
  sessionId: string
  /** past the backlog on the current connection */
  live: boolean
  status?: 'idle' | 'running'
  /** seq of the last durable event folded */
  headSeq: number
  messages: TranscriptEntry[]
  partial: PartialAnswer | null
  /** tool calls logged without a result yet */
  toolCalls: ToolCallView[]
  inbox: Inbox
  /** the open turn, or null between turns */
  turn: number | null
  lastTurn: { turn: number; reason: TurnEndReason } | null
  errors: Array<{ turn: number; step: number; error: LlmFailure }>
  /** reconnects so far */
  reconnects: number
}

export function emptyTranscript(sessionId: string): TranscriptView {
  return { sessionId, live: false, headSeq: -1, messages: [], partial: null, toolCalls: [], inbox: { nextTurn: [], nextStep: [] }, turn: null, lastTurn: null, errors: [], reconnects: 0 }
}

const ROLE: Record<string, TranscriptEntry['role']> = { 'system/message': 'system', 'user/message': 'user', 'assistant/message': 'assistant', 'tool/result': 'tool' }

/** The view after one frame. Returns `v` itself when nothing changed. */
export function reduceTranscript(v: TranscriptView, f: StreamFrame): TranscriptView {
  switch (f.event) {
    case 'session/event':
      return foldEvent(v, f.data)
    case 'stream/ready':
      return { ...v, live: true }
    case 'agent/status':
      return f.data.status === v.status ? v : { ...v, status: f.data.status }
    case 'agent/session-start':
      return v.partial ? { ...v, partial: null } : v
    case 'agent/error':
      return { ...v, errors: [...v.errors, f.data] }
    case 'client/reconnecting':
      return { ...v, live: false, partial: null, reconnects: v.reconnects + 1 }
    case 'agent/assistant-stream': {
      const a = f.data
      if (a.kind === 'start') return { ...v, partial: { attemptId: a.attemptId, turn: a.turn, step: a.step, text: '', reasoning: '', toolCalls: [], nextIndex: 0, gap: false } }
      if (a.kind === 'snapshot') {
        let p: PartialAnswer = { attemptId: a.attemptId, turn: a.turn, step: a.step, text: '', reasoning: '', toolCalls: [], nextIndex: 0, gap: false }
        for (const c of expandRecords(a.stream)) p = applyChunk(p, c)
        return { ...v, partial: { ...p, nextIndex: chunkCount(a.stream) } }
      }
      if (a.kind === 'chunk') {
        const p = v.partial
        if (!p || p.attemptId !== a.attemptId) return v // its start or snapshot was not seen: wait for the settlement
        const next = applyChunk(p, a.chunk)
        return { ...v, partial: { ...next, nextIndex: a.index + 1, gap: p.gap || a.index !== p.nextIndex } }
      }
      return v.partial?.attemptId === a.attemptId ? { ...v, partial: null } : v
    }
    default:
      return v
  }
}

function foldEvent(v: TranscriptView, e: SessionEvent): TranscriptView {
  const out: TranscriptView = { ...v, headSeq: e.seq }
  if (isEvent(e, 'turn/start')) out.turn = e.data.turn
  else if (isEvent(e, 'turn/end')) {
    out.turn = null
    out.lastTurn = { turn: e.data.turn, reason: e.data.reason }
    out.partial = null
    out.toolCalls = v.toolCalls.filter((c) => c.turn !== e.data.turn)
  } else if (isEvent(e, 'agent/inbox/spliced')) {
    const key = e.data.target === 'next-turn' ? 'nextTurn' : 'nextStep'
    const list: UserMessage[] = [...v.inbox[key]]
    list.splice(e.data.start, e.data.removedCount ?? 0, ...e.data.inserted)
    out.inbox = { ...v.inbox, [key]: list }
  } else if (isEvent(e, 'tool/call')) {
    out.toolCalls = [...v.toolCalls, { seq: e.seq, callId: e.data.callId, name: e.data.name, arguments: e.data.arguments, turn: e.data.turn, step: e.data.step }]
  }
  const role = ROLE[e.type]
  if (role) {
    const d = e.data as { message?: Message; turn?: number; interrupted?: true }
    const message = (e.type === 'user/message' ? e.data : d.message) as Message
    const entry: TranscriptEntry = { seq: e.seq, role, message, turn: e.type === 'user/message' ? (v.turn ?? undefined) : d.turn }
    if (d.interrupted) entry.interrupted = true
    if (e.type === 'tool/result') {
      const callId = (message as { source: { callId?: string } }).source.callId
      out.toolCalls = out.toolCalls.filter((c) => c.callId !== callId)
    }
    out.messages = placeOnSurface(v.messages, entry, e)
  }
  return out
}

/** Appends, or puts a replacing event where the range it shadows begins (SPEC §3.2.2). */
function placeOnSurface(list: TranscriptEntry[], entry: TranscriptEntry, e: SessionEvent): TranscriptEntry[] {
  const op = e.surfaceOp
  if (!op || op === 'append') return [...list, entry]
  const shadowed = new Set(e.sourceEventSeqs ?? [])
  const at = list.findIndex((m) => m.seq === op.start || shadowed.has(m.seq))
  const next = list.map((m) => (shadowed.has(m.seq) || (m.seq >= op.start && m.seq <= op.end && !m.shadowedBy) ? { ...m, shadowedBy: e.seq } : m))
  next.splice(at < 0 ? next.length : at, 0, entry)
  return next
}

/** The timed chunks a compact stream stands for (SPEC §9.4), without their times. */
export function expandRecords(records: AssistantStreamRecord[]): StreamChunk[] {
  const out: StreamChunk[] = []
  for (const r of records) {
    if (r.type === 'chunk') out.push(r.chunk)
    else if (r.type === 'tool-call-chunks') r.args.forEach((a, i) => out.push({ type: 'tool-call-delta', index: r.index, id: r.id, ...(i === 0 && r.name !== undefined ? { name: r.name } : {}), argumentsDelta: a }))
    else for (const text of r.texts) out.push({ type: r.type === 'text-chunks' ? 'text-delta' : 'reasoning-delta', index: r.index, text })
  }
  return out
}

function applyChunk(p: PartialAnswer, c: StreamChunk): PartialAnswer {
  switch (c.type) {
    case 'text-delta':
      return { ...p, text: p.text + c.text }
    case 'reasoning-delta':
      return { ...p, reasoning: p.reasoning + c.text }
    case 'tool-call-delta': {
      const calls = [...p.toolCalls]
      const i = calls.findIndex((t) => t.index === c.index)
      if (i < 0) calls.push({ index: c.index, id: c.id, name: c.name ?? '', arguments: c.argumentsDelta })
      else calls[i] = { ...calls[i]!, name: calls[i]!.name || (c.name ?? ''), arguments: calls[i]!.arguments + c.argumentsDelta }
      return { ...p, toolCalls: calls }
    }
    default:
      return p
  }
}

/** Marks which logged calls wait for a client or an approver, from GET …/pending. */
export function withPending(v: TranscriptView, pending: PendingCall[]): TranscriptView {
  const kind = new Map(pending.map((p) => [p.callId, p.kind]))
  let changed = false
  const toolCalls = v.toolCalls.map((c) => {
    const w = kind.get(c.callId)
    if (w === c.waitingFor) return c
    changed = true
    return { ...c, waitingFor: w }
  })
  return changed ? { ...v, toolCalls } : v
}

// ---- the live view ----

export interface WatchOptions {
  signal?: AbortSignal
  /** how often to ask GET …/pending while calls wait (default 1000 ms); also asked on every new call */
  pendingPollMs?: number
}

export interface Watch extends AsyncIterable<TranscriptView> {
  /** the current view */
  readonly view: TranscriptView
  /** resolves with the view once the backlog is folded and the status known */
  readonly ready: Promise<TranscriptView>
  /** resolves when the watch ends: closed, aborted, or (rejecting) a fatal stream error */
  readonly done: Promise<void>
  /** called after every change once live; returns the unsubscribe function */
  subscribe(fn: (view: TranscriptView, frame: StreamFrame | null) => void): () => void
  /** the first view (now or later) for which `pred` holds */
  until(pred: (view: TranscriptView) => boolean, o?: { signal?: AbortSignal }): Promise<TranscriptView>
  close(): void
}

export function watchSession(client: AgentdClient, sessionId: string, o: WatchOptions = {}): Watch {
  const stop = new AbortController()
  o.signal?.addEventListener('abort', () => stop.abort(), { once: true })
  if (o.signal?.aborted) stop.abort()
  let view = emptyTranscript(sessionId)
  const listeners = new Set<(v: TranscriptView, f: StreamFrame | null) => void>()
  let readyResolve!: (v: TranscriptView) => void
  let readyReject!: (e: unknown) => void
  const ready = new Promise<TranscriptView>((res, rej) => ((readyResolve = res), (readyReject = rej)))
  ready.catch(() => {})
  let wasReady = false

  const publish = (next: TranscriptView, f: StreamFrame | null) => {
    if (next === view) return
    view = next
    if (!wasReady) return
    for (const l of [...listeners]) {
      try {
        l(view, f)
      } catch {
        // a listener's failure is its own
      }
    }
  }

  // who each waiting call waits for: asked when a call appears, then polled while any is unknown
  let asking = false
  let askAgain = false
  const askPending = async () => {
    if (asking) return void (askAgain = true)
    asking = true
    try {
      do {
        askAgain = false
        const p = await client.pending(sessionId, { signal: stop.signal }).catch(() => undefined)
        if (p) publish(withPending(view, p), null)
      } while (askAgain && !stop.signal.aborted)
    } finally {
      asking = false
    }
  }
  const poll = setInterval(() => {
    if (wasReady && view.toolCalls.length) void askPending()
  }, o.pendingPollMs ?? 1000)

  const done = (async () => {
    const s = client.stream(sessionId, { signal: stop.signal })
    try {
      for await (const f of s) {
        const before = view.toolCalls.length
        publish(reduceTranscript(view, f), f)
        // ready once the connect preamble is in: stream/ready, then the current status (API.md §6)
        if (f.event === 'agent/status' && view.live && !wasReady) {
          wasReady = true
          readyResolve(view)
          for (const l of [...listeners]) l(view, f)
        }
        if (wasReady && (view.toolCalls.length > before || (f.event === 'agent/status' && view.toolCalls.length))) void askPending()
      }
    } catch (e) {
      readyReject(e)
      throw e
    } finally {
      clearInterval(poll)
      readyReject(new Error('the watch ended before the stream was ready'))
      for (const l of [...listeners]) l(view, null)
    }
  })()
  done.catch(() => {})

  return {
    get view() {
      return view
    },
    ready,
    done,
    subscribe(fn) {
      listeners.add(fn)
      return () => listeners.delete(fn)
    },
    until(pred, uo = {}) {
      return new Promise((resolve, reject) => {
        if (wasReady && pred(view)) return resolve(view)
        const off = this.subscribe((v, f) => {
          if (wasReady && pred(v)) {
            off()
            resolve(v)
          } else if (f === null && stop.signal.aborted) {
            off()
            reject(new Error('the watch was closed'))
          }
        })
        done.catch((e) => (off(), reject(e)))
        uo.signal?.addEventListener('abort', () => (off(), reject(uo.signal!.reason)), { once: true })
      })
    },
    close() {
      stop.abort()
    },
    async *[Symbol.asyncIterator]() {
      await ready
      let seen: TranscriptView | undefined
      let wake: (() => void) | undefined
      const off = this.subscribe(() => wake?.())
      try {
        while (!stop.signal.aborted) {
          if (view !== seen) {
            seen = view
            yield view
            continue
          }
          const ended = await Promise.race([new Promise<boolean>((r) => (wake = () => r(false))), done.then(() => true, () => true)])
          if (ended && view === seen) return
        }
      } finally {
        off()
      }
    },
  }
}
