// API.md §15 slot handoff under a slow database: a session whose driver, after its turn ended with
// work still queued, found no free slot (a session woken earlier waited) leaves its driver only once
// that failed opening returns. The slot's doorbell can ring in between — the waiting session ran its
// whole turn meanwhile — and finds the Agent still busy. The ring must not be lost: the driver looks
// again as it leaves, else the session waits, wanted, for a doorbell that already rang (the
// "yields its slot at the end of each turn" test's occasional 10 s timeout on a loaded machine).

import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SlotUnavailableError, type Db } from '../../src/store/index.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { d, ofType } from '../helpers/events.js'
import { APP_DB_KINDS } from '../helpers/db.js'
import { expectValidLog } from '../helpers/invariants.js'
import { gate } from '../helpers/scripted.js'
import { sleep, until } from '../helpers/wait.js'

const WAITERS = /LEFT JOIN LATERAL/

/**
 * The database as the server sees it: when armed for a session, the unit of that session that found
 * no free slot returns its failure only once released; and when each ring's query for the sessions
 * waiting for a slot was answered.
 */
function slowSlots(db: Db) {
  let armed: { key: string; reached: () => void; release: Promise<void> } | undefined
  const rings: number[] = []
  const query = (q: Pick<Db, 'query'>): Db['query'] =>
    async <T,>(sql: string, params?: unknown[]) => {
      const r = await q.query<T>(sql, params)
      if (WAITERS.test(sql)) rings.push(Date.now())
      return r
    }
  const wrapped = new Proxy(db, {
    get(target, p) {
      if (p === 'query') return query(target)
      if (p === 'transaction')
        return async <R,>(fn: (tx: Pick<Db, 'query'>) => Promise<R>) => {
          try {
            return await target.transaction((tx) => fn({ query: query(tx) }))
          } catch (e) {
            const a = armed
            if (a && e instanceof SlotUnavailableError && e.sessionKey === a.key) {
              armed = undefined
              a.reached()
              await a.release
            }
            throw e
          }
        }
      const v = Reflect.get(target, p)
      return typeof v === 'function' ? v.bind(target) : v
    },
  })
  return {
    db: wrapped,
    rings,
    /** holds the next failed slot taking of session `key`; resolves, with its release, once it failed */
    hold(key: string): { failed: Promise<() => void> } {
      const release = gate()
      return { failed: new Promise((resolve) => (armed = { key, reached: () => resolve(release.open), release: release.promise })) }
    },
  }
}

describe.each(APP_DB_KINDS)('a slot handoff on %s', (kind) => {
  let t: TestApp
  let slots: ReturnType<typeof slowSlots>
  beforeAll(async () => {
    t = await startTestApp({ kind, wrapDb: (db) => (slots = slowSlots(db)).db })
  })
  afterAll(async () => {
    await t?.close()
  })
  const keyOf = async (id: string) => (await t.app.db.query<{ key: string }>('SELECT key FROM sessions WHERE id = $1', [id])).rows[0].key
  const runState = async (id: string) => (await t.app.db.query<{ run_state: string }>('SELECT run_state FROM sessions WHERE id = $1', [id])).rows[0].run_state

  it('the doorbell of a freed slot that rings while the yielding driver is still leaving starts its next turn', async () => {
    expect((await t.api('PATCH', `/v1/admin/tenants/${t.tenantId}`, { limits: { maxRunningSessions: 1 } }, { key: t.adminToken })).status).toBe(200)
    const a = await t.createSession()
    const w = await t.createSession()
    const ga = gate()
    t.models.script(a.id, async () => (await ga.promise, { text: ['a1'] }), { text: ['a2'] })
    t.models.script(w.id, { text: ['w'] })
    expect((await t.api('POST', `/v1/sessions/${a.id}/followup`, { content: 'first' })).status).toBe(202)
    await t.models.waitForRequest(a.id, 1)
    expect((await t.api('POST', `/v1/sessions/${a.id}/followup`, { content: 'second, queued behind the first' })).status).toBe(202)
    expect((await t.api('POST', `/v1/sessions/${w.id}/followup`, { content: 'waiting' })).status).toBe(202)
    await until('w waits for the slot', async () => (await runState(w.id)) !== 'idle' && t.models.requestsOf(w.id).length === 0)

    // a's turn ends; its driver's opening of the next turn finds w woken earlier, and its failure is slow to return
    const held = slots.hold(await keyOf(a.id))
    ga.open()
    const release = await held.failed
    // meanwhile w runs its whole turn, and its end rings a, whose driver is still leaving
    const wEnd = ofType(await t.waitForTurnEnd(w.id, 1), 'turn/end')[0]
    await until('the ring after the turn of w', () => slots.rings.some((at) => at >= wEnd.time))
    await sleep(50)
    release()

    const evs = await t.waitForTurnEnd(a.id, 2, 5000)
    expect(d(ofType(evs, 'turn/end')[1]).reason).toEqual({ kind: 'completed' })
    expectValidLog(evs)
    expect(t.models.requestsOf(a.id)).toHaveLength(2)
  })
})
