// Ringing sessions that wait for a running-session slot (API.md §15): whenever a tenant's slot may
// have freed — a turn ended (crash repair's too), a waiting session left without a turn, a session was
// deleted, the limit changed — its oldest waiting sessions, as many as slots are free, get a wake on
// the bus, whichever process drives them. A waiting session polls nothing: it waits for this doorbell.

import type { Logger } from 'pino'
import type { Doorbells } from '../bus/index.js'
import { errorChain } from '../session/index.js'
import { waitersToWake, type Db } from '../store/index.js'

/** How long "this tenant has no running limit" saves the query after a turn ends. */
const HINT_MS = 10_000

export class SlotBell {
  /** whether a tenant has maxRunningSessions, and when this process learnt it */
  private readonly hints = new Map<string, { limited: boolean; at: number }>()

  constructor(private readonly d: { db: Db; doorbells: Doorbells; log: Logger }) {}

  /** What this process learnt of a tenant's running limit (a budget check reads it too). */
  learnt(tenantId: string, limited: boolean): void {
    if (this.hints.size > 10_000) this.hints.clear()
    this.hints.set(tenantId, { limited, at: Date.now() })
  }

  /** A slot of the tenant may have freed: wake its oldest waiting sessions. */
  ring(tenantId: string, o: { force?: boolean } = {}): void {
    const h = this.hints.get(tenantId)
    if (!o.force && h && !h.limited && Date.now() - h.at < HINT_MS) return
    void waitersToWake(this.d.db, tenantId).then(
      (w) => {
        this.learnt(tenantId, w.limited)
        for (const key of w.keys) this.d.doorbells.wake(key)
      },
      (e) => this.d.log.warn({ err: errorChain(e), tenantId }, 'could not ring the sessions waiting for a slot'),
    )
  }
}
