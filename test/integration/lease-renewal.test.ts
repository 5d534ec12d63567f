// Lease renewal against a session that changed hands inside this process (SPEC §5.7, §19; the
// continuation soak's one unanswered input): a renewal judges only the Agents it asked about. A
// renewal whose answer arrives after the session was released and claimed again (an idle release, a
// lost lease taken back, a release after a failed closer) must not stop the new Agent, whose lease is
// newer than that answer: disposing it mid-turn would end the turn `aborted {disposed}`, an end
// nobody asked for, and the input it consumed would never be answered.

import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Db } from '../../src/store/index.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { APP_DB_KINDS } from '../helpers/db.js'
import { expectValidLog } from '../helpers/invariants.js'
import { gate } from '../helpers/scripted.js'
import { until } from '../helpers/wait.js'

const RENEWAL = /UPDATE sessions s SET lease_expires_at/

/** The database as the server sees it, with the answer of one renewal held back when armed. */
function slowRenewals(db: Db) {
  let armed: { reached: () => void; release: Promise<void> } | undefined
  let answered = 0
  const query = (q: Pick<Db, 'query'>): Db['query'] =>
    async <T,>(sql: string, params?: unknown[]) => {
      const r = await q.query<T>(sql, params)
      if (RENEWAL.test(sql)) {
        const a = armed
        armed = undefined
        if (a) {
          a.reached()
          await a.release
        }
        answered++
      }
      return r
    }
  const wrapped = new Proxy(db, {
    get(target, p) {
      if (p === 'query') return query(target)
      if (p === 'transaction') return <R,>(fn: (tx: Pick<Db, 'query'>) => Promise<R>) => target.transaction((tx) => fn({ query: query(tx) }))
      const v = Reflect.get(target, p)
      return typeof v === 'function' ? v.bind(target) : v
    },
  })
  return {
    db: wrapped,
    answered: () => answered,
    /** holds the next renewal's answer; resolves once that renewal ran, with the release of its answer */
    hold(): Promise<() => void> {
      const release = gate()
      return new Promise((resolve) => {
        armed = { reached: () => resolve(release.open), release: release.promise }
      })
    },
  }
}

describe.each(APP_DB_KINDS)('lease renewal on %s', (kind) => {
  let t: TestApp
  let renewals: ReturnType<typeof slowRenewals>
  beforeAll(async () => {
    t = await startTestApp({ kind, env: { AGENTD_LEASE_TTL_MS: '1500' }, wrapDb: (db) => (renewals = slowRenewals(db)).db })
  })
  afterAll(async () => {
    await t?.close()
  })
  const keyOf = async (id: string): Promise<string> => (await t.app.db.query<{ key: string }>('SELECT key FROM sessions WHERE id = $1', [id])).rows[0].key

  it('a renewal answered before the session was released and claimed again leaves the new Agent and its turn alone', async () => {
    const host = t.app.host!
    const s = await t.createSession()
    const key = await keyOf(s.id)
    const g = gate()
    t.models.script(s.id, { text: ['first'] }, { text: ['sec', 'ond'], holdAfter: 1, gate: g.promise })
    expect((await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'one' })).status).toBe(202)
    await t.waitIdle(s.id)
    const first = host.agent(key)
    expect(first !== undefined).toBe(true)

    // a renewal asks about the first Agent's lease and is answered; its answer is slow to arrive
    const release = await renewals.hold()
    // meanwhile the session is released (as an idle release does) and claimed again for a followup
    await host.drop(key, { release: true })
    expect((await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'two' })).status).toBe(202)
    await t.models.waitForRequest(s.id, 2)
    const second = host.agent(key)
    expect(second !== undefined).toBe(true)
    expect(second === first).toBe(false)

    // the old answer arrives: it names the first Agent's token, not the second's
    const seen = renewals.answered()
    release()
    // judged once the next renewal is answered (or the host gave up the session: then none comes)
    await until('the old answer was judged', () => renewals.answered() >= seen + 2 || host.agent(key) !== second, 5000, 20)
    g.open()
    // the turn that claimed 'two' ends as the model ended it, not aborted {disposed}
    const evs = await t.waitForTurnEnd(s.id, 2)
    expectValidLog(evs)
    expect(evs.find((e) => e.type === 'turn/end' && (e.data as { turn: number }).turn === 2)!.data).toEqual({ turn: 2, reason: { kind: 'completed' } })
    expect(second!.disposed).toBe(false)
    expect(host.agent(key) === second).toBe(true)
  })
})
