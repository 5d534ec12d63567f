// Publication after commit (SPEC §2.8, §3.1.5, §3.7, §18.11): durable events go to the bus (local
// subscribers and other processes) and to plugins' `session/event`; live notifications go to the bus
// (wire payload without `agent`) and to plugins' `agent/*` listeners (payload with `agent`).

import type { Logger } from 'pino'
import type { Bus } from '../bus/index.js'
import { emitContained, hasListeners, type Context } from '../hooks/index.js'
import type { StoredEvent } from '../store/index.js'

/** The notifications subscribers receive (API.md §6, SPEC §18.11); the rest stay in the process. */
export const WIRE_NOTIFICATIONS = new Set(['agent/status', 'agent/session-start', 'agent/inbox/inserted', 'agent/inbox/claimed', 'agent/inbox/discarded', 'agent/assistant-stream', 'agent/error'])

export interface SessionRef {
  key: string
  id: string
  /** set where the committer knows it (the driver, crash repair): commit observers use it */
  tenantId?: string
}

/** Work that follows a commit in this process besides fan-out (tenancy: slot rings, metrics). */
export type CommitObserver = (s: SessionRef, events: readonly StoredEvent[]) => void

export class Publisher {
  private readonly publishing = new Set<string>()
  /** work to run once a session's publication ends (a cancel issued by an observer, SPEC §18.9) */
  private readonly afterPublish = new Map<string, Array<() => void>>()
  private readonly observers = new Set<CommitObserver>()

  constructor(readonly bus: Pick<Bus, 'live' | 'doorbells'>, readonly root: Context, readonly log: Logger) {}

  /** While true, appends by observers must be refused (SPEC §3.1.5). */
  isPublishing(key: string): boolean {
    return this.publishing.has(key)
  }

  /** Runs fn now, or when the session's current publication ends. */
  whenNotPublishing(key: string, fn: () => void): void {
    if (!this.publishing.has(key)) return fn()
    let l = this.afterPublish.get(key)
    if (!l) this.afterPublish.set(key, (l = []))
    l.push(fn)
  }

  /** Adds a commit observer; a throwing one is logged and the others still run. */
  observe(fn: CommitObserver): () => void {
    this.observers.add(fn)
    return () => void this.observers.delete(fn)
  }

  committed(s: SessionRef, events: readonly StoredEvent[]): void {
    if (!events.length) return
    this.bus.live.publishCommit(s.key, events)
    for (const o of this.observers) {
      try {
        o(s, events)
      } catch (err) {
        this.log.warn({ err, sessionId: s.id }, 'commit observer failed')
      }
    }
    if (!hasListeners(this.root, 'session/event')) return
    this.publishing.add(s.key)
    try {
      for (const e of events) emitContained(this.root, 'session/event', [{ ...e, sessionId: s.id }], (err, plugin) => this.log.warn({ err, plugin, sessionId: s.id }, 'session/event listener failed'))
    } finally {
      this.publishing.delete(s.key)
      const after = this.afterPublish.get(s.key)
      if (after) {
        this.afterPublish.delete(s.key)
        for (const fn of after) fn()
      }
    }
  }

  /**
   * A live notification. `wire` is what subscribers receive (defaults to the payload); plugins get
   * the payload plus `agent`.
   */
  live(s: SessionRef, name: string, payload: Record<string, unknown>, agent?: unknown | ((plugin: string) => unknown), wire: unknown = payload): void {
    if (WIRE_NOTIFICATIONS.has(name)) this.bus.live.publishLive(s.key, { event: name, data: wire })
    if (!hasListeners(this.root, name)) return
    // each listener gets the handle of its own plugin (its deliveries default to its source)
    const args = typeof agent === 'function' ? (plugin: string) => [{ ...payload, agent: (agent as (p: string) => unknown)(plugin) }] : [{ ...payload, agent }]
    emitContained(this.root, name, args, (err, plugin) => this.log.warn({ err, plugin, sessionId: s.id, notification: name }, 'notification listener failed'))
  }
}
