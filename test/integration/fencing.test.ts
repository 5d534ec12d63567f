// Fencing (SPEC §2.2, §5.7, §13; DESIGN.md §3 Ownership): every driver append checks the lease
// token; a driver whose lease was taken writes nothing more and stops, and the session is only
// driven again by whoever holds the lease — here the app's own takeover scan once the stolen lease
// expires (SPEC §13.3a).

import crypto from 'node:crypto'
import pino from 'pino'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { commitDecision, KeyedMutex, LeaseLostError, Publisher, SessionLog, StaleUnitError, type UnitBuilder } from '../../src/agent/index.js'
import { LocalHub } from '../../src/bus/index.js'
import { createRoot } from '../../src/hooks/index.js'
import { SessionState, type UserMessage } from '../../src/session/index.js'
import { insertSession, NOW_MS, readEvents, type Db } from '../../src/store/index.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { DB_KINDS, openTestDb, type TestDb } from '../helpers/db.js'
import { expectValidLog } from '../helpers/invariants.js'
import { throughSeed } from '../helpers/events.js'
import { gate } from '../helpers/scripted.js'
import { until } from '../helpers/wait.js'

const msg = (id: string, text: string): UserMessage => ({ id, role: 'user', content: [{ type: 'text', text }], source: { kind: 'user' } })

describe.each(DB_KINDS)('SessionLog fencing on %s', (kind) => {
  let t: TestDb
  let db: Db
  const tenantId = crypto.randomUUID()
  const log = pino({ level: 'silent' })
  const publisher = new Publisher(new LocalHub(), createRoot(), log)
  const mutex = new KeyedMutex()

  beforeAll(async () => {
    t = await openTestDb(kind)
    db = t.db
    await db.query('INSERT INTO tenants (id, name, created_at) VALUES ($1, $2, $3)', [tenantId, 'fencing', Date.now()])
  })
  afterAll(async () => {
    await t?.drop()
  })

  let n = 0
  async function newSession(lease: { owner: string; token: number }): Promise<{ key: string; id: string }> {
    const key = crypto.randomUUID()
    const id = `fence-${++n}`
    await insertSession(db, { key, tenantId, id, model: 'test/scripted', system: '', tools: [], metadata: {}, createHash: 'h', createdAt: Date.now() })
    await db.query(`UPDATE sessions SET lease_owner = $2, lease_token = $3, lease_expires_at = ${NOW_MS} + 60000 WHERE key = $1`, [key, lease.owner, lease.token])
    return { key, id }
  }
  const rowOf = async (key: string) => (await db.query<Record<string, any>>('SELECT * FROM sessions WHERE key = $1', [key])).rows[0]
  const splice = (m: UserMessage, start: number) => ({ type: 'agent/inbox/spliced', data: { target: 'next-turn', start, inserted: [m] } as any })

  it('a driver whose lease was taken over (owner b, token 2) commits nothing: LeaseLostError, log, row and fold unchanged', async () => {
    const { key, id } = await newSession({ owner: 'a', token: 1 })
    const sl = new SessionLog({ db, publisher, mutex, log }, key, id, new SessionState(), { owner: 'a', token: 1 })
    // while the lease is ours, appends go through
    const ok = await sl.commit(
      (u) => {
        u.add(splice(msg('m1', 'one'), 0))
      },
      { reads: ['inbox'] },
    )
    expect(ok.events.map((e) => e.seq)).toEqual([0])
    expect(JSON.parse((await rowOf(key)).inbox).nextTurn.map((m: UserMessage) => m.id)).toEqual(['m1'])

    // a takeover: another owner, a new fencing token
    await db.query('UPDATE sessions SET lease_owner = $2, lease_token = 2 WHERE key = $1', [key, 'b'])
    const before = await rowOf(key)
    const stateBefore = { nextSeq: sl.state.nextSeq, inbox: structuredClone(sl.state.inbox) }
    const err = await sl.commit((u) => void u.add(splice(msg('m2', 'two'), 1)), { reads: ['inbox'] }).catch((e) => e)
    expect(err).toBeInstanceOf(LeaseLostError)
    expect(err.reason).toBe('lost')
    expect((await readEvents(db, key)).map((e) => e.seq)).toEqual([0])
    expect(await rowOf(key)).toEqual(before)
    expect({ nextSeq: sl.state.nextSeq, inbox: sl.state.inbox }).toEqual(stateBefore)
    // a read-only sync is refused the same way
    await expect(sl.sync()).rejects.toBeInstanceOf(LeaseLostError)
    // the new holder continues the log where it is: no hole, no trace of the refused unit
    const sl2 = new SessionLog({ db, publisher, mutex, log }, key, id, SessionState.fromEvents(await readEvents(db, key)), { owner: 'b', token: 2 })
    const next = await sl2.commit((u) => void u.add(splice(msg('m3', 'three'), 1)), { reads: ['inbox'] })
    expect(next.events.map((e) => e.seq)).toEqual([1])
    expect(JSON.parse((await rowOf(key)).inbox).nextTurn.map((m: UserMessage) => m.id)).toEqual(['m1', 'm3'])
  })

  it("a unit's row flags are its declared inputs: an undeclared one throws and writes nothing; a declared one that moved sends the unit back, and it is decided again under the lock", async () => {
    const { key, id } = await newSession({ owner: 'a', token: 1 })
    const sl = new SessionLog({ db, publisher, mutex, log }, key, id, new SessionState(), { owner: 'a', token: 1 })
    await sl.commit((u) => void u.add(splice(msg('m1', 'one'), 0)), { reads: ['inbox'] })
    const err = await sl.commit((u) => void u.add(splice(msg('m2', (u.row as any).cancelPending ? 'x' : 'y'), 1)), { reads: ['inbox'] }).catch((e) => e)
    expect(String(err)).toMatch(/cancelPending without declaring it/)
    expect(sl.state.nextSeq).toBe(1)
    expect((await readEvents(db, key)).length).toBe(1)
    // another process set cancel_pending: the fast append, conditional on the flag as last seen, fails;
    // the flag it declared changed, so nothing is written and the unit goes back to its caller
    await db.query('UPDATE sessions SET cancel_pending = true WHERE key = $1', [key])
    const seen: boolean[] = []
    const build = (u: UnitBuilder<'cancelPending'>) => {
      seen.push(u.row.cancelPending)
      u.add(splice(msg('m2', 'two'), 1))
    }
    const stale = await sl.commit<void, 'cancelPending'>(build, { reads: ['cancelPending', 'inbox'] }).catch((e) => e)
    expect(stale).toBeInstanceOf(StaleUnitError)
    expect(stale.changed).toEqual(['cancelPending'])
    expect(seen).toEqual([false])
    expect(sl.state.nextSeq).toBe(1)
    expect((await readEvents(db, key)).length).toBe(1)
    // the log read the row under the lock: the flag as it is now. It moves once more, and this time
    // the caller decides again (commitDecision): once more, under the lock, against the row as it is
    seen.length = 0
    await db.query('UPDATE sessions SET cancel_pending = false WHERE key = $1', [key])
    const r = await commitDecision<void, 'cancelPending'>(sl, build, { reads: ['cancelPending', 'inbox'] })
    expect(seen).toEqual([true, false])
    expect(r.row.cancelPending).toBe(false)
    expect(r.events.map((e) => e.seq)).toEqual([1])
  })

  it('the same owner with a stale token is fenced too (a re-claim bumps the token)', async () => {
    const { key, id } = await newSession({ owner: 'a', token: 1 })
    const sl = new SessionLog({ db, publisher, mutex, log }, key, id, new SessionState(), { owner: 'a', token: 1 })
    await db.query('UPDATE sessions SET lease_token = lease_token + 1 WHERE key = $1', [key])
    const before = await rowOf(key)
    await expect(sl.commit((u) => void u.add(splice(msg('m1', 'one'), 0)), { reads: ['inbox'] })).rejects.toMatchObject({ name: 'LeaseLostError', reason: 'lost' })
    expect(await readEvents(db, key)).toEqual([])
    expect(await rowOf(key)).toEqual(before)
  })

  it('a deleted session gives LeaseLostError("deleted") and writes nothing', async () => {
    const { key, id } = await newSession({ owner: 'a', token: 1 })
    const sl = new SessionLog({ db, publisher, mutex, log }, key, id, new SessionState(), { owner: 'a', token: 1 })
    await db.query('DELETE FROM sessions WHERE key = $1', [key])
    const err = await sl.commit((u) => void u.add(splice(msg('m1', 'one'), 0)), { reads: ['inbox'] }).catch((e) => e)
    expect(err).toBeInstanceOf(LeaseLostError)
    expect(err.reason).toBe('deleted')
    expect((await db.query('SELECT count(*)::int AS n FROM session_events WHERE session_key = $1', [key])).rows[0].n).toBe(0)
    expect(sl.state.nextSeq).toBe(0)
  })
})

describe.each(DB_KINDS)('a worker host that lost its lease on %s', (kind) => {
  let t: TestApp
  const STOLEN_FOR_MS = 2500
  beforeAll(async () => {
    t = await startTestApp({ kind, env: { AGENTD_LEASE_TTL_MS: '1500' } })
  })
  afterAll(async () => {
    await t?.close()
  })
  const keyOf = async (id: string): Promise<string> => (await t.app.db.query<{ key: string }>('SELECT key FROM sessions WHERE id = $1', [id])).rows[0].key
  const lease = async (key: string) => {
    const r = (await t.app.db.query<{ lease_owner: string | null; lease_token: string | number; lease_expires_at: string | number | null }>('SELECT lease_owner, lease_token, lease_expires_at FROM sessions WHERE key = $1', [key])).rows[0]
    return { owner: r.lease_owner, token: Number(r.lease_token), expiresAt: r.lease_expires_at === null ? null : Number(r.lease_expires_at) }
  }
  /** As another process's takeover would: a new owner and token, expiring in STOLEN_FOR_MS. */
  const steal = async (key: string) => {
    const r = await t.app.db.query<{ lease_token: string | number; lease_expires_at: string | number }>(
      `UPDATE sessions SET lease_owner = 'other', lease_token = lease_token + 1, lease_expires_at = ${NOW_MS} + ${STOLEN_FOR_MS} WHERE key = $1 RETURNING lease_token, lease_expires_at`,
      [key],
    )
    return { token: Number(r.rows[0].lease_token), expiresAt: Number(r.rows[0].lease_expires_at) }
  }

  it('an idle Agent is dropped at renewal; a followup waits for the stolen lease to expire, then the scan reclaims and runs it', async () => {
    const host = t.app.host!
    const s = await t.createSession()
    const key = await keyOf(s.id)
    t.models.script(s.id, { text: ['first'] }, { text: ['second'] })
    expect((await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'one' })).status).toBe(202)
    await t.waitIdle(s.id)
    expect(host.agent(key)).toBeDefined()
    expect((await lease(key)).owner).toBe(host.owner)

    const stolen = await steal(key)
    await until('the host dropped the Agent after its renewal failed', () => host.agent(key) === undefined, 5000, 20)
    const atSteal = await t.events(s.id)

    const r = await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'two' })
    expect(r.status).toBe(202)
    const evs = await t.waitForTurnEnd(s.id, 2, STOLEN_FOR_MS + 8000)
    expectValidLog(evs)
    // nothing was written between the steal and the delivery
    expect(evs[atSteal.length]).toMatchObject({ seq: r.body.seq, type: 'agent/inbox/spliced' })
    const after = evs.slice(atSteal.length + 1)
    // the reclaim is a new loop instance: marker, then turn 2 with a resume header
    expect(after[0]).toMatchObject({ type: 'session/end-seed', data: {} })
    expect(after[1]).toMatchObject({ type: 'turn/start', data: { turn: 2 } })
    expect(after.find((e) => e.type === 'request/header')?.data).toMatchObject({ reason: 'resume' })
    expect(after.at(-1)!.data).toEqual({ turn: 2, reason: { kind: 'completed' } })
    // not before the stolen lease expired (database clock vs. the event's time: the same machine)
    expect(after[0].time).toBeGreaterThanOrEqual(stolen.expiresAt - 5)
    expect(t.models.requestsOf(s.id)).toHaveLength(2)
    expect(t.models.requestsOf(s.id)[1].at).toBeGreaterThanOrEqual(stolen.expiresAt - 5)
    const l = await lease(key)
    expect(l.owner).toBe(host.owner)
    expect(l.token).toBe(stolen.token + 1)
    expect(host.agent(key)).toBeDefined()
  })

  it('a streaming Agent whose lease is stolen writes nothing more; after expiry the scan repairs the open turn', async () => {
    const host = t.app.host!
    const s = await t.createSession()
    const key = await keyOf(s.id)
    const g = gate()
    t.models.script(s.id, { text: ['par', 'tial'], holdAfter: 1, gate: g.promise })
    expect((await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'go' })).status).toBe(202)
    await t.models.waitForRequest(s.id, 1)
    const atSteal = await t.events(s.id)
    const last = atSteal.at(-1)!
    const stolen = await steal(key)
    // the model answers at once: the settlement meets the fence
    g.open()
    await until('the Agent stopped', () => host.agent(key) === undefined, 5000, 20)

    const evs = await t.waitFor(s.id, (e) => e.type === 'session/end-seed', STOLEN_FOR_MS + 8000)
    expectValidLog(evs)
    const after = throughSeed(evs.slice(atSteal.length))
    // no settlement by the fenced driver: only the repair by the next holder, at the last stored time
    expect(after.map((e) => e.type)).toEqual(['step/end', 'turn/end', 'session/end-seed'])
    expect(after[0]).toMatchObject({ time: last.time, data: { turn: 1, step: 1 } })
    expect(after[1]).toMatchObject({ time: last.time, data: { turn: 1, reason: { kind: 'interrupted' } } })
    expect(after[2].time).toBeGreaterThanOrEqual(stolen.expiresAt - 5)
    expect(throughSeed(evs).some((e) => e.type === 'assistant/message' || e.type === 'assistant/attempt')).toBe(false)
    const l = await lease(key)
    expect(l.owner).toBe(host.owner)
    expect(l.token).toBe(stolen.token + 1)
  })
})
