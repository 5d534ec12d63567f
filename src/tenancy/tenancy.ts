// The tenancy service (API.md §15): what the driver asks before every model attempt (the budget) and
// when a wake leaves the slot queue, what follows each commit in this process (slot doorbells,
// tenant metrics), the admin routes' limits and the usage route's report.

import type { Logger } from 'pino'
import type { Bus } from '../bus/index.js'
import type { Metrics } from '../metrics.js'
import { sumUsage, type LlmFailure, type SessionEvent } from '../session/index.js'
import { budgetState, tenants, usageReport, type Db, type UsageGroup, type UsageRow } from '../store/index.js'
import { periodsAt, systemClock, type Clock } from './clock.js'
import { budgetRefusal, type Limits } from './limits.js'
import { TenantMetrics } from './metrics.js'
import { SlotBell } from './slots.js'
import { usagePeriod } from './usage.js'

export interface TenancyOptions {
  db: Db
  bus: Bus
  log: Logger
  metrics?: Metrics
  /** the tenants of the sessions this process's drivers run a turn for, one per session (a gauge) */
  running?: () => Iterable<string>
  clock?: Clock
}

export type Tenant = { id: string; name: string; limits: Limits }

export class Tenancy {
  readonly clock: Clock
  private readonly bell: SlotBell
  private readonly metrics: TenantMetrics

  constructor(private readonly o: TenancyOptions) {
    this.clock = o.clock ?? systemClock
    this.bell = new SlotBell(o)
    this.metrics = new TenantMetrics(o.metrics, o.running ?? (() => []))
  }

  /** API.md §15: before every model attempt, one read of the limits and the day's and month's totals. */
  async checkBudget(tenantId: string): Promise<LlmFailure | null> {
    const period = periodsAt(this.clock())
    const s = await budgetState(this.o.db, tenantId, period.day, period.month)
    if (!s) return null
    this.bell.learnt(tenantId, s.maxRunningSessions !== null)
    this.metrics.sawLimits(tenantId, s.hasLimits)
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
