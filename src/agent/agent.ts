// The Agent of one session in the process that holds its lease (SPEC §2.1, §5): the handle plugins
// see (followup, steer, inject, cancel, whenIdle), its phases and public status, deliveries and
// cancels from inside the lease holder, waking the driver (the turn loop is turn.ts), the bus and
// row flags it reacts to, maintenance and disposal. It is the loop instance the driver's parts see
// (context.ts Loop).

import type { Logger } from 'pino'
import type { Context } from 'cordis'
import type { Hooks } from '../hooks/index.js'
import { errorChain, listOf, planClear, planDelivery, ROUTE_WAKES, toUserMessage, type AgentCancelCause, type DeliveryRoute, type Json, type MessageInput, type SessionState, type UserMessage } from '../session/index.js'
import type { Db, SessionRow, StoredEvent } from '../store/index.js'
import type { LlmService } from '../llm/index.js'
import type { HostPolicy, ToolRegistry } from '../tools/index.js'
import type { Metrics } from '../metrics.js'
import { Abort, type AgentSpec, type Loop, type LoopServices } from './context.js'
import type { Accepted } from './intake.js'
import { LeaseLostError, SessionLog, type Lease, type UnitBuilder } from './log.js'
import { PendingCalls } from './pending.js'
import type { SystemPromptService } from './prompt.js'
import type { Publisher } from './publish.js'
import { drive, openTurn, type DriverControl, type OpenedTurn } from './turn.js'

export type Phase = 'idle' | 'running' | 'maintenance'

/** What a plugin sees as `payload.agent` (API.md §11). */
export interface AgentHandle {
  readonly id: string
  readonly status: 'idle' | 'running'
  followup(m: MessageInput): Promise<Accepted>
  steer(m: MessageInput): Promise<Accepted>
  inject(m: MessageInput): Promise<Accepted>
  cancel(opts?: { keepInbox?: boolean; reason?: string }): Promise<{ cancelled: boolean }>
  whenIdle(): Promise<void>
}

export interface AgentDeps {
  db: Db
  publisher: Publisher
  log: Logger
  root: Context
  llm: LlmService
  toolPolicy: HostPolicy
  metrics?: Metrics
  maxParallelToolCalls: () => number
  /** the pool of SessionLog dependencies (mutex etc.) */
  makeLog: (key: string, id: string, state: SessionState) => SessionLog
}

const AGENT = Symbol.for('agentd.agent')

/** The Agent behind a handle (built-in plugins reach the log through it). */
export function agentOf(handle: unknown): Agent | undefined {
  return (handle as Record<symbol, Agent> | undefined)?.[AGENT]
}

export class Agent implements Loop {
  readonly id: string
  readonly key: string
  phase: Phase = 'idle'
  /** the running activity's abort (a driver run or maintenance) */
  private current: Abort | undefined
  private activity: Promise<void> | undefined
  private waking: Promise<void> | undefined
  private idleWaiters: Array<() => void> = []
  private ended = false
  private stopped = false
  readonly series: Loop['series']
  private revision = 0
  inflight: Loop['inflight']
  readonly pending: PendingCalls
  private syncing: Promise<void> | undefined
  private syncAgain = false
  private unsubscribe: () => void = () => {}
  readonly hooks: Hooks
  readonly services: LoopServices
  private readonly handles = new Map<string, AgentHandle>()
  private readonly sessionLog: SessionLog
  readonly log: Loop['log']
  readonly logger: Logger

  constructor(
    private readonly d: AgentDeps,
    row: SessionRow,
    state: SessionState,
    readonly spec: AgentSpec,
    lease: Lease,
  ) {
    this.id = row.id
    this.key = row.key
    this.sessionLog = d.makeLog(row.key, row.id, state)
    this.sessionLog.lease = lease
    this.log = this.sessionLog
    this.logger = d.log.child({ tenantId: row.tenantId, sessionId: row.id, leaseToken: lease.token })
    // SPEC §8.7: the captured generation starts at attach
    this.series = { headerLogged: false, capturedGeneration: state.replaceGeneration }
    this.pending = new PendingCalls(d.db, row.key)
    // cordis services are looked up once: property access on a context goes through its proxy
    const root = d.root as unknown as { hooks: Hooks; tools: ToolRegistry; systemPrompt: SystemPromptService }
    this.hooks = root.hooks
    this.services = { db: d.db, llm: d.llm, registry: root.tools, systemPrompt: root.systemPrompt, toolPolicy: d.toolPolicy, metrics: d.metrics, maxParallelToolCalls: d.maxParallelToolCalls }
    // every commit and sync reports the row: a cancel request or a wake is noticed at once
    this.sessionLog.onRow = (r) => this.react(r)
  }

  get state(): SessionState {
    return this.sessionLog.state
  }

  /** The lease this Agent appends under. */
  get lease(): Lease {
    return this.sessionLog.lease
  }

  /** Forgets the row flags last seen: the next unit reads the row again. */
  forgetRow(): void {
    this.sessionLog.row = undefined
  }

  get status(): 'idle' | 'running' {
    return this.phase === 'running' ? 'running' : 'idle'
  }

  get busy(): boolean {
    return this.phase !== 'idle' || !!this.activity
  }

  /** Disposed, or stopped by a lost lease: it starts nothing more. */
  get disposed(): boolean {
    return this.ended
  }

  /** The running activity's signal (for built-in plugins' own waits). */
  get signal(): AbortSignal | undefined {
    return this.current?.signal
  }

  nextRevision(): number {
    return ++this.revision
  }

  /** The in-flight attempt as a snapshot frame for a late subscriber (API.md §6). */
  snapshotFrame(): { event: string; data: unknown } | undefined {
    const f = this.inflight
    if (!f) return undefined
    return { event: 'agent/assistant-stream', data: { kind: 'snapshot', attemptId: f.attemptId, revision: f.revision, turn: f.turn, step: f.step, stream: structuredClone(f.acc.records) } }
  }

  // ------------------------------------------------------------------------------------------
  // The handle and notifications

  /** The Agent handle a plugin sees; its deliveries default to source {kind:'plugin', plugin}. */
  handle(plugin = 'agentd'): AgentHandle {
    let h = this.handles.get(plugin)
    if (h) return h
    const self = this
    h = {
      id: this.id,
      get status() {
        return self.status
      },
      followup: (m) => this.send(m, 'followup', plugin),
      steer: (m) => this.send(m, 'steer', plugin),
      inject: (m) => this.send(m, 'inject', plugin),
      cancel: (o) => this.cancel(o?.reason ? { kind: 'hook', reason: o.reason } : { kind: 'user' }, { keepInbox: o?.keepInbox }),
      whenIdle: () => this.whenIdle(),
    }
    Object.defineProperty(h, AGENT, { value: this, enumerable: false })
    this.handles.set(plugin, h)
    return h
  }

  /** Rebinds `agent` in a hook payload to the listening plugin's handle. */
  readonly bind = (payload: unknown, plugin: string) => {
    const p = payload as Record<string, unknown>
    return p && typeof p === 'object' && 'agent' in p ? { ...p, agent: this.handle(plugin) } : payload
  }

  private readonly handleFor = (plugin: string) => this.handle(plugin || 'agentd')

  readonly notify = (name: string, payload: Record<string, unknown>, wire: unknown = payload): void => {
    this.d.publisher.live({ key: this.key, id: this.id }, name, payload, this.handleFor, wire)
  }

  /**
   * Appends plugin-owned durable events (SPEC §3.6: llm/retry, compaction/*) as one fenced unit;
   * `build` may add several drafts, each folded at once.
   */
  async appendOwned<T = void>(build: (u: UnitBuilder) => T): Promise<{ events: StoredEvent[]; value: T }> {
    const r = await this.log.commit<T>((u) => ({ value: build(u) }))
    return { events: r.events, value: r.value }
  }

  /** The public status last announced: agent/status goes out exactly when it changes (SPEC §5.1). */
  private emitted: 'idle' | 'running' = 'idle'

  private announce(): void {
    if (this.status === this.emitted) return
    this.emitted = this.status
    this.notify('agent/status', { status: this.status })
  }

  private setPhase(p: Phase): void {
    this.phase = p
    this.announce()
    if (p === 'idle') {
      const w = this.idleWaiters
      this.idleWaiters = []
      for (const r of w) r()
    }
  }

  /** Resolves once neither a driver nor maintenance runs (SPEC §5.6). */
  whenIdle(): Promise<void> {
    if (this.phase === 'idle' && !this.activity) return Promise.resolve()
    return new Promise((r) => this.idleWaiters.push(r))
  }

  // ------------------------------------------------------------------------------------------
  // Delivery and cancel from inside the lease holder (plugins, tools)

  /**
   * SPEC §4.4 send(): one splice; a waking delivery to an idle Agent resolves only after the wake
   * prefix committed too (C2).
   */
  async send(input: MessageInput, route: DeliveryRoute, plugin: string): Promise<Accepted> {
    if (this.d.publisher.isPublishing(this.key)) throw new Error('a session/event observer may not append to the session it observes (SPEC §3.1.5)')
    if (this.disposed) throw new Error(`the Agent of session ${this.id} is disposed`)
    const message = toUserMessage(input, { kind: 'plugin', plugin })
    const r = await this.log.commit<number>((u) => {
      // the view is read lazily: only the row flags a route looks at condition the append
      const self = this
      const plan = planDelivery(this.state.inbox, route, message, {
        get idle() {
          return self.phase === 'idle' && u.row.runState === 'idle'
        },
        get maintenance() {
          return self.phase === 'maintenance'
        },
        get cancelling() {
          return self.converging() || u.row.cancelPending
        },
      })
      const e = u.add({ type: 'agent/inbox/spliced', data: plan.splice as unknown as Json })
      return { patch: plan.flags, value: e.seq }
    })
    this.notify('agent/inbox/inserted', { message })
    // C2: a waking delivery to an idle Agent resolves once the wake prefix committed (maybe started by the row flag)
    if (ROUTE_WAKES[route] && !this.disposed) await this.wake()
    return { messageId: message.id, seq: r.value }
  }

  /** SPEC §5.5: clear the inbox unless keepInbox, then abort whatever runs. */
  async cancel(cause: AgentCancelCause, o: { keepInbox?: boolean } = {}): Promise<{ cancelled: boolean }> {
    const running = this.phase !== 'idle'
    // SPEC §18.9: an observer's cancel aborts at once; its inbox clearing waits for the publication
    if (running) this.abort(cause)
    if (!o.keepInbox) await new Promise<void>((resolve, reject) => this.d.publisher.whenNotPublishing(this.key, () => void this.clearInbox().then(resolve, reject)))
    return { cancelled: running }
  }

  private async clearInbox(): Promise<void> {
    let removed: UserMessage[] = []
    // a build may run twice (fast path, then locked path): it must not keep side effects
    await this.log.commit((u) => {
      removed = []
      for (const d of planClear(this.state.inbox)) {
        removed.push(...listOf(this.state.inbox, d.target))
        u.add({ type: 'agent/inbox/spliced', data: d as unknown as Json })
      }
      return { patch: { wakeLatched: false } }
    })
    for (const message of removed) this.notify('agent/inbox/discarded', { message })
  }

  private abort(cause: AgentCancelCause): void {
    this.current?.abort(cause)
  }

  /** An aborted activity still converging (a cancel, not a disposal): waking input latches. */
  private converging(): boolean {
    return this.phase !== 'idle' && !!this.current?.aborted && !this.current.disposing
  }

  // ------------------------------------------------------------------------------------------
  // Waking the driver (SPEC §5.2–§5.4, §18.4–§18.5)

  /** A durable wake request found by the lease holder (doorbell, attach). */
  async wakeDurable(): Promise<void> {
    if (this.disposed) return
    try {
      await this.wake()
    } catch (e) {
      if (e instanceof LeaseLostError) this.lost(e)
      else this.logger.warn({ err: errorChain(e) }, 'wake failed')
    }
  }

  /**
   * The wake prefix: running, then turn/start and the claim in ONE unit (SPEC §5.2); the driver runs
   * on as the activity. A wake with nothing to do (or one a cancel spent) settles the row without a turn.
   */
  private wake(): Promise<void> {
    // one wake at a time: a second caller (a delivery racing a doorbell) waits for the same prefix
    if (this.waking) return this.waking
    if (this.phase !== 'idle' || this.activity) return Promise.resolve()
    const p = this.wakeOnce().finally(() => {
      if (this.waking === p) this.waking = undefined
    })
    this.waking = p
    return p
  }

  private async wakeOnce(): Promise<void> {
    this.current = new Abort()
    this.phase = 'running'
    const prefix = (async () => {
      let opened: OpenedTurn | null
      try {
        opened = await openTurn(this.control, true)
      } catch (e) {
        this.phase = 'idle'
        throw e
      }
      if (!opened) this.phase = 'idle'
      else this.activity = this.runDriver(opened)
    })()
    this.activity = prefix
    try {
      await prefix
    } finally {
      if (this.activity === prefix) this.activity = undefined
      if ((this.phase as Phase) === 'idle') this.setPhase('idle')
    }
  }

  /** What the turn loop may do to this Agent between turns. */
  private readonly control: DriverControl = {
    loop: this,
    current: () => this.current!,
    renew: () => (this.current = new Abort()),
    announce: () => this.announce(),
    relatch: () => {
      // SPEC §5.3: leaving the driver makes the Agent idle; the latch wakes it once more
      this.setPhase('idle')
      this.phase = 'running'
    },
  }

  private async runDriver(first: OpenedTurn): Promise<void> {
    try {
      await drive(this.control, first)
    } catch (e) {
      this.failStop(e)
    } finally {
      this.activity = undefined
      this.setPhase('idle')
    }
  }

  /** The process can no longer append: stop driving and let the next lease holder repair (SPEC §5.7). */
  private failStop(e: unknown): void {
    this.logger.error({ err: errorChain(e) }, 'the driver stopped: it can no longer append to the session')
    if (e instanceof LeaseLostError) this.lost(e)
    else this.onFatal?.(e)
  }

  /** Set by the host: release the session after a fatal append failure. */
  onFatal?: (e: unknown) => void
  /** Set by the host: the lease is gone (or the session deleted). */
  onLost?: (e: LeaseLostError) => void

  private lost(e: LeaseLostError): void {
    if (this.stopped) return
    this.stopped = true
    this.ended = true
    this.abort({ kind: 'disposed' })
    this.unsubscribe()
    this.pending.releaseAll()
    this.onLost?.(e)
  }

  // ------------------------------------------------------------------------------------------
  // What others committed: doorbells, pokes and the row flags

  /** Bus wiring: doorbells, pokes. Called by the host after attach. */
  listen(subscribe: (l: { commit?: (n: { seq: number; remote?: boolean; events?: readonly StoredEvent[] }) => void; poke?: () => void; reset?: () => void }) => () => void): void {
    this.unsubscribe = subscribe({
      commit: (n) => {
        if (n.seq <= this.state.headSeq) return
        // this process's own commits (deliveries) fold without a read; others' need one
        if (n.events?.length) void this.sessionLog.foldLocal(n.events).then((ok) => ok || this.requestSync(), () => this.requestSync())
        else this.requestSync()
      },
      poke: () => this.requestSync(),
      reset: () => this.requestSync(),
    })
  }

  /** Folds what others committed and reacts to row flags: cancel, answers, wakes. Coalesced. */
  requestSync(): void {
    if (this.stopped) return
    if (this.syncing) {
      this.syncAgain = true
      return
    }
    this.syncing = (async () => {
      do {
        this.syncAgain = false
        try {
          await this.sessionLog.sync()
          if (this.pending.waits) await this.pending.check()
        } catch (e) {
          if (e instanceof LeaseLostError) this.lost(e)
          else this.logger.warn({ err: errorChain(e) }, 'session sync failed')
        }
      } while (this.syncAgain && !this.stopped)
      this.syncing = undefined
    })()
  }

  private react(row: { cancelPending: boolean; runState: string }): void {
    if (row.cancelPending && this.phase !== 'idle' && this.current && !this.current.aborted) this.abort({ kind: 'user' })
    if (this.phase === 'idle' && row.runState !== 'idle' && !this.activity) void this.wakeDurable()
  }

  // ------------------------------------------------------------------------------------------
  // Maintenance and disposal (SPEC §5.6, §5.7)

  private hasWork(): boolean {
    return this.state.inbox.nextTurn.length > 0 || this.state.inbox.nextStep.length > 0
  }

  /** Runs task while idle as maintenance; a wake latched meanwhile fires afterwards. */
  async runMaintenance<T>(task: (signal: AbortSignal) => Promise<T>): Promise<T> {
    if (this.phase !== 'idle' || this.activity) throw new Error('maintenance needs an idle Agent')
    const abort = (this.current = new Abort())
    this.setPhase('maintenance')
    let done!: () => void
    this.activity = new Promise<void>((r) => (done = r))
    try {
      await this.log.commit(() => ({ patch: { runState: 'maintenance' } }))
      return await task(abort.signal)
    } finally {
      let latched = false
      try {
        const r = await this.log.commit<boolean>((u) => {
          latched = u.row.wakeLatched && this.hasWork() && !this.disposed
          return { patch: { runState: latched ? 'wanted' : 'idle', wakeLatched: false, cancelPending: false }, value: latched }
        })
        latched = r.value
      } catch (e) {
        this.logger.warn({ err: errorChain(e) }, 'could not end maintenance')
      }
      this.activity = undefined
      done()
      this.setPhase('idle')
      if (latched) void this.wakeDurable()
    }
  }

  /** Disposal (lease release, shutdown, deletion): abort {disposed}, close the turn balanced, stop. */
  async dispose(): Promise<void> {
    if (this.ended && this.stopped) return
    this.ended = true
    this.abort({ kind: 'disposed' })
    this.pending.releaseAll()
    while (this.activity) await this.activity.catch(() => {})
    this.stopped = true
    this.unsubscribe()
    this.notify('agent/disposed', {})
  }
}
