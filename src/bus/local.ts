// The in-process bus, split by concern: live frames (commit doorbells and frames to a session's
// subscribers), doorbells (pokes and wakes for drivers), invalidations (caches) and commands (work for
// the process holding a session). Each user receives only the part it needs. The PostgreSQL transport
// (pg.ts) wraps the same local parts and feeds remote notices into them.

import type { StoredEvent } from '../store/index.js'

/** A live frame as it travels to subscribers: the SSE event name and its data (SPEC §18.11). */
export interface LiveFrame {
  event: string
  data: unknown
}

export interface CommitNotice {
  /** the session's head seq after the commit (or at least this far) */
  seq: number
  /** the committed events, in order, when the commit happened in this process */
  events?: readonly StoredEvent[]
}

export interface SessionListener {
  commit?(n: CommitNotice): void
  live?(frame: LiveFrame): void
  /** the cross-process channel dropped: anything may have been missed; re-read from the last seq */
  reset?(): void
  /** the session's row changed without new events (cancel flag, pending answer, deletion) */
  poke?(): void
}

/** A request for the process that holds a session's lease (e.g. manual compaction). */
export interface Command {
  id: string
  kind: string
  sessionKey: string
}

/** A handler answers a command it can serve with a promise of the result, else undefined. */
export type CommandHandler = (c: Command) => Promise<unknown> | undefined

export type CommandOutcome = { ok: true; result: unknown } | { ok: false; reason: 'no-holder' | 'timeout' } | { ok: false; reason: 'error'; error: { code?: string; message: string } }

/** Commits and live frames, to the subscribers of a session in every process. */
export interface LiveFrames {
  /** sees every live frame of every session, local or remote, before subscribers do */
  tap(fn: (sessionKey: string, frame: LiveFrame) => void): () => void
  subscribe(sessionKey: string, l: SessionListener): () => void
  /** after commit: local listeners get the events, other processes a coalesced doorbell */
  publishCommit(sessionKey: string, events: readonly StoredEvent[]): void
  publishLive(sessionKey: string, frame: LiveFrame): void
}

/** Rings for drivers: a session's row changed (poke), or it wants driving (wake). */
export interface Doorbells {
  /** a row change other processes' drivers must look at (cancel, answers, deletion) */
  poke(sessionKey: string): void
  /**
   * A poke sent at once, not in the next window: resolves once other processes have been sent it (a
   * settings PATCH answers after it, so a driver elsewhere hears of it as soon as it can)
   */
  pokeNow(sessionKey: string): Promise<void>
  /** asks whichever worker can to drive the session; true when a handler here took it */
  wake(sessionKey: string): boolean
  /** a handler answers true when it took the wake (it holds the session): no other process is asked */
  onWake(handler: (sessionKey: string) => boolean | void): () => void
}

/** What processes cache: a change under a topic (e.g. `tenant:<id>`) drops it everywhere. */
export interface Invalidations {
  /** handlers here run at once; other processes' when the returned promise resolves or shortly after */
  invalidate(topic: string): Promise<void>
  /** sees invalidations of every topic, and null when the cross-process channel dropped (drop all caches) */
  on(handler: (topic: string | null) => void): () => void
}

/** Work for the process that holds a session. */
export interface Commands {
  /** runs a command where the session is held: this process or another one */
  run(c: Command, o?: { ackMs?: number; doneMs?: number }): Promise<CommandOutcome>
  serve(handler: CommandHandler): () => void
}

export interface Bus {
  readonly live: LiveFrames
  readonly doorbells: Doorbells
  readonly invalidations: Invalidations
  readonly commands: Commands
  close(): Promise<void>
}

export class LocalLive implements LiveFrames {
  private readonly sessions = new Map<string, Set<SessionListener>>()
  private readonly taps = new Set<(sessionKey: string, frame: LiveFrame) => void>()

  tap(fn: (sessionKey: string, frame: LiveFrame) => void): () => void {
    this.taps.add(fn)
    return () => this.taps.delete(fn)
  }

  subscribe(sessionKey: string, l: SessionListener): () => void {
    let set = this.sessions.get(sessionKey)
    if (!set) this.sessions.set(sessionKey, (set = new Set()))
    set.add(l)
    return () => {
      const s = this.sessions.get(sessionKey)
      if (!s) return
      s.delete(l)
      if (s.size === 0) this.sessions.delete(sessionKey)
    }
  }

  private listeners(sessionKey: string, fn: (l: SessionListener) => void): void {
    const set = this.sessions.get(sessionKey)
    if (!set) return
    for (const l of [...set]) {
      try {
        fn(l)
      } catch {
        // a listener's failure is its own; the bus goes on
      }
    }
  }

  publishCommit(sessionKey: string, events: readonly StoredEvent[]): void {
    if (events.length) this.deliverCommit(sessionKey, { seq: events[events.length - 1].seq, events })
  }

  publishLive(sessionKey: string, frame: LiveFrame): void {
    this.deliverLive(sessionKey, frame)
  }

  deliverCommit(sessionKey: string, n: CommitNotice): void {
    this.listeners(sessionKey, (l) => l.commit?.(n))
  }

  deliverLive(sessionKey: string, frame: LiveFrame): void {
    for (const t of this.taps) {
      try {
        t(sessionKey, frame)
      } catch {
        // a tap's failure is its own
      }
    }
    this.listeners(sessionKey, (l) => l.live?.(frame))
  }

  /** A row change, to the session's subscribers (its driver's watch among them). */
  deliverPoke(sessionKey: string): void {
    this.listeners(sessionKey, (l) => l.poke?.())
  }

  /** Every subscriber re-reads from its last seq. */
  resetAll(): void {
    for (const key of [...this.sessions.keys()]) this.listeners(key, (l) => l.reset?.())
  }

  clear(): void {
    this.sessions.clear()
  }
}

export class LocalDoorbells implements Doorbells {
  private readonly wakeHandlers = new Set<(k: string) => boolean | void>()

  /** pokes reach the session's subscribers */
  constructor(private readonly live: LocalLive) {}

  poke(sessionKey: string): void {
    this.live.deliverPoke(sessionKey)
  }

  async pokeNow(sessionKey: string): Promise<void> {
    this.poke(sessionKey)
  }

  wake(sessionKey: string): boolean {
    return this.deliverWake(sessionKey)
  }

  onWake(handler: (sessionKey: string) => boolean | void): () => void {
    this.wakeHandlers.add(handler)
    return () => this.wakeHandlers.delete(handler)
  }

  /** Whether a handler here took the wake. */
  deliverWake(sessionKey: string): boolean {
    let taken = false
    for (const h of [...this.wakeHandlers]) {
      try {
        if (h(sessionKey) === true) taken = true
      } catch {
        // a handler's failure is its own
      }
    }
    return taken
  }

  clear(): void {
    this.wakeHandlers.clear()
  }
}

export class LocalInvalidations implements Invalidations {
  private readonly handlers = new Set<(topic: string | null) => void>()

  async invalidate(topic: string): Promise<void> {
    this.deliver(topic)
  }

  on(handler: (topic: string | null) => void): () => void {
    this.handlers.add(handler)
    return () => this.handlers.delete(handler)
  }

  deliver(topic: string | null): void {
    for (const h of [...this.handlers]) {
      try {
        h(topic)
      } catch {
        // a handler's failure is its own
      }
    }
  }

  clear(): void {
    this.handlers.clear()
  }
}

export class LocalCommands implements Commands {
  private readonly handlers = new Set<CommandHandler>()

  async run(c: Command): Promise<CommandOutcome> {
    return (await this.runLocal(c)) ?? { ok: false, reason: 'no-holder' }
  }

  serve(handler: CommandHandler): () => void {
    this.handlers.add(handler)
    return () => this.handlers.delete(handler)
  }

  /** Runs a command with this process's handlers; undefined when none serves it. */
  runLocal(c: Command): Promise<CommandOutcome> | undefined {
    for (const h of this.handlers) {
      const p = h(c)
      if (p) {
        return p.then(
          (result) => ({ ok: true, result }) as CommandOutcome,
          (e) => ({ ok: false, reason: 'error', error: { code: (e as { code?: string })?.code, message: (e as Error)?.message ?? String(e) } }) as CommandOutcome,
        )
      }
    }
    return undefined
  }

  clear(): void {
    this.handlers.clear()
  }
}

/** The bus of a process alone: its parts deliver here only. */
export class LocalHub implements Bus {
  readonly live = new LocalLive()
  readonly doorbells = new LocalDoorbells(this.live)
  readonly invalidations = new LocalInvalidations()
  readonly commands = new LocalCommands()

  /** The cross-process channel dropped: subscribers re-read, caches are dropped. */
  resetAll(): void {
    this.live.resetAll()
    this.invalidations.deliver(null)
  }

  async close(): Promise<void> {
    this.live.clear()
    this.doorbells.clear()
    this.invalidations.clear()
    this.commands.clear()
  }
}
