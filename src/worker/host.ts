// The driver host: which sessions this process drives. Leases are rows (owner, token, expiry in the
// database's clock); a claim or takeover attaches a loop instance (crash repair in the same
// transaction); renewal keeps them; idle sessions are released; a lost lease stops its Agent.

import crypto from 'node:crypto'
import os from 'node:os'
import type { Logger } from 'pino'
import { Agent, attach, errorChain, type AgentDeps, type AgentHost, type AgentSpec, type Lease } from '../agent/index.js'
import type { Doorbells } from '../bus/index.js'
import { tracingOn } from '../tracing/index.js'
import { agents, claimLease, getSessionByKey, releaseIfIdle, releaseLease, renewLeases, takeoverCandidates, type Db, type Queryable, type SessionRow } from '../store/index.js'
import type { KeyedMutex, Publisher } from '../agent/index.js'
import type { Metrics } from '../metrics.js'
import type { McpServerSpec, ToolSpec } from '../tools/index.js'

export interface HostOptions {
  db: Db
  doorbells: Doorbells
  publisher: Publisher
  mutex: KeyedMutex
  log: Logger
  metrics?: Metrics
  leaseTtlMs: number
  idleReleaseMs: number
  /** how often workers look for sessions to take over (SPEC §13.3a: within 2 s) */
  scanMs?: number
  agentDeps: AgentDeps
}

interface Held {
  agent: Agent
  idleSince: number | undefined
  releasing?: boolean
}

/** The held sessions by key, and the same by session id (a request names the id). */
class HeldSessions extends Map<string, Held> {
  private readonly ids = new Map<string, string>()

  override set(key: string, h: Held): this {
    this.ids.set(h.agent.id, key)
    return super.set(key, h)
  }

  override delete(key: string): boolean {
    const h = this.get(key)
    if (h && this.ids.get(h.agent.id) === key) this.ids.delete(h.agent.id)
    return super.delete(key)
  }

  byId(id: string): Held | undefined {
    const key = this.ids.get(id)
    return key === undefined ? undefined : this.get(key)
  }
}

export class WorkerHost {
  readonly owner = `${os.hostname()}:${process.pid}:${crypto.randomBytes(4).toString('hex')}`
  private readonly held = new HeldSessions()
  private readonly claiming = new Map<string, Promise<Agent | null>>()
  /** sessions whose log does not fold: not driven again until the backoff passes */
  private readonly broken = new Map<string, number>()
  private timers: NodeJS.Timeout[] = []
  private stopping = false
  private offWake: () => void = () => {}

  constructor(private readonly o: HostOptions) {}

  start(): void {
    this.offWake = this.o.doorbells.onWake((key) => this.onWake(key))
    const renewEvery = Math.max(100, Math.floor(this.o.leaseTtlMs / 3))
    this.timers.push(setInterval(() => void this.renew(), renewEvery))
    this.timers.push(setInterval(() => void this.scan(), this.o.scanMs ?? Math.min(1000, renewEvery)))
    this.timers.push(setInterval(() => void this.releaseIdle(), Math.max(100, Math.min(1000, Math.floor(this.o.idleReleaseMs / 3) || 100))))
    for (const t of this.timers) t.unref()
    void this.scan()
  }

  get size(): number {
    return this.held.size
  }

  /** Held sessions whose Agent is in the running phase (a turn or its wake prefix). */
  get running(): number {
    let n = 0
    for (const h of this.held.values()) if (h.agent.phase === 'running') n++
    return n
  }

  agent(key: string): Agent | undefined {
    return this.held.get(key)?.agent
  }

  /** The Agent of session `id` while this process drives it (not while it is being released). */
  local(id: string): Agent | undefined {
    const h = this.held.byId(id)
    return h && !h.releasing && !h.agent.disposed ? h.agent : undefined
  }

  /** The Agents this process drives. */
  *agents(): IterableIterator<Agent> {
    for (const h of this.held.values()) yield h.agent
  }

  /**
   * A wake request: the local Agent takes it, else try to claim the session. True when an Agent held
   * here (and not being released) took it, so the bus need not ask other processes.
   */
  onWake(key: string): boolean {
    if (this.stopping) return false
    const h = this.held.get(key)
    if (h) {
      // the wake prefix runs under the row lock and catches up on its own
      h.idleSince = undefined
      void h.agent.wakeDurable()
      return !h.releasing
    }
    void this.claim(key)
    return false
  }

  /**
   * Claims the lease when it is free, expired, or already ours, and attaches a loop instance. The
   * claim, any crash repair and the end-seed marker commit together.
   */
  claim(key: string, opts: { skipLocked?: boolean } = {}): Promise<Agent | null> {
    if (this.stopping) return Promise.resolve(null)
    const existing = this.held.get(key)
    if (existing) return Promise.resolve(existing.agent)
    const pending = this.claiming.get(key)
    if (pending) return pending
    const until = this.broken.get(key)
    if (until && until > Date.now()) return Promise.resolve(null)
    const p = this.doClaim(key, opts).finally(() => this.claiming.delete(key))
    this.claiming.set(key, p)
    return p
  }

  private async doClaim(key: string, opts: { skipLocked?: boolean }): Promise<Agent | null> {
    const { db, log } = this.o
    let takeover = false
    let attached
    try {
      attached = await attach({ db, mutex: this.o.mutex, publisher: this.o.publisher }, key, async (tx: Queryable) => {
        const c = await claimLease(tx, key, this.owner, this.o.leaseTtlMs, opts)
        if (!c) return null
        takeover = c.takeover
        return { row: c.row, lease: { owner: this.owner, token: c.row.leaseToken } satisfies Lease }
      })
    } catch (e) {
      log.error({ err: errorChain(e), sessionKey: key }, 'could not attach the session; it is not driven for a minute')
      this.broken.set(key, Date.now() + 60000)
      await this.releaseRow(key).catch(() => {})
      return null
    }
    if (!attached) return null
    if (this.stopping) {
      await this.releaseRow(key).catch(() => {})
      return null
    }
    this.o.metrics?.leaseClaims.inc()
    if (takeover || attached.repaired) this.o.metrics?.takeovers.inc()
    // crash repair closed a turn the previous holder left open (SPEC §13.1)
    if (attached.repaired) this.o.metrics?.turns.inc({ reason: 'interrupted' })
    const r = attached.row
    const spec: AgentSpec = { model: r.model, system: r.system, tools: r.tools as unknown as ToolSpec[], mcpServers: r.mcpServers as unknown as McpServerSpec[], ...(r.maxTokens !== undefined ? { maxTokens: r.maxTokens } : {}), ...(r.reasoningEffort !== undefined ? { reasoningEffort: r.reasoningEffort } : {}) }
    if (r.agent) spec.agent = { ...r.agent, ...(await this.agentName(r)) }
    const agent = new Agent(this.o.agentDeps, attached, spec, this.agentHost)
    const held: Held = { agent, idleSince: Date.now() }
    this.held.set(key, held)
    agent.listen()
    const handleFor = (plugin: string) => agent.handle(plugin || 'agentd')
    this.o.publisher.live({ key, id: r.id }, 'agent/created', {}, handleFor)
    this.o.publisher.live({ key, id: r.id }, 'agent/session-start', { source: attached.source }, handleFor)
    log.debug({ sessionId: r.id, lease: attached.lease.token, repaired: attached.repaired }, 'session attached')
    // SPEC §18.5: a run state other than idle is an unspent wake
    if (r.runState !== 'idle') void agent.wakeDurable()
    return agent
  }

  /** What an Agent may tell the host about itself. */
  private readonly agentHost: AgentHost = {
    leaseLost: (agent, e) => {
      this.o.log.warn({ sessionId: agent.id, reason: e.reason }, 'lease lost; the Agent stopped')
      if (this.held.get(agent.key)?.agent === agent) this.held.delete(agent.key)
    },
    // only the Agent held under its key: a newer one claimed since is not the one that failed
    cannotAppend: (agent) => {
      if (this.held.get(agent.key)?.agent === agent) void this.drop(agent.key, { release: true })
    },
  }

  /**
   * Extends every held lease; any we no longer hold stops its Agent at once. It judges only the
   * Agents it asked about: one claimed meanwhile (the session released and claimed again) holds a
   * newer lease than the answer, and disposing it would end its turn aborted (SPEC §5.7, §19).
   */
  private renewing = false

  private async renew(): Promise<void> {
    if (!this.held.size || this.renewing) return
    this.renewing = true
    const asked = [...this.held]
    try {
      // rows locked in key order, one renewal at a time: no lock cycle with other renewals or appends
      const still = await renewLeases(this.o.db, asked.map(([key]) => key), this.owner, this.o.leaseTtlMs)
      for (const [key, h] of asked) {
        if (this.held.get(key) !== h || still.get(key) === h.agent.lease.token) continue
        this.held.delete(key)
        h.agent.forgetRow()
        void h.agent.dispose()
        const deleted = !(await getSessionByKey(this.o.db, key))
        this.o.log.warn({ sessionId: h.agent.id, deleted }, deleted ? 'session deleted; its Agent stopped' : 'lease lost at renewal; the Agent stopped')
      }
    } catch (e) {
      this.o.log.warn({ err: errorChain(e) }, 'lease renewal failed')
    } finally {
      this.renewing = false
    }
  }

  /** SPEC §13.3a: take over sessions with work or an open turn whose lease expired. */
  private async scan(): Promise<void> {
    if (this.stopping) return
    try {
      for (const key of await takeoverCandidates(this.o.db)) if (!this.held.has(key)) void this.claim(key, { skipLocked: true })
    } catch (e) {
      this.o.log.debug?.({ err: errorChain(e) }, 'takeover scan failed')
    }
  }

  /** Releases sessions idle for AGENTD_IDLE_RELEASE_MS (SPEC §13.3a). */
  private async releaseIdle(): Promise<void> {
    const now = Date.now()
    for (const [key, h] of this.held) {
      if (h.releasing) continue
      if (h.agent.busy) {
        h.idleSince = undefined
        continue
      }
      h.idleSince ??= now
      if (now - h.idleSince >= this.o.idleReleaseMs) void this.drop(key, { release: true, onlyIfIdle: true })
    }
  }

  /** Disposes a session's Agent and releases its lease (only if still idle, when asked). */
  async drop(key: string, o: { release: boolean; onlyIfIdle?: boolean }): Promise<void> {
    const h = this.held.get(key)
    if (!h || h.releasing) return
    h.releasing = true
    try {
      if (o.onlyIfIdle) {
        // atomically: only an idle row with our lease is released; a delivery meanwhile keeps it
        const released = await this.o.mutex.run(key, () => releaseIfIdle(this.o.db, key, this.owner, h.agent.lease.token, () => !h.agent.busy))
        if (!released) {
          h.releasing = false
          h.idleSince = undefined
          h.agent.requestSync()
          return
        }
        this.held.delete(key)
        await h.agent.dispose()
        return
      }
      await h.agent.dispose()
      this.held.delete(key)
      if (o.release) await this.releaseRow(key, h.agent.lease.token)
    } catch (e) {
      this.o.log.warn({ err: errorChain(e), sessionId: h.agent.id }, 'release failed')
      this.held.delete(key)
    }
  }

  /** API.md §19: the turn span's gen_ai.agent.name, read only when spans are recorded (a deleted agent has none). */
  private async agentName(r: SessionRow): Promise<{ name?: string }> {
    if (!r.agent || !tracingOn()) return {}
    const v = await agents.readAgent(this.o.db, r.tenantId, r.agent.id, r.agent.version).catch(() => undefined)
    return v?.name ? { name: v.name } : {}
  }

  private async releaseRow(key: string, token?: number): Promise<void> {
    await releaseLease(this.o.db, key, this.owner, token)
  }

  /** A session was deleted: stop its Agent without writing. */
  deleted(key: string): void {
    const h = this.held.get(key)
    if (!h) return
    this.held.delete(key)
    h.agent.requestSync() // its sync finds no row: LeaseLostError('deleted') stops it
  }

  /**
   * SIGTERM (SPEC §18.12): stop claiming, let running turns finish within graceMs, then dispose
   * every Agent (open turns end aborted {disposed}, balanced) and release the leases.
   */
  async stop(graceMs: number): Promise<void> {
    this.stopping = true
    this.offWake()
    for (const t of this.timers) clearInterval(t)
    this.timers = []
    await Promise.allSettled([...this.claiming.values()])
    const deadline = Date.now() + graceMs
    while ([...this.held.values()].some((h) => h.agent.busy) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50))
    await Promise.allSettled([...this.held.keys()].map((k) => this.drop(k, { release: true })))
  }
}

