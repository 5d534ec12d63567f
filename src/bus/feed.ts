// Session feeds: what SSE and WebSocket subscribers read. One feed per session per process keeps a
// short tail of recent events, filled from local commits or, for a remote doorbell, by ONE read of
// the rows the process has not seen; each subscriber sends durable events seq > lastSent in order,
// reading older pages itself, and interleaves live frames (API.md §6, SPEC §18.11).

import { readEventTexts, type Queryable } from '../store/index.js'
import type { LiveFrame, LiveFrames } from './local.js'

export interface FeedEvent {
  seq: number
  json: string
}

const TAIL = 512
const PAGE = 500

/** The transport's side of a subscription. */
export interface FeedSink {
  durable(e: FeedEvent): void
  live(frame: LiveFrame): void
  /** after the backlog, before going live: asynchronous preparation (e.g. reading the status) */
  ready(headSeq: number): Promise<void> | void
  /** true while the transport can take more; false pauses the durable pump until drained() */
  writable(): boolean
  /** the subscriber failed (database error): end the stream so the client reconnects */
  fail(err: Error): void
}

class SessionFeed {
  readonly tail: FeedEvent[] = []
  head = -1
  private fetching: Promise<void> | null = null
  /** doorbells rung so far (a read that overlapped one must be repeated) */
  private rings = 0
  readonly subscribers = new Set<Subscriber>()
  private unsubscribe: () => void

  constructor(readonly key: string, private readonly feeds: Feeds) {
    this.unsubscribe = feeds.live.subscribe(key, {
      commit: (n) => {
        if (n.events?.length) this.add(n.events.map((e) => ({ seq: e.seq, json: e.json })))
        else this.fetchUpTo(n.seq)
        this.pumpAll()
      },
      live: (f) => {
        for (const s of this.subscribers) s.onLive(f)
      },
      reset: () => {
        // a dropped channel may have swallowed doorbells: look at the database
        this.fetchUpTo(Number.MAX_SAFE_INTEGER)
      },
      poke: () => {},
    })
  }

  private add(events: FeedEvent[]): void {
    for (const e of events) {
      if (e.seq <= this.head) continue
      if (this.head >= 0 && e.seq !== this.head + 1 && this.tail.length) {
        // a hole (a remote commit we have not fetched): drop the tail, subscribers read the database
        this.tail.length = 0
      }
      this.tail.push(e)
      this.head = e.seq
    }
    if (this.tail.length > TAIL) this.tail.splice(0, this.tail.length - TAIL)
  }

  /** Events with seq > after from the tail, or null when the tail does not reach back that far. */
  from(after: number): FeedEvent[] | null {
    if (!this.tail.length) return after >= this.head ? [] : null
    const first = this.tail[0].seq
    if (after + 1 < first) return null
    return this.tail.slice(after + 1 - first)
  }

  /**
   * One read of the rows this process has not seen, shared by every subscriber. A doorbell that rings
   * while a read is in flight makes the loop read again: that read may have missed its row.
   */
  fetchUpTo(seq: number): void {
    this.rings++
    if (seq <= this.head && !this.fetching) return
    if (this.fetching) return
    this.fetching = (async () => {
      try {
        for (;;) {
          const seen = this.rings
          const rows = await readEventTexts(this.feeds.db, this.key, this.head, PAGE)
          if (rows.length) {
            this.add(rows.map((r) => ({ seq: r.seq, json: r.body })))
            this.pumpAll()
          }
          if (rows.length === PAGE) continue
          if (this.rings === seen) break
        }
      } catch {
        // subscribers notice through their own reads
      } finally {
        this.fetching = null
        this.pumpAll()
      }
    })()
  }

  pumpAll(): void {
    for (const s of this.subscribers) s.pump()
  }

  release(s: Subscriber): void {
    this.subscribers.delete(s)
    if (!this.subscribers.size) {
      this.unsubscribe()
      this.feeds.drop(this.key)
    }
  }
}

/** One subscription: backlog, ready, then live, with every durable event exactly once, in order. */
export class Subscriber {
  lastSent: number
  private state: 'backlog' | 'live' | 'closed' = 'backlog'
  private pumping = false
  private again = false
  /** called synchronously right before the subscription goes live (stream/ready, status, snapshot) */
  onReady?: (headSeq: number) => void
  /** end frames held until the durable event they name is sent (SPEC §18.11) */
  private heldEnds: Array<{ seq: number; frame: LiveFrame }> = []
  /** the backlog's wait for a transport that is not writable */
  private resume?: () => void

  private get closed(): boolean {
    return this.state === 'closed'
  }

  constructor(private readonly feed: SessionFeed, after: number, private readonly sink: FeedSink, private readonly db: Queryable) {
    this.lastSent = after
  }

  async start(): Promise<void> {
    try {
      await this.drainDb()
      if (this.closed) return
      await this.sink.ready(this.lastSent)
      if (this.closed) return
      // synchronously with the switch to live: no live frame can slip in before these
      this.onReady?.(this.lastSent)
      this.state = 'live'
      this.pump()
    } catch (e) {
      this.sink.fail(e as Error)
    }
  }

  /**
   * Reads pages from the database until it has sent everything committed so far, at the pace the
   * transport takes them (a long backlog must not pile up in the connection's buffer).
   */
  private async drainDb(): Promise<void> {
    for (;;) {
      if (this.closed) return
      const rows = await readEventTexts(this.db, this.feed.key, this.lastSent, PAGE)
      for (const r of rows) {
        while (!this.sink.writable()) {
          if (this.closed) return
          await new Promise<void>((resolve) => (this.resume = resolve))
        }
        this.send({ seq: r.seq, json: r.body })
      }
      if (rows.length < PAGE) return
    }
  }

  private send(e: FeedEvent): void {
    if (e.seq !== this.lastSent + 1) return
    this.sink.durable(e)
    this.lastSent = e.seq
    if (this.heldEnds.length) {
      const ready = this.heldEnds.filter((h) => h.seq <= this.lastSent)
      this.heldEnds = this.heldEnds.filter((h) => h.seq > this.lastSent)
      for (const h of ready) this.sink.live(h.frame)
    }
  }

  /** Sends what the feed has beyond lastSent; falls back to the database for older events. */
  pump(): void {
    if (this.state !== 'live') return
    if (this.pumping) {
      this.again = true
      return
    }
    // the common case, synchronously: the feed's tail covers what this subscriber lacks
    for (;;) {
      if (!this.sink.writable()) return // resumed by drained()
      const evs = this.feed.from(this.lastSent)
      if (evs === null) break
      if (!evs.length) return
      for (const e of evs) {
        this.send(e)
        if (!this.sink.writable()) return
      }
    }
    this.pumping = true
    void (async () => {
      try {
        do {
          this.again = false
          for (;;) {
            if (!this.sink.writable()) return
            const evs = this.feed.from(this.lastSent)
            if (evs === null) {
              const rows = await readEventTexts(this.db, this.feed.key, this.lastSent, PAGE)
              if (!rows.length) break
              for (const r of rows) this.send({ seq: r.seq, json: r.body })
              continue
            }
            if (!evs.length) break
            for (const e of evs) {
              this.send(e)
              if (!this.sink.writable()) break
            }
          }
        } while (this.again && this.state === 'live')
      } catch (e) {
        this.sink.fail(e as Error)
      } finally {
        this.pumping = false
      }
    })()
  }

  drained(): void {
    this.wake()
    this.pump()
  }

  /** the backlog waiting for the transport goes on (or ends, when closed) */
  private wake(): void {
    const resume = this.resume
    this.resume = undefined
    resume?.()
  }

  onLive(frame: LiveFrame): void {
    if (this.state !== 'live') return
    const d = frame.data as { kind?: string; outcome?: { kind?: string; seq?: number } } | undefined
    if (frame.event === 'agent/assistant-stream' && d?.kind === 'end' && d.outcome?.kind === 'committed' && typeof d.outcome.seq === 'number' && d.outcome.seq > this.lastSent) {
      this.heldEnds.push({ seq: d.outcome.seq, frame })
      // make sure the durable event arrives even if its doorbell is still on the way
      this.feed.fetchUpTo(d.outcome.seq)
      return
    }
    this.sink.live(frame)
  }

  close(): void {
    if (this.state === 'closed') return
    this.state = 'closed'
    this.wake()
    this.feed.release(this)
  }
}

export class Feeds {
  private readonly feeds = new Map<string, SessionFeed>()

  constructor(readonly live: LiveFrames, readonly db: Queryable) {}

  /** Subscribes from seq `after`; call start() on the result to send the backlog and go live. */
  open(sessionKey: string, after: number, sink: FeedSink): Subscriber {
    let f = this.feeds.get(sessionKey)
    if (!f) this.feeds.set(sessionKey, (f = new SessionFeed(sessionKey, this)))
    const s = new Subscriber(f, after, sink, this.db)
    f.subscribers.add(s)
    return s
  }

  drop(key: string): void {
    this.feeds.delete(key)
  }
}
