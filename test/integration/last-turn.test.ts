// API.md §4 `lastTurn` on one database (docs/testing.md): null before the first turn ends, then the latest turn/end's
// number, reason and time after a completed, a failed, a cancelled and a crash-repaired turn, the same
// in the session object and in the list, and always what the log itself says.

import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { expectValidLog } from '../helpers/invariants.js'
import { d, types } from '../helpers/events.js'
import { leaveCrashedTurn } from '../helpers/crashed.js'
import type { SessionEvent } from '../../src/session/index.js'

describe.each(APP_DB_KINDS)('lastTurn on %s', (kind) => {
  let t: TestApp
  beforeAll(async () => {
    t = await startTestApp({ kind, env: { AGENTD_RATE_LIMIT_PER_MIN: '1000000' } })
  })
  afterAll(async () => {
    await t?.close()
  })

  const get = async (id: string) => (await t.api('GET', `/v1/sessions/${id}`)).body
  const listed = async (id: string) => ((await t.api('GET', '/v1/sessions?limit=200')).body.sessions as any[]).find((s) => s.id === id)
  /** lastTurn as the log says it: its latest turn/end */
  const fromLog = (evs: SessionEvent[]) => {
    const end = evs.filter((e) => e.type === 'turn/end').at(-1)
    return end ? { turn: d(end).turn, reason: d(end).reason, endedAt: new Date(end.time).toISOString() } : null
  }
  /** the session object and its list entry both show what the log says; returns it */
  const expectMirrored = async (id: string) => {
    const evs = await t.waitIdle(id)
    expectValidLog(evs)
    const want = fromLog(evs)
    expect((await get(id)).lastTurn).toEqual(want)
    expect((await listed(id)).lastTurn).toEqual(want)
    return want
  }

  it('is null before the first turn ends, then names each turn as it ends: completed, error, aborted', async () => {
    const s = await t.createSession()
    expect(s.lastTurn).toBeNull()
    expect((await get(s.id)).lastTurn).toBeNull()
    // input queued without a turn: still null
    expect((await t.api('POST', `/v1/sessions/${s.id}/inject`, { content: 'a note' })).status).toBe(202)
    expect((await listed(s.id)).lastTurn).toBeNull()

    t.models.script(s.id, { text: ['fine'] })
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hello' })
    await t.waitForTurnEnd(s.id, 1)
    expect(await expectMirrored(s.id)).toMatchObject({ turn: 1, reason: { kind: 'completed' } })

    // AUTH is not retried: turn 2 fails at once, and the session is idle again
    t.models.script(s.id, { error: '401 Incorrect API key provided' })
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'again' })
    await t.waitForTurnEnd(s.id, 2)
    const failed = await expectMirrored(s.id)
    expect(failed).toMatchObject({ turn: 2, reason: { kind: 'error', error: { code: 'AUTH' } } })
    expect((await get(s.id)).status).toBe('idle')

    // a hung answer cancelled by the user
    t.models.script(s.id, { text: ['thinking'], hang: true })
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'take your time' })
    await t.waitFor(s.id, (e) => e.type === 'step/start' && d(e).turn === 3)
    // while turn 3 runs, lastTurn still names turn 2
    expect((await get(s.id)).lastTurn).toEqual(failed)
    expect((await t.api('POST', `/v1/sessions/${s.id}/cancel`, {})).status).toBe(202)
    await t.waitForTurnEnd(s.id, 3)
    expect(await expectMirrored(s.id)).toMatchObject({ turn: 3, reason: { kind: 'aborted', reason: { kind: 'user' } } })
  })

  it('names the interrupted turn that crash repair closed (a log left inside an open turn, taken over)', async () => {
    const s = await t.createSession()
    const { events, time: T } = await leaveCrashedTurn(t.app.db, s.id)
    expect((await get(s.id)).lastTurn).toBeNull()
    // no delivery: the worker's scan takes it over and writes the closers
    const evs = await t.waitFor(s.id, (e) => e.type === 'session/end-seed', 8000)
    expect(types(evs.slice(events.length))).toEqual(['step/end', 'turn/end', 'session/end-seed'])
    const want = await expectMirrored(s.id)
    // the closers keep the last stored time (SPEC §18.13), so the turn ended at T
    expect(want).toEqual({ turn: 1, reason: { kind: 'interrupted' }, endedAt: new Date(T).toISOString() })
  })
})
