// A unit's build runs once (agent/log.ts SessionLog.commit). When the optimistic append loses the
// race to another writer (a delivery, a cancel), the unit is either written as built, stamped after
// what the other wrote — its references to its own events moving with them — or, when an input it
// declared changed, sent back to its caller with nothing written (StaleUnitError), and decided again
// by the caller under the lock (commitDecision).

import crypto from 'node:crypto'
import pino from 'pino'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { commitDecision, KeyedMutex, Publisher, SessionLog, StaleUnitError, type UnitBuilder } from '../../src/agent/index.js'
import { LocalHub } from '../../src/bus/index.js'
import { createRoot } from '../../src/hooks/index.js'
import { SessionState, type UserMessage } from '../../src/session/index.js'
import { insertSession, lockSession, NOW_MS, readEvents, stamp, webhooks, writeEvents, type Db } from '../../src/store/index.js'
import type { Context } from '../../src/hooks/index.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { APP_DB_KINDS, DB_KINDS, openTestDb, type TestDb } from '../helpers/db.js'
import type { Ev } from '../helpers/events.js'
import { expectValidLog } from '../helpers/invariants.js'
import { gate } from '../helpers/scripted.js'

const msg = (id: string): UserMessage => ({ id, role: 'user', content: [{ type: 'text', text: id }], source: { kind: 'user' } })
const deliver = (start: number, m: UserMessage) => ({ type: 'agent/inbox/spliced', data: { target: 'next-turn', start, inserted: [m] } as never })

describe.each(DB_KINDS)('a unit that loses the race on %s', (kind) => {
  let t: TestDb
  let db: Db
  const tenantId = crypto.randomUUID()
  const log = pino({ level: 'silent' })
  const publisher = new Publisher(new LocalHub(), createRoot(), log)
  const lease = { owner: 'a', token: 1 }

  beforeAll(async () => {
    t = await openTestDb(kind)
    db = t.db
    await db.query('INSERT INTO tenants (id, name, created_at) VALUES ($1, $2, $3)', [tenantId, 'race', Date.now()])
    await webhooks.insertWebhook(db, { id: crypto.randomUUID(), tenantId, url: 'https://hooks.example/race', events: ['session.requires_action'], description: null, secret: 's', createdAt: Date.now() })
  })
  afterAll(async () => {
    await t?.drop()
  })

  /** A session under lease `a`, its driver's log, and another writer over the same rows (as intake is). */
  async function session(): Promise<{ key: string; driver: SessionLog; other: () => Promise<SessionLog> }> {
    const key = crypto.randomUUID()
    const id = `race-${key.slice(0, 8)}`
    await insertSession(db, { key, tenantId, id, model: 'test/scripted', system: '', tools: [], metadata: {}, createHash: 'h', createdAt: Date.now() })
    await db.query(`UPDATE sessions SET lease_owner = $2, lease_token = $3, lease_expires_at = ${NOW_MS} + 60000 WHERE key = $1`, [key, lease.owner, lease.token])
    const driver = new SessionLog({ db, publisher, mutex: new KeyedMutex(), log }, key, id, new SessionState(), lease, tenantId)
    const other = async () => new SessionLog({ db, publisher, mutex: new KeyedMutex(), log }, key, id, SessionState.fromEvents(await readEvents(db, key)), lease, tenantId)
    return { key, driver, other }
  }

  it('declaring nothing that changed, it is written as built after the delivery: its build runs once, its own references move with it', async () => {
    const { key, driver, other } = await session()
    await driver.commit((u) => {
      u.add({ type: 'turn/start', data: { turn: 1 } })
      u.add({ type: 'step/start', data: { turn: 1, step: 1 } })
    })
    // a delivery lands after the driver last saw the row (seq 2)
    await (await other()).commit((u) => void u.add(deliver(0, msg('late'))), { reads: ['inbox'] })
    let builds = 0
    const r = await driver.commit((u) => {
      builds++
      const call = u.add({ type: 'tool/call', data: { turn: 1, step: 1, callId: 'c1', name: 'echo', arguments: '{}' } })
      u.side({ kind: 'webhook', event: { type: 'session.requires_action', turn: 1, seq: call.seq, time: call.time, extra: { pending: [{ callId: 'c1', name: 'echo', kind: 'client' }] } } })
      u.add({ type: 'tool/result', data: { turn: 1, step: 1, message: { id: 'r1', role: 'user', content: [{ type: 'tool-result', toolCallId: 'c1', isError: false, content: [] }], source: { kind: 'tool', callId: 'c1' } } }, surfaceOp: 'append', sourceEventSeqs: [call.seq] })
    })
    expect(builds).toBe(1)
    // built at seqs 2 and 3, written at 3 and 4 after the delivery; the result names its call's new seq
    expect(r.events.map((e) => [e.seq, e.type])).toEqual([
      [3, 'tool/call'],
      [4, 'tool/result'],
    ])
    expect(r.events[1].sourceEventSeqs).toEqual([3])
    const stored = await readEvents(db, key)
    expect(stored.map((e) => e.type)).toEqual(['turn/start', 'step/start', 'agent/inbox/spliced', 'tool/call', 'tool/result'])
    expect(stored[4].sourceEventSeqs).toEqual([3])
    expect(stored.every((e, i) => i === 0 || e.time >= stored[i - 1].time)).toBe(true)
    // the webhook's delivery names the call where it was written
    const sid = (await db.query<{ id: string }>('SELECT id FROM sessions WHERE key = $1', [key])).rows[0].id
    expect((await db.query<{ seq: number }>('SELECT seq FROM webhook_deliveries WHERE session_id = $1', [sid])).rows.map((d) => d.seq)).toEqual([3])
    // the driver's fold is the log's: the delivery folded in, nothing of the first stamping left
    const fresh = SessionState.fromEvents(stored)
    expect(driver.state.nextSeq).toBe(5)
    expect(driver.state.inbox).toEqual(fresh.inbox)
    expect([...driver.state.openCalls.keys()]).toEqual([...fresh.openCalls.keys()])
    const row = (await db.query<{ next_seq: number; inbox: string }>('SELECT next_seq, inbox FROM sessions WHERE key = $1', [key])).rows[0]
    expect(Number(row.next_seq)).toBe(5)
    expect(JSON.parse(row.inbox).nextTurn.map((m: UserMessage) => m.id)).toEqual(['late'])
  })

  it('declaring the inbox a delivery changed, it goes back to its caller with nothing written; the caller decides again, once, under the lock', async () => {
    const { key, driver, other } = await session()
    await driver.commit((u) => void u.add(deliver(0, msg('first'))), { reads: ['inbox'] })
    await (await other()).commit((u) => void u.add(deliver(1, msg('second'))), { reads: ['inbox'] })
    const seen: number[] = []
    // queues at the end of next-turn: where that is depends on the inbox
    const build = (u: UnitBuilder) => {
      seen.push(driver.state.inbox.nextTurn.length)
      u.add(deliver(driver.state.inbox.nextTurn.length, msg('mine')))
    }
    const stale = await driver.commit(build, { reads: ['inbox'] }).catch((e) => e)
    expect(stale).toBeInstanceOf(StaleUnitError)
    expect(stale.changed).toEqual(['inbox'])
    expect(seen).toEqual([1])
    // nothing written; the driver folded the delivery
    expect((await readEvents(db, key)).length).toBe(2)
    expect(driver.state.inbox.nextTurn.map((m) => m.id)).toEqual(['first', 'second'])

    // the caller's decision, made again: a third delivery races it too, so the first try is stale
    // and the second runs under the lock
    seen.length = 0
    await (await other()).commit((u) => void u.add(deliver(2, msg('third'))), { reads: ['inbox'] })
    const r = await commitDecision(driver, build, { reads: ['inbox'] })
    expect(seen).toEqual([2, 3])
    expect(r.events.map((e) => e.seq)).toEqual([3])
    const row = (await db.query<{ inbox: string }>('SELECT inbox FROM sessions WHERE key = $1', [key])).rows[0]
    expect(JSON.parse(row.inbox).nextTurn.map((m: UserMessage) => m.id)).toEqual(['first', 'second', 'third', 'mine'])
  })

  it('a unit that declares the inbox and finds nothing to write costs no statement (an empty claim); one that read a row flag goes under the lock', async () => {
    const { key, driver } = await session()
    await driver.commit((u) => void u.add(deliver(0, msg('one'))), { reads: ['inbox'] })
    let statements = 0
    // the database as this log sees it: every statement and transaction it starts is counted
    const countingDb = new Proxy(db, {
      get(target, p) {
        const v = Reflect.get(target, p, target)
        if (p === 'query' || p === 'transaction') return (...a: unknown[]) => (statements++, (v as (...x: unknown[]) => unknown).apply(target, a))
        return typeof v === 'function' ? v.bind(target) : v
      },
    })
    const counted = new SessionLog({ db: countingDb, publisher, mutex: new KeyedMutex(), log }, key, driver.id, SessionState.fromEvents(await readEvents(db, key)), lease, tenantId)
    await counted.sync()
    statements = 0
    // nothing claimed from next-step: no round trip at all
    const r = await counted.commit(() => ({ value: counted.state.inbox.nextStep.length }), { reads: ['inbox'] })
    expect(r.events).toEqual([])
    expect(statements).toBe(0)
    // a decision on a row flag that writes nothing is still checked against the row
    await counted.commit<void, 'cancelPending'>((u) => void u.row.cancelPending, { reads: ['cancelPending'] })
    expect(statements).toBeGreaterThan(0)
  })

  it('a unit that splices the inbox without declaring it is refused before anything is written', async () => {
    const { key, driver } = await session()
    const err = await driver.commit((u) => void u.add(deliver(0, msg('x')))).catch((e) => e)
    expect(String(err)).toMatch(/declares it reads the inbox/)
    expect(driver.state.nextSeq).toBe(0)
    expect(await readEvents(db, key)).toEqual([])
  })
})

describe.each(APP_DB_KINDS)('a driver whose unit loses the race to another process (%s)', (kind) => {
  let t: TestApp | undefined
  afterAll(async () => {
    await t?.close()
  })

  const ping = (root: Context) =>
    root.plugin({
      name: 'race-ping',
      apply(ctx: any) {
        ctx.tools.register({ name: 'ping', description: 'answers pong', parameters: { type: 'object', properties: {} }, execute: async () => ({ content: 'pong' }) })
      },
    })

  it("a followup another process wrote while the model streamed a call: the settlement and its tool/call follow it, and the tool/result names the call where it was written", async () => {
    t = await startTestApp({ kind, plugins: [ping] })
    const s = await t.createSession({ tools: [{ name: 'ping', execution: { type: 'builtin' } }] })
    const g = gate()
    t.models.script(s.id, { toolCalls: [{ id: 'call_1', name: 'ping', arguments: {} }], gate: g.promise }, { text: ['done'] }, { text: ['second'] })
    expect((await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })).status).toBe(202)
    await t.waitFor(s.id, (e) => e.type === 'request/context' || e.type === 'user/message')
    // another process's delivery: a locked append straight into the log (no doorbell reaches the driver)
    const db = t.app.db
    const foreign = await db.transaction(async (tx) => {
      const row = (await lockSession(tx, (await tx.query<{ key: string }>('SELECT key FROM sessions WHERE id = $1', [s.id])).rows[0].key))!
      const inbox = { nextTurn: [...(row.inbox?.nextTurn ?? []), { id: 'msg_elsewhere', role: 'user', content: [{ type: 'text', text: 'from elsewhere' }], source: { kind: 'user' } }], nextStep: row.inbox?.nextStep ?? [] }
      const drafts = [{ type: 'agent/inbox/spliced', data: { target: 'next-turn', start: row.inbox?.nextTurn.length ?? 0, inserted: [inbox.nextTurn.at(-1)] } as never }]
      return (await writeEvents(tx, row, stamp(row, drafts), { inbox: inbox as never }))[0].seq
    })
    g.open()
    await t.waitFor(s.id, (e, all) => all.filter((x) => x.type === 'turn/end').length === 2)
    const log = (await t.events(s.id)) as Ev[]
    expectValidLog(log)
    const call = log.find((e) => e.type === 'tool/call')!
    const result = log.find((e) => e.type === 'tool/result')!
    const message = log.find((e) => e.type === 'assistant/message')!
    // the settlement was built before the delivery and written after it, with its call, in one unit
    expect(message.seq).toBe(foreign + 1)
    expect(call.seq).toBe(foreign + 2)
    expect(result.sourceEventSeqs).toEqual([call.seq])
    const tx = await db.query<{ seq: number; tx: string }>('SELECT e.seq, e.xmin::text AS tx FROM session_events e JOIN sessions s ON s.key = e.session_key WHERE s.id = $1 AND e.seq = ANY($2::int[])', [s.id, [message.seq, call.seq]])
    expect(new Set(tx.rows.map((r) => r.tx)).size).toBe(1)
    // the followup from elsewhere was answered in the next turn
    const claims = log.filter((e) => e.type === 'turn/start').map((e) => e.data.turn)
    expect(claims).toEqual([1, 2])
    expect(JSON.stringify(log.filter((e) => e.type === 'user/message').at(-1)!.data)).toContain('from elsewhere')
  })
})
