// A delivery route reads the session's row, inbox included, in the statement that checks the key
// (http/auth.ts, issue 16); intake plans its first, optimistic attempt on that row, so an accepted
// followup costs one statement more than the key check: the conditional append. A row that moved
// since it was read fails the append's condition, and the delivery reads it again: nothing is lost,
// nothing is overwritten, the order holds.

import { afterEach, describe, expect, it } from 'vitest'
import { Intake, KeyedMutex } from '../../src/agent/index.js'
import { toUserMessage } from '../../src/session/index.js'
import { tenants } from '../../src/store/index.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { APP_DB_KINDS, countingDb } from '../helpers/db.js'
import { userTexts, type Ev } from '../helpers/events.js'
import { expectValidLog } from '../helpers/invariants.js'

let t: TestApp | undefined
afterEach(async () => {
  await t?.close()
  t = undefined
})

describe.each(APP_DB_KINDS)('a delivery planned on the row its route read (%s)', (kind) => {
  it('costs one statement with the preloaded row, two without; a stale row is read again and every message arrives once', async () => {
    t = await startTestApp({ kind })
    const s = await t.createSession()
    t.models.script(s.id, { text: ['one'] }, { text: ['two'] }, { text: ['three'] }, { text: ['four'] })
    const c = countingDb(t.app.db)
    const intake = new Intake({ db: c.db, publisher: t.app.publisher, mutex: new KeyedMutex() })
    const read = async () => (await tenants.authenticateWithSession(t!.app.db, t!.key, s.id, { inbox: true }))!.session!
    const msg = (text: string) => toUserMessage({ content: text }, { kind: 'user' })

    const fresh = await read()
    expect(fresh.inbox).toEqual({ nextTurn: [], nextStep: [] })
    const before = c.n()
    await intake.deliver({ session: fresh, route: 'followup', message: msg('first') })
    expect(c.n() - before).toBe(1)
    await t.waitIdle(s.id)

    // without the inbox, the delivery reads the row itself first
    const { inbox: _drop, ...plain } = await read()
    const before2 = c.n()
    await intake.deliver({ session: plain, route: 'followup', message: msg('second') })
    expect(c.n() - before2).toBe(2)
    await t.waitIdle(s.id)

    // read, then the session moves (a followup through the server), then the stale row is delivered on
    const stale = await read()
    expect((await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'third' })).status).toBe(202)
    await t.waitFor(s.id, (e) => e.type === 'agent/inbox/spliced' && JSON.stringify(e.data).includes('third'))
    const before3 = c.n()
    const r = await intake.deliver({ session: stale, route: 'followup', message: msg('fourth') })
    expect(c.n() - before3).toBeGreaterThanOrEqual(3) // the append refused, the read, the append
    expect(r.seq).toBeGreaterThan(stale.nextSeq)
    await t.waitFor(s.id, (_e, all) => userTexts(all as Ev[]).length >= 4, 15000)
    await t.waitIdle(s.id)
    const all = (await t.events(s.id)) as Ev[]
    expectValidLog(all)
    expect(userTexts(all).sort()).toEqual(['first', 'fourth', 'second', 'third'])
    expect(userTexts(all).indexOf('third')).toBeLessThan(userTexts(all).indexOf('fourth'))
  })

  it('the followup route reads the inbox with the key: its answer and the log are those of a plain delivery', async () => {
    t = await startTestApp({ kind })
    const s = await t.createSession()
    t.models.script(s.id, { text: ['ok'] })
    const r = await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hello', id: 'm-1' })
    expect(r.status).toBe(202)
    expect(r.body).toMatchObject({ messageId: 'm-1', seq: 0 })
    // the same id and body again: the idempotent answer, not a second message
    const again = await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hello', id: 'm-1' })
    expect(again.status).toBe(202)
    expect(again.body).toEqual(r.body)
    await t.waitIdle(s.id)
    const log = (await t.events(s.id)) as Ev[]
    expectValidLog(log)
    expect(userTexts(log)).toEqual(['hello'])
  })
})
