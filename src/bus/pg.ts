// Fan-out across processes over PostgreSQL LISTEN/NOTIFY (DESIGN.md §3). NOTIFY carries only
// doorbells {session, seq} and small batches of live frames, never event bodies. Everything a window
// (~50 ms) collects, across all sessions, goes out as a few NOTIFYs, sent outside any transaction:
// the rate of NOTIFYs does not grow with the number of sessions or commits. PgBus offers the bus's
// parts (local.ts): each wraps this process's LocalHub part, and all share one LISTEN connection, one
// window and one presence.
//
// Presence: doorbells, live frames and pokes are forwarded only while another agentd process listens
// on the database. A process alone (the usual single-process deployment) sends none of them; a
// streamed answer's frames were otherwise a stream of NOTIFYs that PostgreSQL delivered straight back
// to their sender (measured: 40 % of the server's CPU per streamed chunk). Processes announce
// themselves: `hi` when their listener (re)connects, `hb` every heartbeat, and whoever hears a process
// it did not know answers `ack` to it, having started to forward. The one acknowledged re-reads every
// session its subscribers watch (resetAll), so what the other committed before it knew of it is read
// from the database. A process forwards from its listener's (re)connect for a grace of EXPIRE, and
// while it heard another within EXPIRE; one whose peer fell silent longer stops.

import crypto from 'node:crypto'
import pg from 'pg'
import { statement, type Db } from '../store/index.js'
import { LocalHub, type Bus, type Command, type CommandOutcome, type Commands, type Doorbells, type Invalidations, type LiveFrame, type LiveFrames } from './local.js'

const CHANNEL = 'agentd_bus'
const CH_WAKE = 'agentd_wake'
const MAX_PAYLOAD = 7800 // NOTIFY payloads must stay under 8000 bytes
const NOTIFY = statement('bus_notify', 'SELECT pg_notify($1, $2)')

/** One NOTIFY: doorbells [session, seq], pokes, live frames [session, frame] and invalidated topics; or presence. */
interface Batch {
  o: string
  c?: Array<[string, number]>
  p?: string[]
  f?: Array<[string, LiveFrame]>
  t?: string[]
  /** presence: the sender's listener (re)connected */
  hi?: 1
  /** presence: the sender is still here */
  hb?: 1
  /** presence: the sender forwards to the process named here, which had not been known to it */
  ack?: string
}

/** How often a process tells the others it is there. */
export const HEARTBEAT_MS = 5000

export interface PgBusOptions {
  url: string
  db: Db
  windowMs?: number
  /** presence heartbeat (default HEARTBEAT_MS); a peer silent for three of them is gone */
  heartbeatMs?: number
  log?: { warn(obj: unknown, msg?: string): void; debug?(obj: unknown, msg?: string): void }
}

export class PgBus implements Bus {
  /** this process's subscribers and handlers; what other processes notify is delivered to them */
  private readonly local = new LocalHub()
  readonly origin = crypto.randomBytes(6).toString('hex')
  private client: pg.Client | undefined
  private closed = false
  private readonly windowMs: number
  private reconnectTimer: NodeJS.Timeout | undefined
  /** what the current window collected */
  private commits = new Map<string, number>()
  private pokes = new Set<string>()
  private topics = new Set<string>()
  private frames: Array<[string, LiveFrame]> = []
  private timer: NodeJS.Timeout | undefined
  private lastFlush = 0
  /** listener connection generations; a drop makes every subscriber re-read */
  generation = 0
  /** other processes heard, by origin: when last */
  private readonly peers = new Map<string, number>()
  /** forwarding regardless of peers until then (a grace after the listener's (re)connect) */
  private graceUntil = 0
  private heartbeat: NodeJS.Timeout | undefined
  private readonly heartbeatMs: number

  constructor(private readonly o: PgBusOptions) {
    this.windowMs = o.windowMs ?? 50
    this.heartbeatMs = o.heartbeatMs ?? HEARTBEAT_MS
  }

  /** A peer silent this long is gone. */
  private get expireMs(): number {
    return 3 * this.heartbeatMs
  }

  /** Whether doorbells, frames and pokes go to other processes: someone else listens, or may. */
  get forwarding(): boolean {
    const now = Date.now()
    if (now < this.graceUntil) return true
    for (const [origin, at] of this.peers) {
      if (now - at <= this.expireMs) return true
      this.peers.delete(origin)
    }
    return false
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
      this.local.resetAll()
      this.reconnectTimer = setTimeout(() => this.connect().catch(() => {}), 500)
    }
    client.on('error', lost)
    client.on('end', lost)
    try {
      await client.connect()
      await client.query(`LISTEN ${CHANNEL}; LISTEN ${CH_WAKE}`)
    } catch (e) {
      client.end().catch(() => {})
      if (this.closed) return
      this.o.log?.warn({ err: (e as Error).message }, 'bus listener could not connect; retrying')
      this.reconnectTimer = setTimeout(() => this.connect().catch(() => {}), 1000)
      throw e
    }
    this.client = client
    this.generation++
    // announce ourselves; until the others answer (or stay silent for a grace), forward as if they listen
    this.graceUntil = Date.now() + this.expireMs
    this.notify(CHANNEL, JSON.stringify({ o: this.origin, hi: 1 }))
    if (!this.heartbeat) {
      this.heartbeat = setInterval(() => this.notify(CHANNEL, JSON.stringify({ o: this.origin, hb: 1 })), this.heartbeatMs)
      this.heartbeat.unref()
    }
    if (this.generation > 1) this.local.resetAll()
  }

  /** Presence messages of another process. */
  private heard(m: Batch): void {
    const known = this.peers.has(m.o) && Date.now() - this.peers.get(m.o)! <= this.expireMs
    this.peers.set(m.o, Date.now())
    // from now on its subscribers get our doorbells; what we committed before, it reads on our ack
    if (m.hi || !known) this.notify(CHANNEL, JSON.stringify({ o: this.origin, ack: m.o }))
    if (m.ack === this.origin) this.local.resetAll()
  }

  /** Drops the listener connection (tests use it to prove subscribers recover). */
  dropListener(): void {
    this.client?.emit('error', new Error('dropped on purpose'))
  }

  private receive(channel: string, payload: string): void {
    // our own notifications come back too; skip them before parsing
    if (payload.startsWith(`{"o":"${this.origin}"`)) return
    let m: Batch & { s?: string; cmd?: Command; ack?: string; done?: string; out?: CommandOutcome }
    try {
      m = JSON.parse(payload)
    } catch {
      return
    }
    if (channel === CH_WAKE) {
      if (m.cmd) this.serve(m.cmd, m.o)
      else if (m.ack) this.calls.get(m.ack)?.ack()
      else if (m.done) this.calls.get(m.done)?.done(m.out!)
      else if (m.s) this.local.doorbells.deliverWake(m.s)
      return
    }
    if (typeof m.o === 'string') {
      if (m.hi || m.hb || m.ack) return this.heard(m)
      // anything a process sends says it is there
      this.peers.set(m.o, Date.now())
    }
    const live = this.local.live
    for (const [s, f] of m.f ?? []) live.deliverLive(s, f)
    for (const [s, q] of m.c ?? []) live.deliverCommit(s, { seq: q })
    for (const s of m.p ?? []) live.deliverPoke(s)
    for (const t of m.t ?? []) this.local.invalidations.deliver(t)
  }

  readonly live: LiveFrames = {
    tap: (fn) => this.local.live.tap(fn),
    subscribe: (sessionKey, l) => this.local.live.subscribe(sessionKey, l),
    publishCommit: (sessionKey, events) => {
      this.local.live.publishCommit(sessionKey, events)
      if (!events.length || !this.forwarding) return
      this.commits.set(sessionKey, Math.max(this.commits.get(sessionKey) ?? -1, events[events.length - 1].seq))
      this.schedule()
    },
    publishLive: (sessionKey, frame) => {
      this.local.live.publishLive(sessionKey, frame)
      if (!this.forwarding) return
      this.frames.push([sessionKey, frame])
      this.schedule()
    },
  }

  readonly doorbells: Doorbells = {
    poke: (sessionKey) => {
      this.local.doorbells.poke(sessionKey)
      if (!this.forwarding) return
      this.pokes.add(sessionKey)
      this.schedule()
    },
    /** Not windowed: the NOTIFY leaves at once, and the promise resolves when it has been sent. */
    pokeNow: async (sessionKey) => {
      this.doorbells.poke(sessionKey)
      this.flush()
      await this.sending
    },
    /**
     * Other processes hear a wake only when no Agent here took it: the lease holder is the only driver,
     * so a wake this process's holder took needs nobody else (one NOTIFY per turn fewer). Should the
     * lease have moved unnoticed, the new holder still wakes on the commit's doorbell.
     */
    wake: (sessionKey) => {
      if (this.local.doorbells.wake(sessionKey)) return true
      this.notify(CH_WAKE, JSON.stringify({ o: this.origin, s: sessionKey }))
      return false
    },
    onWake: (handler) => this.local.doorbells.onWake(handler),
  }

  readonly invalidations: Invalidations = {
    /** Not windowed: the NOTIFY leaves at once, and the promise resolves when it has been sent. */
    invalidate: async (topic) => {
      await this.local.invalidations.invalidate(topic)
      this.topics.add(topic)
      this.flush()
      await this.sending
    },
    on: (handler) => this.local.invalidations.on(handler),
  }

  readonly commands: Commands = {
    run: (c, o) => this.command(c, o),
    serve: (handler) => this.local.commands.serve(handler),
  }

  private readonly calls = new Map<string, { ack(): void; done(o: CommandOutcome): void }>()

  /**
   * Runs a command here if this process holds the session, else asks the others: the holder
   * acknowledges within ackMs and answers within doneMs; silence means nobody holds it.
   */
  private async command(c: Command, o: { ackMs?: number; doneMs?: number } = {}): Promise<CommandOutcome> {
    const local = this.local.commands.runLocal(c)
    if (local) return local
    return new Promise<CommandOutcome>((resolve) => {
      const finish = (out: CommandOutcome) => {
        clearTimeout(timer)
        this.calls.delete(c.id)
        resolve(out)
      }
      let timer = setTimeout(() => finish({ ok: false, reason: 'no-holder' }), o.ackMs ?? 1000)
      this.calls.set(c.id, {
        ack: () => {
          clearTimeout(timer)
          timer = setTimeout(() => finish({ ok: false, reason: 'timeout' }), o.doneMs ?? 600000)
        },
        done: finish,
      })
      this.notify(CH_WAKE, JSON.stringify({ o: this.origin, cmd: c }))
    })
  }

  /** Another process's command: served (acknowledged, then answered) when this process holds the session. */
  private serve(c: Command, from: string): void {
    const p = this.local.commands.runLocal(c)
    if (!p) return
    this.notify(CH_WAKE, JSON.stringify({ o: this.origin, to: from, ack: c.id }))
    void p.then((out) => this.notify(CH_WAKE, JSON.stringify({ o: this.origin, to: from, done: c.id, out })))
  }

  /** Leading edge at once when the bus was quiet, then at most one flush per window. */
  private schedule(): void {
    if (this.timer) return
    const wait = Math.max(0, this.lastFlush + this.windowMs - Date.now())
    if (wait === 0) queueMicrotask(() => this.flush())
    this.timer = setTimeout(() => this.flush(), wait)
  }

  private flush(): void {
    clearTimeout(this.timer)
    this.timer = undefined
    if (!this.commits.size && !this.pokes.size && !this.frames.length && !this.topics.size) return
    this.lastFlush = Date.now()
    const head = `{"o":"${this.origin}"`
    let parts: string[] = []
    let size = head.length + 2
    const send = () => {
      if (parts.length) this.notify(CHANNEL, `${head},${parts.join(',')}}`)
      parts = []
      size = head.length + 2
    }
    // frames before doorbells: a subscriber may then send the durable event an `end` frame names
    const groups: Array<[string, string[]]> = [
      ['f', this.frames.map(([s, f]) => JSON.stringify([s, f]))],
      ['c', [...this.commits].map(([s, q]) => JSON.stringify([s, q]))],
      ['p', [...this.pokes].map((s) => JSON.stringify(s))],
      ['t', [...this.topics].map((t) => JSON.stringify(t))],
    ]
    this.frames = []
    this.commits = new Map()
    this.pokes = new Set()
    this.topics = new Set()
    for (const [key, items] of groups) {
      let list: string[] = []
      const close = () => {
        if (list.length) parts.push(`"${key}":[${list.join(',')}]`)
        list = []
      }
      for (const item of items) {
        if (item.length > MAX_PAYLOAD - 200) {
          // too big for NOTIFY (a huge chunk): remote viewers recover it from the durable settlement
          this.o.log?.debug?.({ size: item.length }, 'live frame too large for NOTIFY; not forwarded to other processes')
          continue
        }
        if (size + item.length + key.length + 8 > MAX_PAYLOAD) {
          close()
          send()
        }
        list.push(item)
        size += item.length + 1
      }
      close()
      size += key.length + 6
    }
    send()
  }

  private sending: Promise<unknown> = Promise.resolve()

  /**
   * Sent one after another on the listener's own connection, so NOTIFYs leave in the order made. The
   * listener's own pg.Client sends the text as it is (unnamed); without it, the pool prepares it by name.
   */
  private notify(channel: string, payload: string): void {
    if (this.closed) return
    this.sending = this.sending
      .then((): Promise<unknown> => (this.client ? this.client.query(NOTIFY, [channel, payload]) : this.o.db.query(NOTIFY, [channel, payload])))
      .catch((e) => {
        this.o.log?.warn({ err: (e as Error).message, channel }, 'NOTIFY failed')
      })
  }

  async close(): Promise<void> {
    this.flush()
    this.closed = true
    clearTimeout(this.reconnectTimer)
    clearTimeout(this.timer)
    clearInterval(this.heartbeat)
    const c = this.client
    this.client = undefined
    await c?.end().catch(() => {})
    await this.local.close()
  }
}
