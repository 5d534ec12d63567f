// Fan-out across processes over PostgreSQL LISTEN/NOTIFY (DESIGN.md §3). NOTIFY carries only
// doorbells {session, seq} and small batches of live frames, never event bodies; doorbells and frames
// are coalesced to at most one NOTIFY per session per window, sent outside any transaction.

import crypto from 'node:crypto'
import pg from 'pg'
import type { Db } from '../store/index.js'
import type { StoredEvent } from '../store/index.js'
import { LocalHub, type LiveFrame } from './local.js'

const CH_COMMIT = 'agentd_commit'
const CH_LIVE = 'agentd_live'
const CH_POKE = 'agentd_poke'
const CH_WAKE = 'agentd_wake'
const MAX_PAYLOAD = 7800 // NOTIFY payloads must stay under 8000 bytes

interface Pending {
  seq?: number
  frames: LiveFrame[]
  poke?: boolean
  timer?: NodeJS.Timeout
  lastSent: number
}

export interface PgBusOptions {
  url: string
  db: Db
  windowMs?: number
  log?: { warn(obj: unknown, msg?: string): void; debug?(obj: unknown, msg?: string): void }
}

export class PgBus extends LocalHub {
  readonly origin = crypto.randomBytes(6).toString('hex')
  private client: pg.Client | undefined
  private closed = false
  private readonly pending = new Map<string, Pending>()
  private readonly windowMs: number
  private reconnectTimer: NodeJS.Timeout | undefined
  /** listener connection generations; a drop makes every subscriber re-read */
  generation = 0

  constructor(private readonly o: PgBusOptions) {
    super()
    this.windowMs = o.windowMs ?? 50
  }

  async start(): Promise<void> {
    await this.connect()
  }

  private async connect(): Promise<void> {
    const client = new pg.Client({ connectionString: this.o.url })
    client.on('notification', (m) => this.receive(m.channel, m.payload ?? ''))
    const lost = () => {
      if (this.client !== client) return
      this.client = undefined
      client.removeAllListeners('notification')
      client.end().catch(() => {})
      if (this.closed) return
      // whatever was notified while we were away is lost: every subscriber re-reads from its seq
      this.resetAll()
      this.reconnectTimer = setTimeout(() => this.connect().catch(() => {}), 500)
    }
    client.on('error', lost)
    client.on('end', lost)
    try {
      await client.connect()
      await client.query(`LISTEN ${CH_COMMIT}; LISTEN ${CH_LIVE}; LISTEN ${CH_POKE}; LISTEN ${CH_WAKE}`)
    } catch (e) {
      client.end().catch(() => {})
      if (this.closed) return
      this.o.log?.warn({ err: (e as Error).message }, 'bus listener could not connect; retrying')
      this.reconnectTimer = setTimeout(() => this.connect().catch(() => {}), 1000)
      throw e
    }
    this.client = client
    this.generation++
    if (this.generation > 1) this.resetAll()
  }

  /** Drops the listener connection (tests use it to prove subscribers recover). */
  dropListener(): void {
    this.client?.emit('error', new Error('dropped on purpose'))
  }

  private receive(channel: string, payload: string): void {
    let m: { o: string; s: string; q?: number; f?: LiveFrame[] }
    try {
      m = JSON.parse(payload)
    } catch {
      return
    }
    if (m.o === this.origin) return
    if (channel === CH_COMMIT && typeof m.q === 'number') this.deliverCommit(m.s, { seq: m.q, remote: true })
    else if (channel === CH_LIVE && Array.isArray(m.f)) for (const f of m.f) this.deliverLive(m.s, f)
    else if (channel === CH_POKE) this.deliverPoke(m.s)
    else if (channel === CH_WAKE) this.deliverWake(m.s)
  }

  override publishCommit(sessionKey: string, events: readonly StoredEvent[]): void {
    super.publishCommit(sessionKey, events)
    if (!events.length) return
    const p = this.slot(sessionKey)
    p.seq = Math.max(p.seq ?? -1, events[events.length - 1].seq)
    this.schedule(sessionKey, p)
  }

  override publishLive(sessionKey: string, frame: LiveFrame): void {
    super.publishLive(sessionKey, frame)
    const p = this.slot(sessionKey)
    p.frames.push(frame)
    this.schedule(sessionKey, p)
  }

  override poke(sessionKey: string): void {
    super.poke(sessionKey)
    const p = this.slot(sessionKey)
    p.poke = true
    this.schedule(sessionKey, p)
  }

  override wake(sessionKey: string): void {
    super.wake(sessionKey)
    this.notify(CH_WAKE, { o: this.origin, s: sessionKey })
  }

  private slot(key: string): Pending {
    let p = this.pending.get(key)
    if (!p) this.pending.set(key, (p = { frames: [], lastSent: 0 }))
    return p
  }

  /** Leading edge at once, then at most one flush per window. */
  private schedule(key: string, p: Pending): void {
    if (p.timer) return
    const wait = Math.max(0, p.lastSent + this.windowMs - Date.now())
    if (wait === 0) this.flush(key, p)
    else p.timer = setTimeout(() => this.flush(key, p), wait)
  }

  private flush(key: string, p: Pending): void {
    p.timer = undefined
    p.lastSent = Date.now()
    // frames first: a doorbell may let a subscriber send the durable event an `end` frame names
    if (p.frames.length) {
      const frames = p.frames
      p.frames = []
      let batch: LiveFrame[] = []
      let size = 0
      const send = () => {
        if (batch.length) this.notify(CH_LIVE, { o: this.origin, s: key, f: batch })
        batch = []
        size = 0
      }
      for (const f of frames) {
        const n = JSON.stringify(f).length + 1
        if (n > MAX_PAYLOAD - 120) {
          // too big for NOTIFY: remote viewers recover the content from the durable settlement
          this.o.log?.debug?.({ event: f.event }, 'live frame too large for NOTIFY; not forwarded to other processes')
          continue
        }
        if (size + n > MAX_PAYLOAD - 120) send()
        batch.push(f)
        size += n
      }
      send()
    }
    if (p.seq !== undefined) {
      this.notify(CH_COMMIT, { o: this.origin, s: key, q: p.seq })
      p.seq = undefined
    }
    if (p.poke) {
      p.poke = false
      this.notify(CH_POKE, { o: this.origin, s: key })
    }
    // forget idle sessions so the map does not grow with every session ever touched
    setTimeout(() => {
      if (!p.timer && !p.frames.length && p.seq === undefined && !p.poke && this.pending.get(key) === p) this.pending.delete(key)
    }, this.windowMs * 2).unref()
  }

  private notify(channel: string, payload: unknown): void {
    if (this.closed) return
    this.o.db.query('SELECT pg_notify($1, $2)', [channel, JSON.stringify(payload)]).catch((e) => {
      this.o.log?.warn({ err: (e as Error).message, channel }, 'NOTIFY failed')
    })
  }

  override async close(): Promise<void> {
    this.closed = true
    clearTimeout(this.reconnectTimer)
    for (const p of this.pending.values()) clearTimeout(p.timer)
    this.pending.clear()
    const c = this.client
    this.client = undefined
    await c?.end().catch(() => {})
    await super.close()
  }
}
