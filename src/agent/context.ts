// What the parts of the driver share: the loop instance they run in (Loop, the Agent is one), the
// abort of the running activity, and the TurnContext every part of a turn receives in place of
// threaded parameters.

import type { Logger } from 'pino'
import type { LiveAttempts } from '../bus/index.js'
import type { Hooks } from '../hooks/index.js'
import type { LlmService } from '../llm/index.js'
import type { Metrics } from '../metrics.js'
import { errorChain, type AgentCancelCause, type LlmFailure, type SessionState, type TurnEndReason } from '../session/index.js'
import type { Db, RowPatch, StoredEvent } from '../store/index.js'
import type { HostPolicy, McpClients, McpServerSpec, SecretResolver, ToolRegistry, ToolSpec } from '../tools/index.js'
import { AbortedError } from './errors.js'
import type { SystemPromptService } from './prompt.js'
import type { PendingCalls } from './pending.js'
import type { ContinuationDuty } from './continuation.js'
import { NOOP_TURN, type TurnTrace } from '../tracing/index.js'
import { OpenUnit, type UnitLog } from './unit.js'
import type { AgentSpec, Series, SessionSettings } from './settings.js'

export type { AgentSpec }

export type { UnitLog }

/** What the driver asks of the tenant's limits (API.md §15); tenancy/ implements it. */
export interface TenantGate {
  /** before every model attempt: null when it may be made, else the failure that ends the turn (BUDGET_EXCEEDED) */
  checkBudget(tenantId: string): Promise<LlmFailure | null>
  /** a wake ended with the session idle and no turn: sessions of the tenant waiting for a slot may start */
  leftQueue(tenantId: string): void
}

/** The services a loop instance calls, looked up once (cordis services go through a proxy). */
export interface LoopServices {
  db: Db
  llm: LlmService
  registry: ToolRegistry
  systemPrompt: SystemPromptService
  toolPolicy: HostPolicy
  metrics?: Metrics
  maxParallelToolCalls: () => number
  /** the process's one tracker of streaming attempts (snapshot frames, the settled stream) */
  attempts: LiveAttempts
  /** the tenant's budget and slots, when the host enforces limits */
  tenancy?: TenantGate
  /** AGENTD_CONTINUE_AFTER_CRASH (SPEC §19.5): continuations in a row; 0 turns them off */
  continueAfterCrash: number
}

export type Notify = (name: string, payload: Record<string, unknown>, wire?: unknown) => void

/** A loop instance (SPEC §13.4) as the parts of a turn see it. */
export interface Loop {
  readonly id: string
  readonly key: string
  readonly tenantId: string
  /** the session's settings as the current step was proposed with them, and their refresh */
  readonly settings: SessionSettings
  /** the folded log; every unit folds into it as it is built */
  readonly state: SessionState
  readonly services: LoopServices
  readonly hooks: Hooks
  readonly log: UnitLog
  readonly notify: Notify
  /** pino child logger carrying tenantId, sessionId and leaseToken (DESIGN.md §4) */
  readonly logger: Logger
  readonly series: Series
  /** SPEC §9.2: live frame revisions count per loop instance */
  nextRevision(): number
  /** calls waiting on a pending row, and their answers */
  readonly pending: PendingCalls
  /** the session's MCP server connections (API.md §12) */
  readonly mcp: McpClients
  /** the tenant's secrets for `secret:NAME` header values (API.md §13) */
  readonly secrets: SecretResolver
  /** The Agent handle a payload carries (API.md §11); per listening plugin through `bind`. */
  handle(plugin?: string): unknown
  readonly bind: (payload: unknown, plugin: string) => unknown
  readonly disposed: boolean
  /** SPEC §19.3: the continuation owed since attach, until a unit opens or declines it */
  continuation: ContinuationDuty | null
}

/** The abort of one activity (a driver run or maintenance): the first cause wins (SPEC §5.5). */
export class Abort {
  private readonly controller = new AbortController()
  private first: AgentCancelCause | undefined

  get signal(): AbortSignal {
    return this.controller.signal
  }

  get aborted(): boolean {
    return this.controller.signal.aborted
  }

  /** The cause the activity ends with: the first one given. */
  get cause(): AgentCancelCause {
    return this.first ?? { kind: 'user' }
  }

  /** Whether the first cause was a disposal (no latch, no continuation). */
  get disposing(): boolean {
    return this.first?.kind === 'disposed'
  }

  abort(cause: AgentCancelCause): void {
    if (this.aborted) return
    this.first = cause
    this.controller.abort(new AbortedError(cause))
  }

  /** SPEC §6.2: after every await. */
  check(): void {
    if (this.aborted) throw new AbortedError(this.cause)
  }
}

/** What the driver does after a turn: the next turn, a latched wake's turn, or idle. */
export type AfterTurn = 'idle' | 'continue' | 'latched'

/** A turn's end as the unit that wrote its turn/end decided it. */
export interface TurnEnded {
  reason: TurnEndReason
  after: AfterTurn
}

/** Where a turn stands, and what each of its parts uses; passed down instead of (turn, step, signal, …). */
export interface TurnContext {
  readonly loop: Loop
  readonly turn: number
  /** SPEC §19.3: the crash-interrupted turn this one continues */
  readonly continues?: number
  /** the open step, 0 before the first */
  step: number
  /** SPEC §6.4: a step of the turn stopped at max-tokens (sticky within the turn) */
  sawMaxTokens: boolean
  readonly abort: Abort
  readonly signal: AbortSignal
  /** API.md §19: the turn's span (a no-op with tracing off) */
  trace: TurnTrace
  /** the turn's open unit: every unit of the turn is closed through it (unit.ts) */
  readonly unit: OpenUnit
  readonly hooks: Hooks
  readonly notify: Notify
}

export function turnContext(loop: Loop, abort: Abort, turn: number, continues?: number): TurnContext {
  return { loop, turn, ...(continues !== undefined ? { continues } : {}), step: 0, sawMaxTokens: false, abort, signal: abort.signal, trace: NOOP_TURN, unit: new OpenUnit(loop.log), hooks: loop.hooks, notify: loop.notify }
}

/** A closer that failed to commit: this process can no longer append (SPEC §5.7). */
export class FatalAppend extends Error {
  constructor(readonly error: unknown) {
    super(errorChain(error))
    this.name = 'FatalAppend'
  }
}

/** Commits a closer; a failure means this process can no longer append (SPEC §5.7). */
export async function closer<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn()
  } catch (e) {
    throw new FatalAppend(e)
  }
}
