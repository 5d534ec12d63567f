// API.md §5 (the inbox) on one database (docs/testing.md): deliveries and their splices, the stored UserMessage,
// idempotency by id and by Idempotency-Key, queue removal, idle inject, and cancel (SPEC §4, §5.5, §18.4).

import crypto from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { expectValidLog } from '../helpers/invariants.js'
import { gate } from '../helpers/scripted.js'
import { sleep } from '../helpers/wait.js'
import type { SessionEvent } from '../../src/session/index.js'

const types = (evs: Array<{ type: string }>) => evs.map((e) => e.type)
const userMsg = (id: string, text: string) => ({ id, role: 'user', content: [{ type: 'text', text }], source: { kind: 'user' } })

describe.each(APP_DB_KINDS)('the inbox over HTTP on %s', (kind) => {
  let t: TestApp
  beforeAll(async () => {
    t = await startTestApp({ kind })
  })
  afterAll(async () => {
    await t?.close()
  })

  const inbox = async (id: string) => (await t.api('GET', `/v1/sessions/${id}/inbox`)).body
  const idemRows = async () => (await t.app.db.query<{ n: number }>('SELECT count(*)::int AS n FROM idempotency')).rows[0].n
  /** A session whose turn 1 is held inside its model call until the returned gate opens. */
  const held = async () => {
    const s = await t.createSession()
    const g = gate()
    t.models.script(s.id, { text: ['held'], gate: g.promise })
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'start' })
    await t.models.waitForRequest(s.id, 1)
    return { s, g }
  }

  it('inject on an idle session: 202 {messageId, seq}, the splice at seq, the stored UserMessage; no turn', async () => {
    const s = await t.createSession()
    const r = await t.api('POST', `/v1/sessions/${s.id}/inject`, { content: 'some context' })
    expect(r.status).toBe(202)
    expect(Object.keys(r.body).sort()).toEqual(['messageId', 'seq'])
    expect(typeof r.body.messageId).toBe('string')
    expect(r.body.seq).toBe(0)
    const evs = await t.events(s.id)
    expect(evs.length).toBe(1)
    const m = userMsg(r.body.messageId, 'some context')
    expect(evs[0]).toMatchObject({ seq: 0, type: 'agent/inbox/spliced', data: { target: 'next-step', start: 0, inserted: [m] } })
    expect(evs[0].data).toEqual({ target: 'next-step', start: 0, inserted: [m] })
    expect(await inbox(s.id)).toEqual({ nextTurn: [], nextStep: [m] })
    expect((await t.api('GET', `/v1/sessions/${s.id}`)).body.status).toBe('idle')
    // a second one, with blocks: appended after the first
    const blocks = [{ type: 'text', text: 'a' }, { type: 'text', text: '' }, { type: 'text', text: 'b' }]
    const r2 = await t.api('POST', `/v1/sessions/${s.id}/inject`, { content: blocks, id: 'ctx-2' })
    expect(r2.body).toEqual({ messageId: 'ctx-2', seq: 1 })
    const m2 = { id: 'ctx-2', role: 'user', content: blocks, source: { kind: 'user' } }
    expect((await t.events(s.id))[1].data).toEqual({ target: 'next-step', start: 1, inserted: [m2] })
    expect(await inbox(s.id)).toEqual({ nextTurn: [], nextStep: [m, m2] })
    // an idle inject opens no turn and calls no model: it records no wake request (status idle is
    // run_state idle, SPEC §18.4), and the log holds only its splices
    expect((await t.api('GET', `/v1/sessions/${s.id}`)).body.status).toBe('idle')
    expect(types(await t.events(s.id))).toEqual(['agent/inbox/spliced', 'agent/inbox/spliced'])
    expect(t.models.requestsOf(s.id)).toEqual([])
    // the next waking delivery takes the parked context into its turn: context first, then the prompt;
    // that it is turn 1 right after the splices shows no turn opened in between
    t.models.script(s.id, { text: ['ok'] })
    const f = await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'now go', id: 'go-1' })
    expect(f.body).toEqual({ messageId: 'go-1', seq: 2 })
    const log = await t.waitForTurnEnd(s.id, 1)
    expectValidLog(log)
    expect(types(log).slice(0, 4)).toEqual(['agent/inbox/spliced', 'agent/inbox/spliced', 'agent/inbox/spliced', 'turn/start'])
    expect(log.filter((e) => e.type === 'user/message').map((e) => e.data)).toEqual([m, m2, userMsg('go-1', 'now go')])
    expect(t.models.requestsOf(s.id)).toHaveLength(1)
    expect(await inbox(s.id)).toEqual({ nextTurn: [], nextStep: [] })
  })

  it('followup and steer: 202 with the seq of the splice that inserted the message, in the list of their target', async () => {
    const { s, g } = await held()
    const f = await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'queued prompt' })
    expect(f.status).toBe(202)
    const st = await t.api('POST', `/v1/sessions/${s.id}/steer`, { content: 'steering', id: 'steer-1' })
    expect(st.status).toBe(202)
    expect(st.body.messageId).toBe('steer-1')
    const evs = await t.events(s.id)
    const fe = evs[f.body.seq]
    expect(fe.type).toBe('agent/inbox/spliced')
    expect(fe.data).toEqual({ target: 'next-turn', start: 0, inserted: [userMsg(f.body.messageId, 'queued prompt')] })
    const se = evs[st.body.seq]
    expect(se.type).toBe('agent/inbox/spliced')
    expect(se.data).toEqual({ target: 'next-step', start: 0, inserted: [userMsg('steer-1', 'steering')] })
    expect(st.body.seq).toBe(f.body.seq + 1)
    expect(await inbox(s.id)).toEqual({ nextTurn: [userMsg(f.body.messageId, 'queued prompt')], nextStep: [userMsg('steer-1', 'steering')] })
    // the held step finishes; the steer enters step 2 of turn 1, the followup opens turn 2
    t.models.script(s.id, { text: ['after steer'] }, { text: ['turn two'] })
    g.open()
    const log = await t.waitForTurnEnd(s.id, 2)
    expectValidLog(log)
    const users = log.filter((e) => e.type === 'user/message').map((e) => (e.data as any).id)
    expect(users.slice(1)).toEqual(['steer-1', f.body.messageId])
    expect((t.models.requestsOf(s.id)[1].context.messages.at(-1) as any).content).toEqual([{ type: 'text', text: 'steering' }])
  })

  it('idempotency by client id: same id and body answer the original, also after consumption; no new event', async () => {
    const s = await t.createSession()
    t.models.script(s.id, { text: ['once'] })
    const body = { content: 'do it once', id: 'once-1' }
    const first = await t.api('POST', `/v1/sessions/${s.id}/followup`, body)
    expect(first.status).toBe(202)
    expect(first.body.messageId).toBe('once-1')
    const again = await t.api('POST', `/v1/sessions/${s.id}/followup`, body)
    expect(again.status).toBe(202)
    expect(again.body).toEqual(first.body)
    await t.waitForTurnEnd(s.id, 1)
    const log = await t.waitIdle(s.id)
    // consumed: still the original answer, nothing inserted, no new turn
    const late = await t.api('POST', `/v1/sessions/${s.id}/followup`, body)
    expect(late.status).toBe(202)
    expect(late.body).toEqual(first.body)
    // a replay writes nothing and records no wake request: the session stays idle, so no turn can follow
    expect((await t.api('GET', `/v1/sessions/${s.id}`)).body.status).toBe('idle')
    expect(await t.events(s.id)).toEqual(log)
    expect(log.filter((e) => e.type === 'turn/start').length).toBe(1)
    expect(log.filter((e) => e.type === 'agent/inbox/spliced' && (e.data as any).inserted.length).length).toBe(1)
    expect(t.models.requestsOf(s.id).length).toBe(1)
    expect(await inbox(s.id)).toEqual({ nextTurn: [], nextStep: [] })
  })

  it('idempotency conflicts: another body, or the same id on another route, is 409 and writes nothing', async () => {
    const s = await t.createSession()
    const first = await t.api('POST', `/v1/sessions/${s.id}/inject`, { content: 'original', id: 'dup-1' })
    expect(first.status).toBe(202)
    const before = { events: await t.events(s.id), inbox: await inbox(s.id), idem: await idemRows() }
    const conflicts: Array<[string, unknown]> = [
      ['inject', { content: 'changed', id: 'dup-1' }],
      ['inject', { content: [{ type: 'text', text: 'changed' }], id: 'dup-1' }],
      ['followup', { content: 'original', id: 'dup-1' }],
      ['steer', { content: 'original', id: 'dup-1' }],
    ]
    for (const [route, body] of conflicts) {
      const r = await t.api('POST', `/v1/sessions/${s.id}/${route}`, body)
      expect(r.status, `${route} ${JSON.stringify(body)}`).toBe(409)
      expect(r.body.error.code).toBe('idempotency-conflict')
    }
    expect({ events: await t.events(s.id), inbox: await inbox(s.id), idem: await idemRows() }).toEqual(before)
    // the same id in another session is unrelated
    const other = await t.createSession()
    const o = await t.api('POST', `/v1/sessions/${other.id}/inject`, { content: 'changed', id: 'dup-1' })
    expect(o.status).toBe(202)
    expect(o.body).toEqual({ messageId: 'dup-1', seq: 0 })
  })

  it('two concurrent identical requests: both get the same answer, one splice', async () => {
    const s = await t.createSession()
    const body = { content: 'racing', id: 'race-1' }
    const rs = await Promise.all([0, 1, 2, 3].map(() => t.api('POST', `/v1/sessions/${s.id}/inject`, body)))
    for (const r of rs) {
      expect(r.status).toBe(202)
      expect(r.body).toEqual(rs[0].body)
    }
    const evs = await t.events(s.id)
    expect(evs.length).toBe(1)
    expect(rs[0].body).toEqual({ messageId: 'race-1', seq: 0 })
    expect(await inbox(s.id)).toEqual({ nextTurn: [], nextStep: [userMsg('race-1', 'racing')] })
    // and concurrent followups: one turn, one prompt
    const s2 = await t.createSession()
    t.models.script(s2.id, { text: ['one'] })
    const fs = await Promise.all([0, 1, 2].map(() => t.api('POST', `/v1/sessions/${s2.id}/followup`, { content: 'once', id: 'race-f' })))
    for (const r of fs) expect(r.body).toEqual(fs[0].body)
    await t.waitForTurnEnd(s2.id, 1)
    const log = await t.waitIdle(s2.id)
    expect(log.filter((e) => e.type === 'user/message').length).toBe(1)
    expect(log.filter((e) => e.type === 'turn/start').length).toBe(1)
  })

  it('Idempotency-Key header: messageId is idem- + 32 hex digits of SHA-256(key); a disagreeing id is 400', async () => {
    const s = await t.createSession()
    const key = `client-key-${crypto.randomUUID()}`
    const expected = `idem-${crypto.createHash('sha256').update(key).digest('hex').slice(0, 32)}`
    const r = await t.api('POST', `/v1/sessions/${s.id}/inject`, { content: 'keyed' }, { headers: { 'idempotency-key': key } })
    expect(r.status).toBe(202)
    expect(r.body.messageId).toBe(expected)
    expect((await inbox(s.id)).nextStep).toEqual([userMsg(expected, 'keyed')])
    const again = await t.api('POST', `/v1/sessions/${s.id}/inject`, { content: 'keyed' }, { headers: { 'idempotency-key': key } })
    expect(again.body).toEqual(r.body)
    // the derived id in the body agrees with the header: the same message
    const agreeing = await t.api('POST', `/v1/sessions/${s.id}/inject`, { content: 'keyed', id: expected }, { headers: { 'idempotency-key': key } })
    expect(agreeing.status).toBe(202)
    expect(agreeing.body).toEqual(r.body)
    // and the id alone names the same record
    expect((await t.api('POST', `/v1/sessions/${s.id}/inject`, { content: 'keyed', id: expected })).body).toEqual(r.body)
    const before = await t.events(s.id)
    expect(before.length).toBe(1)
    // both given and disagreeing: 400, nothing written
    const bad = await t.api('POST', `/v1/sessions/${s.id}/inject`, { content: 'keyed', id: 'something-else' }, { headers: { 'idempotency-key': key } })
    expect(bad.status).toBe(400)
    expect(bad.body.error.code).toBe('bad-request')
    const bad2 = await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'new', id: 'fresh-id' }, { headers: { 'idempotency-key': 'another-key' } })
    expect(bad2.status).toBe(400)
    // the header's id on another route is a conflict
    const cross = await t.api('POST', `/v1/sessions/${s.id}/steer`, { content: 'keyed' }, { headers: { 'idempotency-key': key } })
    expect(cross.status).toBe(409)
    expect(cross.body.error.code).toBe('idempotency-conflict')
    expect(await t.events(s.id)).toEqual(before)
    expect((await inbox(s.id)).nextStep.length).toBe(1)
  })

  it('DELETE inbox/:messageId: 204 and a cancelling splice; then 409 queue-item-not-found', async () => {
    const s = await t.createSession()
    for (const id of ['a', 'b', 'c']) await t.api('POST', `/v1/sessions/${s.id}/inject`, { content: `ctx ${id}`, id })
    const d = await t.api('DELETE', `/v1/sessions/${s.id}/inbox/b`)
    expect(d.status).toBe(204)
    expect(d.text).toBe('')
    const evs = await t.events(s.id)
    expect(evs.length).toBe(4)
    expect(evs[3]).toMatchObject({ seq: 3, type: 'agent/inbox/spliced' })
    expect(evs[3].data).toEqual({ target: 'next-step', start: 1, removedCount: 1, inserted: [], outcome: 'canceled' })
    expect(await inbox(s.id)).toEqual({ nextTurn: [], nextStep: [userMsg('a', 'ctx a'), userMsg('c', 'ctx c')] })
    for (const id of ['b', 'never-there']) {
      const again = await t.api('DELETE', `/v1/sessions/${s.id}/inbox/${id}`)
      expect(again.status, id).toBe(409)
      expect(again.body.error.code).toBe('queue-item-not-found')
    }
    expect((await t.events(s.id)).length).toBe(4)
    // a queued next-turn prompt behind a running turn can be withdrawn too; a claimed one cannot
    const { s: h, g } = await held()
    const q = await t.api('POST', `/v1/sessions/${h.id}/followup`, { content: 'second thoughts', id: 'q-1' })
    const dq = await t.api('DELETE', `/v1/sessions/${h.id}/inbox/q-1`)
    expect(dq.status).toBe(204)
    const hl = await t.events(h.id)
    expect(hl.at(-1)!.data).toEqual({ target: 'next-turn', start: 0, removedCount: 1, inserted: [], outcome: 'canceled' })
    expect(hl.at(-1)!.seq).toBe(q.body.seq + 1)
    const claimed = (hl.find((e) => e.type === 'user/message')!.data as any).id
    const dc = await t.api('DELETE', `/v1/sessions/${h.id}/inbox/${claimed}`)
    expect(dc.status).toBe(409)
    expect(dc.body.error.code).toBe('queue-item-not-found')
    g.open()
    const done = await t.waitForTurnEnd(h.id, 1)
    await t.waitIdle(h.id)
    // the withdrawn prompt never ran
    expect((await t.events(h.id)).filter((e) => e.type === 'turn/start').length).toBe(1)
    expectValidLog(done)
  })

  it('cancel on an idle session: {cancelled:false}; keepInbox keeps the inbox, otherwise it is cleared by cancelling splices', async () => {
    const s = await t.createSession()
    for (const id of ['x1', 'x2']) await t.api('POST', `/v1/sessions/${s.id}/inject`, { content: id, id })
    const keep = await t.api('POST', `/v1/sessions/${s.id}/cancel`, { keepInbox: true })
    expect(keep.status).toBe(202)
    expect(keep.body).toEqual({ cancelled: false })
    expect((await t.events(s.id)).length).toBe(2)
    expect((await inbox(s.id)).nextStep.map((m: any) => m.id)).toEqual(['x1', 'x2'])
    const explicit = await t.api('POST', `/v1/sessions/${s.id}/cancel`, { keepInbox: false })
    expect(explicit.status).toBe(202)
    expect(explicit.body).toEqual({ cancelled: false })
    const evs = await t.events(s.id)
    expect(evs.length).toBe(3)
    expect(evs[2].data).toEqual({ target: 'next-step', start: 0, removedCount: 2, inserted: [], outcome: 'canceled' })
    expect(await inbox(s.id)).toEqual({ nextTurn: [], nextStep: [] })
    // an empty inbox writes nothing; no body at all works
    const nobody = await t.api('POST', `/v1/sessions/${s.id}/cancel`)
    expect(nobody.status).toBe(202)
    expect(nobody.body).toEqual({ cancelled: false })
    const empty = await t.api('POST', `/v1/sessions/${s.id}/cancel`, {})
    expect(empty.body).toEqual({ cancelled: false })
    expect((await t.events(s.id)).length).toBe(3)
    // the cancel armed nothing: a later followup runs normally
    t.models.script(s.id, { text: ['fine'] })
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'after cancel' })
    const log = await t.waitForTurnEnd(s.id, 1)
    expect(log.find((e) => e.type === 'turn/end')!.data).toEqual({ turn: 1, reason: { kind: 'completed' } })
    expect(log.filter((e) => e.type === 'user/message').map((e) => (e.data as any).content[0].text)).toEqual(['after cancel'])
  })

  it('cancel without a body on a running turn: {cancelled:true}, next-step cleared first, then next-turn; the turn ends aborted', async () => {
    const { s, g } = await held()
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'q1', id: 'q1' })
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'q2', id: 'q2' })
    await t.api('POST', `/v1/sessions/${s.id}/inject`, { content: 'c1', id: 'c1' })
    const head = (await t.events(s.id)).at(-1)!.seq
    expect((await t.api('GET', `/v1/sessions/${s.id}`)).body.status).toBe('running')
    const r = await t.api('POST', `/v1/sessions/${s.id}/cancel`)
    expect(r.status).toBe(202)
    expect(r.body).toEqual({ cancelled: true })
    const evs = await t.waitForTurnEnd(s.id, 1)
    g.open()
    await t.waitIdle(s.id)
    expect(evs[head + 1].data).toEqual({ target: 'next-step', start: 0, removedCount: 1, inserted: [], outcome: 'canceled' })
    expect(evs[head + 2].data).toEqual({ target: 'next-turn', start: 0, removedCount: 2, inserted: [], outcome: 'canceled' })
    expect(evs.find((e) => e.type === 'turn/end')!.data).toEqual({ turn: 1, reason: { kind: 'aborted', reason: { kind: 'user' } } })
    expect(await inbox(s.id)).toEqual({ nextTurn: [], nextStep: [] })
    const final = await t.events(s.id)
    expect(final.filter((e) => e.type === 'turn/start').length).toBe(1)
    expectValidLog(final)
    // a second cancel once idle: nothing was running
    expect((await t.api('POST', `/v1/sessions/${s.id}/cancel`)).body).toEqual({ cancelled: false })
  })

  it('cancel {keepInbox:true}: the kept input opens no turn by itself and runs with the next waking delivery (API.md §5)', async () => {
    const { s, g } = await held()
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'keep me', id: 'k1' })
    expect((await t.api('POST', `/v1/sessions/${s.id}/cancel`, { keepInbox: true })).body).toEqual({ cancelled: true })
    await t.waitForTurnEnd(s.id, 1)
    g.open()
    await t.waitIdle(s.id)
    // idle, and it stays so: the kept prompt waits in the inbox
    await sleep(300)
    expect((await t.events(s.id)).filter((e) => e.type === 'turn/start')).toHaveLength(1)
    expect((await t.api('GET', `/v1/sessions/${s.id}`)).body.status).toBe('idle')
    expect((await inbox(s.id)).nextTurn.map((m: any) => m.id)).toEqual(['k1'])
    // the next followup wakes the session: the kept prompt runs first, in a turn of its own, then the new one
    t.models.script(s.id, { text: ['kept'] }, { text: ['next'] })
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'next', id: 'n1' })
    await t.waitForTurnEnd(s.id, 3)
    const log = await t.waitIdle(s.id)
    const turnOf = (id: string) => {
      const at = log.findIndex((e) => e.type === 'user/message' && (e.data as any).id === id)
      return (log.slice(0, at).filter((e) => e.type === 'turn/start').at(-1)!.data as any).turn
    }
    expect([turnOf('k1'), turnOf('n1')]).toEqual([2, 3])
    expectValidLog(log)
  })

  it('cancel {keepInbox:true} on a running turn keeps the queued input', async () => {
    const { s, g } = await held()
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'keep me', id: 'k1' })
    const head = (await t.events(s.id)).at(-1)!.seq
    const r = await t.api('POST', `/v1/sessions/${s.id}/cancel`, { keepInbox: true })
    expect(r.body).toEqual({ cancelled: true })
    const evs = await t.waitForTurnEnd(s.id, 1)
    g.open()
    // no cancelling splice was written for the queued prompt
    const after = evs.filter((e) => e.seq > head)
    expect(after.filter((e) => e.type === 'agent/inbox/spliced' && (e.data as any).outcome === 'canceled')).toEqual([])
    expect(evs.find((e) => e.type === 'turn/end')!.data).toEqual({ turn: 1, reason: { kind: 'aborted', reason: { kind: 'user' } } })
    // the queued prompt is still pending, or was run by a following turn; it was never discarded
    const final: SessionEvent[] = await t.waitIdle(s.id)
    const ran = final.some((e) => e.type === 'user/message' && (e.data as any).id === 'k1')
    const pending = (await inbox(s.id)).nextTurn.some((m: any) => m.id === 'k1')
    expect(ran || pending).toBe(true)
    expectValidLog(final)
  })
})
