// One subscription to a session for SSE and WebSocket alike (API.md §6): the backlog, stream/ready,
// agent/status, the in-flight snapshot, then live frames, through a transport; and the wire text of
// frames, made once per process.

import type { FastifyRequest } from 'fastify'
import { badRequest } from '../errors.js'
import { getSessionByKey } from '../store/index.js'
import type { FeedEvent, FeedSink, LiveFrame } from '../bus/index.js'
import type { HttpDeps } from './deps.js'
import { AFTER_WORDS } from './schemas.js'
import { sessionOf, sessionStatus } from './session.js'

export const PING_MS = 15000
/** a subscriber whose connection holds this much its client has not read is paused (no durable events) */
export const HIGH_WATER = 1 << 20
/** a subscriber whose connection would hold more is cut at once: live frames do not wait for it */
export const MAX_BUFFERED = 4 * HIGH_WATER

/** How one protocol carries a subscription (SSE text, WebSocket messages); subscribe() runs the rest. */
export interface Transport {
  /** the wire text of a durable event and of a live frame */
  durable(e: FeedEvent): string
  live(frame: LiveFrame): string
  /** hands text to the connection */
  write(text: string): void
  /** what the connection holds that its client has not read (characters, near enough to bytes) */
  buffered(): number
  /** a keep-alive: SSE's comment, WebSocket's ping */
  ping(): void
  /** closes the connection; a slow consumer first gets the final stream/error frame (API.md §6) */
  end(reason?: 'slow-consumer' | 'error'): void
}

/** The last frame a slow consumer gets (API.md §6). */
export const SLOW_CONSUMER: LiveFrame = { event: 'stream/error', data: { code: 'slow-consumer' } }

/** A subscription as its route holds it; it is in the route's set of open ones until it closes. */
export interface Subscription {
  /** sends the backlog, then goes live */
  start(): Promise<void>
  /** the connection took what it held (below HIGH_WATER again): durable events flow again */
  drained(): void
  /** a frame from outside the feed (a WebSocket op's ack or error), under the same limit */
  answer(text: string): void
  /** ends it and closes the connection, for a reason when the server ends it */
  close(reason?: 'slow-consumer' | 'error'): void
}

/** The largest seq a log can hold (a PostgreSQL integer); a resume point past it is past every event. */
const MAX_SEQ = 2 ** 31 - 1

/** A resume point: an integer seq (`-1` and below read as the whole log). */
export function parseAfter(raw: string | undefined, what: string): number | undefined {
  if (raw === undefined) return undefined
  if (!/^-?\d{1,10}$/.test(raw)) throw badRequest(`${what} must be ${AFTER_WORDS}`, [{ path: what, message: `must be ${AFTER_WORDS}` }])
  return Math.min(MAX_SEQ, Math.max(-1, Number(raw)))
}

/**
 * Sends frames in the order of API.md §6 through a transport, under the slow-consumer rule, the same
 * for SSE and WebSocket: a connection holding HIGH_WATER unread pauses the durable events (they are
 * read again from the log once it drains); one that stays paused past AGENTD_SLOW_CONSUMER_MS, or that
 * a frame would take past MAX_BUFFERED (live frames keep coming while paused), is cut with a final
 * `stream/error {code: "slow-consumer"}` frame, and its client resumes from its last id.
 */
export function subscribe(deps: HttpDeps, req: FastifyRequest, after: number, t: Transport, open: Set<Subscription>): Subscription {
  const row = sessionOf(req)
  let status = sessionStatus(row)
  let closed = false
  let pausedSince = 0
  const close = (reason?: 'slow-consumer' | 'error') => {
    if (closed) return
    closed = true
    clearInterval(ping)
    open.delete(subscription)
    sub.close()
    t.end(reason)
  }
  const writable = () => {
    if (closed) return false
    if (t.buffered() < HIGH_WATER) return true
    if (!pausedSince) pausedSince = Date.now()
    else if (Date.now() - pausedSince > deps.config.slowConsumerMs) close('slow-consumer')
    return false
  }
  const send = (text: string) => {
    if (closed) return
    if (t.buffered() + text.length > MAX_BUFFERED) return close('slow-consumer')
    t.write(text)
  }
  const sink: FeedSink = {
    durable: (e: FeedEvent) => send(t.durable(e)),
    live: (f: LiveFrame) => {
      send(t.live(f))
      // a client paused past its grace is cut when the next frame comes, not only at the next ping
      if (pausedSince) writable()
    },
    ready: async () => {
      // the status as of now, then the in-flight snapshot (everything streamed so far)
      const fresh = await getSessionByKey(deps.db, row.key)
      if (fresh) status = sessionStatus(fresh)
    },
    writable,
    fail: (e: Error) => {
      req.log.warn({ err: e.message, sessionId: row.id }, 'stream subscriber failed')
      close('error')
    },
  }
  const sub = deps.feeds.open(row.key, after, sink)
  // ready() is split: the async part (status) above; the frames below go out synchronously with
  // the switch to live, so no live frame can slip between the snapshot and the live stream
  sub.onReady = (headSeq: number) => {
    sink.live({ event: 'stream/ready', data: { headSeq } })
    sink.live({ event: 'agent/status', data: { status } })
    const snap = deps.snapshot(row.key)
    if (snap) sink.live(snap)
  }
  const ping = setInterval(() => {
    t.ping()
    writable()
  }, PING_MS)
  const subscription: Subscription = {
    start: () => sub.start(),
    drained: () => {
      if (!pausedSince || closed || t.buffered() >= HIGH_WATER) return
      pausedSince = 0
      sub.drained()
    },
    answer: send,
    close,
  }
  open.add(subscription)
  return subscription
}

/**
 * Wire text of a frame, made once per event or frame object and shared by every subscriber of the
 * process (a thousand subscribers must not serialize the same chunk a thousand times).
 */
function memo<K extends object>(fn: (k: K) => string): (k: K) => string {
  const cache = new WeakMap<K, string>()
  return (k) => {
    let v = cache.get(k)
    if (v === undefined) cache.set(k, (v = fn(k)))
    return v
  }
}
export const sseDurable = memo((e: FeedEvent) => `event: session/event\nid: ${e.seq}\ndata: ${e.json}\n\n`)
export const sseLive = memo((f: LiveFrame) => `event: ${f.event}\ndata: ${JSON.stringify(f.data)}\n\n`)
export const wsDurable = memo((e: FeedEvent) => `{"event":"session/event","id":${e.seq},"data":${e.json}}`)
export const wsLive = memo((f: LiveFrame) => JSON.stringify({ event: f.event, data: f.data }))

/** Flushes of every connection that was written to in this event-loop turn, run once at its end. */
export const batch = (() => {
  let queue: Array<() => void> = []
  const run = () => {
    const q = queue
    queue = []
    for (const f of q) f()
  }
  return {
    add(f: () => void) {
      if (!queue.length) setImmediate(run)
      queue.push(f)
    },
  }
})()
