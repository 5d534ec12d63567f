// Tenant-labelled metrics (API.md §15, docs/operations.md): settled tokens and cost, running sessions
// and budget refusals. The label set stays bounded: a tenant has a label of its own only while it has
// limits (an operator's choice of tenants to watch), and at most MAX_LABELLED tenants ever get one in
// a process; every other tenant counts as `other`.

import type { Metrics } from '../metrics.js'
import { budgetTokens, type UsageTotals } from '../session/index.js'

export const MAX_LABELLED = 100
export const OTHER = 'other'

export class TenantMetrics {
  /** labelled tenants that have limits, as this process last read them */
  private readonly limited = new Set<string>()
  /** tenants that ever had a label here: their series exist, so they never exceed MAX_LABELLED */
  private readonly labelled = new Set<string>()
  private readonly tokens
  private readonly cost
  private readonly refusals

  constructor(metrics: Metrics | undefined, running: () => Iterable<string>) {
    this.tokens = metrics?.counter('agentd_tenant_tokens_total', 'Tokens of settled model attempts (input + output + cache), by tenant', ['tenant'])
    this.cost = metrics?.counter('agentd_tenant_cost_usd_total', 'Cost in USD of settled model attempts, by tenant', ['tenant'])
    this.refusals = metrics?.counter('agentd_tenant_budget_refusals_total', 'Model attempts not made because the tenant was over a budget, by tenant and limit', ['tenant', 'limit'])
    metrics?.gauge(
      'agentd_tenant_running_sessions',
      "Sessions of this process's drivers that run a turn, by tenant",
      () => {
        const n = new Map<string, number>()
        for (const t of running()) {
          const label = this.label(t)
          n.set(label, (n.get(label) ?? 0) + 1)
        }
        return [...n].map(([tenant, value]) => ({ labels: { tenant }, value }))
      },
      ['tenant'],
    )
  }

  /** What this process learnt of a tenant's limits (a budget check, the admin routes). */
  sawLimits(tenantId: string, hasLimits: boolean): void {
    if (!hasLimits) return void this.limited.delete(tenantId)
    if (this.labelled.size < MAX_LABELLED) this.labelled.add(tenantId)
    if (this.labelled.has(tenantId)) this.limited.add(tenantId)
  }

  label(tenantId: string | undefined): string {
    return tenantId && this.limited.has(tenantId) ? tenantId : OTHER
  }

  settled(tenantId: string | undefined, u: UsageTotals): void {
    const tenant = this.label(tenantId)
    this.tokens?.inc({ tenant }, budgetTokens(u))
    if (u.costUsd > 0) this.cost?.inc({ tenant }, u.costUsd)
  }

  refused(tenantId: string, limit: string): void {
    this.refusals?.inc({ tenant: this.label(tenantId), limit })
  }
}
