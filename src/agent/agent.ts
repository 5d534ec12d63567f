// The Agent of one session in the process that holds its lease: the handle (followup, steer, inject,
// cancel, whenIdle), the driver (turns and steps, SPEC §5–§6), hook points (§7), attempts with
// synchronous admission (§8), streaming and settlement (§9), retries in the open step (§10) and the
// effects of tool execution (§11). Read it top to bottom: handle, driver, turn, step, attempt, tools.

import type { Logger } from 'pino'
import type { Context } from 'cordis'
import type { Hooks } from '../hooks/index.js'
import {
  assembleBlocks,
  canonicalJson,
  deepFreeze,
  errorChain,
  interruptedPrefix,
  jsonEqual,
  listOf,
  planClaim,
  planClear,
  planDelivery,
  planSplice,
  ROUTE_WAKES,
  toUserMessage,
  newMessageId,
  type DeliveryRoute,
  type MessageInput,
  StreamAccumulator,
  assertLosslessJson,
  type AgentCancelCause,
  type AssistantMessage,
  type ContentBlock,
  type Draft,
  type EpochHeader,
  type InboxTarget,
  type Json,
  type LlmCallConfig,
  type LlmFailure,
  type PreStepDecision,
  type SessionState,
  type StreamChunk,
  type ToolCallBlock,
  type ToolSchema,
  type TurnEndReason,
  type UserMessage,
} from '../session/index.js'
import { getPending, type Db, type RowPatch, type SessionRow, type StoredEvent } from '../store/index.js'
import { LlmError, splitModelRef, type LlmRequest, type LlmService, type PreparedCall, type RetryPolicy } from '../llm/index.js'
import { runToolCalls, toolResultDraft, type HostPolicy, type ToolEffects, type ToolEnv, type ToolRegistry, type ToolSpec } from '../tools/index.js'
import type { Metrics } from '../metrics.js'
import { AbortedError, TurnLlmError } from './errors.js'
import { LeaseLostError, SessionLog, type UnitBuilder } from './log.js'
import { canonicalTools, promptDraft, reconcile, renderPrompt, snapshotCandidate, systemNodes, type PromptAssembly, type PromptSection, type SystemPromptService } from './prompt.js'
import type { Publisher } from './publish.js'
import type { Accepted } from './intake.js'

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

/** The session's definition as the driver uses it. */
export interface AgentSpec {
  model: string
  system: string
  tools: Array<Record<string, unknown>>
  maxTokens?: number
  reasoningEffort?: string
}

interface Proposal {
  decision: PreStepDecision
  rendered: string
  tools: ToolSchema[]
}

type StepResult = 'completed' | 'max-tokens' | 'continue'
type AfterTurn = 'idle' | 'continue' | 'latched'

const AGENT = Symbol.for('agentd.agent')

/** The Agent behind a handle (built-in plugins reach the log through it). */
export function agentOf(handle: unknown): Agent | undefined {
  return (handle as Record<symbol, Agent> | undefined)?.[AGENT]
}

/** Process-local marker of loop requests (SPEC §7.6). */
export const LOOP_REQUEST = Symbol.for('agentd.loopRequest')

export class Agent {
  readonly id: string
  readonly key: string
  phase: Phase = 'idle'
  private controller: AbortController | undefined
  private cause: AgentCancelCause | undefined
  private activity: Promise<void> | undefined
  private idleWaiters: Array<() => void> = []
  private disposed = false
  private stopped = false
  /** SPEC §8.8: whether this loop instance logged a header yet, and its captured generation */
  private headerLogged = false
  private capturedGeneration: number
  /** live frame revision, per loop instance (SPEC §9.2) */
  private revision = 0
  private inflight: { attemptId: string; turn: number; step: number; acc: StreamAccumulator; revision: number } | undefined
  /** calls with a pending_calls row (client, approval); their result deletes it */
  private readonly pendingRows = new Set<string>()
  /** client results and approvals this driver waits for */
  private readonly waiting = new Map<string, { kind: 'client' | 'approval'; resolve: (answer: unknown) => void }>()
  private syncing: Promise<void> | undefined
  private syncAgain = false
  private unsubscribe: () => void = () => {}
  private readonly hooks: Hooks
  private readonly handles = new Map<string, AgentHandle>()
  readonly log: SessionLog
  /** pino child logger carrying tenantId, sessionId and leaseToken (DESIGN.md §4) */
  private readonly logger: Logger

  constructor(
    private readonly d: AgentDeps,
    row: SessionRow,
    state: SessionState,
    readonly spec: AgentSpec,
    lease: { owner: string; token: number },
  ) {
    this.id = row.id
    this.key = row.key
    this.log = d.makeLog(row.key, row.id, state)
    this.log.lease = lease
    this.logger = d.log.child({ tenantId: row.tenantId, sessionId: row.id, leaseToken: lease.token })
    this.capturedGeneration = state.replaceGeneration
    // cordis services are looked up once: property access on a context goes through its proxy
    this.hooks = (d.root as unknown as { hooks: Hooks }).hooks
    this.registry = (d.root as unknown as { tools: ToolRegistry }).tools
    this.systemPrompt = (d.root as unknown as { systemPrompt: SystemPromptService }).systemPrompt
    // every commit and sync reports the row: a cancel request or a wake is noticed at once
    this.log.onRow = (r) => this.react(r)
  }

  get state(): SessionState {
    return this.log.state
  }

  get status(): 'idle' | 'running' {
    return this.phase === 'running' ? 'running' : 'idle'
  }

  private get ref() {
    return { key: this.key, id: this.id }
  }

  // ------------------------------------------------------------------------------------------
  // Notifications and the handle

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

  /**
   * Appends plugin-owned durable events (SPEC §3.6: llm/retry, compaction/*) as one fenced unit;
   * `build` may add several drafts, each folded at once.
   */
  async appendOwned<T = void>(build: (u: UnitBuilder) => T): Promise<{ events: StoredEvent[]; value: T }> {
    const r = await this.log.commit<T>((u) => ({ value: build(u) }))
    return { events: r.events, value: r.value }
  }

  /** The turn's signal while an activity runs (for built-in plugins' own waits). */
  get signal(): AbortSignal | undefined {
    return this.controller?.signal
  }

  private notify(name: string, payload: Record<string, unknown>, wire: unknown = payload): void {
    this.d.publisher.live(this.ref, name, payload, this.handleFor, wire)
  }

  private readonly handleFor = (plugin: string) => this.handle(plugin || 'agentd')

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

  /** Bus wiring: doorbells, pokes. Called by the host after attach. */
  listen(subscribe: (l: { commit?: (n: { seq: number; remote?: boolean; events?: readonly StoredEvent[] }) => void; poke?: () => void; reset?: () => void }) => () => void): void {
    this.unsubscribe = subscribe({
      commit: (n) => {
        if (n.seq <= this.state.headSeq) return
        // this process's own commits (deliveries) fold without a read; others' need one
        if (n.events?.length) void this.log.foldLocal(n.events).then((ok) => ok || this.requestSync(), () => this.requestSync())
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
          await this.log.sync()
          if (this.waiting.size) await this.checkAnswers()
        } catch (e) {
          if (e instanceof LeaseLostError) this.lost(e)
          else this.logger.warn({ err: errorChain(e) }, 'session sync failed')
        }
      } while (this.syncAgain && !this.stopped)
      this.syncing = undefined
    })()
  }

  private react(row: { cancelPending: boolean; runState: string }): void {
    if (row.cancelPending && this.phase !== 'idle' && this.controller && !this.controller.signal.aborted) this.abort({ kind: 'user' })
    if (this.phase === 'idle' && row.runState !== 'idle' && !this.activity) void this.wakeDurable()
  }

  private abort(cause: AgentCancelCause): void {
    if (!this.controller || this.controller.signal.aborted) return
    this.cause = cause // the first cause wins per activity
    this.controller.abort(new AbortedError(cause))
  }

  private checkAborted(): void {
    if (this.controller?.signal.aborted) throw new AbortedError(this.cause ?? { kind: 'user' })
  }

  /** An aborted activity still converging (a cancel, not a disposal): waking input latches. */
  private converging(): boolean {
    return this.phase !== 'idle' && !!this.controller?.signal.aborted && this.cause?.kind !== 'disposed'
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
    if (!o.keepInbox) {
      await new Promise<void>((resolve, reject) =>
        this.d.publisher.whenNotPublishing(this.key, () => {
          this.clearInbox().then(resolve, reject)
        }),
      )
    }
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

  // ------------------------------------------------------------------------------------------
  // Waking and the driver (SPEC §5.2–§5.4, §18.4–§18.5)

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

  private hasWork(): boolean {
    return this.state.inbox.nextTurn.length > 0 || this.state.inbox.nextStep.length > 0
  }

  /**
   * The wake prefix: running, then turn/start and the claim in ONE transaction (SPEC §5.2). A wake
   * with nothing to do (or one a cancel spent) is settled in the row without a turn.
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

  private waking: Promise<void> | undefined

  private async wakeOnce(): Promise<void> {
    this.controller = new AbortController()
    this.cause = undefined
    this.phase = 'running'
    let prefix: { turn: number; claimed: UserMessage[] } | null
    const activity = (async () => {
      try {
        prefix = await this.prefix(true)
      } catch (e) {
        this.phase = 'idle'
        throw e
      }
      if (!prefix) {
        this.phase = 'idle'
        return
      }
      this.activity = this.drive(prefix)
    })()
    this.activity = activity
    try {
      await activity
    } finally {
      if (this.activity === activity) this.activity = undefined
      if ((this.phase as Phase) === 'idle') this.setPhase('idle')
    }
  }

  /** turn/start + claim of next-turn (SPEC §6.2: the same unit as the first claim). */
  private async prefix(first: boolean): Promise<{ turn: number; claimed: UserMessage[] } | null> {
    const r = await this.log.commit<{ turn: number; claimed: UserMessage[] } | null>(
      (u) => {
        const work = this.hasWork()
        if (first && u.row.cancelPending) {
          // a cancel spent this wake request (SPEC §5.5: no later work is armed) unless input latched
          if (!(u.row.wakeLatched && work)) return { patch: { runState: 'idle', cancelPending: false, wakeLatched: false }, value: null }
        }
        if (!work) return { patch: { runState: 'idle', cancelPending: false, wakeLatched: false }, value: null }
        const turn = this.state.lastTurn + 1
        u.add({ type: 'turn/start', data: { turn } })
        const { splices, claimed } = planClaim(this.state.inbox, 'next-turn')
        for (const s of splices) u.add({ type: 'agent/inbox/spliced', data: s as unknown as Json })
        return { patch: { runState: 'running', cancelPending: false, wakeLatched: false }, value: { turn, claimed } }
      },
      {
        // publication order (SPEC §5.2): agent/status running, then turn/start and the claim
        beforePublish: (value) => {
          if (value) this.announce()
        },
      },
    )
    if (r.value) for (const message of r.value.claimed) this.notify('agent/inbox/claimed', { message, turn: r.value.turn })
    return r.value
  }

  /** Runs turns until one stops the driver (SPEC §5.3). */
  private async drive(first: { turn: number; claimed: UserMessage[] }): Promise<void> {
    let next: { turn: number; claimed: UserMessage[] } | null = first
    try {
      while (next) {
        const after = await this.runTurn(next.turn, next.claimed)
        if (after === 'idle') break
        if (after === 'latched') {
          // SPEC §5.3: leaving the driver makes the Agent idle; the latch wakes it once more
          this.setPhase('idle')
          this.phase = 'running'
        }
        this.controller = new AbortController()
        this.cause = undefined
        next = await this.prefix(false)
      }
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
    this.disposed = true
    this.abort({ kind: 'disposed' })
    this.unsubscribe()
    for (const w of this.waiting.values()) w.resolve(undefined)
    this.onLost?.(e)
  }

  // ------------------------------------------------------------------------------------------
  // One turn (SPEC §6.2)

  private async runTurn(turn: number, firstClaim: UserMessage[]): Promise<AfterTurn> {
    const signal = this.controller!.signal
    let reason: TurnEndReason | null = null
    let sawMaxTokens = false
    let stopped = false
    let park = false
    let exception = false
    let target: InboxTarget = 'next-turn'
    let step = 0
    let claimed: UserMessage[] | undefined = firstClaim
    try {
      for (;;) {
        this.checkAborted()
        const proposed = step + 1
        const p = await this.proposeStep(target, turn, proposed, claimed)
        claimed = undefined
        if (p.decision.kind === 'reject') {
          reason = { kind: 'blocked' }
          park = true
          break
        }
        if (p.decision.messages.length === 0 && step === 0) {
          reason = { kind: 'completed' }
          park = true
          break
        }
        if (p.decision.messages.length === 0 && stopped) break
        this.checkAborted()
        await this.log.commit((u) => {
          u.add({ type: 'step/start', data: { turn, step: proposed } })
        })
        step = proposed
        this.d.metrics?.steps.inc()
        let result: StepResult
        try {
          result = await this.runStep(turn, step, p)
        } finally {
          await this.closer(() => this.log.commit((u) => void u.add({ type: 'step/end', data: { turn, step } })))
        }
        if (result === 'max-tokens') sawMaxTokens = true
        stopped = result !== 'continue'
        this.checkAborted()
        if (stopped && this.state.inbox.nextStep.length === 0) {
          await this.hooks.runSerial('agent/turn-stopping', { agent: this.handle(), turn, signal }, { bind: this.bind })
          this.checkAborted()
        }
        if (stopped && this.state.inbox.nextStep.length === 0) break
        target = 'next-step'
      }
      if (reason === null) reason = sawMaxTokens ? { kind: 'max-tokens' } : { kind: 'completed' }
    } catch (e) {
      if (e instanceof FatalAppend) throw e.error
      exception = true
      if (signal.aborted) reason = { kind: 'aborted', reason: this.cause ?? { kind: 'user' } }
      else {
        const error: LlmFailure = e instanceof TurnLlmError ? e.failure : { message: errorChain(e), code: 'UNKNOWN' }
        reason = { kind: 'error', error }
        this.notify('agent/error', { turn, step, error })
        this.logger.warn({ turn, step, code: error.code, err: error.message }, 'turn failed')
      }
    }
    const r = await this.closer(() =>
      this.log.commit<AfterTurn>((u) => {
        u.add({ type: 'turn/end', data: { turn, reason } as unknown as Json })
        return this.afterTurn(u, exception || park)
      }),
    )
    this.d.metrics?.turns.inc({ reason: reason!.kind })
    return r.value
  }

  /**
   * The driver's exit decision, made under the row lock with the turn/end (so no delivery can slip
   * between "nothing pending" and "idle"): continue with pending work, honour a latched wake, or go idle.
   */
  private afterTurn(u: UnitBuilder, stop: boolean): { patch: RowPatch; value: AfterTurn } {
    const work = this.hasWork()
    const clear = { cancelPending: false, wakeLatched: false }
    if (this.disposed) return { patch: { ...clear, runState: work ? 'wanted' : 'idle' }, value: 'idle' }
    if (!stop && work && !u.row.cancelPending && !this.controller!.signal.aborted) return { patch: { ...clear, runState: 'running' }, value: 'continue' }
    if (u.row.wakeLatched && work && this.cause?.kind !== 'disposed') return { patch: { ...clear, runState: 'running' }, value: 'latched' }
    return { patch: { ...clear, runState: 'idle' }, value: 'idle' }
  }

  /** Commits a closer; a failure means this process can no longer append (SPEC §5.7). */
  private async closer<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn()
    } catch (e) {
      throw new FatalAppend(e)
    }
  }

  private readonly bind = (payload: unknown, plugin: string) => {
    const p = payload as Record<string, unknown>
    return p && typeof p === 'object' && 'agent' in p ? { ...p, agent: this.handle(plugin) } : payload
  }

  // ------------------------------------------------------------------------------------------
  // Proposing a step: claim, assemble, snapshot, agent/pre-step (SPEC §4.5, §7.2–§7.4)

  private async proposeStep(target: InboxTarget, turn: number, step: number, prefixClaim?: UserMessage[]): Promise<Proposal> {
    const signal = this.controller!.signal
    let claimed = prefixClaim
    if (!claimed) {
      const r = await this.log.commit<UserMessage[]>((u) => {
        const { splices, claimed: c } = planClaim(this.state.inbox, target)
        for (const s of splices) u.add({ type: 'agent/inbox/spliced', data: s as unknown as Json })
        return { value: c }
      })
      claimed = r.value
      for (const message of claimed) this.notify('agent/inbox/claimed', { message, turn })
    }
    const sp = this.systemPrompt
    const base: PromptAssembly = {
      sections: [{ name: 'session', text: this.spec.system, literal: true }, ...sp.sections.map((s) => ({ ...s }))],
      contexts: sp.contexts.map((c) => ({ name: c.name, text: typeof c.text === 'function' ? String(c.text()) : c.text })),
      tools: this.sessionTools(),
      variables: {},
    }
    const assembly = await this.hooks.runWaterfall<PromptAssembly>('system-prompt/assemble', base, (a) => a, { rest: [{ agent: this.handle(), turn, step, signal }] })
    if (!assembly || !Array.isArray(assembly.sections)) throw new Error('system-prompt/assemble did not return an assembly')
    const rendered = renderPrompt(assembly as PromptAssembly & { sections: PromptSection[] })
    const tools = canonicalTools(assembly.tools ?? [], assembly.toolOrder)
    const snapshot = snapshotCandidate(this.state, assembly.contexts ?? [])
    const decision = await this.hooks.runWaterfall<PreStepDecision>(
      'agent/pre-step',
      { agent: this.handle(), messages: claimed, turn, step, signal },
      (p: { messages: UserMessage[] }) => ({ kind: 'enter', messages: snapshot ? [...p.messages, snapshot] : [...p.messages] }),
      { bind: this.bind },
    )
    return { decision: this.checkDecision(decision), rendered, tools }
  }

  /** The final pre-step decision is authoritative but must be well formed. */
  private checkDecision(d: unknown): PreStepDecision {
    const x = d as PreStepDecision
    if (x?.kind === 'reject') return { kind: 'reject' }
    if (x?.kind !== 'enter' || !Array.isArray(x.messages)) throw new Error(`agent/pre-step returned ${JSON.stringify(d)?.slice(0, 200)}; expected {kind:'reject'} or {kind:'enter', messages}`)
    const messages = x.messages.map((m) => {
      assertLosslessJson(m)
      if (m?.role !== 'user' || typeof m.id !== 'string' || !Array.isArray(m.content) || !m.source || typeof m.source.kind !== 'string') throw new Error('agent/pre-step entered something that is not a UserMessage')
      return deepFreeze(structuredClone(m))
    })
    return x.startsRequestSeries === true ? { kind: 'enter', messages, startsRequestSeries: true } : { kind: 'enter', messages }
  }

  /** The session's ToolSpecs as schemas; a builtin takes its registration's parameters. */
  private sessionTools(): ToolSchema[] {
    const out: ToolSchema[] = []
    for (const s of this.spec.tools) {
      const ex = s.execution as { type: string }
      if (ex.type === 'builtin') {
        const reg = this.registry.get(s.name as string)
        if (!reg) continue // its plugin left: calls to it become UNKNOWN_TOOL results
        out.push({ name: reg.name, description: (s.description as string | undefined) ?? reg.description, parameters: reg.parameters })
      } else out.push({ name: s.name as string, description: (s.description as string) ?? '', parameters: s.parameters as ToolSchema['parameters'] })
    }
    return out
  }

  private readonly registry: ToolRegistry
  private readonly systemPrompt: SystemPromptService

  // ------------------------------------------------------------------------------------------
  // One step: attempts until one settles as a message, then its tools (SPEC §8, §10, §11)

  private async runStep(turn: number, step: number, p: Proposal): Promise<StepResult> {
    for (let attempt = 1; ; attempt++) {
      const r = await this.runAttempt(turn, step, p, attempt)
      if (r.kind === 'message') {
        const calls = r.message.content.filter((b): b is ToolCallBlock => b.type === 'tool-call')
        if (!calls.length) return r.finish === 'max-tokens' ? 'max-tokens' : 'completed'
        const { concludes } = await this.runTools(turn, step, calls)
        return concludes ? 'completed' : 'continue'
      }
      // SPEC §10.1 / §18.3: cancellation beats recovery
      this.checkAborted()
      const decision = await this.hooks.runWaterfall<{ kind?: string } | undefined>(
        'agent/request-error',
        { agent: this.handle(), turn, step, provider: r.provider, failure: r.failure, retryPolicy: r.retryPolicy, signal: this.controller!.signal },
        () => undefined,
        { bind: this.bind },
      )
      this.checkAborted()
      if (decision?.kind !== 'retry') throw new TurnLlmError(r.failure)
    }
  }

  /** SPEC §7.5: the proposed config of this attempt. */
  private proposeConfig(): LlmCallConfig {
    const ref = splitModelRef(this.spec.model)
    if (!ref) throw new Error(`the session's model ${this.spec.model} is not provider/model`)
    const { provider, model } = ref
    const h = this.state.latestHeader?.header
    if (!this.headerLogged || !h) {
      const c: LlmCallConfig = { provider, model }
      if (this.spec.maxTokens !== undefined) c.maxTokens = this.spec.maxTokens
      if (this.spec.reasoningEffort !== undefined) c.reasoningEffort = this.spec.reasoningEffort
      else if (h && h.config.provider === provider && h.config.model === model && h.config.reasoningEffort !== undefined && !h.adapterDefaults?.reasoningEffort) c.reasoningEffort = h.config.reasoningEffort
      return c
    }
    const c: LlmCallConfig = { ...h.config }
    if (h.adapterDefaults?.maxTokens) delete c.maxTokens
    if (h.adapterDefaults?.reasoningEffort) delete c.reasoningEffort
    return c
  }

  private async runAttempt(
    turn: number,
    step: number,
    p: Proposal,
    attempt: number,
  ): Promise<{ kind: 'message'; message: AssistantMessage; finish: string } | { kind: 'failed'; failure: LlmFailure; provider: string; retryPolicy?: RetryPolicy }> {
    const signal = this.controller!.signal
    // A1: the request config
    const proposal = this.proposeConfig()
    const config = deepFreeze(structuredClone(await this.hooks.runWaterfall<LlmCallConfig>('agent/request', { agent: this.handle(), turn, step, signal }, () => proposal, { bind: this.bind }))) as LlmCallConfig
    if (!config || typeof config.provider !== 'string' || !config.provider || typeof config.model !== 'string' || !config.model) throw new Error('the request config lacks provider or model')
    this.checkAborted()
    // A2: prepare the call (NO_ADAPTER continues unprepared for an llm/stream listener)
    let prepared: PreparedCall | undefined
    try {
      prepared = await this.d.llm.prepareCall(config, signal)
    } catch (e) {
      if (!(e instanceof LlmError && e.failure.code === 'NO_ADAPTER')) throw e
    }
    this.checkAborted()
    // A3: synchronous admission, ONE transaction (SPEC §2.4, §8.1)
    const used = prepared?.config ?? config
    await this.log.commit((u) => this.admit(u, turn, step, p, attempt, used, prepared))
    // instance state moves only once the unit committed (a build may run twice)
    this.headerLogged = true
    this.capturedGeneration = this.state.replaceGeneration
    this.checkAborted()
    // the frozen request, derived from the log (SPEC §8.9)
    const header = this.state.latestHeader!.header
    const request = Object.freeze({ ...header.config, messages: Object.freeze(this.state.deriveMessages()), ...(header.tools ? { tools: header.tools } : {}), sessionId: this.id, signal, [LOOP_REQUEST]: true }) as unknown as LlmRequest
    return this.dispatch(turn, step, request, prepared, used)
  }

  /** A3: reconcile the prompt, admit users (attempt 1), log header and route context (SPEC §8.6–§8.8). */
  private admit(u: UnitBuilder, turn: number, step: number, p: Proposal, attempt: number, config: LlmCallConfig, prepared: PreparedCall | undefined): void {
    const decision = p.decision as Extract<PreStepDecision, { kind: 'enter' }>
    const latest = this.state.latestHeader?.header
    const toolsChanged = !jsonEqual(p.tools, latest?.tools ?? [])
    const byDecision = attempt === 1 && decision.startsRequestSeries === true
    const inHistory = prepared?.systemPromptUpdate === 'in-history'
    const startsSeries = byDecision || this.capturedGeneration !== this.state.replaceGeneration || toolsChanged
    for (const c of reconcile(systemNodes(this.state), p.rendered, inHistory, startsSeries)) u.add(promptDraft(c, turn, step))
    if (attempt === 1) for (const m of decision.messages) u.add({ type: 'user/message', data: m as unknown as Json, surfaceOp: 'append' })
    const header: EpochHeader = JSON.parse(canonicalJson({ config, ...(prepared?.adapterDefaults && Object.keys(prepared.adapterDefaults).length ? { adapterDefaults: prepared.adapterDefaults } : {}), ...(p.tools.length ? { tools: p.tools } : {}) }))
    const seriesBreak = byDecision || this.capturedGeneration !== this.state.replaceGeneration || toolsChanged
    if (!this.headerLogged) u.add({ type: 'request/header', data: { header, reason: latest ? 'resume' : 'initial' } as unknown as Json })
    else if (!jsonEqual(header, latest)) u.add({ type: 'request/header', data: { header, reason: 'change', ...(seriesBreak ? { startsSeries: true } : {}) } as unknown as Json })
    else if (seriesBreak) u.add({ type: 'request/header', data: { header, reason: 'series' } as unknown as Json })
    const ctx: Record<string, Json> = { provider: config.provider, model: config.model }
    if (prepared?.context.contextWindow !== undefined) ctx.contextWindow = prepared.context.contextWindow
    if (prepared?.systemPromptUpdate) ctx.systemPromptUpdate = prepared.systemPromptUpdate
    if (!jsonEqual(ctx, this.state.latestContext)) u.add({ type: 'request/context', data: ctx })
  }

  // ------------------------------------------------------------------------------------------
  // A4: dispatch, stream, settle (SPEC §9, §18.1)

  /** The adapter's stream with its throws turned into a finish error chunk (SPEC §18.1). */
  private async *adapterStream(prepared: PreparedCall | undefined, request: LlmRequest): AsyncGenerator<StreamChunk> {
    if (!prepared) {
      yield { type: 'finish', reason: { kind: 'error', failure: { code: 'NO_ADAPTER', message: `no adapter serves ${request.provider}/${request.model}` } } }
      return
    }
    try {
      for await (const c of prepared.stream(request)) {
        yield c
        if (c.type === 'finish') return
      }
    } catch (e) {
      const aborted = request.signal.aborted
      yield { type: 'finish', reason: { kind: aborted ? 'aborted' : 'error', failure: { code: aborted ? 'ABORTED' : e instanceof LlmError ? e.failure.code : 'UNKNOWN', message: errorChain(e) } } }
    }
  }

  private frame(data: Record<string, unknown>): void {
    this.notify('agent/assistant-stream', { frame: data }, data)
  }

  /** The in-flight attempt as a snapshot frame for a late subscriber (API.md §6). */
  snapshotFrame(): { event: string; data: unknown } | undefined {
    const f = this.inflight
    if (!f) return undefined
    return { event: 'agent/assistant-stream', data: { kind: 'snapshot', attemptId: f.attemptId, revision: f.revision, turn: f.turn, step: f.step, stream: structuredClone(f.acc.records) } }
  }

  private async dispatch(
    turn: number,
    step: number,
    request: LlmRequest,
    prepared: PreparedCall | undefined,
    config: LlmCallConfig,
  ): Promise<{ kind: 'message'; message: AssistantMessage; finish: string } | { kind: 'failed'; failure: LlmFailure; provider: string; retryPolicy?: RetryPolicy }> {
    const signal = request.signal
    const attemptId = `${this.id}:${this.state.nextSeq}`
    // a throw from an llm/stream listener: no frames at all, a turn error
    const source = await this.hooks.runWaterfall<AsyncIterable<StreamChunk>>('llm/stream', request, (req: LlmRequest) => this.adapterStream(prepared, req))
    const acc = new StreamAccumulator()
    const chunks: StreamChunk[] = []
    let index = 0
    this.inflight = { attemptId, turn, step, acc, revision: ++this.revision }
    this.frame({ kind: 'start', attemptId, revision: this.inflight.revision, turn, step })
    let iterError: unknown
    let finished = false
    const it = source[Symbol.asyncIterator]()
    let onAbort: (() => void) | undefined
    const aborted = new Promise<'aborted'>((resolve) => {
      if (signal.aborted) resolve('aborted')
      else signal.addEventListener('abort', (onAbort = () => resolve('aborted')), { once: true })
    })
    try {
      for (;;) {
        const r = await Promise.race([it.next(), aborted])
        if (r === 'aborted' || r.done) break
        const chunk = r.value
        assertLosslessJson(chunk as unknown, 'chunk')
        const time = Date.now()
        acc.push(time, chunk)
        chunks.push(chunk)
        const revision = ++this.revision
        this.inflight.revision = revision
        this.frame({ kind: 'chunk', attemptId, revision, index: index++, time, chunk })
        if (chunk.type === 'finish') {
          finished = true
          break
        }
      }
    } catch (e) {
      iterError = e
    } finally {
      if (onAbort) signal.removeEventListener('abort', onAbort)
      if (!finished) void Promise.resolve(it.return?.()).catch(() => {})
    }
    const assembled = assembleBlocks(chunks)
    const success = finished && (assembled.finish?.kind === 'stop' || assembled.finish?.kind === 'tool-calls' || assembled.finish?.kind === 'max-tokens')
    const { provider, model } = config
    const settle = async (type: 'assistant/message' | 'assistant/attempt', data: Record<string, unknown>) => {
      try {
        const draft: Draft = type === 'assistant/message' ? { type, data: data as Json, surfaceOp: 'append' } : { type, data: data as Json }
        const r = await this.log.commit<number>((u) => ({ value: u.add(draft).seq }))
        this.d.metrics?.attempts.inc({ outcome: type === 'assistant/message' ? 'message' : 'attempt' })
        this.endFrame(attemptId, index, { kind: 'committed', eventType: type, seq: r.value })
      } catch (e) {
        this.endFrame(attemptId, index, { kind: 'abandoned' })
        if (e instanceof LeaseLostError) throw new FatalAppend(e)
        if (iterError || (!success && !signal.aborted)) throw new AggregateError([iterError ?? new Error(failureOf(assembled.finish)?.message ?? 'stream failed'), e], 'the stream failed and its settlement was rejected', { cause: iterError })
        throw e
      }
    }
    const stream = acc.records
    if (iterError && !signal.aborted) {
      // an llm/stream listener's iterator threw: the attempt settles, then the turn fails (no recovery)
      await settle('assistant/attempt', { turn, step, stream })
      throw iterError
    }
    if (!success && signal.aborted) {
      // cancelled: the visible prefix becomes an interrupted message, else an attempt (SPEC §9.3)
      const prefix = interruptedPrefix(assembled.content)
      if (prefix.length) await settle('assistant/message', { turn, step, message: this.assistant(prefix, provider, model, undefined), stream, ...(assembled.usage ? { usage: assembled.usage } : {}), interrupted: true })
      else await settle('assistant/attempt', { turn, step, stream })
      throw new AbortedError(this.cause ?? { kind: 'user' })
    }
    if (!success) {
      await settle('assistant/attempt', { turn, step, stream })
      const failure = failureOf(assembled.finish) ?? { code: 'UNKNOWN', message: 'the stream ended without a finish' }
      return { kind: 'failed', failure, provider, retryPolicy: prepared?.retryPolicy }
    }
    const message = this.assistant(assembled.content, provider, model, assembled.replayState)
    await settle('assistant/message', { turn, step, message, stream, ...(assembled.usage ? { usage: assembled.usage } : {}) })
    return { kind: 'message', message, finish: assembled.finish!.kind }
  }

  private endFrame(attemptId: string, index: number, outcome: Record<string, unknown>): void {
    const revision = ++this.revision
    this.inflight = undefined
    this.frame({ kind: 'end', attemptId, revision, index, outcome })
  }

  private assistant(content: ContentBlock[], provider: string, model: string, replayState: Json | undefined): AssistantMessage {
    return { id: newMessageId(), role: 'assistant', content, source: { kind: 'model', provider, model, ...(replayState !== undefined ? { replayState } : {}) } }
  }

  // ------------------------------------------------------------------------------------------
  // Tools (SPEC §11): the effects the scheduler asks for

  private async runTools(turn: number, step: number, calls: ToolCallBlock[]): Promise<{ concludes: boolean }> {
    const signal = this.controller!.signal
    const at = { turn, step }
    const env: ToolEnv = {
      sessionId: this.id,
      signal,
      specs: this.spec.tools as unknown as ToolSpec[],
      registry: this.registry,
      hooks: this.hooks,
      handle: (plugin) => this.handle(plugin),
      bind: this.bind,
      policy: this.d.toolPolicy,
      maxParallel: () => this.d.maxParallelToolCalls(),
      notify: (name, payload) => this.notify(name, payload),
      log: this.logger.child({ turn, step }),
    }
    const fx: ToolEffects = {
      appendCall: async (p, { client }) => {
        const r = await this.log.commit<number>((u) => {
          const e = u.add({ type: 'tool/call', data: { turn, step, callId: p.callId, name: p.name, arguments: p.rawArguments } })
          // SPEC §18.10: a client call waits on a pending row written with its tool/call
          if (client) u.side({ kind: 'pending-insert', call: { callId: p.callId, kind: 'client', name: p.name, arguments: p.rawArguments } })
          return { value: e.seq }
        })
        if (client) this.pendingRows.add(p.callId)
        return r.value
      },
      openApproval: async (p) => {
        await this.log.commit((u) => u.side({ kind: 'pending-insert', call: { callId: p.callId, kind: 'approval', name: p.name, arguments: p.rawArguments } }))
        this.pendingRows.add(p.callId)
      },
      waitAnswer: (callId, kind) => this.waitAnswer(callId, kind),
      commitResult: async (p, callSeq, { outcome, contexts }) => {
        await this.log.commit((u) => {
          u.add(toolResultDraft(at, p.callId, callSeq, outcome))
          if (contexts.length) {
            const data = planSplice(this.state.inbox, 'next-step', this.state.inbox.nextStep.length, 0, contexts)
            if (data) u.add({ type: 'agent/inbox/spliced', data: data as unknown as Json })
          }
          // settlement deletes the call's pending row (SPEC §18.10) with its result
          if (this.pendingRows.has(p.callId)) u.side({ kind: 'pending-delete', callIds: [p.callId] })
        })
        this.pendingRows.delete(p.callId)
        for (const message of contexts) this.notify('agent/inbox/inserted', { message })
        this.d.metrics?.toolCalls.inc({ code: outcome.error?.code ?? (outcome.isError ? 'error' : 'ok') })
      },
      abortUnstarted: async (p, outcome) => {
        await this.log.commit((u) => {
          const c = u.add({ type: 'tool/call', data: { turn, step, callId: p.callId, name: p.name, arguments: p.rawArguments } })
          u.add(toolResultDraft(at, p.callId, c.seq, outcome))
        })
        this.d.metrics?.toolCalls.inc({ code: 'TOOL_ABORTED_BEFORE_DISPATCH' })
      },
    }
    return runToolCalls(calls, env, fx)
  }

  /** Waits for a pending row's answer, or undefined once the turn is cancelled. */
  private waitAnswer(callId: string, kind: 'client' | 'approval'): Promise<unknown> {
    const signal = this.controller!.signal
    return new Promise((resolve) => {
      const done = (v: unknown) => {
        this.waiting.delete(callId)
        signal.removeEventListener('abort', onAbort)
        resolve(v)
      }
      const onAbort = () => done(undefined)
      if (signal.aborted) return done(undefined)
      signal.addEventListener('abort', onAbort, { once: true })
      this.waiting.set(callId, { kind, resolve: done })
      void this.checkAnswers()
    })
  }

  private async checkAnswers(): Promise<void> {
    for (const [callId, w] of [...this.waiting]) {
      const row = await getPending(this.d.db, this.key, callId).catch(() => undefined)
      if (row?.answered && row.kind === w.kind) w.resolve(row.answer)
    }
  }

  // ------------------------------------------------------------------------------------------
  // Maintenance and disposal (SPEC §5.6, §5.7)

  /** Runs task while idle as maintenance; a wake latched meanwhile fires afterwards. */
  async runMaintenance<T>(task: (signal: AbortSignal) => Promise<T>): Promise<T> {
    if (this.phase !== 'idle' || this.activity) throw new Error('maintenance needs an idle Agent')
    this.controller = new AbortController()
    this.cause = undefined
    this.setPhase('maintenance')
    let done!: () => void
    this.activity = new Promise<void>((r) => (done = r))
    try {
      await this.log.commit(() => ({ patch: { runState: 'maintenance' } }))
      return await task(this.controller.signal)
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
    if (this.disposed && this.stopped) return
    this.disposed = true
    this.abort({ kind: 'disposed' })
    for (const w of this.waiting.values()) w.resolve(undefined)
    while (this.activity) await this.activity.catch(() => {})
    this.stopped = true
    this.unsubscribe()
    this.notify('agent/disposed', {})
  }

  get isDisposed(): boolean {
    return this.disposed
  }

  get busy(): boolean {
    return this.phase !== 'idle' || !!this.activity
  }
}

class FatalAppend extends Error {
  constructor(readonly error: unknown) {
    super(errorChain(error))
    this.name = 'FatalAppend'
  }
}

function failureOf(f: ReturnType<typeof assembleBlocks>['finish']): LlmFailure | undefined {
  return f && (f.kind === 'error' || f.kind === 'aborted') ? f.failure : undefined
}

