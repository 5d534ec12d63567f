// API.md §15 maxRunningSessions: at most that many of a tenant's sessions run a turn at once, across
// processes (two apps on one PostgreSQL database, sampled from the database during the run); sessions
// woken beyond it wait — reading `running` — and start in wake order as turns end; a process that dies
// holding a slot or while a session waits leaves nothing stuck (crash repair frees the slot, takeover
// picks the waiter up); deleting a session or raising the limit lets waiting sessions start.

import pino from 'pino'
import { afterEach, describe, expect, it } from 'vitest'
import { loadConfig } from '../../src/config.js'
import { startApp, type App } from '../../src/app.js'
import { APP_DB_KINDS, type DbKind } from '../helpers/db.js'
import { ADMIN_TOKEN, startTestApp, type TestApp } from '../helpers/app.js'
import { d, ofType } from '../helpers/events.js'
import { expectValidLog } from '../helpers/invariants.js'
import { gate } from '../helpers/scripted.js'
import { leaveCrashedTurn } from '../helpers/crashed.js'
import { sleep, until } from '../helpers/wait.js'

let t: TestApp | undefined
let second: App | undefined
afterEach(async () => {
  await second?.close()
  second = undefined
  await t?.close()
  t = undefined
})

/** A second agentd process on the same PostgreSQL database, with the same scripted models. */
async function secondProcess(t: TestApp, env: Record<string, string> = {}): Promise<App> {
  const config = loadConfig({ PORT: '0', HOST: '127.0.0.1', DATABASE_URL: t.testDb.url!, AGENTD_ADMIN_TOKEN: ADMIN_TOKEN, AGENTD_DATA_DIR: t.app.config.dataDir, LOG_LEVEL: 'silent', ...env })
  return startApp(config, { log: pino({ level: 'silent' }), llm: { extraProviders: [t.models.provider], defaultModel: t.models.ref(), models: { providers: {} } } })
}

/** Samples the tenant's slots and open turns from the database until stopped; keeps the highest of each. */
function sampler(t: TestApp) {
  const max = { slots: 0, openTurns: 0, samples: 0 }
  let stop = false
  const done = (async () => {
    while (!stop) {
      const { rows } = await t.app.db.query<{ slots: number; open: number }>(
        'SELECT (SELECT count(*)::int FROM running_slots WHERE tenant_id = $1) AS slots, (SELECT count(*)::int FROM sessions WHERE tenant_id = $1 AND open_turn IS NOT NULL) AS open',
        [t.tenantId],
      )
      max.slots = Math.max(max.slots, rows[0].slots)
      max.openTurns = Math.max(max.openTurns, rows[0].open)
      max.samples++
      await sleep(3)
    }
  })()
  return {
    max,
    async stop() {
      stop = true
      await done
    },
  }
}

describe.each(APP_DB_KINDS)('running-session slots on %s', (kind: DbKind) => {
  const start = async (env: Record<string, string> = {}) => {
    t = await startTestApp({ kind, env })
    // on PostgreSQL a second process shares the database: drivers and requests spread over both
    if (kind === 'pg') second = await secondProcess(t, env)
    return t
  }
  const limits = async (l: Record<string, number | null>) => expect((await t!.api('PATCH', `/v1/admin/tenants/${t!.tenantId}`, { limits: l }, { key: t!.adminToken })).status).toBe(200)
  /** A followup POSTed to process i (0: the test app, 1: the second process when there is one). */
  const followup = async (id: string, content: string, i = 0) => {
    const url = i === 1 && second ? second.url! : t!.url
    const r = await fetch(`${url}/v1/sessions/${id}/followup`, { method: 'POST', headers: { authorization: `Bearer ${t!.key}`, 'content-type': 'application/json' }, body: JSON.stringify({ content }) })
    expect(r.status).toBe(202)
  }
  const started = (id: string) => t!.models.requestsOf(id).length > 0
  const status = async (id: string) => (await t!.api('GET', `/v1/sessions/${id}`)).body.status
  const keyOf = async (id: string) => (await t!.app.db.query<{ key: string }>('SELECT key FROM sessions WHERE id = $1', [id])).rows[0].key
  const slots = async () => (await t!.app.db.query<{ n: number }>('SELECT count(*)::int AS n FROM running_slots WHERE tenant_id = $1', [t!.tenantId])).rows[0].n

  it('maxRunningSessions 2, six sessions woken at once: never more than 2 run, all six complete, in wake order', async () => {
    await start()
    await limits({ maxRunningSessions: 2 })
    const ids: string[] = []
    const gates = new Map<string, ReturnType<typeof gate>>()
    for (let i = 0; i < 6; i++) {
      const s = await t!.createSession()
      ids.push(s.id)
      const g = gate()
      gates.set(s.id, g)
      t!.models.script(s.id, async () => {
        await g.promise
        return { text: [`answer ${i}`] }
      })
    }
    const sample = sampler(t!)
    await Promise.all(ids.map((id, i) => followup(id, `question ${i}`, i % 2)))
    // the wake order is the order in which the deliveries drew their place (API.md §15)
    const { rows } = await t!.app.db.query<{ id: string }>('SELECT id FROM sessions WHERE tenant_id = $1 ORDER BY wake_seq, key', [t!.tenantId])
    const order = rows.map((r) => r.id)
    expect([...order].sort()).toEqual([...ids].sort())
    const byWake = rows.map((r) => r.id)
    await until('two sessions running', () => byWake.filter(started).length === 2)
    await sleep(100)
    expect(byWake.filter(started)).toEqual(byWake.slice(0, 2))
    // the others wait: wanted, reading running, without a slot or a turn
    for (const id of byWake.slice(2)) expect(await status(id)).toBe('running')
    for (let i = 0; i < 6; i++) {
      gates.get(byWake[i])!.open()
      await t!.waitForTurnEnd(byWake[i], 1)
      if (i + 2 < 6) await until(`session ${i + 2} in wake order starting`, () => started(byWake[i + 2]))
      // nobody overtook: the sessions behind it still wait
      expect(byWake.slice(i + 3).filter(started)).toEqual([])
    }
    for (const id of ids) await t!.waitIdle(id)
    await sample.stop()
    expect(sample.max.samples).toBeGreaterThan(20)
    expect(sample.max).toMatchObject({ slots: 2, openTurns: 2 })
    // each first request came in wake order (the first two started together, in either order)
    const firsts = [...new Set(t!.models.requests.filter((r) => ids.includes(r.sessionId!)).map((r) => r.sessionId))]
    expect(firsts.slice(0, 2).sort()).toEqual(byWake.slice(0, 2).sort())
    expect(firsts.slice(2)).toEqual(byWake.slice(2))
    for (const id of ids) {
      const evs = await t!.events(id)
      expect(d(ofType(evs, 'turn/end')[0]).reason).toEqual({ kind: 'completed' })
      expectValidLog(evs)
    }
    expect(await slots()).toBe(0)
  })

  it('a process that dies while a session waits, and then one that dies holding the slot: repair frees it and the waiter runs', async () => {
    await start({ AGENTD_LEASE_TTL_MS: '1500' })
    await limits({ maxRunningSessions: 1 })
    const holder = await t!.createSession()
    const waiter = await t!.createSession()
    const g = gate()
    t!.models.script(holder.id, async () => {
      await g.promise
      return { text: ['never settles'] }
    })
    t!.models.script(waiter.id, { text: ['my turn at last'] })
    const sample = sampler(t!)
    await followup(holder.id, 'hold the slot')
    await until('the holder running', () => started(holder.id))
    await followup(waiter.id, 'wait for it', 1)
    await sleep(300)
    expect(started(waiter.id)).toBe(false)
    expect(await status(waiter.id)).toBe('running')
    // the waiter's process dies: its lease lapses without a word written; a survivor takes it over, and it waits again
    const wkey = await keyOf(waiter.id)
    await t!.app.db.query("UPDATE sessions SET lease_owner = 'a-dead-process', lease_expires_at = 0 WHERE key = $1", [wkey])
    await until('the waiter taken over', async () => (await t!.app.db.query<{ owner: string }>('SELECT lease_owner AS owner FROM sessions WHERE key = $1', [wkey])).rows[0].owner !== 'a-dead-process', 10000)
    await sleep(300)
    expect(started(waiter.id)).toBe(false)
    // the holder's process dies mid-turn, holding the slot: crash repair closes the turn and frees it
    await t!.app.db.query("UPDATE sessions SET lease_owner = 'a-dead-process', lease_expires_at = 0 WHERE key = $1", [await keyOf(holder.id)])
    const repaired = await t!.waitFor(holder.id, (e) => e.type === 'turn/end', 10000)
    expect(d(ofType(repaired, 'turn/end')[0]).reason).toEqual({ kind: 'interrupted' })
    const evs = await t!.waitForTurnEnd(waiter.id, 1, 10000)
    expect(d(ofType(evs, 'turn/end')[0]).reason).toEqual({ kind: 'completed' })
    g.open()
    await t!.waitIdle(waiter.id)
    await sample.stop()
    expect(sample.max.slots).toBe(1)
    expect(sample.max.openTurns).toBe(1)
    expectValidLog(evs)
    expectValidLog(await t!.events(holder.id))
    await until('no slot held', async () => (await slots()) === 0)
  })

  it('SPEC §19: a crash continuation takes a running-session slot like any turn: it waits while the slot is held, then runs', async () => {
    await start({ AGENTD_LEASE_TTL_MS: '1500' })
    await limits({ maxRunningSessions: 1 })
    const holder = await t!.createSession()
    const crashed = await t!.createSession()
    const g = gate()
    t!.models.script(holder.id, async () => {
      await g.promise
      return { text: ['done holding'] }
    })
    t!.models.script(crashed.id, { text: ['continued at last'] })
    const sample = sampler(t!)
    await followup(holder.id, 'hold the slot')
    await until('the holder running', () => started(holder.id))
    const left = await leaveCrashedTurn(t!.app.db, crashed.id, { cancel: false })
    // repaired by the scan, but its continuation finds no free slot: nothing more is written, it waits
    await t!.waitFor(crashed.id, (e) => e.type === 'session/end-seed', 10000)
    await sleep(2500)
    expect(started(crashed.id)).toBe(false)
    expect((await t!.events(crashed.id)).length).toBe(left.events.length + 3)
    expect(await status(crashed.id)).toBe('running')
    g.open()
    const evs = await t!.waitForTurnEnd(crashed.id, 2, 15000)
    expect(d(ofType(evs, 'turn/start').at(-1))).toEqual({ turn: 2, continues: 1 })
    expect(d(ofType(evs, 'turn/end').at(-1)).reason).toEqual({ kind: 'completed' })
    expect(ofType(evs, 'user/message').map((e) => d(e).id)).toEqual([left.prompt.id])
    await t!.waitIdle(crashed.id)
    await sample.stop()
    expect(sample.max.slots).toBe(1)
    expectValidLog(evs)
    await until('no slot held', async () => (await slots()) === 0)
  })

  it('a session with queued followups yields its slot at the end of each turn to a session that waited', async () => {
    await start()
    await limits({ maxRunningSessions: 1 })
    const a = await t!.createSession()
    const w = await t!.createSession()
    const ga = gate()
    const gw = gate()
    t!.models.script(a.id, async () => (await ga.promise, { text: ['a1'] }), { text: ['a2'] })
    t!.models.script(w.id, async () => (await gw.promise, { text: ['w'] }))
    await followup(a.id, 'first')
    await until('a running', () => started(a.id))
    await followup(a.id, 'second, queued behind the first')
    await followup(w.id, 'waiting', 1)
    await sleep(200)
    expect(started(w.id)).toBe(false)
    ga.open()
    await t!.waitForTurnEnd(a.id, 1)
    await until('w running after the turn of a ended', () => started(w.id))
    expect(t!.models.requestsOf(a.id)).toHaveLength(1)
    expect(await status(a.id)).toBe('running') // its second turn waits, wanted
    gw.open()
    await t!.waitForTurnEnd(w.id, 1)
    const evs = await t!.waitForTurnEnd(a.id, 2)
    expect(d(ofType(evs, 'turn/end')[1]).reason).toEqual({ kind: 'completed' })
    expectValidLog(evs)
    await until('no slot held', async () => (await slots()) === 0)
  })

  it('deleting the session that holds the slot, or raising the limit, lets waiting sessions start', async () => {
    await start()
    await limits({ maxRunningSessions: 1 })
    const [a, b, c] = [await t!.createSession(), await t!.createSession(), await t!.createSession()]
    const ga = gate()
    const gb = gate()
    t!.models.script(a.id, async () => (await ga.promise, { text: ['a'] }))
    t!.models.script(b.id, async () => (await gb.promise, { text: ['b'] }))
    t!.models.script(c.id, { text: ['c'] })
    await followup(a.id, 'a')
    await until('a running', () => started(a.id))
    await followup(b.id, 'b', 1)
    await followup(c.id, 'c')
    await sleep(200)
    expect([started(b.id), started(c.id)]).toEqual([false, false])
    expect((await t!.api('DELETE', `/v1/sessions/${a.id}`)).status).toBe(204)
    await until('b running after the delete', () => started(b.id))
    expect(started(c.id)).toBe(false)
    await limits({ maxRunningSessions: 2 })
    await t!.waitForTurnEnd(c.id, 1)
    gb.open()
    ga.open()
    await t!.waitForTurnEnd(b.id, 1)
    await until('no slot held', async () => (await slots()) === 0)
  })
})
