// The in-process bus: commit doorbells, live frames and wake requests between the parts of one
// process. The PostgreSQL transport (pg.ts) feeds remote notices into the same hub.

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

export interface Bus {
  /** runs a command where the session is held: this process or another one */
  command(c: Command, o?: { ackMs?: number; doneMs?: number }): Promise<CommandOutcome>
  onCommand(handler: CommandHandler): () => void
  tap(fn: (sessionKey: string, frame: LiveFrame) => void): () => void
  subscribe(sessionKey: string, l: SessionListener): () => void
  /** after commit: local listeners get the events, other processes a coalesced doorbell */
  publishCommit(sessionKey: string, events: readonly StoredEvent[]): void
  publishLive(sessionKey: string, frame: LiveFrame): void
  /** a row change other processes' drivers must look at (cancel, answers, deletion) */
  poke(sessionKey: string): void
  /**
   * A poke sent at once, not in the next window: resolves once other processes have been sent it (a
   * settings PATCH answers after it, so a driver elsewhere hears of it as soon as it can)
   */
  pokeNow(sessionKey: string): Promise<void>
  /** asks whichever worker can to drive the session */
  wake(sessionKey: string): void
  /** a handler answers true when it took the wake (it holds the session): no other process is asked */
  onWake(handler: (sessionKey: string) => boolean | void): () => void
  /**
   * Tells every process that what it caches under `topic` (e.g. `tenant:<id>`) changed: handlers here
   * run at once; other processes' run when the returned promise resolves or shortly after.
   */
  invalidate(topic: string): Promise<void>
  /** sees invalidations of every topic, and null when the cross-process channel dropped (drop all caches) */
  onInvalidate(handler: (topic: string | null) => void): () => void
  close(): Promise<void>
}

export class LocalHub implements Bus {
  private readonly sessions = new Map<string, Set<SessionListener>>()
  private readonly wakeHandlers = new Set<(k: string) => boolean | void>()
  private readonly commandHandlers = new Set<CommandHandler>()

  onCommand(handler: CommandHandler): () => void {
    this.commandHandlers.add(handler)
    return () => this.commandHandlers.delete(handler)
  }

  /** Runs a command with this process's handlers; undefined when none serves it. */
  protected runLocal(c: Command): Promise<CommandOutcome> | undefined {
    for (const h of this.commandHandlers) {
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

  async command(c: Command): Promise<CommandOutcome> {
    return (await this.runLocal(c)) ?? { ok: false, reason: 'no-holder' }
  }
  private readonly taps = new Set<(sessionKey: string, frame: LiveFrame) => void>()

  /** Sees every live frame of every session, local or remote, before subscribers do. */
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

  private each(sessionKey: string, fn: (l: SessionListener) => void): void {
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

  deliverCommit(sessionKey: string, n: CommitNotice): void {
    this.each(sessionKey, (l) => l.commit?.(n))
  }

  deliverLive(sessionKey: string, frame: LiveFrame): void {
    for (const t of this.taps) {
      try {
        t(sessionKey, frame)
      } catch {
        // a tap's failure is its own
      }
    }
    this.each(sessionKey, (l) => l.live?.(frame))
  }

  deliverPoke(sessionKey: string): void {
    this.each(sessionKey, (l) => l.poke?.())
  }

  /** Whether a handler here took the wake. */
  deliverWake(sessionKey: string): boolean {
    let taken = false
    for (const h of [...this.wakeHandlers]) {
      try {
        if (h(sessionKey) === true) taken = true
      } catch {
        // ignore
      }
    }
    return taken
  }

  resetAll(): void {
    for (const key of [...this.sessions.keys()]) this.each(key, (l) => l.reset?.())
    this.deliverInvalidate(null)
  }

  private readonly invalidateHandlers = new Set<(topic: string | null) => void>()

  onInvalidate(handler: (topic: string | null) => void): () => void {
    this.invalidateHandlers.add(handler)
    return () => this.invalidateHandlers.delete(handler)
  }

  deliverInvalidate(topic: string | null): void {
    for (const h of [...this.invalidateHandlers]) {
      try {
        h(topic)
      } catch {
        // a handler's failure is its own
      }
    }
  }

  async invalidate(topic: string): Promise<void> {
    this.deliverInvalidate(topic)
  }

  publishCommit(sessionKey: string, events: readonly StoredEvent[]): void {
    if (events.length) this.deliverCommit(sessionKey, { seq: events[events.length - 1].seq, events })
  }

  publishLive(sessionKey: string, frame: LiveFrame): void {
    this.deliverLive(sessionKey, frame)
  }

  poke(sessionKey: string): void {
    this.deliverPoke(sessionKey)
  }

  async pokeNow(sessionKey: string): Promise<void> {
    this.poke(sessionKey)
  }

  /** Whether a handler here took the wake. */
  wake(sessionKey: string): boolean {
    return this.deliverWake(sessionKey)
  }

  onWake(handler: (sessionKey: string) => boolean | void): () => void {
    this.wakeHandlers.add(handler)
    return () => this.wakeHandlers.delete(handler)
  }

  async close(): Promise<void> {
    this.sessions.clear()
    this.wakeHandlers.clear()
    this.invalidateHandlers.clear()
    this.commandHandlers.clear()
  }
}
