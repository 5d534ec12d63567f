// The Agent of one session in the process that holds its lease (SPEC §2.1, §5): deliveries and
// cancels from its handles (handle.ts), waking the driver (the turn loop is turn.ts), the row flags
// it reacts to (watch.ts brings them), maintenance and disposal; its phases are phases.ts. It is the
// loop instance the driver's parts see (context.ts Loop); what it needs of the process hosting it
// comes in as an AgentHost.

import type { Logger } from 'pino'
import type { Context } from 'cordis'
import type { LiveAttempts } from '../bus/index.js'
import { unwrapService, type Hooks } from '../hooks/index.js'
import { errorChain, listOf, planClear, planDelivery, ROUTE_WAKES, toUserMessage, type AgentCancelCause, type DeliveryRoute, type Inbox, type Json, type MessageInput, type SessionState, type UserMessage } from '../session/index.js'
import { readSettings, type LeanRow, type SessionRow, type StoredEvent } from '../store/index.js'
import type { LlmService } from '../llm/index.js'
import { McpClients, type HostPolicy, type SecretResolver, type ToolRegistry } from '../tools/index.js'
import type { Metrics } from '../metrics.js'
import type { AgentSpec, Loop, LoopServices, TenantGate } from './context.js'
import { Series, SessionSettings } from './settings.js'
import { AGENT, Handles, type AgentHandle } from './handle.js'
import type { Accepted } from './intake.js'
import { runMaintenance } from './maintenance.js'
import { commitDecision, LeaseLostError, SessionLog, type Lease, type SessionLogDeps, type UnitBuilder } from './log.js'
import { PendingCalls } from './pending.js'
import { Phases, type Phase } from './phases.js'
import type { SystemPromptService } from './prompt.js'
import { wakeDriver } from './turn.js'
import { SessionWatch } from './watch.js'
import { continuationDelayMs, type ContinuationDuty } from './continuation.js'

/** What every Agent of this process shares. */
export interface AgentDeps {
  /** the database, the session mutex and publication, shared by every SessionLog */
  sessionLog: SessionLogDeps
  log: Logger
  root: Context
  llm: LlmService
  toolPolicy: HostPolicy
  metrics?: Metrics
  maxParallelToolCalls: () => number
  attempts: LiveAttempts
  /** tenant limits: the budget before every model attempt, slot waiting (API.md §15) */
  tenancy?: TenantGate
  /** AGENTD_CONTINUE_AFTER_CRASH (SPEC §19.5) */
  continueAfterCrash: number
  /** tenant secrets (API.md §13), resolved when a call is prepared or an MCP connection opens */
  secrets?: { resolve(tenantId: string, names: readonly string[]): Promise<{ values: Map<string, string>; missing: string[] }> }
  /** MCP tools/call timeout (default 30 s, the ToolSpec default) */
  mcpCallTimeoutMs?: number
}

/** The driver's view of the process hosting it (worker/), passed down at construction. */
export interface AgentHost {
  /** the lease is gone or the session deleted: the Agent stopped and writes nothing more */
  leaseLost(agent: Agent, e: LeaseLostError): void
  /** this process can no longer append to the session (SPEC §5.7): release it for the next holder */
  cannotAppend(agent: Agent, e: unknown): void
}

/** The Agent behind a handle (built-in plugins reach the log through it). */
export function agentOf(handle: unknown): Agent | undefined {
  return (handle as Record<symbol, Agent> | undefined)?.[AGENT]
}

export class Agent implements Loop {
  readonly id: string
  readonly key: string
  readonly tenantId: string
  readonly series: Series
  readonly settings: SessionSettings
  readonly pending: PendingCalls
  readonly mcp: McpClients
  readonly secrets: SecretResolver
  readonly hooks: Hooks
  readonly services: LoopServices
  readonly logger: Logger
  private readonly sessionLog: SessionLog
  private readonly run = new Phases((status) => this.notify('agent/status', { status }))
  private readonly handles = new Handles(this)
  private readonly watch: SessionWatch
  private waking: Promise<void> | undefined
  /** a durable wake came while a wake or its driver was in flight: look again once it ends (a slot may have freed) */
  private wakeAgain = false
  private ended = false
  private revision = 0
  /** SPEC §19.3: the continuation owed at attach, until the unit that opens or declines it commits */
  continuation: ContinuationDuty | null
  private readonly continuationAt: number
  private continuationTimer: NodeJS.Timeout | undefined

  constructor(
    private readonly d: AgentDeps,
    attached: { row: SessionRow; state: SessionState; lease: Lease; continuation?: ContinuationDuty | null },
    spec: AgentSpec,
    private readonly host: AgentHost,
  ) {
    const { row, state, lease } = attached
    this.continuation = attached.continuation ?? null
    this.continuationAt = this.continuation ? Date.now() + continuationDelayMs(this.continuation, d.continueAfterCrash) : 0
    this.id = row.id
    this.key = row.key
    this.tenantId = row.tenantId
    this.sessionLog = new SessionLog(d.sessionLog, row.key, row.id, state, lease, row.tenantId)
    this.logger = d.log.child({ tenantId: row.tenantId, sessionId: row.id, leaseToken: lease.token })
    // SPEC §8.7: the captured generation starts at attach
    this.series = new Series(state.replaceGeneration)
    this.pending = new PendingCalls(d.sessionLog.db, row.key)
    const tenantId = row.tenantId
    this.secrets = (names) => (d.secrets ? d.secrets.resolve(tenantId, names) : Promise.resolve({ values: new Map(), missing: [...names] }))
    this.mcp = new McpClients({ policy: d.toolPolicy, secrets: this.secrets, log: this.logger, callTimeoutMs: d.mcpCallTimeoutMs }, spec.mcpServers ?? [])
    // the first step after attach reads the settings once
    this.settings = new SessionSettings(spec, () => readSettings(d.sessionLog.db, row.key), (servers) => this.mcp.setServers(servers))
    // cordis services are looked up once, and unwrapped: every property access and method call on a
    // service through its context goes through proxies that track the caller (for plugins' disposal);
    // the driver registers nothing, so it calls the services themselves
    const root = d.root as unknown as { hooks: Hooks; tools: ToolRegistry; systemPrompt: SystemPromptService }
    this.hooks = unwrapService(root.hooks)
    this.services = { db: d.sessionLog.db, llm: d.llm, registry: unwrapService(root.tools), systemPrompt: unwrapService(root.systemPrompt), toolPolicy: d.toolPolicy, metrics: d.metrics, maxParallelToolCalls: d.maxParallelToolCalls, attempts: d.attempts, tenancy: d.tenancy, continueAfterCrash: d.continueAfterCrash }
    this.watch = new SessionWatch(d.sessionLog.publisher.bus.live, row.key, {
      log: this.sessionLog,
      pending: this.pending,
      react: (r) => this.react(r),
      poked: () => this.settings.poke(),
      lost: (e) => this.lost(e),
      warn: (o, msg) => this.logger.warn(o, msg),
    })
  }

  /**
   * Every unit of this Agent: SessionLog.commit, then the reaction to the row flags it saw (a cancel
   * request, a wake), once the session's mutex is released.
   */
  readonly log: Loop['log'] = {
    commit: async (build, opts) => {
      const r = await this.sessionLog.commit(build, opts)
      this.react(r.row)
      return r
    },
  }

  get state(): SessionState {
    return this.sessionLog.state
  }

  get phase(): Phase {
    return this.run.phase
  }

  get status(): 'idle' | 'running' {
    return this.run.status
  }

  get busy(): boolean {
    return this.run.busy
  }

  /** Disposed, or stopped by a lost lease: it starts nothing more. */
  get disposed(): boolean {
    return this.ended
  }

  /** The lease this Agent appends under. */
  get lease(): Lease {
    return this.sessionLog.lease
  }

  /**
   * What a delivery accepted in this process can plan on without reading the row (intake.ts
   * deliverLocal): the folded log (its next seq, last time and inbox, a copy) and the row flags this
   * driver last saw. A stale view only makes the delivery's conditional append fail and read the row.
   * Undefined once disposed, or while no row is known.
   */
  localRow(): (LeanRow & { inbox: Inbox }) | undefined {
    const row = this.sessionLog.row
    if (!row || this.disposed) return undefined
    const s = this.state
    return { ...row, nextSeq: s.nextSeq, lastTime: s.lastTime, inbox: structuredClone(s.inbox) }
  }

  /** Forgets the row flags last seen: the next unit reads the row again. */
  forgetRow(): void {
    this.sessionLog.row = undefined
  }

  nextRevision(): number {
    return ++this.revision
  }

  /** The Agent handle a plugin sees (API.md §11). */
  handle(plugin = 'agentd'): AgentHandle {
    return this.handles.of(plugin)
  }

  readonly bind = this.handles.bind

  readonly notify = (name: string, payload: Record<string, unknown>, wire: unknown = payload): void => {
    this.d.sessionLog.publisher.live({ key: this.key, id: this.id }, name, payload, this.handles.forPlugin, wire)
  }

  /**
   * Appends plugin-owned durable events (SPEC §3.6: llm/retry, compaction/*) as one fenced unit;
   * `build` may add several drafts, each folded at once.
   */
  async appendOwned<T = void>(build: (u: UnitBuilder) => T): Promise<{ events: StoredEvent[]; value: T }> {
    const r = await this.log.commit<T>((u) => ({ value: build(u) }))
    return { events: r.events, value: r.value }
  }

  /** Resolves once neither a driver nor maintenance runs (SPEC §5.6). */
  whenIdle(): Promise<void> {
    return this.run.whenIdle()
  }

  // ------------------------------------------------------------------------------------------
  // Delivery and cancel from inside the lease holder (plugins, tools)

  /**
   * SPEC §4.4 send(): one splice; a waking delivery to an idle Agent resolves only after the wake
   * prefix committed too (C2).
   */
  async send(input: MessageInput, route: DeliveryRoute, plugin: string): Promise<Accepted> {
    if (this.d.sessionLog.publisher.isPublishing(this.key)) throw new Error('a session/event observer may not append to the session it observes (SPEC §3.1.5)')
    if (this.disposed) throw new Error(`the Agent of session ${this.id} is disposed`)
    const message = toUserMessage(input, { kind: 'plugin', plugin })
    const run = this.run
    const r = await commitDecision<void, 'runState' | 'cancelPending'>(this.log, (u) => {
      // a waking route decides on the row's flags: they are the unit's declared inputs
      const plan = planDelivery(this.state.inbox, route, message, {
        get idle() {
          return run.phase === 'idle' && u.row.runState === 'idle'
        },
        get maintenance() {
          return run.phase === 'maintenance'
        },
        get cancelling() {
          return run.converging || u.row.cancelPending
        },
      })
      u.add({ type: 'agent/inbox/spliced', data: plan.splice as unknown as Json })
      return { patch: plan.flags }
    }, { reads: ROUTE_WAKES[route] ? ['inbox', 'runState', 'cancelPending'] : ['inbox'] })
    this.notify('agent/inbox/inserted', { message })
    // C2: a waking delivery to an idle Agent resolves once the wake prefix committed (maybe started by the row flag)
    if (ROUTE_WAKES[route] && !this.disposed) await this.wake()
    return { messageId: message.id, seq: r.events[0].seq }
  }

  /** SPEC §5.5: clear the inbox unless keepInbox, then abort whatever runs. */
  async cancel(cause: AgentCancelCause, o: { keepInbox?: boolean } = {}): Promise<{ cancelled: boolean }> {
    const running = this.run.phase !== 'idle'
    // SPEC §18.9: an observer's cancel aborts at once; its inbox clearing waits for the publication
    if (running) this.run.abort(cause)
    if (!o.keepInbox) await new Promise<void>((resolve, reject) => this.d.sessionLog.publisher.whenNotPublishing(this.key, () => void this.clearInbox().then(resolve, reject)))
    return { cancelled: running }
  }

  private async clearInbox(): Promise<void> {
    const r = await commitDecision<UserMessage[]>(
      this.log,
      (u) => {
        const removed: UserMessage[] = []
        for (const d of planClear(this.state.inbox)) {
          removed.push(...listOf(this.state.inbox, d.target))
          u.add({ type: 'agent/inbox/spliced', data: d as unknown as Json })
        }
        return { patch: { wakeLatched: false }, value: removed }
      },
      { reads: ['inbox'] },
    )
    for (const message of r.value) this.notify('agent/inbox/discarded', { message })
  }

  // ------------------------------------------------------------------------------------------
  // Waking the driver (SPEC §5.2–§5.4, §18.4–§18.5)

  /** A durable wake request found by the lease holder (doorbell, attach). */
  async wakeDurable(): Promise<void> {
    if (this.disposed) return
    // SPEC §19.3: an owed continuation opens at once, or after a backoff once a crash loop has eaten
    // one (continuationDelayMs); a delivery through a handle wakes at once, and the continuation still comes first
    const wait = this.continuation ? this.continuationAt - Date.now() : 0
    if (wait > 0) {
      if (!this.continuationTimer) {
        this.continuationTimer = setTimeout(() => {
          this.continuationTimer = undefined
          void this.wakeDurable()
        }, wait)
        this.continuationTimer.unref()
      }
      return
    }
    if (this.waking || this.run.phase === 'running') this.wakeAgain = true
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
    if (this.run.busy) return Promise.resolve()
    const p = this.wakeOnce().finally(() => {
      if (this.waking === p) this.waking = undefined
      // a driver runs on as the activity: it settles when it leaves (its next turn may find no slot)
      const driver = this.run.phase === 'running' ? this.run.activity : undefined
      if (driver) void driver.then(() => this.settle(false))
      else this.settle(true)
    })
    this.waking = p
    return p
  }

  /**
   * A wake, or the driver it started, left. API.md §15: a session still wanted (it waited for a slot)
   * looks again if rung meanwhile, since the ring may have found it busy; one that left a wake
   * without a turn may let a waiting session of its tenant start.
   */
  private settle(noTurn: boolean): void {
    const again = this.wakeAgain
    this.wakeAgain = false
    if (this.run.busy || this.disposed) return
    if (this.sessionLog.row?.runState !== 'idle') {
      if (again) void this.wakeDurable()
    } else if (noTurn) this.d.tenancy?.leftQueue(this.tenantId)
  }

  private wakeOnce(): Promise<void> {
    return wakeDriver({
      loop: this,
      run: this.run,
      // the process can no longer append: stop driving and let the next lease holder repair (SPEC §5.7)
      failStop: (e) => {
        this.logger.error({ err: errorChain(e) }, 'the driver stopped: it can no longer append to the session')
        if (e instanceof LeaseLostError) this.lost(e)
        else this.host.cannotAppend(this, e)
      },
    })
  }

  private lost(e: LeaseLostError): void {
    if (this.watch.stopped) return
    this.watch.stop()
    this.ended = true
    this.run.abort({ kind: 'disposed' })
    this.pending.releaseAll()
    void this.mcp.close()
    this.host.leaseLost(this, e)
  }

  // ------------------------------------------------------------------------------------------
  // What others committed (watch.ts) and the row flags every unit sees

  /** Subscribes to the session's doorbells and pokes; the host calls it once the Agent is held. */
  listen(): void {
    this.watch.start()
  }

  /** Folds what others committed and reacts to row flags: cancel, answers, wakes. Coalesced. */
  requestSync(): void {
    this.watch.sync()
  }

  private react(row: LeanRow): void {
    const run = this.run
    if (row.cancelPending && run.phase !== 'idle' && run.current && !run.current.aborted) run.abort({ kind: 'user' })
    if (run.phase === 'idle' && row.runState !== 'idle' && !run.activity) void this.wakeDurable()
  }

  // ------------------------------------------------------------------------------------------
  // Maintenance and disposal (SPEC §5.6, §5.7)

  /** Runs task while idle as maintenance (maintenance.ts); throws AgentBusyError when not idle. */
  runMaintenance<T>(task: (signal: AbortSignal) => Promise<T>): Promise<T> {
    return runMaintenance(this.run, this, task)
  }

  /** Disposal (lease release, shutdown, deletion): abort {disposed}, close the turn balanced, stop. */
  async dispose(): Promise<void> {
    if (this.ended && this.watch.stopped) return
    this.ended = true
    clearTimeout(this.continuationTimer)
    this.run.abort({ kind: 'disposed' })
    this.pending.releaseAll()
    while (this.run.activity) await this.run.activity.catch(() => {})
    this.watch.stop()
    await this.mcp.close()
    this.services.llm.endSession(this.id)
    this.notify('agent/disposed', {})
  }
}
