// Webhook deliveries as side rows (unit-kinds.ts KINDS.webhook, API.md §14) on real PostgreSQL and
// PGlite, for units that carry SEVERAL of them: a unit's requires-actions and its turn end, of different
// types and seqs, written by the unit's own statement — alone, in a group with other sessions' units
// (UnitCommitter), and on the locked path in the caller's transaction. Each webhook subscribed to an
// event's type gets exactly one row for it, no other webhook any, and the unit reports how many rows
// its commit wrote. A task's webhook (an A2A push config, migrations/0010_a2a_push.sql) gets ONE
// delivery ever: its task's end, the first qualifying event of its session from the task's start —
// however many such events one unit or several units carry, grouped or not, and after the delivered
// rows are pruned.

import crypto from 'node:crypto'
import { describe, expect, it } from 'vitest'
import type { Draft } from '../../src/session/index.js'
import { appendConditional, deliveriesWritten, insertSession, lockLean, stamp, webhooks, writeEvents, type Db, type SideRow, type WebhookEventType, type WebhookTask } from '../../src/store/index.js'
import { countingDb, DB_KINDS, tenantDb } from '../helpers/db.js'

const ALL: WebhookEventType[] = ['turn.completed', 'turn.failed', 'turn.cancelled', 'turn.interrupted', 'session.requires_action']
/** what a task's webhook subscribes to (webhooks/service.ts createForTask) */
const TASK_EVENTS: WebhookEventType[] = ['turn.completed', 'turn.failed', 'turn.cancelled', 'session.requires_action']
const T0 = 1_700_000_000_000

type Stamped = { seq: number; time: number }
/** the side row of a call that became pending at `e` (tool-effects.ts) */
const pending = (e: Stamped, turn: number, callId: string): SideRow => ({
  kind: 'webhook',
  event: { type: 'session.requires_action', turn, seq: e.seq, time: e.time, extra: { pending: [{ callId, name: 'ask', kind: 'client' }] } },
})
/** the side row of a turn end at `e` (log.ts turnEndWebhook) */
const ended = (e: Stamped, turn: number, type: WebhookEventType = 'turn.completed'): SideRow => ({
  kind: 'webhook',
  event: { type, turn, seq: e.seq, time: e.time, extra: { reason: { kind: type === 'turn.completed' ? 'completed' : type === 'turn.failed' ? 'error' : 'aborted' } } },
})
const call = (callId: string, turn: number): Draft => ({ type: 'tool/call', data: { turn, callId, name: 'ask', arguments: {} } })
const start = (turn: number): Draft => ({ type: 'turn/start', data: { turn } })
const end = (turn: number, kind = 'completed'): Draft => ({ type: 'turn/end', data: { turn, reason: { kind } } })

describe.each(DB_KINDS)('webhook side rows on %s', (kind) => {
  // the tenant tenantDb makes is not used: each test makes its own, so webhooks never leak between tests
  const env = tenantDb(kind, 'webhook-rows')

  let n = 0
  async function newTenant(): Promise<string> {
    const id = crypto.randomUUID()
    await env.db.query('INSERT INTO tenants (id, name, created_at) VALUES ($1, $2, $3)', [id, `hooks-${++n}`, Date.now()])
    return id
  }
  /** a session of the tenant; `id` may repeat across tenants (a delivery names its session by id) */
  async function newSession(tenantId: string, id = `s-${++n}`): Promise<{ key: string; id: string }> {
    const key = crypto.randomUUID()
    await insertSession(env.db, { key, tenantId, id, model: 'test/scripted', system: '', tools: [], metadata: {}, createHash: 'h', createdAt: T0 })
    return { key, id }
  }
  /** a webhook; its name (the description) is what the tests read back */
  async function hook(tenantId: string, name: string, events: WebhookEventType[], task?: Omit<WebhookTask, 'id'>): Promise<string> {
    const id = crypto.randomUUID()
    await webhooks.insertWebhook(env.db, { id, tenantId, url: `https://hooks.example/${name}`, events, description: name, secret: 'whsec_x', createdAt: Date.now(), ...(task ? { task: { id: `task-${name}`, ...task } } : {}) })
    return id
  }
  /** every delivery row of the tenants' webhooks, as `webhook type session turn #seq`, sorted */
  async function rows(...tenants: string[]): Promise<string[]> {
    const { rows } = await env.db.query<{ name: string; type: string; session_id: string; turn: number; seq: number }>(
      'SELECT w.description AS name, d.type, d.session_id, d.turn, d.seq FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id WHERE w.tenant_id = ANY($1::uuid[])',
      [tenants],
    )
    return rows.map((r) => `${r.name} ${r.type} ${r.session_id} t${r.turn} #${r.seq}`).sort()
  }
  /** the fast path (commitFast through appendConditional) of a unit continuing the log at `at` */
  const fast = (db: Db, key: string, at: number, events: ReturnType<typeof stamp>, side: SideRow[]) => appendConditional(db, key, { nextSeq: at }, events, {}, side)
  const stamped = (at: number, drafts: Draft[]) => stamp({ nextSeq: at, lastTime: 0 }, drafts, T0 + 1 + at)

  /**
   * A tenant whose webhooks cover each case of a unit with two requires-actions and a turn end:
   * subscribed to the end only, to both types, to requires-action only, to none of the unit's types.
   */
  async function subscribed(tenantId: string) {
    await hook(tenantId, 'end', ['turn.completed'])
    await hook(tenantId, 'both', ['turn.completed', 'session.requires_action'])
    await hook(tenantId, 'asks', ['session.requires_action'])
    await hook(tenantId, 'none', ['turn.failed', 'turn.cancelled', 'turn.interrupted'])
  }
  /** a unit of turn `turn` from `at`: two calls pending, then the turn's end (completed) */
  function twoAsksAndEnd(at: number, turn: number) {
    const events = stamped(at, [call(`a${at}`, turn), call(`b${at}`, turn), end(turn)])
    return { events, side: [pending(events[0], turn, `a${at}`), pending(events[1], turn, `b${at}`), ended(events[2], turn)] }
  }
  /** the rows `subscribed`'s webhooks get for twoAsksAndEnd(at, turn) of session `sid` */
  const twoAsksAndEndRows = (sid: string, at: number, turn: number) => [
    `asks session.requires_action ${sid} t${turn} #${at}`,
    `asks session.requires_action ${sid} t${turn} #${at + 1}`,
    `both session.requires_action ${sid} t${turn} #${at}`,
    `both session.requires_action ${sid} t${turn} #${at + 1}`,
    `both turn.completed ${sid} t${turn} #${at + 2}`,
    `end turn.completed ${sid} t${turn} #${at + 2}`,
  ]

  describe('several webhook side rows in one unit', () => {
    it('alone: one row per subscribed webhook and event, with the event as reported; none for other types or tenants; the count is the rows written', async () => {
      const tenant = await newTenant()
      const other = await newTenant()
      await subscribed(tenant)
      await hook(other, 'other', ALL)
      const s = await newSession(tenant)
      const c = countingDb(env.db)
      const u = twoAsksAndEnd(0, 1)
      const out = await fast(c.db, s.key, 0, u.events, u.side)
      expect(c.n()).toBe(1)
      expect(out).not.toBeNull()
      expect(await rows(tenant, other)).toEqual(twoAsksAndEndRows(s.id, 0, 1).sort())
      expect(out!.deliveries).toBe(6)
      // the events travel with the count to the commit observers (app.ts wakes the deliverer by it)
      expect(deliveriesWritten(out!.events)).toBe(6)

      // each row as the deliverer reads it: the event's time and extra, due now, not attempted
      const both = (await webhooks.listWebhooks(env.db, tenant)).find((w) => w.description === 'both')!
      const list = (await webhooks.listDeliveries(env.db, both.id, 10)).sort((a, b) => a.seq! - b.seq!)
      expect(list).toEqual([0, 1, 2].map((i) => ({
        id: expect.stringMatching(/^msg_[0-9a-f]{32}$/),
        webhookId: both.id,
        type: i < 2 ? 'session.requires_action' : 'turn.completed',
        sessionId: s.id,
        turn: 1,
        seq: i,
        extra: i < 2 ? { pending: [{ callId: `${i ? 'b' : 'a'}0`, name: 'ask', kind: 'client' }] } : { reason: { kind: 'completed' } },
        eventTime: u.events[i].time,
        createdAt: expect.any(Number),
        status: 'pending',
        attempts: 0,
        firstAttemptAt: null,
        nextAttemptAt: list[i].createdAt,
        lastStatus: null,
        lastError: null,
        deliveredAt: null,
      })))
      expect(new Set(list.map((x) => x.id)).size).toBe(3)

      // a stale unit writes none and reports none; the next one adds its own rows only
      const again = twoAsksAndEnd(0, 1)
      expect(await fast(env.db, s.key, 0, again.events, again.side)).toBeNull()
      const next = { events: stamped(3, [start(2), end(2, 'error')]) }
      const failed = await fast(env.db, s.key, 3, next.events, [ended(next.events[1], 2, 'turn.failed')])
      expect(failed!.deliveries).toBe(1)
      expect(await rows(tenant, other)).toEqual([...twoAsksAndEndRows(s.id, 0, 1), `none turn.failed ${s.id} t2 #4`].sort())
    })

    it("grouped with other sessions' units in one statement: each unit's rows and count are its own, whoever shares the statement", async () => {
      const tenant = await newTenant()
      const other = await newTenant()
      await subscribed(tenant)
      await hook(other, 'other', ALL)
      await hook(other, 'other-ends', ['turn.completed', 'turn.failed'])
      const mine = await Promise.all(Array.from({ length: 5 }, () => newSession(tenant)))
      // the other tenant's sessions bear the ids of this tenant's: rows follow the unit, not the id
      const theirs = await Promise.all(mine.slice(0, 2).map((s) => newSession(other, s.id)))
      const stale = await newSession(tenant)
      const quiet = await newSession(tenant)

      type Plan = { key: string; at: number; events: ReturnType<typeof stamp>; side: SideRow[] }
      const plans: Plan[] = [
        ...mine.map((s) => ({ key: s.key, at: 0, ...twoAsksAndEnd(0, 1) })),
        ...theirs.map((s) => {
          const events = stamped(0, [call('x', 1), end(1, 'error')])
          return { key: s.key, at: 0, events, side: [pending(events[0], 1, 'x'), ended(events[1], 1, 'turn.failed')] }
        }),
        // its row is not at seq 4: it moves nothing and writes no delivery
        { key: stale.key, at: 4, ...twoAsksAndEnd(4, 1) },
        // a unit without deliveries in the same statement
        { key: quiet.key, at: 0, events: stamped(0, [start(1)]), side: [] },
      ]
      const c = countingDb(env.db)
      const out = await Promise.all(plans.map((p) => fast(c.db, p.key, p.at, p.events, p.side)))
      // one statement for all of them: grouped (a group that failed would be retried unit by unit)
      expect(c.n()).toBe(1)
      expect(out.map((o) => o?.deliveries ?? null)).toEqual([6, 6, 6, 6, 6, 3, 3, null, 0])
      expect(await rows(tenant)).toEqual(mine.flatMap((s) => twoAsksAndEndRows(s.id, 0, 1)).sort())
      expect(await rows(other)).toEqual(
        theirs.flatMap((s) => [`other session.requires_action ${s.id} t1 #0`, `other turn.failed ${s.id} t1 #1`, `other-ends turn.failed ${s.id} t1 #1`]).sort(),
      )
      expect(deliveriesWritten(out.flatMap((o) => o?.events ?? []))).toBe(5 * 6 + 2 * 3)
    })

    it("on the locked path: the rows are written in the caller's transaction, roll back with it, and the count rides on the unit's last event", async () => {
      const tenant = await newTenant()
      const other = await newTenant()
      await subscribed(tenant)
      await hook(other, 'other', ALL)
      const s = await newSession(tenant)
      const locked = () =>
        env.db.transaction(async (tx) => {
          const row = (await lockLean(tx, s.key))!
          const u = twoAsksAndEnd(row.nextSeq, 1)
          return writeEvents(tx, row, u.events, {}, u.side)
        })
      await expect(env.db.transaction(async (tx) => {
        const row = (await lockLean(tx, s.key))!
        const u = twoAsksAndEnd(row.nextSeq, 1)
        const written = await writeEvents(tx, row, u.events, {}, u.side)
        // inside the transaction the rows are there
        expect(Number((await tx.query<{ n: number }>('SELECT count(*)::int AS n FROM webhook_deliveries WHERE session_id = $1', [s.id])).rows[0].n)).toBe(6)
        expect(deliveriesWritten(written)).toBe(6)
        throw new Error('rolled back')
      })).rejects.toThrow('rolled back')
      expect(await rows(tenant, other)).toEqual([])

      const written = await locked()
      expect(written.map((e) => e.seq)).toEqual([0, 1, 2])
      expect(deliveriesWritten(written)).toBe(6)
      expect((written[2] as { deliveries?: number }).deliveries).toBe(6)
      expect(await rows(tenant, other)).toEqual(twoAsksAndEndRows(s.id, 0, 1).sort())
    })
  })

  describe("a task's webhook: its task's end, once", () => {
    it('of several qualifying events in one unit it gets the first; nothing before the task starts (seq or turn); nothing after, across units, on both paths', async () => {
      const tenant = await newTenant()
      const s = await newSession(tenant)
      const sibling = await newSession(tenant)
      await hook(tenant, 'tenant', ALL)
      // the task starts at seq 2 in turn 2: queued while turn 1 ran, turn 1's end (seq 2) is not its end
      await hook(tenant, 'task', TASK_EVENTS, { sessionKey: s.key, fromSeq: 2, minTurn: 2 })
      // another session's task in the same tenant
      await hook(tenant, 'sibling', TASK_EVENTS, { sessionKey: sibling.key, fromSeq: 0, minTurn: 1 })

      // turn 1: a pending call before the task's start, and turn 1's end after its seq: not the task's
      const u1 = stamped(0, [start(1), call('c1', 1), end(1)])
      const o1 = await fast(env.db, s.key, 0, u1, [pending(u1[1], 1, 'c1'), ended(u1[2], 1)])
      expect(o1!.deliveries).toBe(2)
      expect(await rows(tenant)).toEqual([`tenant session.requires_action ${s.id} t1 #1`, `tenant turn.completed ${s.id} t1 #2`])

      // turn 2 in one unit: two pending calls, then its end: the task's webhook takes the first only
      const u2 = stamped(3, [start(2), call('c2', 2), call('c3', 2), end(2)])
      const o2 = await fast(env.db, s.key, 3, u2, [pending(u2[1], 2, 'c2'), pending(u2[2], 2, 'c3'), ended(u2[3], 2)])
      const task = [`task session.requires_action ${s.id} t2 #4`]
      const tenantRows = [...['t1 #1', 't2 #4', 't2 #5'].map((x) => `tenant session.requires_action ${s.id} ${x}`), `tenant turn.completed ${s.id} t1 #2`, `tenant turn.completed ${s.id} t2 #6`]
      expect(await rows(tenant)).toEqual([...task, ...tenantRows].sort())
      // the count is what the unit wrote: three for the tenant's webhook, one for the task's
      expect(o2!.deliveries).toBe(4)

      // later units, on the fast path and on the locked path: nothing more for the task
      const u3 = stamped(7, [start(3), end(3, 'error')])
      const o3 = await fast(env.db, s.key, 7, u3, [ended(u3[1], 3, 'turn.failed')])
      expect(o3!.deliveries).toBe(1)
      const w4 = await env.db.transaction(async (tx) => {
        const row = (await lockLean(tx, s.key))!
        const u4 = stamp(row, [start(4), call('c4', 4), end(4, 'aborted')], T0 + 100)
        return writeEvents(tx, row, u4, {}, [pending(u4[1], 4, 'c4'), ended(u4[2], 4, 'turn.cancelled')])
      })
      expect(deliveriesWritten(w4)).toBe(2)
      const rest = await rows(tenant)
      expect(rest.filter((r) => r.startsWith('task '))).toEqual(task)
      expect(rest.filter((r) => r.startsWith('sibling '))).toEqual([])
      expect(rest.filter((r) => r.startsWith('tenant '))).toHaveLength(5 + 1 + 2)
    })

    it('on the locked path too, several qualifying events in the first unit give one delivery, the first', async () => {
      const tenant = await newTenant()
      const s = await newSession(tenant)
      await hook(tenant, 'task', TASK_EVENTS, { sessionKey: s.key, fromSeq: 0, minTurn: 1 })
      await hook(tenant, 'task-too', TASK_EVENTS, { sessionKey: s.key, fromSeq: 2, minTurn: 1 })
      const written = await env.db.transaction(async (tx) => {
        const row = (await lockLean(tx, s.key))!
        const u = stamp(row, [start(1), call('c1', 1), call('c2', 1), end(1)], T0 + 1)
        return writeEvents(tx, row, u, {}, [pending(u[1], 1, 'c1'), pending(u[2], 1, 'c2'), ended(u[3], 1)])
      })
      expect(await rows(tenant)).toEqual([`task session.requires_action ${s.id} t1 #1`, `task-too session.requires_action ${s.id} t1 #2`])
      expect(deliveriesWritten(written)).toBe(2)
    })

    it('grouped: each task of the units in one statement gets its one delivery, a stale unit\'s none until it commits; the next grouped round adds none', async () => {
      const tenant = await newTenant()
      await hook(tenant, 'tenant', ['session.requires_action', 'turn.completed'])
      const sessions = await Promise.all(Array.from({ length: 6 }, () => newSession(tenant)))
      // two configs of one task: each gets its delivery
      for (const [i, s] of sessions.entries()) await hook(tenant, `task${i}`, TASK_EVENTS, { sessionKey: s.key, fromSeq: 0, minTurn: 1 })
      await hook(tenant, 'task0-again', TASK_EVENTS, { sessionKey: sessions[0].key, fromSeq: 0, minTurn: 1 })
      const staleAt = (i: number) => (i === 5 ? 9 : 0)

      const c = countingDb(env.db)
      const round1 = await Promise.all(sessions.map((s, i) => {
        const u = twoAsksAndEnd(staleAt(i), 1)
        return fast(c.db, s.key, staleAt(i), u.events, u.side)
      }))
      expect(c.n()).toBe(1)
      // three rows for the tenant's webhook, one for each task config of the session
      expect(round1.map((o) => o?.deliveries ?? null)).toEqual([5, 4, 4, 4, 4, null])
      const tasks = async () => (await rows(tenant)).filter((r) => r.startsWith('task'))
      const first = (i: number, at = 0) => `session.requires_action ${sessions[i].id} t1 #${at}`
      const want = [`task0 ${first(0)}`, `task0-again ${first(0)}`, ...[1, 2, 3, 4].map((i) => `task${i} ${first(i)}`)].sort()
      expect(await tasks()).toEqual(want)

      // round 2, grouped again, the stale unit now at its row's seq: only its task is new
      const c2 = countingDb(env.db)
      const round2 = await Promise.all(sessions.map((s, i) => {
        const at = i === 5 ? 0 : 3
        const u = twoAsksAndEnd(at, i === 5 ? 1 : 2)
        return fast(c2.db, s.key, at, u.events, u.side)
      }))
      expect(c2.n()).toBe(1)
      expect(round2.map((o) => o?.deliveries ?? null)).toEqual([3, 3, 3, 3, 3, 4])
      expect(await tasks()).toEqual([...want, `task5 ${first(5)}`].sort())
      // two rounds of three for the five, one for the unit that was stale in the first
      expect((await rows(tenant)).filter((r) => r.startsWith('tenant '))).toHaveLength((5 * 2 + 1) * 3)
    })

    it("pruning delivered rows does not open a task's webhook again: its one delivery stays, and a later end of its session writes none", async () => {
      const tenant = await newTenant()
      const s = await newSession(tenant)
      await hook(tenant, 'tenant', ['turn.completed'])
      await hook(tenant, 'task', TASK_EVENTS, { sessionKey: s.key, fromSeq: 0, minTurn: 1 })
      const u1 = stamped(0, [start(1), end(1)])
      expect((await fast(env.db, s.key, 0, u1, [ended(u1[1], 1)]))!.deliveries).toBe(2)
      // both delivered eight days ago: past the deliverer's keep of seven (webhooks/deliverer.ts keepDeliveredMs)
      const day = 24 * 3600 * 1000
      const now = Date.now()
      await env.db.query("UPDATE webhook_deliveries SET status = 'delivered', delivered_at = $2, next_attempt_at = NULL WHERE session_id = $1", [s.id, now - 8 * day])
      await webhooks.pruneDeliveries(env.db, now, 7 * day)
      expect(await rows(tenant)).toEqual([`task turn.completed ${s.id} t1 #1`])
      // the session's next turn ends: the tenant's webhook hears of it, the task's does not (it ended at seq 1)
      const u2 = stamped(2, [start(2), end(2)])
      expect((await fast(env.db, s.key, 2, u2, [ended(u2[1], 2)]))!.deliveries).toBe(1)
      expect(await rows(tenant)).toEqual([`task turn.completed ${s.id} t1 #1`, `tenant turn.completed ${s.id} t2 #3`])
    })
  })
})
