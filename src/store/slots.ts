// Running-session slots (API.md §15 maxRunningSessions): a row per session that runs a turn, taken
// as a side row of the unit that writes turn/start and freed by the one that writes turn/end. A
// tenant with a limit takes its slots on the locked path, under its tenant row's lock, in wake order.

import { statement, type Queryable } from './db.js'

/** The unit's turn/start found no free slot: nothing of it was written; the session waits. */
export class SlotUnavailableError extends Error {
  constructor(readonly sessionKey: string, readonly maxRunningSessions: number) {
    super(`all ${maxRunningSessions} running-session slots of the tenant are taken or promised to sessions woken earlier`)
    this.name = 'SlotUnavailableError'
  }
}

/**
 * The fast path's condition on the row move of a unit that takes a slot: only a tenant without a
 * limit takes one without looking; any other unit takes the locked path (takeSlotLocked). `sessions`
 * names the updated sessions row (its alias in the unit statement, unit-sql.ts).
 */
export const slotTakeGuard = (sessions = 'sessions'): string => `NOT EXISTS (SELECT 1 FROM tenants t WHERE t.id = ${sessions}.tenant_id AND t.max_running_sessions IS NOT NULL)`

const SLOT_TENANT_LOCK = statement(
  'slot_tenant_lock',
  'SELECT s.tenant_id, coalesce(s.wake_seq, 0) AS wake_seq, t.max_running_sessions AS max FROM sessions s JOIN tenants t ON t.id = s.tenant_id WHERE s.key = $1 FOR NO KEY UPDATE OF t',
)
const SLOT_INSERT = (when: string) => `INSERT INTO running_slots (session_key, tenant_id, taken_at) SELECT $1, $2, $3 WHERE ${when}
     ON CONFLICT (session_key) DO UPDATE SET taken_at = EXCLUDED.taken_at`
const SLOT_TAKE = statement('slot_take', SLOT_INSERT('true'))
const SLOT_TAKE_LIMITED = statement(
  'slot_take_limited',
  SLOT_INSERT(`(SELECT count(*) FROM running_slots WHERE tenant_id = $2 AND session_key <> $1)
       + (SELECT count(*) FROM sessions w WHERE w.tenant_id = $2 AND w.key <> $1 AND w.run_state IN ('wanted', 'running')
            AND (coalesce(w.wake_seq, 0), w.key) < ($4::bigint, $1::uuid) AND NOT EXISTS (SELECT 1 FROM running_slots x WHERE x.session_key = w.key)) < $5`),
)

/**
 * Side row (unit-kinds.ts slot-take), locked path: takes the slot if the tenant's running sessions plus the sessions
 * woken before this one that still wait stay below its limit; throws SlotUnavailableError otherwise,
 * which rolls the unit back. The tenant row's lock orders takers across processes (NO KEY UPDATE: the
 * foreign-key checks of inserts go on); the counts are read after it, so they see every slot taken before.
 */
export async function takeSlotLocked(tx: Queryable, key: string): Promise<void> {
  const { rows } = await tx.query<{ tenant_id: string; wake_seq: number; max: number | null }>(
    SLOT_TENANT_LOCK,
    [key],
  )
  const r = rows[0]
  if (!r) return
  const taken = r.max === null ? await tx.query(SLOT_TAKE, [key, r.tenant_id, Date.now()]) : await tx.query(SLOT_TAKE_LIMITED, [key, r.tenant_id, Date.now(), r.wake_seq, r.max])
  if (taken.rowCount === 0) throw new SlotUnavailableError(key, r.max!)
}

const SLOT_WAITERS = statement(
  'slot_waiters',
  `SELECT t.max_running_sessions AS max, w.key FROM tenants t
     LEFT JOIN LATERAL (
       SELECT w.key FROM sessions w
       WHERE w.tenant_id = t.id AND w.run_state IN ('wanted', 'running') AND NOT EXISTS (SELECT 1 FROM running_slots x WHERE x.session_key = w.key)
       ORDER BY coalesce(w.wake_seq, 0), w.key
       LIMIT greatest(0, coalesce(t.max_running_sessions, 0) - (SELECT count(*) FROM running_slots x WHERE x.tenant_id = t.id))
     ) w ON true
     WHERE t.id = $1`,
)

/**
 * The sessions to ring when a tenant's slots may have freed: its oldest waiting sessions (wanted or
 * between turns, without a slot), as many as slots are free. `limited` is false for a tenant without
 * a limit (nothing waits) or an unknown one.
 */
export async function waitersToWake(db: Queryable, tenantId: string): Promise<{ limited: boolean; keys: string[] }> {
  const { rows } = await db.query<{ max: number | null; key: string | null }>(SLOT_WAITERS, [tenantId])
  return { limited: rows.some((r) => r.max !== null), keys: rows.flatMap((r) => (r.key ? [r.key] : [])) }
}

