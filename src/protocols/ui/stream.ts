// One UI message stream (API.md §17.2): the session's feed (its durable events from the start, then
// live frames, src/bus/feed.ts) through the renderer, cut to the turn a request is about:
// - `message`: the turn that admitted a user message, from its start (a resent message gets the same);
// - `answer`: the span opened by answering pending calls, from the first of their results;
// - `open`: the turn open when the stream caught up with the log, from its start (useChat's resume
//   replaces the message it resumes, so the whole turn is replayed), unless it waits.
// The stream ends with the turn, or where the turn waits on a `client` call or an approval and nothing
// else runs: its open calls all wait in the pending table, the side rows written in the same unit as
// their `tool/call` events (store/pending.ts). Nothing is kept beyond the connection.

import type { FeedEvent, LiveFrame } from '../../bus/index.js'
import { listPending } from '../../store/index.js'
import type { HttpDeps } from '../../http/deps.js'
import type { SessionRow } from '../../store/index.js'
import { turnMessageId, UiRenderer, type UiChunk } from './render.js'

export type Selection = { kind: 'message'; messageId: string } | { kind: 'answer'; callIds: string[] } | { kind: 'open' }

/** Whether a session's tool runs on the server (not a `client` tool). */
export function serverTools(row: SessionRow): (name: string) => boolean {
  const client = new Set(row.tools.filter((t: any) => t?.execution?.type === 'client').map((t: any) => t.name as string))
  return (name) => !client.has(name)
}

export interface UiStreamHandle {
  /** resolves once the backlog is rendered: false when `open` found nothing to stream (204) */
  ready: Promise<boolean>
  close(): void
}

/**
 * Opens a stream; `emit` gets each chunk of the selected span in order (the first is `start`, the last
 * `finish`, `abort` or `error`), `end` once after the last, or when the feed fails.
 */
export function openUiStream(deps: Pick<HttpDeps, 'feeds' | 'db' | 'snapshot'>, row: SessionRow, selection: Selection, emit: (c: UiChunk) => void, end: (error?: Error) => void): UiStreamHandle {
  let target: number | null = null
  let active = false
  let done = false
  let resolveReady!: (v: boolean) => void
  const ready = new Promise<boolean>((r) => (resolveReady = r))

  const finish = (chunks: UiChunk[]) => {
    if (done) return
    for (const c of chunks) emit(c)
    done = true
    sub.close()
    end()
  }
  /** nothing to stream (204): the feed closes, and `end` is not called */
  const quit = () => {
    done = true
    sub.close()
    resolveReady(false)
  }
  const begin = (turn: number, replay: readonly UiChunk[]) => {
    target = turn
    active = true
    // a turn found in the backlog may end before the feed goes live: the answer starts now
    resolveReady(true)
    emit({ type: 'start', messageId: turnMessageId(turn) })
    for (const c of replay) emit(c)
  }

  /** After a tool/call (or on catching up): does the target turn now wait on someone? */
  let checking: Promise<void> = Promise.resolve()
  const checkWait = () => {
    const calls = [...r.openCalls]
    if (!calls.length || r.turn === null) return Promise.resolve(false)
    return listPending(deps.db, row.key).then((rows) => {
      const waiting = new Map(rows.map((p) => [p.callId, p.kind]))
      if (!calls.every((c) => waiting.has(c))) return false
      // the turn may have moved on while the database answered
      if (!calls.every((c) => r.openCalls.has(c))) return false
      const approvals = calls.filter((c) => waiting.get(c) === 'approval')
      return approvals
    }).then((approvals) => {
      if (approvals === false) return false
      if (active && !done) finish([...approvals.map((c) => ({ type: 'tool-approval-request', approvalId: c, toolCallId: c })), { type: 'finish-step' }, { type: 'finish', finishReason: 'tool-calls' }])
      return true
    })
  }

  const r = new UiRenderer(serverTools(row), {
    userMessage(turn, m) {
      if (!active && selection.kind === 'message' && m.id === selection.messageId) begin(turn, r.parts)
    },
    result(turn, callId) {
      if (!active && selection.kind === 'answer' && selection.callIds.includes(callId)) begin(turn, [])
    },
    content(turn, chunk) {
      if (active && !done && turn === target) emit(chunk)
    },
    called(turn) {
      if (active && turn === target) checking = checking.then(() => checkWait().then(() => undefined))
    },
    turnEnd(turn, reason) {
      if (!active || turn !== target) return
      const k = reason.kind
      if (k === 'completed') finish([{ type: 'finish', finishReason: 'stop' }])
      else if (k === 'max-tokens') finish([{ type: 'finish', finishReason: 'length' }])
      else if (k === 'aborted') finish([{ type: 'abort', reason: 'cancelled' }])
      else finish([{ type: 'error', errorText: errorText(reason) }])
    },
  })

  // feed items are rendered one at a time, after any wait check they caused
  const sink = {
    durable: (e: FeedEvent) => {
      if (done) return
      const ev = JSON.parse(e.json)
      checking = checking.then(() => {
        if (!done) r.durable(ev)
      })
    },
    live: (f: LiveFrame) => {
      if (done) return
      checking = checking.then(() => {
        if (!done) r.live(f as { event: string; data: any })
      })
    },
    ready: async () => {
      await checking
    },
    writable: () => true,
    fail: (err: Error) => {
      if (done) return
      done = true
      resolveReady(false)
      end(err)
    },
  }
  const sub = deps.feeds.open(row.key, -1, sink)
  sub.onReady = () => {
    const snap = deps.snapshot(row.key)
    if (snap) r.live(snap as { event: string; data: any })
    if (selection.kind !== 'open') return resolveReady(true)
    if (r.turn === null) return quit()
    const turn = r.turn
    checking = checking.then(() =>
      checkWait().then((waits) => {
        if (waits || done) quit()
        else {
          resolveReady(true)
          begin(turn, r.parts)
        }
      }),
    )
  }
  void sub.start()
  return {
    ready,
    close: () => {
      if (done) return
      done = true
      sub.close()
    },
  }
}

function errorText(reason: { kind: string; [k: string]: unknown }): string {
  const e = reason.error as { code?: string; message?: string } | undefined
  if (reason.kind === 'blocked') return `the turn was blocked${typeof reason.reason === 'string' ? `: ${reason.reason}` : ''}`
  return e?.message ?? e?.code ?? `the turn ended: ${reason.kind}`
}
