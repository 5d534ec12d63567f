// One UI message stream (API.md §17.2): the session followed from its start (../source.ts, the native
// stream's subscription) through the span fold and the UI renderer, cut to the span a request is about:
// - `span`: a span by id — the one a user message opened (its delivery's seq names it, a resent message
//   names the same one), or the one an answer to a wait opens — from its start to its end;
// - `open`: the span open when the stream caught up with the log, replayed from the start of its turn
//   (useChat's resume replaces the message it resumes), unless nothing is open or the turn waits (204).
// Nothing is kept beyond the connection.

import type { FastifyRequest } from 'fastify'
import type { SessionRow } from '../store/index.js'
import { followSession, type Connection } from './source.js'
import { kindsOf, SpanFold } from './span.js'
import { endParts, serverRun, uiMessageId, UiRenderer, type UiChunk } from './ui-render.js'
import type { HttpDeps, Subscription } from '../http/index.js'

export type Selection = { kind: 'span'; spanId: string } | { kind: 'open' }

export interface UiStreamHandle {
  /** resolves once there is something to send (true), or when `open` found nothing to stream (false: 204) */
  ready: Promise<boolean>
  close(): void
}

/**
 * Opens a stream; `emit` gets each part of the selected span in order (the first `start`, the last
 * `finish`, `abort` or `error`), `end` once after the last, or when the connection is cut (`error`).
 */
export function openUiStream(deps: HttpDeps, req: FastifyRequest, open: Set<Subscription>, row: SessionRow, selection: Selection, conn: Pick<Connection, 'buffered' | 'ping'>, emit: (c: UiChunk) => void, end: (error?: string) => void): UiStreamHandle {
  let target: string | null = selection.kind === 'span' ? selection.spanId : null
  let root: string | null = null
  let done = false
  let resolveReady!: (v: boolean) => void
  const ready = new Promise<boolean>((r) => (resolveReady = r))

  const begin = (r: string, replay: readonly UiChunk[]) => {
    root = r
    resolveReady(true)
    emit({ type: 'start', messageId: uiMessageId(r) })
    for (const c of replay) emit(c)
  }
  const finish = (chunks: UiChunk[]) => {
    if (done) return
    done = true
    for (const c of chunks) emit(c)
    sub.close()
    end()
  }
  /** nothing to stream (204): the subscription closes, and `end` is not called */
  const quit = () => {
    done = true
    sub.close()
    resolveReady(false)
  }

  const renderer = new UiRenderer({
    content(r, chunk, span) {
      if (done) return
      if (root === null && span.id === target) begin(r, [])
      if (root !== null && r === root && (selection.kind === 'open' || span.id === target)) emit(chunk)
    },
    spanEnd(r, span) {
      if (done) return
      if (root === null && span.id === target && span.status !== 'queued') begin(r, [])
      if (span.id === target) finish(endParts(span))
    },
  }, serverRun(row.tools))
  const fold = new SpanFold({
    toolKind: kindsOf(row.tools as never),
    onOp: (op) => {
      // the span starts when it is announced in progress, or when its queued input is claimed
      if (!done && root === null && op.span.id === target && (op.op === 'span-start' || (op.op === 'span-open' && op.span.status !== 'queued'))) begin(renderer.rootOf(op.span), [])
      renderer.op(op)
    },
  })
  req.session = row
  const sub = followSession(
    deps,
    req,
    -1,
    {
      event: (e) => {
        fold.event(e)
        const span = e.type === 'step/start' ? fold.open : undefined
        if (span && span.status === 'in_progress') renderer.step(span)
      },
      frame: (f) => {
        if (f.event === 'stream/ready' && selection.kind === 'open' && !done) {
          // caught up: the span open now, if any and not waiting, from the start of its turn
          const span = fold.open
          if (!span || fold.waiting) return quit()
          target = span.id
          const r = renderer.rootOf(span)
          return begin(r, renderer.parts.get(r) ?? [])
        }
        fold.frame(f.event, f.data)
      },
    },
    {
      buffered: conn.buffered,
      ping: conn.ping,
      end: (reason) => {
        if (done) return
        done = true
        resolveReady(true)
        end(reason ?? 'closed')
      },
    },
    open,
  )
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
