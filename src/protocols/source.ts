// The live part of the protocol layer: for one session, its durable events after a seq and then its
// live frames (agent/assistant-stream start, chunk, end and the snapshot of the attempt in flight), in
// order — the very subscription the native SSE stream runs (http/feed.ts subscribe, bus/feed.ts), with
// its backpressure, slow-consumer cut, pings and close on disconnect. A protocol route hands the
// events and frames to a SpanFold and writes what its renderer makes of the ops.
//
// Across processes: the feed follows commits through the bus's doorbells and live frames through its
// live channel, so a span driven by another process (or taken over after a crash) is followed here too;
// waitForSpan is the blocking mode's wait built on the same feed.

import type { FastifyRequest } from 'fastify'
import type { FeedEvent, LiveFrame } from '../bus/index.js'
import type { SessionEvent } from '../session/index.js'
import { readEvents } from '../store/index.js'
import { kindsOf, SpanFold, type SpanFoldOptions, type ToolSpecLike } from './span.js'
import { subscribe, type HttpDeps, type Subscription, type Transport } from '../http/index.js'

/** What a follower of a session gets, in order. */
export interface SessionSink {
  /** a durable event (seq ascending, none skipped or repeated) */
  event(e: SessionEvent): void
  /** a live frame (API.md §6): stream/ready, agent/status, the snapshot, then live frames */
  frame(f: LiveFrame): void
}

/** The connection a protocol stream writes to: what subscribe() needs besides the frames. */
export interface Connection {
  /** what the connection holds that its client has not read */
  buffered(): number
  /** a keep-alive in the protocol's own form */
  ping(): void
  /** closes the connection; `slow-consumer` when the client did not read fast enough */
  end(reason?: 'slow-consumer' | 'error'): void
}

const parse = (e: FeedEvent): SessionEvent => JSON.parse(e.json) as SessionEvent

/**
 * Follows the session of `req.session` from seq `after` over a connection, as the native SSE stream
 * does (same subscription, same limits). The sink gets parsed events and frames; what it writes to the
 * connection is its own. Call start() to send the backlog and go live; close() (or the connection's
 * close) ends it. The caller adds `subscription.drained` to the connection's drain.
 */
export function followSession(deps: HttpDeps, req: FastifyRequest, after: number, sink: SessionSink, conn: Connection, open: Set<Subscription>): Subscription {
  // subscribe() turns each event and frame into text and then writes it: the text is what the
  // buffer limit counts, the object goes to the sink in the same order
  const queue: Array<SessionEvent | LiveFrame> = []
  const t: Transport = {
    durable: (e) => {
      queue.push(parse(e))
      return e.json
    },
    live: (f) => {
      queue.push(f)
      return ''
    },
    write: () => {
      const x = queue.shift()
      if (!x) return
      if ('seq' in x) sink.event(x)
      else sink.frame(x)
    },
    buffered: () => conn.buffered(),
    ping: () => conn.ping(),
    end: (reason) => {
      queue.length = 0
      conn.end(reason)
    },
  }
  return subscribe(deps, req, after, t, open)
}

/**
 * Follows a session without a connection (the blocking mode's wait, API.md §17.1): the durable events
 * after `after`, then the in-flight snapshot and live frames, through the same feed.
 */
export function watchSession(deps: Pick<HttpDeps, 'feeds' | 'snapshot'>, key: string, after: number, sink: SessionSink & { fail?(e: Error): void }): { start(): Promise<void>; close(): void } {
  const sub = deps.feeds.open(key, after, {
    durable: (e) => sink.event(parse(e)),
    live: (f) => sink.frame(f),
    ready: () => {},
    writable: () => true,
    fail: (e) => sink.fail?.(e),
  })
  sub.onReady = () => {
    const snap = deps.snapshot(key)
    if (snap) sink.frame(snap)
  }
  return { start: () => sub.start(), close: () => sub.close() }
}

/**
 * Resolves with the fold once span `id` has ended (or `until` says enough), following the session in
 * any process; rejects when `signal` aborts or the feed fails. Without `fold` it folds the session from
 * its start; with one (caught up to some seq, e.g. from SpanFolds) it goes on from that fold's head.
 */
export function waitForSpan(deps: Pick<HttpDeps, 'feeds' | 'snapshot'>, key: string, id: string, opts: Omit<SpanFoldOptions, 'onOp'> & { signal?: AbortSignal; until?: (fold: SpanFold) => boolean; fold?: SpanFold }): Promise<SpanFold> {
  return new Promise((resolve, reject) => {
    const fold = opts.fold ?? new SpanFold(opts)
    let done = false
    let w: { start(): Promise<void>; close(): void } | undefined
    const finish = (err?: Error) => {
      if (done) return
      done = true
      w?.close()
      opts.signal?.removeEventListener('abort', onAbort)
      if (err) reject(err)
      else resolve(fold)
    }
    const ended = () => fold.get(id)?.ended === true || opts.until?.(fold) === true
    const onAbort = () => finish(new Error('aborted'))
    if (ended()) return finish()
    if (opts.signal?.aborted) return finish(new Error('aborted'))
    w = watchSession(deps, key, fold.head, {
      event: (e) => {
        fold.event(e)
        if (ended()) finish()
      },
      frame: (f) => fold.frame(f.event, f.data),
      fail: (e) => finish(e),
    })
    opts.signal?.addEventListener('abort', onAbort, { once: true })
    void w.start().then(() => {
      if (ended()) finish()
    }, (e: Error) => finish(e))
  })
}

/**
 * The span folds of recently used sessions in this process, each caught up with the log on use: a
 * request reads only the events committed since the last one instead of the whole log. A fold is a pure
 * function of the events fed in order, so sharing one is safe; a session whose tool settings changed
 * (the fold's toolKind) gets a fresh one. Streams keep their own folds: they need every op from the start.
 */
export class SpanFolds {
  private readonly folds = new Map<string, { fold: SpanFold; sig: string }>()

  constructor(private readonly deps: Pick<HttpDeps, 'db' | 'feeds' | 'snapshot'>, private readonly max = 256) {}


  private entry(row: { key: string; tools: readonly unknown[] }): SpanFold {
    const sig = JSON.stringify(row.tools)
    let e = this.folds.get(row.key)
    if (e && e.sig !== sig) e = undefined
    if (e) this.folds.delete(row.key)
    else e = { fold: new SpanFold({ toolKind: kindsOf(row.tools as ToolSpecLike[]) }), sig }
    // most recently used last; the least recently used goes first
    this.folds.set(row.key, e)
    if (this.folds.size > this.max) this.folds.delete(this.folds.keys().next().value!)
    return e.fold
  }

  /** The session's fold, caught up with every event committed when it is read. */
  async current(row: { key: string; tools: readonly unknown[] }): Promise<SpanFold> {
    const fold = this.entry(row)
    for (;;) {
      const events = await readEvents(this.deps.db, row.key, fold.head, PAGE)
      for (const e of events) fold.event(e)
      if (events.length < PAGE) return fold
    }
  }

  /**
   * Follows the session on the bus from now on, its fold caught up to the row's head (`nextSeq - 1`,
   * read once only when the cached fold is behind it): for a caller that is about to write input and wait
   * for the span it opens. Commits made in this process hand their events over with their notice, so a
   * session driven here is followed without a read; a remote commit's doorbell, or a dropped channel,
   * reads what the fold lacks. `until` resolves once span `id` has ended; close() ends the following.
   */
  async follow(row: { key: string; tools: readonly unknown[]; nextSeq: number }): Promise<{ fold: SpanFold; until(id: string, signal?: AbortSignal): Promise<SpanFold>; close(): void }> {
    const fold = this.entry(row)
    const waiters = new Set<() => void>()
    const changed = () => {
      for (const w of [...waiters]) w()
    }
    let reading: Promise<void> | undefined
    let again = false
    let failed: Error | undefined
    const catchUp = (): Promise<void> => {
      if (reading) {
        again = true
        return reading
      }
      reading = (async () => {
        try {
          do {
            again = false
            for (;;) {
              const events = await readEvents(this.deps.db, row.key, fold.head, PAGE)
              for (const e of events) fold.event(e)
              if (events.length < PAGE) break
            }
          } while (again)
        } catch (e) {
          failed = e as Error
        } finally {
          reading = undefined
          changed()
        }
      })()
      return reading
    }
    const off = this.deps.feeds.live.subscribe(row.key, {
      commit: (n) => {
        const events = n.events
        if (events?.length && !reading && events[0].seq <= fold.head + 1) {
          for (const e of events) fold.event(e)
          changed()
        } else if (n.seq > fold.head) void catchUp()
      },
      live: (f) => fold.frame(f.event, f.data),
      reset: () => void catchUp(),
    })
    if (fold.head < row.nextSeq - 1) await catchUp()
    return {
      fold,
      until: (id, signal) =>
        new Promise<SpanFold>((resolve, reject) => {
          const check = () => {
            if (failed) return done(failed)
            if (signal?.aborted) return done(new Error('aborted'))
            if (fold.get(id)?.ended) done()
          }
          const done = (err?: Error) => {
            waiters.delete(check)
            signal?.removeEventListener('abort', check)
            if (err) reject(err)
            else resolve(fold)
          }
          waiters.add(check)
          signal?.addEventListener('abort', check, { once: true })
          check()
        }),
      close: off,
    }
  }

  /** Resolves with the session's fold once span `id` has ended, followed in any process (waitForSpan). */
  async until(row: { key: string; tools: readonly unknown[] }, id: string, signal?: AbortSignal): Promise<SpanFold> {
    // the subscription reads what the fold lacks itself (from its head): no separate catch-up read
    const fold = this.entry(row)
    return waitForSpan(this.deps, row.key, id, { toolKind: kindsOf(row.tools as ToolSpecLike[]), signal, fold })
  }
}

const PAGE = 2000
