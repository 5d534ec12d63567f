// Waiting for a span (API.md §17 intro) for a bounded time, as the agent-facing protocols do (MCP's
// send_message, A2A's blocking SendMessage): the core's fold over the session's feed from its start,
// in any process, answered with where the span stands when it ended or when the time ran out.

import type { SessionRow } from '../store/index.js'
import type { Span, ToolCallItem } from './items.js'
import { kindsOf, SpanFold, type ToolSpecLike } from './span.js'
import { watchSession } from './source.js'
import type { HttpDeps } from '../http/index.js'

/** The fold options of a session: who answers each of its tools (span.ts kindsOf). */
export const foldOptionsOf = (row: Pick<SessionRow, 'tools'>) => ({ toolKind: kindsOf(row.tools as unknown as ToolSpecLike[]) })

/**
 * Follows the session until span `id` ends, `ms` pass (counted once the log so far is folded) or
 * `signal` aborts, and answers the fold as it stands then (the span may be missing from it only when the id is not one of the session's).
 */
export function waitSpan(deps: Pick<HttpDeps, 'feeds' | 'snapshot'>, row: SessionRow, id: string, ms: number, signal?: AbortSignal): Promise<SpanFold> {
  return new Promise((resolve, reject) => {
    const fold = new SpanFold(foldOptionsOf(row))
    let done = false
    let timer: NodeJS.Timeout | undefined
    const finish = (err?: Error) => {
      if (done) return
      done = true
      clearTimeout(timer)
      w.close()
      signal?.removeEventListener('abort', onAbort)
      if (err) reject(err)
      else resolve(fold)
    }
    const check = () => {
      if (fold.get(id)?.ended) finish()
    }
    const onAbort = () => finish()
    const w = watchSession(deps, row.key, -1, {
      event: (e) => {
        fold.event(e)
        check()
      },
      frame: (f) => fold.frame(f.event, f.data),
      fail: (e) => finish(e),
    })
    if (signal?.aborted) return finish()
    signal?.addEventListener('abort', onAbort, { once: true })
    // the time runs from when the log so far is folded: even a wait of 0 answers the span as it stands
    void w.start().then(
      () => {
        check()
        if (!done) timer = setTimeout(() => finish(), Math.max(0, ms))
      },
      (e: Error) => finish(e),
    )
  })
}

/** The text of the span's last text item that has any: its answer. */
export function finalText(span: Span): string | undefined {
  for (let i = span.items.length - 1; i >= 0; i--) {
    const item = span.items[i]
    if (item.type === 'text' && item.text) return item.text
  }
  return undefined
}

/** The calls an ended span waits on, with their arguments (the tool-call items that made them). */
export function pendingOf(span: Span): Array<{ callId: string; name: string; kind: 'client' | 'approval'; arguments: string }> {
  return span.waits.map((w) => {
    const item = span.items.find((i): i is ToolCallItem => i.type === 'tool-call' && i.callId === w.callId)
    return { callId: w.callId, name: w.name, kind: w.kind, arguments: item?.arguments ?? '' }
  })
}
