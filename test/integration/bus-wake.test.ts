// Wake requests across processes (DESIGN.md §3 Fan-out, SPEC §5.2): a delivery accepted by the
// process that holds the session wakes its Agent there and asks nobody else, so it sends no wake
// NOTIFY; a delivery accepted by a process that does not hold the session sends one, and the holder
// runs the turn. Two apps in this process on one database, each with its own PgBus: one drives, the
// other (AGENTD_ROLE=api) only accepts.

import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { driverAndApi } from '../helpers/app.js'
import { until } from '../helpers/wait.js'

describe('wake NOTIFYs (pg)', () => {
  const apps = driverAndApi()
  const heard: Array<{ s?: string }> = []
  let listener: pg.Client

  beforeAll(async () => {
    listener = new pg.Client({ connectionString: apps.driver.testDb.url })
    await listener.connect()
    listener.on('notification', (m) => {
      if (m.channel === 'agentd_wake') heard.push(JSON.parse(m.payload ?? '{}'))
    })
    await listener.query('LISTEN agentd_wake')
  })
  afterAll(async () => {
    await listener?.end()
  })

  it('a wake the holding process took reaches no other process; one accepted elsewhere does, and the holder runs the turn', async () => {
    const { driver, api } = apps
    const s = await driver.createSession()
    const { rows } = await listener.query<{ key: string }>('SELECT key FROM sessions WHERE id = $1', [s.id])
    const key = rows[0].key
    const wakesFor = () => heard.filter((m) => m.s === key).length
    driver.models.script(s.id, { text: ['one'] }, { text: ['two'] }, { text: ['three'] })

    // turn 1: nobody holds the session yet, so the wake goes out (and the driver claims it)
    expect((await driver.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'first' })).status).toBe(202)
    await driver.waitForTurnEnd(s.id, 1)
    await until('the first wake was heard', () => wakesFor() >= 1)
    const before = wakesFor()

    // turn 2: accepted by the holder, which takes the wake itself
    expect((await driver.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'second' })).status).toBe(202)
    await driver.waitForTurnEnd(s.id, 2)

    // turn 3: accepted by the api process, which holds nothing: its wake must reach the holder
    expect((await api.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'third' }, { key: driver.key })).status).toBe(202)
    const log = await driver.waitForTurnEnd(s.id, 3, 5000)
    expect(log.filter((e) => e.type === 'turn/end').length).toBe(3)
    await until('the api process wake was heard', () => wakesFor() > before)
    // NOTIFYs arrive in commit order: turn 2's would have come before turn 3's
    expect(wakesFor() - before).toBe(1)
  })
})
