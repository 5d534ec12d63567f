// API.md §14 webhooks against a real HTTP receiver on 127.0.0.1, on one database (docs/testing.md): each type
// fires once per triggering event with the documented body; the signature verifies with the
// `standardwebhooks` package (written by others) and fails with a wrong secret; retries keep the
// webhook-id and follow the (shrunk) schedule to `delivered` or `failed`; a deleted webhook stops;
// a delivery row exists exactly when its event committed (a rolled-back unit writes none; one written
// while no deliverer ran is delivered after a restart); bad input changes nothing; tenants are apart.

import { Webhook } from 'standardwebhooks'
import { afterEach, describe, expect, it } from 'vitest'
import { APP_DB_KINDS, type DbKind } from '../helpers/db.js'
import { ADMIN_TOKEN, startTestApp, type TestApp, type TestAppOptions } from '../helpers/app.js'
import { startReceiver, type Receiver } from '../helpers/receiver.js'
import { leaveCrashedTurn } from '../helpers/crashed.js'
import { d } from '../helpers/events.js'
import { sleep, until } from '../helpers/wait.js'
import { labelsMatch, parsePromText } from '../helpers/prom-text.js'
import { appendConditional, stamp, writeEvents, type SideRow } from '../../src/store/index.js'

let t: TestApp | undefined
let rx: Receiver | undefined
afterEach(async () => {
  await t?.close()
  t = undefined
  await rx?.close()
  rx = undefined
})

const FAST = { schedule: [50, 100], repeatMs: 100, giveUpMs: 60_000, pollMs: 20, timeoutMs: 2000 }

describe.each(APP_DB_KINDS)('webhooks on %s', (kind: DbKind) => {
  const start = async (o: Partial<TestAppOptions> = {}) => {
    rx = await startReceiver()
    t = await startTestApp({ kind, env: { AGENTD_BUILTIN_PLUGINS: '', AGENTD_RATE_LIMIT_PER_MIN: '1000000' }, webhooks: FAST, ...o })
    return t
  }
  const subscribe = async (events: string[], path = '/hook') => {
    const r = await t!.api('POST', '/v1/webhooks', { url: rx!.url + path, events, description: 'test' })
    expect(r.status).toBe(201)
    return r.body as { id: string; secret: string; url: string }
  }
  const deliveries = async (id: string) => (await t!.api('GET', `/v1/webhooks/${id}/deliveries`)).body.deliveries as any[]
  const metric = async (name: string, labels: Record<string, string> = {}) => {
    const f = parsePromText(await (await fetch(`${t!.url}/metrics`)).text()).get(name)
    return f ? f.samples.filter((x) => x.name === name && labelsMatch(x.labels, labels)).reduce((a, x) => a + x.value, 0) : 0
  }
  const count = async (sql: string, params: unknown[] = []) => (await t!.app.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${sql}`, params)).rows[0].n

  it('sends each type once per triggering event with the documented body, signed as Standard Webhooks', async () => {
    await start()
    const hook = await subscribe(['turn.completed', 'turn.failed', 'turn.cancelled', 'turn.interrupted', 'session.requires_action'])
    expect(hook.secret).toMatch(/^whsec_/)
    const s = await t!.createSession({
      tools: [
        { name: 'ask_user', description: 'asks', parameters: { type: 'object' }, execution: { type: 'client' } },
        { name: 'guarded', description: 'needs approval', parameters: { type: 'object' }, execution: { type: 'http', url: rx!.url + '/tool' }, approval: 'always' },
      ],
    })
    // turn 1 completed
    t!.models.script(s.id, { text: ['fine'] })
    await t!.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'one' })
    // turn 2 failed (AUTH is not retried)
    t!.models.script(s.id, { error: '401 Incorrect API key provided' })
    await t!.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'two' })
    await t!.waitForTurnEnd(s.id, 2)
    // turn 3: a client call, then an approval (denied), then cancelled while the model hangs
    t!.models.script(s.id, { toolCalls: [{ id: 'c1', name: 'ask_user', arguments: {} }] }, { toolCalls: [{ id: 'a1', name: 'guarded', arguments: {} }] }, { text: ['…'], hang: true })
    await t!.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'three' })
    await until('the client call pending', async () => (await t!.api('GET', `/v1/sessions/${s.id}/pending`)).body.toolCalls.length === 1)
    expect((await t!.api('POST', `/v1/sessions/${s.id}/tool-results`, { callId: 'c1', content: 'yes' })).status).toBe(202)
    await until('the approval pending', async () => (await t!.api('GET', `/v1/sessions/${s.id}/pending`)).body.toolCalls.some((c: any) => c.callId === 'a1'))
    expect((await t!.api('POST', `/v1/sessions/${s.id}/approvals/a1`, { decision: 'deny' })).status).toBe(202)
    await t!.waitFor(s.id, (e, all) => e.type === 'step/start' && d(e).turn === 3 && all.filter((x) => x.type === 'step/start' && d(x).turn === 3).length === 3)
    expect((await t!.api('POST', `/v1/sessions/${s.id}/cancel`, {})).status).toBe(202)
    await t!.waitForTurnEnd(s.id, 3)
    // a second session left crashed inside turn 1: crash repair writes turn/end{interrupted}
    const crashed = await t!.createSession()
    await leaveCrashedTurn(t!.app.db, crashed.id)
    const crashedLog = await t!.waitFor(crashed.id, (e) => e.type === 'turn/end', 8000)

    const log = await t!.events(s.id)
    const ends = log.filter((e) => e.type === 'turn/end')
    const calls = log.filter((e) => e.type === 'tool/call')
    const want = [
      { type: 'turn.completed', data: { sessionId: s.id, turn: 1, seq: ends[0].seq, reason: { kind: 'completed' } } },
      { type: 'turn.failed', data: { sessionId: s.id, turn: 2, seq: ends[1].seq, reason: { kind: 'error' } } },
      { type: 'session.requires_action', data: { sessionId: s.id, turn: 3, seq: calls.find((c) => d(c).callId === 'c1')!.seq, pending: [{ callId: 'c1', name: 'ask_user', kind: 'client' }] } },
      { type: 'session.requires_action', data: { sessionId: s.id, turn: 3, seq: calls.find((c) => d(c).callId === 'a1')!.seq, pending: [{ callId: 'a1', name: 'guarded', kind: 'approval' }] } },
      { type: 'turn.cancelled', data: { sessionId: s.id, turn: 3, seq: ends[2].seq, reason: { kind: 'aborted' } } },
      { type: 'turn.interrupted', data: { sessionId: crashed.id, turn: 1, seq: crashedLog.find((e) => e.type === 'turn/end')!.seq, reason: { kind: 'interrupted' } } },
    ]
    const got = await rx!.waitFor(want.length)
    await sleep(300) // nothing more comes
    expect(rx!.received.length).toBe(want.length)
    const bodies = rx!.received.map((r) => r.body).sort((a, b) => (a.data.sessionId === b.data.sessionId ? a.data.seq - b.data.seq : a.data.sessionId === s.id ? -1 : 1))
    expect(bodies).toMatchObject(want)
    for (const b of bodies) expect(Object.keys(b)).toEqual(['type', 'timestamp', 'data'])
    for (const b of bodies) expect(new Date(b.timestamp).toISOString()).toBe(b.timestamp)

    // the signature verifies with a receiver library no one here wrote, and fails with another secret
    const wh = new Webhook(hook.secret)
    const other = new Webhook('whsec_' + Buffer.from('another secret of 24 byte').toString('base64'))
    for (const r of got) {
      const headers = { 'webhook-id': String(r.headers['webhook-id']), 'webhook-timestamp': String(r.headers['webhook-timestamp']), 'webhook-signature': String(r.headers['webhook-signature']) }
      expect(r.headers['content-type']).toMatch(/^application\/json/)
      expect(wh.verify(r.raw, headers)).toEqual(r.body)
      expect(() => other.verify(r.raw, headers)).toThrow()
      expect(() => wh.verify(r.raw.replace('"turn"', '"turn" '), headers)).toThrow()
    }
    // every delivery reads delivered, one attempt, newest first
    const list = await deliveries(hook.id)
    expect(list).toHaveLength(want.length)
    expect(list.every((x) => x.status === 'delivered' && x.attempts === 1 && x.lastStatus === 200 && x.deliveredAt)).toBe(true)
    expect(new Set(list.map((x) => x.id))).toEqual(new Set(got.map((r) => r.headers['webhook-id'])))
    // the http tool was never called: the approval was denied
    expect(rx!.received.filter((r) => r.path === '/tool')).toHaveLength(0)
  })

  it('a commit that wrote deliveries wakes the deliverer at once; one of a tenant without webhooks does not', async () => {
    // a poll of a minute: only wake-ups deliver within the test
    await start({ webhooks: { ...FAST, pollMs: 60_000 } })
    await sleep(100) // the start-up look at the outbox is over
    const s = await t!.createSession({ tools: [{ name: 'ask_user', description: 'asks', parameters: { type: 'object' }, execution: { type: 'client' } }] })
    // no webhook yet: the turn end writes no delivery and marks nothing
    t!.models.script(s.id, { text: ['one'] })
    await t!.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'one' })
    await t!.waitForTurnEnd(s.id, 1)
    expect(await count('webhook_deliveries')).toBe(0)
    // a subscription created a moment ago is not missed by the next commit, and that commit wakes the deliverer
    await subscribe(['turn.completed', 'session.requires_action'])
    t!.models.script(s.id, { text: ['two'] })
    await t!.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'two' })
    await rx!.waitFor(1)
    expect(rx!.received[0].body).toMatchObject({ type: 'turn.completed', data: { sessionId: s.id, turn: 2 } })
    // a pending call (its own unit, with its pending row) wakes it too
    t!.models.script(s.id, { toolCalls: [{ id: 'c1', name: 'ask_user', arguments: {} }] }, { text: ['three'] })
    await t!.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'three' })
    await rx!.waitFor(2)
    expect(rx!.received[1].body).toMatchObject({ type: 'session.requires_action', data: { sessionId: s.id, turn: 3 } })
  })

  it("a client call with approval 'always' is pending twice, each time with its session.requires_action in the same commit: the approver's with the tool/call, the client's once allowed; a denied call's client is never asked", async () => {
    // no deliverer: the delivery rows stay as their commits wrote them (xmin names the transaction)
    await start({ webhooks: { ...FAST, deliver: false } })
    await subscribe(['session.requires_action'])
    const s = await t!.createSession({ tools: [{ name: 'ask_user', description: 'asks', parameters: { type: 'object' }, execution: { type: 'client' }, approval: 'always' }] })
    t!.models.script(s.id, { toolCalls: [{ id: 'k1', name: 'ask_user', arguments: {} }] }, { toolCalls: [{ id: 'k2', name: 'ask_user', arguments: {} }] }, { text: ['done'] })
    const pending = async () => (await t!.api('GET', `/v1/sessions/${s.id}/pending`)).body.toolCalls as Array<{ callId: string; kind: string }>
    const deliveries = async () =>
      (await t!.app.db.query<{ type: string; turn: number; seq: number; extra: string; tx: string }>('SELECT type, turn, seq, extra, xmin::text AS tx FROM webhook_deliveries WHERE session_id = $1 ORDER BY created_at, id', [s.id])).rows.map((r) => ({ ...r, extra: JSON.parse(r.extra) }))
    const rowTx = async (callId: string) =>
      (await t!.app.db.query<{ kind: string; tx: string }>('SELECT p.kind, p.xmin::text AS tx FROM pending_calls p JOIN sessions s ON s.key = p.session_key WHERE s.id = $1 AND p.call_id = $2', [s.id, callId])).rows[0]
    const callTx = async (callId: string) =>
      (await t!.app.db.query<{ seq: number; tx: string }>("SELECT e.seq, e.xmin::text AS tx FROM session_events e JOIN sessions s ON s.key = e.session_key WHERE s.id = $1 AND e.type = 'tool/call' AND e.body LIKE $2", [s.id, `%"callId":"${callId}"%`])).rows[0]
    await t!.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'go' })

    // k1 waits for the approver: its row and its delivery ride with its tool/call
    await until('k1 pending', async () => (await pending())[0]?.callId === 'k1')
    const call1 = await callTx('k1')
    expect(await rowTx('k1')).toEqual({ kind: 'approval', tx: call1.tx })
    expect(await deliveries()).toEqual([{ type: 'session.requires_action', turn: 1, seq: Number(call1.seq), extra: { pending: [{ callId: 'k1', name: 'ask_user', kind: 'approval' }] }, tx: call1.tx }])
    // allowed: the same call is pending for the client, with a second delivery in the commit that re-opened its row
    expect((await t!.api('POST', `/v1/sessions/${s.id}/approvals/k1`, { decision: 'allow' })).status).toBe(202)
    await until('k1 pending for the client', async () => (await pending())[0]?.kind === 'client')
    const client = await rowTx('k1')
    expect(client.kind).toBe('client')
    expect(client.tx).not.toBe(call1.tx)
    expect((await deliveries())[1]).toEqual({ type: 'session.requires_action', turn: 1, seq: Number(call1.seq), extra: { pending: [{ callId: 'k1', name: 'ask_user', kind: 'client' }] }, tx: client.tx })
    expect((await t!.api('POST', `/v1/sessions/${s.id}/tool-results`, { callId: 'k1', content: 'yes' })).status).toBe(202)

    // k2 is denied: its only delivery is the approver's
    await until('k2 pending', async () => (await pending())[0]?.callId === 'k2')
    expect((await t!.api('POST', `/v1/sessions/${s.id}/approvals/k2`, { decision: 'deny' })).status).toBe(202)
    const log = await t!.waitForTurnEnd(s.id, 1)
    expect(log.filter((e) => e.type === 'tool/result').map((e) => d(e).error?.code ?? 'ok')).toEqual(['ok', 'TOOL_DENIED'])
    const call2 = await callTx('k2')
    expect((await deliveries()).map((x) => [x.extra.pending[0].callId, x.extra.pending[0].kind, x.seq])).toEqual([
      ['k1', 'approval', Number(call1.seq)],
      ['k1', 'client', Number(call1.seq)],
      ['k2', 'approval', Number(call2.seq)],
    ])
  })

  it('retries a 500 with the same webhook-id until a 2xx; ends delivered after three attempts', async () => {
    await start()
    rx!.respond = (_r, prior) => (prior < 2 ? 500 : 200)
    const hook = await subscribe(['turn.completed'])
    const s = await t!.createSession()
    t!.models.script(s.id, { text: ['ok'] })
    await t!.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })
    const got = await rx!.waitFor(3)
    await until('delivered', async () => (await deliveries(hook.id))[0]?.status === 'delivered')
    expect(new Set(got.map((r) => r.headers['webhook-id'])).size).toBe(1)
    expect(new Set(got.map((r) => r.raw)).size).toBe(1)
    // the schedule: 50 ms, then 100 ms between attempts (at least)
    expect(got[1].at - got[0].at).toBeGreaterThanOrEqual(45)
    expect(got[2].at - got[1].at).toBeGreaterThanOrEqual(95)
    const [x] = await deliveries(hook.id)
    expect(x).toMatchObject({ id: got[0].headers['webhook-id'], type: 'turn.completed', sessionId: s.id, status: 'delivered', attempts: 3, lastStatus: 200 })
    const attempts = (await t!.app.db.query<{ attempt: number; status: number }>('SELECT attempt, status FROM webhook_attempts WHERE delivery_id = $1 ORDER BY attempt', [x.id])).rows
    expect(attempts).toEqual([{ attempt: 1, status: 500 }, { attempt: 2, status: 500 }, { attempt: 3, status: 200 }])
    // the metrics count them: attempts by outcome, the delivery by type and outcome, nothing left pending
    expect(await metric('agentd_webhook_attempts_total', { outcome: 'status' })).toBe(2)
    expect(await metric('agentd_webhook_attempts_total', { outcome: 'ok' })).toBe(1)
    expect(await metric('agentd_webhook_deliveries_total', { type: 'turn.completed', outcome: 'delivered' })).toBe(1)
    await until('the queue gauge reads empty', async () => (await metric('agentd_webhook_queue_depth')) === 0 || undefined, 8000)
  })

  it('retries a receiver that never answers by the schedule and ends failed', async () => {
    await start({ webhooks: { ...FAST, timeoutMs: 150, giveUpMs: 600 } })
    rx!.respond = () => 'hang'
    const hook = await subscribe(['turn.completed'])
    const s = await t!.createSession()
    t!.models.script(s.id, { text: ['ok'] })
    await t!.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })
    const failed = await until('failed', async () => (await deliveries(hook.id)).find((x) => x.status === 'failed'), 10000)
    expect(failed.lastError).toMatch(/no answer within 150 ms/)
    expect(failed.lastStatus).toBeUndefined()
    expect(failed.nextAttemptAt).toBeUndefined()
    // attempts start 150 ms apart and more (timeout + 50/100 ms), none after 600 ms from the first
    const rows = (await t!.app.db.query<{ attempt: number; started_at: number; status: number | null; error: string }>('SELECT attempt, started_at, status, error FROM webhook_attempts WHERE delivery_id = $1 ORDER BY attempt', [failed.id])).rows
    expect(rows.length).toBe(failed.attempts)
    expect(rows.length).toBeGreaterThanOrEqual(3)
    expect(rows.map((r) => r.attempt)).toEqual(rows.map((_, i) => i + 1))
    expect(rows.at(-1)!.started_at - rows[0].started_at).toBeLessThanOrEqual(600)
    expect(rx!.received.length).toBe(rows.length)
    await sleep(300)
    expect(rx!.received.length).toBe(rows.length)
  })

  it('while a delivery waits, the gauges show it pending and its age', async () => {
    await start({ webhooks: { ...FAST, schedule: [60_000], giveUpMs: 3_600_000 } })
    rx!.respond = () => 500
    await subscribe(['turn.completed'])
    const s = await t!.createSession()
    t!.models.script(s.id, { text: ['ok'] })
    await t!.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })
    await rx!.waitFor(1)
    // the gauges are read every 5 s at most
    await until('the queue gauge', async () => (await metric('agentd_webhook_queue_depth')) === 1 || undefined, 8000)
    expect(await metric('agentd_webhook_oldest_pending_seconds')).toBeGreaterThan(0)
    expect(await metric('agentd_webhook_deliveries_total')).toBe(0)
  })

  it('an attempt in flight at shutdown is due again at once, and the next start delivers it', async () => {
    await start()
    rx!.respond = (_r, prior) => (prior === 0 ? 'hang' : 200)
    const hook = await subscribe(['turn.completed'])
    const s = await t!.createSession()
    t!.models.script(s.id, { text: ['ok'] })
    await t!.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })
    const [first] = await rx!.waitFor(1)
    const testDb = t!.testDb
    await t!.close({ keepDb: true })
    const row = (await testDb.db.query<{ status: string; attempts: number; next_attempt_at: number }>('SELECT status, attempts, next_attempt_at FROM webhook_deliveries WHERE id = $1', [first.headers['webhook-id']])).rows[0]
    expect(row).toMatchObject({ status: 'pending', attempts: 1 })
    expect(Number(row.next_attempt_at)).toBeLessThanOrEqual(Date.now())
    t = await startTestApp({ kind, testDb, webhooks: FAST })
    const [, again] = await rx!.waitFor(2)
    expect(again.headers['webhook-id']).toBe(first.headers['webhook-id'])
    await until('delivered', async () => (await t!.app.db.query<{ status: string }>('SELECT status FROM webhook_deliveries WHERE webhook_id = $1', [hook.id])).rows[0]?.status === 'delivered')
    const attempts = (await t!.app.db.query<{ attempt: number; status: number | null; error: string | null }>('SELECT attempt, status, error FROM webhook_attempts WHERE delivery_id = $1 ORDER BY attempt', [first.headers['webhook-id']])).rows
    expect(attempts).toEqual([{ attempt: 1, status: null, error: 'aborted (shutdown)' }, { attempt: 2, status: 200, error: null }])
  })

  it('the address guard holds at every attempt: a URL that became refused is not connected to', async () => {
    await start({ webhooks: { ...FAST, giveUpMs: 200 } })
    const hook = await subscribe(['turn.completed'])
    // what creation would refuse, as if the rules changed since (AGENTD_TOOL_HOSTS lists loopback only)
    await t!.app.db.query('UPDATE webhooks SET url = $2 WHERE id = $1', [hook.id, 'http://10.255.255.1:9/x'])
    const ping = await t!.api('POST', `/v1/webhooks/${hook.id}/test`)
    const d = await until('failed', async () => (await deliveries(hook.id)).find((x) => x.id === ping.body.deliveryId && x.status === 'failed'), 8000)
    expect(d.lastError).toMatch(/address refused: 10\.255\.255\.1 is a private address/)
    expect(await metric('agentd_webhook_attempts_total', { outcome: 'refused' })).toBeGreaterThanOrEqual(1)
  })

  it('prunes delivered rows older than 7 days, and only those', async () => {
    await start({ webhooks: { deliver: false } })
    const hook = await subscribe(['turn.completed'])
    const day = 24 * 3600 * 1000
    const now = Date.now()
    const { webhooks: store } = await import('../../src/store/index.js')
    for (const [id, status, deliveredAt] of [['old', 'delivered', now - 8 * day], ['recent', 'delivered', now - 6 * day], ['failed', 'failed', null], ['pending', 'pending', null]] as const) {
      await t!.app.db.query('INSERT INTO webhook_deliveries (id, webhook_id, type, event_time, created_at, status, delivered_at, next_attempt_at) VALUES ($1, $2, $3, $4, $4, $5, $6, $7)', [id, hook.id, 'ping', now - 9 * day, status, deliveredAt, status === 'pending' ? now + day : null])
    }
    expect(await store.pruneDeliveries(t!.app.db, now, 7 * day)).toBe(1)
    expect((await t!.app.db.query<{ id: string }>('SELECT id FROM webhook_deliveries ORDER BY id')).rows.map((r) => r.id)).toEqual(['failed', 'pending', 'recent'])
  })

  it('a deleted webhook stops delivering: its pending deliveries are dropped', async () => {
    await start()
    rx!.respond = () => 500
    const hook = await subscribe(['turn.completed'])
    const s = await t!.createSession()
    t!.models.script(s.id, { text: ['ok'] })
    await t!.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })
    await rx!.waitFor(1)
    expect((await t!.api('DELETE', `/v1/webhooks/${hook.id}`)).status).toBe(204)
    const n = rx!.received.length
    await sleep(400)
    expect(rx!.received.length).toBeLessThanOrEqual(n + 1) // at most the attempt already in flight
    const settled = rx!.received.length
    await sleep(300)
    expect(rx!.received.length).toBe(settled)
    expect(await count('webhook_deliveries')).toBe(0)
    expect((await t!.api('GET', `/v1/webhooks/${hook.id}`)).status).toBe(404)
    // a later turn writes nothing for it
    t!.models.script(s.id, { text: ['again'] })
    await t!.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'again' })
    await t!.waitForTurnEnd(s.id, 2)
    expect(await count('webhook_deliveries')).toBe(0)
  })

  it('a unit that rolls back writes no delivery; the same unit committed writes one per subscribed webhook', async () => {
    await start({ webhooks: { deliver: false } })
    await subscribe(['turn.completed'])
    await subscribe(['turn.completed', 'turn.failed'])
    await subscribe(['turn.failed'])
    const s = await t!.createSession()
    const key = (await t!.app.db.query<{ key: string; next_seq: number; last_time: number }>('SELECT key, next_seq, last_time FROM sessions WHERE id = $1', [s.id])).rows[0]
    const pos = { key: key.key, nextSeq: key.next_seq, lastTime: Number(key.last_time) }
    const events = stamp(pos, [{ type: 'turn/start', data: { turn: 1 } }, { type: 'turn/end', data: { turn: 1, reason: { kind: 'completed' } } }] as never, Date.now())
    const side: SideRow[] = [{ kind: 'webhook', event: { type: 'turn.completed', turn: 1, seq: events[1].seq, time: events[1].time, extra: { reason: { kind: 'completed' } } } }]
    const boom = new Error('rolled back after the append')
    await expect(
      t!.app.db.transaction(async (tx) => {
        await writeEvents(tx, { ...pos }, events, {}, side)
        throw boom
      }),
    ).rejects.toBe(boom)
    expect(await count('webhook_deliveries')).toBe(0)
    expect(await count('session_events WHERE session_key = $1', [key.key])).toBe(0)
    await t!.app.db.transaction((tx) => writeEvents(tx, { ...pos }, events, {}, side))
    expect(await count('webhook_deliveries')).toBe(2)
    expect(await count("webhook_deliveries WHERE seq = $1 AND session_id = $2 AND status = 'pending'", [events[1].seq, s.id])).toBe(2)
    // the fast path: one statement whose side rows are conditioned on the row move; a stale position moves nothing
    const turn2 = (at: number) => stamp({ nextSeq: at, lastTime: events[1].time }, [{ type: 'turn/start', data: { turn: 2 } }, { type: 'turn/end', data: { turn: 2, reason: { kind: 'error', error: { code: 'AUTH', message: 'x' } } } }] as never, Date.now())
    const failedSide = (e: { seq: number; time: number }): SideRow[] => [{ kind: 'webhook', event: { type: 'turn.failed', turn: 2, seq: e.seq, time: e.time, extra: {} } }]
    const stale = turn2(1)
    expect(await appendConditional(t!.app.db, key.key, { nextSeq: 1 }, stale, {}, failedSide(stale[1]))).toBeNull()
    expect(await count("webhook_deliveries WHERE type = 'turn.failed'")).toBe(0)
    const fresh = turn2(2)
    expect(await appendConditional(t!.app.db, key.key, { nextSeq: 2 }, fresh, {}, failedSide(fresh[1]))).not.toBeNull()
    expect(await count("webhook_deliveries WHERE type = 'turn.failed' AND seq = 3")).toBe(2)
  })

  it('a turn end committed while no deliverer runs is delivered after a restart (the process that wrote it is gone)', async () => {
    await start({ webhooks: { deliver: false } })
    const hook = await subscribe(['turn.completed'])
    const s = await t!.createSession()
    t!.models.script(s.id, { text: ['ok'] })
    await t!.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })
    const log = await t!.waitForTurnEnd(s.id, 1)
    await sleep(200)
    expect(rx!.received).toHaveLength(0)
    const testDb = t!.testDb
    await t!.close({ keepDb: true })
    t = await startTestApp({ kind, testDb, webhooks: FAST })
    const [r] = await rx!.waitFor(1)
    expect(r.body).toMatchObject({ type: 'turn.completed', data: { sessionId: s.id, turn: 1, seq: log.find((e) => e.type === 'turn/end')!.seq } })
    // the new tenant key of the restarted helper is another tenant: read the row directly
    await until('delivered', async () => (await t!.app.db.query<{ status: string }>('SELECT status FROM webhook_deliveries WHERE webhook_id = $1', [hook.id])).rows[0]?.status === 'delivered')
  })

  it('a claimed attempt that never reports (its process died) is attempted again under the next number, same webhook-id', async () => {
    await start({ webhooks: { deliver: false } })
    const hook = await subscribe(['turn.completed'])
    const s = await t!.createSession()
    t!.models.script(s.id, { text: ['ok'] })
    await t!.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })
    await t!.waitForTurnEnd(s.id, 1)
    // what a process that died between its claim and the answer leaves: attempt 1 taken, its lease running
    const { webhooks: store } = await import('../../src/store/index.js')
    const [claimed] = await store.claimDeliveries(t!.app.db, Date.now(), 10, 200)
    expect(claimed.attempts).toBe(1)
    const testDb = t!.testDb
    await t!.close({ keepDb: true })
    t = await startTestApp({ kind, testDb, webhooks: FAST })
    const [r] = await rx!.waitFor(1, 5000)
    expect(r.headers['webhook-id']).toBe(claimed.id)
    await until('delivered', async () => (await t!.app.db.query<{ status: string }>('SELECT status FROM webhook_deliveries WHERE webhook_id = $1', [hook.id])).rows[0]?.status === 'delivered')
    const rows = (await t!.app.db.query<{ attempt: number; status: number }>('SELECT attempt, status FROM webhook_attempts WHERE delivery_id = $1', [claimed.id])).rows
    expect(rows).toEqual([{ attempt: 2, status: 200 }])
  })

  it('refuses bad input with 400 and writes nothing; another tenant sees 404; ping and the routes', async () => {
    await start()
    const bad = async (body: unknown, path: string) => {
      const r = await t!.api('POST', '/v1/webhooks', body)
      expect(r.status).toBe(400)
      expect(r.body.error.code).toBe('bad-request')
      expect(r.body.error.details.map((x: any) => x.path).join(' ')).toContain(path)
    }
    await bad({ url: 'http://10.1.2.3/hook', events: ['turn.completed'] }, 'body.url')
    await bad({ url: 'http://169.254.169.254/latest', events: ['turn.completed'] }, 'body.url')
    await bad({ url: 'ftp://example.com/x', events: ['turn.completed'] }, 'body.url')
    await bad({ url: rx!.url, events: ['turn.started'] }, 'body.events[0]')
    await bad({ url: rx!.url, events: [] }, 'events')
    await bad({ url: rx!.url }, 'events')
    await bad({ url: rx!.url, events: ['turn.completed'], secret: 'mine' }, '')
    expect(await count('webhooks')).toBe(0)

    const hook = await subscribe(['turn.completed', 'turn.completed'])
    const got = await t!.api('GET', `/v1/webhooks/${hook.id}`)
    expect(got.body).toEqual({ id: hook.id, url: rx!.url + '/hook', events: ['turn.completed'], description: 'test', createdAt: expect.any(String) })
    expect((await t!.api('GET', '/v1/webhooks')).body.webhooks).toEqual([got.body])

    // another tenant: 404 on each route, and its list is empty
    const other = await t!.api('POST', '/v1/admin/tenants', { name: 'other' }, { key: ADMIN_TOKEN })
    const key = other.body.apiKey
    for (const [m, p] of [['GET', ''], ['DELETE', ''], ['GET', '/deliveries'], ['POST', '/test']] as const) {
      const r = await t!.api(m, `/v1/webhooks/${hook.id}${p}`, undefined, { key })
      expect(r.status, `${m} ${p}`).toBe(404)
      expect(r.body.error.code).toBe('not-found')
    }
    expect((await t!.api('GET', '/v1/webhooks/not-a-uuid')).status).toBe(404)
    expect((await t!.api('GET', '/v1/webhooks', undefined, { key })).body.webhooks).toEqual([])
    expect((await t!.api('GET', `/v1/webhooks/${hook.id}/deliveries?limit=0`)).status).toBe(400)

    // ping: a signed delivery of type ping
    const ping = await t!.api('POST', `/v1/webhooks/${hook.id}/test`)
    expect(ping.status).toBe(202)
    const [r] = await rx!.waitFor(1)
    expect(r.headers['webhook-id']).toBe(ping.body.deliveryId)
    expect(r.body).toMatchObject({ type: 'ping', data: {} })
    new Webhook(hook.secret).verify(r.raw, { 'webhook-id': String(r.headers['webhook-id']), 'webhook-timestamp': String(r.headers['webhook-timestamp']), 'webhook-signature': String(r.headers['webhook-signature']) })
    await until('ping delivered', async () => (await deliveries(hook.id))[0]?.status === 'delivered')
    expect((await deliveries(hook.id))[0]).toMatchObject({ id: ping.body.deliveryId, type: 'ping', sessionId: null, seq: null, attempts: 1 })
  })
})
