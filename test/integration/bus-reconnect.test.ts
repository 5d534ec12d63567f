// The PostgreSQL bus losing its LISTEN connection (DESIGN.md §3 Fan-out, API.md §6): doorbells sent
// while a process's listener is down are gone, yet its SSE subscribers still receive every durable
// event exactly once — after the reset they re-read from their last seq. Two apps in this process on
// one database, each with its own PgBus: one drives the session, the other (AGENTD_ROLE=api) serves
// the subscriber.

import { describe, expect, it } from 'vitest'
import type { PgBus } from '../../src/bus/index.js'
import { driverAndApi, openSse } from '../helpers/app.js'
import { expectValidLog } from '../helpers/invariants.js'
import { gate } from '../helpers/scripted.js'
import { until } from '../helpers/wait.js'

describe('PgBus listener reset (pg)', () => {
  const apps = driverAndApi()

  it('a subscriber on the other app gets every durable event exactly once across listener drops', async () => {
    const { driver, api } = apps
    const bus = api.app.bus as PgBus
    expect(typeof bus.dropListener).toBe('function')
    const s = await driver.createSession()
    const g = gate()
    driver.models.script(s.id, { text: ['a', 'b', 'c'], holdAfter: 1, gate: g.promise }, { text: ['again'] })
    const sub = await openSse(`${api.url}/v1/sessions/${s.id}/stream`, { authorization: `Bearer ${driver.key}` })
    expect(sub.status).toBe(200)
    await sub.waitFor((f) => f.event === 'agent/status')
    const durable = () => sub.frames.filter((f) => f.event === 'session/event')
    const hasAll = async () => {
      const log = await driver.events(s.id)
      return durable().length >= log.length
    }

    // 1. the listener drops while a turn streams; the turn's settlement and closers commit meanwhile
    expect((await driver.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'go' })).status).toBe(202)
    await driver.models.waitForRequest(s.id, 1)
    await sub.waitFor((f) => f.event === 'session/event' && f.json.type === 'user/message')
    const gen0 = bus.generation
    bus.dropListener()
    g.open()
    await driver.waitForTurnEnd(s.id, 1)
    await until('the subscriber received turn 1 to its end', () => durable().some((f) => f.json.type === 'turn/end'))
    await until('the listener reconnected', () => bus.generation > gen0)

    // 2. commits made strictly while the listener is down (an idle inject commits at once)
    let duringOutage = 0
    let gen = bus.generation
    for (let i = 0; i < 3 && duringOutage < 2; i++) {
      if (i > 0) await until('the listener reconnected', () => bus.generation > gen)
      gen = bus.generation
      bus.dropListener()
      const r = await driver.api('POST', `/v1/sessions/${s.id}/inject`, { content: `while down ${i}` })
      expect(r.status).toBe(202)
      if (bus.generation === gen) duringOutage++
      await until(`the subscriber received the inject at seq ${r.body.seq}`, () => durable().some((f) => Number(f.id) === r.body.seq))
    }
    expect(duringOutage).toBeGreaterThan(0)
    await until('the listener reconnected', () => bus.generation > gen)

    // 3. after the reconnect, ordinary doorbells flow again
    expect((await driver.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'and now' })).status).toBe(202)
    const log = await driver.waitForTurnEnd(s.id, 2)
    expectValidLog(log)
    await until('the subscriber caught up', hasAll)
    const d = durable()
    expect(d.map((f) => Number(f.id))).toEqual(log.map((e) => e.seq))
    expect(d.map((f) => f.json)).toEqual(log)
    sub.close()
  })
})
