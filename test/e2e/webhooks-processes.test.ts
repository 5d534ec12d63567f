// API.md §14 across real agentd processes on one PostgreSQL: deliveries are shared between the
// processes' deliverers with one attempt of a delivery at a time (no attempt number twice, no two
// requests with one webhook-id in flight together), and SIGKILL of every process between the claim
// of an attempt and its answer loses nothing: after a restart the delivery is attempted again under
// the next attempt number, with the same webhook-id.

import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { startReceiver, type Receiver } from '../helpers/receiver.js'
import { startCluster, type Cluster } from './helpers-processes.js'

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
async function until<T>(what: string, fn: () => T | Promise<T>, timeoutMs = 15000): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const v = await fn()
    if (v) return v as NonNullable<T>
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`)
    await sleep(25)
  }
}

describe('webhook deliveries across agentd processes', () => {
  let c: Cluster
  let rx: Receiver
  beforeAll(async () => {
    rx = await startReceiver()
    c = await startCluster({ processes: 2, env: { AGENTD_LEASE_TTL_MS: '2000' } })
  }, 90000)
  beforeEach(async () => {
    await c.ensureUp()
    rx.received.length = 0
  }, 60000)
  afterAll(async () => {
    await c?.close()
    await rx?.close()
  }, 60000)

  const subscribe = async (path: string) => {
    const r = await c.api(0, 'POST', '/v1/webhooks', { url: rx.url + path, events: ['turn.completed'] })
    expect(r.status).toBe(201)
    return r.body.id as string
  }

  it('two processes share the deliveries: each attempt once, one attempt of a delivery at a time', async () => {
    const path = '/shared'
    const hook = await subscribe(path)
    // the first attempt of each delivery fails, so every delivery is attempted twice (5 s apart)
    rx.respond = (_r, prior) => (prior === 0 ? 503 : 200)
    const sessions = await Promise.all(Array.from({ length: 8 }, (_, i) => c.createSession(i % 2)))
    for (const [i, s] of sessions.entries()) {
      c.llm.script(s.marker, { chunks: ['ok'] })
      expect((await c.api(i % 2, 'POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })).status).toBe(202)
    }
    await until('16 requests', () => rx.received.filter((r) => r.path === path).length >= 16, 30000)
    await until('all delivered', async () => {
      const { rows } = await c.pool.query("SELECT count(*)::int AS n FROM webhook_deliveries WHERE webhook_id = $1 AND status = 'delivered'", [hook])
      return rows[0].n === 8
    })
    await sleep(500)
    const got = rx.received.filter((r) => r.path === path)
    expect(got).toHaveLength(16)
    const byId = new Map<string, number>()
    for (const r of got) byId.set(String(r.headers['webhook-id']), (byId.get(String(r.headers['webhook-id'])) ?? 0) + 1)
    expect([...byId.values()]).toEqual(Array(8).fill(2))
    expect(rx.maxConcurrentPerId).toBe(1)
    // one row per attempt number: the primary key (delivery, attempt) would refuse a second
    const { rows } = await c.pool.query(
      'SELECT d.id, d.attempts, array_agg(a.attempt ORDER BY a.attempt) AS nums FROM webhook_deliveries d JOIN webhook_attempts a ON a.delivery_id = d.id WHERE d.webhook_id = $1 GROUP BY d.id, d.attempts',
      [hook],
    )
    expect(rows).toHaveLength(8)
    for (const r of rows) expect([r.attempts, r.nums]).toEqual([2, [1, 2]])
    // the sessions' turns ended once each, so one delivery each
    expect(new Set(got.map((r) => r.body.data.sessionId))).toEqual(new Set(sessions.map((s) => s.id)))
  }, 60000)

  it('SIGKILL of every process between the claim and the answer: after a restart the delivery goes out again, same webhook-id', async () => {
    const path = '/crash'
    const hook = await subscribe(path)
    // the first attempt never gets an answer; the processes die while it waits
    rx.respond = (r) => (r.path === path && rx.received.filter((x) => x.path === path).length === 1 ? 'hang' : 200)
    const s = await c.createSession(0)
    c.llm.script(s.marker, { chunks: ['done'] })
    expect((await c.api(0, 'POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })).status).toBe(202)
    const [first] = await until('the first attempt', () => (rx.received.some((r) => r.path === path) ? rx.received.filter((r) => r.path === path) : undefined))
    for (const p of c.procs) p.child.kill('SIGKILL')
    await Promise.all(c.procs.map((p) => p.exited))
    const id = String(first.headers['webhook-id'])
    const before = (await c.pool.query('SELECT status, attempts, next_attempt_at FROM webhook_deliveries WHERE id = $1', [id])).rows[0]
    expect(before).toMatchObject({ status: 'pending', attempts: 1 })
    expect((await c.pool.query('SELECT count(*)::int AS n FROM webhook_attempts WHERE delivery_id = $1', [id])).rows[0].n).toBe(0)
    // the claim's lease (30 s) has to run out first; the test moves it to now instead of waiting
    expect(Number(before.next_attempt_at)).toBeGreaterThan(Date.now() + 20000)
    await c.pool.query('UPDATE webhook_deliveries SET next_attempt_at = $2 WHERE id = $1', [id, Date.now()])
    await c.start(1)
    const again = await until('the attempt after the restart', () => rx.received.filter((r) => r.path === path)[1])
    expect(again.headers['webhook-id']).toBe(id)
    expect(again.raw).toBe(first.raw)
    await until('delivered', async () => (await c.pool.query('SELECT status FROM webhook_deliveries WHERE id = $1', [id])).rows[0].status === 'delivered')
    const attempts = (await c.pool.query('SELECT attempt, status FROM webhook_attempts WHERE delivery_id = $1', [id])).rows
    expect(attempts).toEqual([{ attempt: 2, status: 200 }])
    expect((await c.api(1, 'GET', `/v1/webhooks/${hook}/deliveries`)).body.deliveries[0]).toMatchObject({ id, status: 'delivered', attempts: 2, lastStatus: 200 })
  }, 60000)
})
