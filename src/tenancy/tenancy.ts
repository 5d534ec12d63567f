// The tenancy service (API.md §15): what the driver asks before every model attempt (the budget) and
// when a wake leaves the slot queue, what follows each commit in this process (slot doorbells,
// tenant metrics), the admin routes' limits and the usage route's report.

import type { Logger } from 'pino'
import type { Doorbells, Invalidations } from '../bus/index.js'
import type { Metrics } from '../metrics.js'
import { sumUsage, type LlmFailure, type SessionEvent } from '../session/index.js'
import { budgetState, tenants, usageReport, type Db, type TenantRecord, type UsageGroup, type UsageRow } from '../store/index.js'
import { periodsAt, systemClock, type Clock } from './clock.js'
import { budgetRefusal, type Limits } from './limits.js'
import { TenantMetrics } from './metrics.js'
import { SlotBell } from './slots.js'
import { usagePeriod } from './usage.js'

export interface TenancyOptions {
  db: Db
  invalidations: Invalidations
  /** slot doorbells: waiting sessions are woken wherever they are driven */
  doorbells: Doorbells
  log: Logger
  metrics?: Metrics
  /** the tenants of the sessions this process's drivers run a turn for, one per session (a gauge) */
  running?: () => Iterable<string>
  clock?: Clock
}

/** A tenant with its limits, and its identity provider and origins (API.md §18) */
export type Tenant = TenantRecord

/** the bus topic of a tenant's limits: setLimits invalidates it in every process */
const LIMITS_TOPIC = 'tenant-limits:'
/** how long a tenant read without a budget is taken to have none, invalidations aside */
export const UNBUDGETED_TRUST_MS = 30_000
const limitsTopic = (tenantId: string) => `${LIMITS_TOPIC}${tenantId}`

export class Tenancy {
  readonly clock: Clock
  private readonly bell: SlotBell
  private readonly metrics: TenantMetrics
  /**
   * Tenants last read with neither tokensPerDay nor costUsdPerMonth: their budget check cannot refuse,
   * so it needs no read until their limits change. PATCH of the limits invalidates the entry in every
   * process over the bus (a dropped bus connection clears them all); a tenant with a token or cost
   * limit is read before every attempt, as its settled usage moves. An entry is trusted for
   * UNBUDGETED_TRUST_MS at most: a process killed between a PATCH's commit and its NOTIFY loses the
   * invalidation, and this bounds how long a new budget can go unenforced elsewhere.
   */
  private readonly unbudgeted = new Map<string, { maxRunning: boolean; hasLimits: boolean; at: number }>()
  /** bumped by every invalidation: a read that started before one does not fill the map */
  private generation = 0

  constructor(private readonly o: TenancyOptions) {
    this.clock = o.clock ?? systemClock
    this.bell = new SlotBell(o)
    this.metrics = new TenantMetrics(o.metrics, o.running ?? (() => []))
    o.invalidations.on((topic) => {
      if (topic === null) this.forgetAll()
      else if (topic.startsWith(LIMITS_TOPIC)) this.forget(topic.slice(LIMITS_TOPIC.length))
    })
  }

  /** Calls fn when a tenant's limits change in any process (null: the cross-process channel dropped, anything may have). */
  onLimitsChanged(fn: (tenantId: string | null) => void): () => void {
    return this.o.invalidations.on((topic) => {
      if (topic === null) fn(null)
      else if (topic.startsWith(LIMITS_TOPIC)) fn(topic.slice(LIMITS_TOPIC.length))
    })
  }

  private forget(tenantId: string): void {
    this.generation++
    this.unbudgeted.delete(tenantId)
  }

  private forgetAll(): void {
    this.generation++
    this.unbudgeted.clear()
  }

  /**
   * API.md §15: before every model attempt, the tenant's token and cost limits against its settled
   * usage — one read of the limits and the day's and month's totals, or none for a tenant known to
   * have neither limit.
   */
  async checkBudget(tenantId: string): Promise<LlmFailure | null> {
    const known = this.unbudgeted.get(tenantId)
    if (known && this.clock() - known.at < UNBUDGETED_TRUST_MS) {
      this.bell.learnt(tenantId, known.maxRunning)
      this.metrics.sawLimits(tenantId, known.hasLimits)
      return null
    }
    const generation = this.generation
    const period = periodsAt(this.clock())
    const s = await budgetState(this.o.db, tenantId, period.day, period.month)
    if (!s) return null
    this.bell.learnt(tenantId, s.maxRunningSessions !== null)
    this.metrics.sawLimits(tenantId, s.hasLimits)
    if (s.tokensPerDay === null && s.costUsdPerMonth === null && generation === this.generation) {
      this.unbudgeted.set(tenantId, { maxRunning: s.maxRunningSessions !== null, hasLimits: s.hasLimits, at: this.clock() })
    }
    const refusal = budgetRefusal(s, period)
    if (!refusal) return null
    this.metrics.refused(tenantId, refusal.limit)
    return { code: refusal.code, message: refusal.message }
  }

  /** A wake ended with its session idle and no turn: sessions waiting behind it may start. */
  leftQueue(tenantId: string): void {
    this.bell.ring(tenantId)
  }

  /** A session of the tenant was deleted (its slot, if any, went with it). */
  deleted(tenantId: string): void {
    this.bell.ring(tenantId)
  }

  /** After a commit in this process (Publisher.observe): slot doorbells and settled usage. */
  committed(tenantId: string | undefined, events: readonly SessionEvent[]): void {
    if (!tenantId) return
    if (events.some((e) => e.type === 'turn/end')) this.bell.ring(tenantId)
    const usage = sumUsage(events)
    if (usage) this.metrics.settled(tenantId, usage)
  }

  async tenant(tenantId: string): Promise<Tenant | undefined> {
    const t = await tenants.getTenant(this.o.db, tenantId)
    if (t) this.metrics.sawLimits(t.id, Object.keys(t.limits).length > 0)
    return t
  }

  /** PATCH …/admin/tenants/:id: sets limits (null removes one); a changed running limit rings the waiting sessions. */
  async setLimits(tenantId: string, patch: { [K in keyof Limits]?: number | null }): Promise<Tenant | undefined> {
    const t = await tenants.updateLimits(this.o.db, tenantId, patch)
    if (!t) return undefined
    // before the answer: once the client has it, no process still skips this tenant's budget read
    this.forget(t.id)
    await this.o.invalidations.invalidate(limitsTopic(t.id))
    this.metrics.sawLimits(t.id, Object.keys(t.limits).length > 0)
    this.bell.learnt(t.id, t.limits.maxRunningSessions !== undefined)
    if (patch.maxRunningSessions !== undefined) this.bell.ring(t.id, { force: true })
    return t
  }

  /** GET /v1/usage: the ledger over the query's UTC days, grouped, and the tenant's limits. */
  async usage(tenantId: string, q: { from?: string; to?: string; groupBy?: UsageGroup }): Promise<{ usage: UsageRow[]; limits: Limits }> {
    const period = usagePeriod(q, this.clock())
    const [usage, t] = await Promise.all([usageReport(this.o.db, tenantId, period.from, period.to, q.groupBy), tenants.getTenant(this.o.db, tenantId)])
    return { usage, limits: t?.limits ?? {} }
  }
}
