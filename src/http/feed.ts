// One subscription to a session for SSE and WebSocket alike (API.md §6): the backlog, stream/ready,
// agent/status, the in-flight snapshot, then live frames, through a transport; and the wire text of
// frames, made once per process.

import type { FastifyRequest } from 'fastify'
import { badRequest } from '../errors.js'
import { getSessionByKey } from '../store/index.js'
import type { FeedEvent, FeedSink, LiveFrame, Subscriber } from '../bus/index.js'
import type { HttpDeps } from './deps.js'
import { AFTER_WORDS } from './schemas.js'
import { sessionOf, sessionStatus } from './session.js'

export const PING_MS = 15000
/** a subscriber whose socket buffers this much is paused; past AGENTD_SLOW_CONSUMER_MS paused, it is dropped */
export const HIGH_WATER = 1 << 20

export interface Transport {
  durable(e: FeedEvent): void
  live(frame: LiveFrame): void
  writable(): boolean
  end(reason?: string): void
}

/** The largest seq a log can hold (a PostgreSQL integer); a resume point past it is past every event. */
const MAX_SEQ = 2 ** 31 - 1

/** A resume point: an integer seq (`-1` and below read as the whole log). */
export function parseAfter(raw: string | undefined, what: string): number | undefined {
  if (raw === undefined) return undefined
  if (!/^-?\d{1,10}$/.test(raw)) throw badRequest(`${what} must be ${AFTER_WORDS}`, [{ path: what, message: `must be ${AFTER_WORDS}` }])
  return Math.min(MAX_SEQ, Math.max(-1, Number(raw)))
}

/** Sends frames in the order of API.md §6 through a transport. */
export function subscribe(deps: HttpDeps, req: FastifyRequest, after: number, t: Transport): Subscriber {
  const row = sessionOf(req)
  let status = sessionStatus(row)
  const sink: FeedSink = {
    durable: (e: FeedEvent) => t.durable(e),
    live: (f: LiveFrame) => t.live(f),
    ready: async () => {
      // the status as of now, then the in-flight snapshot (everything streamed so far)
      const fresh = await getSessionByKey(deps.db, row.key)
      if (fresh) status = sessionStatus(fresh)
    },
    writable: () => t.writable(),
    fail: (e: Error) => {
      req.log.warn({ err: e.message, sessionId: row.id }, 'stream subscriber failed')
      t.end('error')
    },
  }
  const sub = deps.feeds.open(row.key, after, sink)
  // ready() is split: the async part (status) above; the frames below go out synchronously with
  // the switch to live, so no live frame can slip between the snapshot and the live stream
  sub.onReady = (headSeq: number) => {
    t.live({ event: 'stream/ready', data: { headSeq } })
    t.live({ event: 'agent/status', data: { status } })
    const snap = deps.snapshot(row.key)
    if (snap) t.live(snap)
  }
  return sub
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
