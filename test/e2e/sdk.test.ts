// @agentd/client against a real agentd (in-process, listening on a port) on one database (docs/testing.md):
// every method once, checked against the durable log; sends carry idempotency keys and repeat safely;
// errors carry the API's codes; stream, watch and run agree with GET …/events.

import { execFile } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { AgentdClient, AgentdError, type RetryEvent, type StreamFrame, type TranscriptView } from '../../clients/typescript/src/index.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { APP_DB_KINDS, freshPgDatabase, type TestDb } from '../helpers/db.js'
import { d, ofType, textOf } from '../helpers/events.js'
import { expectValidLog } from '../helpers/invariants.js'
import { gate } from '../helpers/scripted.js'
import { until } from '../helpers/wait.js'
import { openPg } from '../../src/store/index.js'
import { startForwarder, type Forwarder } from './helpers-sdk.js'

/** A fetch that records what the client sent. */
function recordingFetch() {
  const calls: Array<{ method: string; url: string; headers: Record<string, string>; body?: string; status?: number }> = []
  const f: typeof fetch = async (input, init) => {
    const rec = { method: init?.method ?? 'GET', url: String(input), headers: Object.fromEntries(Object.entries((init?.headers ?? {}) as Record<string, string>).map(([k, v]) => [k.toLowerCase(), v])), body: init?.body as string | undefined, status: undefined as number | undefined }
    calls.push(rec)
    const res = await fetch(input, init)
    rec.status = res.status
    return res
  }
  return { fetch: f, calls }
}

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const idemMessageId = (key: string) => `idem-${crypto.createHash('sha256').update(key).digest('hex').slice(0, 32)}`

async function expectAgentdError(p: Promise<unknown>, status: number, code: string): Promise<AgentdError> {
  const e = await p.then(
    () => undefined,
    (x) => x,
  )
  expect(e, `expected ${status} ${code}`).toBeInstanceOf(AgentdError)
  expect({ status: e.status, code: e.code }).toEqual({ status, code })
  return e
}

describe.each(APP_DB_KINDS)('@agentd/client on %s', (kind) => {
  let t: TestApp
  let client: AgentdClient
  let rec: ReturnType<typeof recordingFetch>
  // an http tool: answers "order N is fine"
  const toolServer = http.createServer(async (req, res) => {
    let raw = ''
    for await (const c of req) raw += c
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ content: `order ${JSON.parse(raw).arguments.order} is fine` }))
  })
  let toolUrl = ''

  beforeAll(async () => {
    await new Promise<void>((r) => toolServer.listen(0, '127.0.0.1', r))
    toolUrl = `http://127.0.0.1:${(toolServer.address() as AddressInfo).port}/lookup`
    t = await startTestApp({ kind })
    rec = recordingFetch()
    client = new AgentdClient({ baseUrl: t.url, apiKey: t.key, adminToken: t.adminToken, fetch: rec.fetch })
  })
  afterAll(async () => {
    await t?.close()
    toolServer.close()
  })

  it('sessions: create (idempotent with an id), list as an async iterator across pages, get, update, fork, compact, delete', async () => {
    const a = await client.sessions.create({ id: 'sdk-a', system: 'be brief', metadata: { team: 'x' } })
    expect(a).toMatchObject({ id: 'sdk-a', title: null, status: 'idle', headSeq: -1, metadata: { team: 'x' } })
    expect(await client.sessions.create({ id: 'sdk-a', system: 'be brief', metadata: { team: 'x' } })).toEqual(a)
    await expectAgentdError(client.sessions.create({ id: 'sdk-a', system: 'other' }), 409, 'session-conflict')
    const b = await client.sessions.create()
    const c = await client.sessions.create({ model: 'faux/echo' })
    expect(c.model).toBe('faux/echo')

    const before = rec.calls.length
    const listed: string[] = []
    for await (const s of client.sessions.list({ pageSize: 2 })) listed.push(s.id)
    expect(new Set(listed)).toEqual(new Set([a.id, b.id, c.id]))
    expect(listed).toHaveLength(3)
    const pages = rec.calls.slice(before).filter((x) => x.url.includes('/v1/sessions?'))
    expect(pages.length, 'two pages of two').toBe(2)
    expect(pages[1]!.url).toMatch(/cursor=/)
    const first = await client.sessions.page({ limit: 2 })
    expect(first.sessions).toHaveLength(2)
    expect(first.nextCursor).toEqual(expect.any(String))

    expect(await client.sessions.get(b.id)).toEqual(b)
    const u = await client.sessions.update(a.id, { title: 'renamed', metadata: { team: 'y' } })
    expect(u).toMatchObject({ id: a.id, title: 'renamed', metadata: { team: 'y' } })

    t.models.script(a.id, { text: ['first answer'] })
    const r = await client.run(a.id, 'hello')
    expect(r.reason).toEqual({ kind: 'completed' })
    const fork = await client.sessions.fork(a.id)
    const log = await t.events(a.id)
    expect(fork).toMatchObject({ title: null, model: a.model, headSeq: log.length })
    expect((await t.events(fork.id)).slice(0, log.length)).toEqual(log)
    const forkAt = await client.sessions.fork(a.id, { atSeq: 0 })
    expect(forkAt.id).not.toBe(fork.id)
    expect(await client.sessions.compact(a.id)).toEqual({ compacted: expect.any(Boolean) })

    await client.sessions.delete(c.id)
    await expectAgentdError(client.sessions.get(c.id), 404, 'session-not-found')
  })

  it('input: followup, steer, inject, inbox, removeFromInbox and cancel; every send carries an Idempotency-Key and a repeat stores nothing', async () => {
    const s = await client.sessions.create()
    const g = gate()
    t.models.script(s.id, { text: ['working'], hang: true }, { text: ['second turn'] })
    const f1 = await client.followup(s.id, 'start working')
    expect(f1).toEqual({ messageId: expect.any(String), seq: expect.any(Number) })
    await t.models.waitForRequest(s.id, 1)

    const inj = await client.inject(s.id, [{ type: 'text', text: 'some context' }], { id: 'ctx-1' })
    expect(inj.messageId).toBe('ctx-1')
    const st = await client.steer(s.id, 'go left', { idempotencyKey: 'steer-key-1' })
    expect(st.messageId).toBe(idemMessageId('steer-key-1'))
    const queued = await client.followup(s.id, 'later', { id: 'later-1' })
    const inbox = await client.inbox(s.id)
    expect(inbox.nextTurn.map((m) => m.id)).toEqual(['later-1'])
    expect(inbox.nextStep.map((m) => m.id)).toEqual(['ctx-1', idemMessageId('steer-key-1')])
    expect(inbox.nextStep[0]).toMatchObject({ role: 'user', content: [{ type: 'text', text: 'some context' }], source: { kind: 'user' } })

    // a send without id or key got a generated key; each send had one or an id
    const sends = rec.calls.filter((x) => x.method === 'POST' && /\/(followup|steer|inject)$/.test(x.url) && x.url.includes(s.id))
    expect(sends).toHaveLength(4)
    expect(sends[0]!.headers['idempotency-key']).toMatch(/^sdk-[0-9a-f]{32}$/)
    expect(f1.messageId).toBe(idemMessageId(sends[0]!.headers['idempotency-key']!))
    expect(sends[2]!.headers['idempotency-key']).toBe('steer-key-1')

    // repeating a send is answered with the original, and stores nothing
    const head = (await t.events(s.id)).length
    expect(await client.steer(s.id, 'go left', { idempotencyKey: 'steer-key-1' })).toEqual(st)
    expect(await client.followup(s.id, 'later', { id: 'later-1' })).toEqual(queued)
    expect((await t.events(s.id)).length).toBe(head)
    await expectAgentdError(client.followup(s.id, 'different body', { id: 'later-1' }), 409, 'idempotency-conflict')
    await expectAgentdError(client.inject(s.id, 'later', { id: 'later-1' }), 409, 'idempotency-conflict')

    await client.removeFromInbox(s.id, 'later-1')
    expect((await client.inbox(s.id)).nextTurn).toEqual([])
    await expectAgentdError(client.removeFromInbox(s.id, 'later-1'), 409, 'queue-item-not-found')

    expect(await client.cancel(s.id)).toEqual({ cancelled: true })
    const log = await t.waitFor(s.id, (e) => e.type === 'turn/end')
    expect(d(ofType(log, 'turn/end')[0]).reason).toEqual({ kind: 'aborted', reason: { kind: 'user' } })
    await t.waitIdle(s.id)
    expect(await client.cancel(s.id)).toEqual({ cancelled: false })
    g.open()
    expectValidLog(await t.events(s.id))
  })

  it('tools: pending, decide and submitToolResult by hand; run() answers client tools from its handler map and approvals through approve()', async () => {
    const tools = [
      { name: 'lookup', description: 'looks up an order', parameters: { type: 'object', properties: { order: { type: 'number' } } }, execution: { type: 'http' as const, url: toolUrl }, approval: 'always' as const },
      { name: 'color', description: 'asks the user for a color', parameters: { type: 'object', properties: {} }, execution: { type: 'client' as const } },
    ]
    // by hand
    const s = await client.sessions.create({ tools })
    t.models.script(s.id, { toolCalls: [{ id: 'c1', name: 'lookup', arguments: { order: 7 } }] }, { toolCalls: [{ id: 'c2', name: 'color', arguments: {} }] }, { text: ['order 7 is red'] })
    await client.followup(s.id, 'where is order 7?')
    const approval = await until('the approval to be pending', async () => (await client.pending(s.id)).find((p) => p.kind === 'approval'))
    expect(approval).toEqual({ callId: 'c1', name: 'lookup', arguments: { order: 7 }, rawArguments: '{"order":7}', kind: 'approval' })
    await client.decide(s.id, 'c1', { decision: 'allow' })
    await expectAgentdError(client.decide(s.id, 'c1', { decision: 'allow' }), 409, 'tool-call-not-pending')
    const call = await until('the client call to be pending', async () => (await client.pending(s.id)).find((p) => p.kind === 'client'))
    expect(call).toEqual({ callId: 'c2', name: 'color', arguments: {}, rawArguments: '{}', kind: 'client' })
    await client.submitToolResult(s.id, { callId: 'c2', content: 'red' })
    await expectAgentdError(client.submitToolResult(s.id, { callId: 'c2', content: 'again' }), 409, 'tool-call-not-pending')
    const log = await t.waitForTurnEnd(s.id, 1)
    expect(ofType(log, 'tool/result').map((e) => d(e).message.content[0])).toMatchObject([
      { isError: false, content: [{ type: 'text', text: 'order 7 is fine' }] },
      { isError: false, content: [{ type: 'text', text: 'red' }] },
    ])

    // through run()
    const s2 = await client.sessions.create({ tools })
    t.models.script(
      s2.id,
      { toolCalls: [{ id: 'k1', name: 'lookup', arguments: { order: 1 } }, { id: 'k2', name: 'lookup', arguments: { order: 2 } }] },
      { toolCalls: [{ id: 'k3', name: 'color', arguments: {} }] },
      { text: ['all done'] },
    )
    const asked: string[] = []
    const frames: StreamFrame[] = []
    const r = await client.run(s2.id, 'check both orders', {
      onFrame: (f) => frames.push(f),
      approve: (p) => (asked.push(p.callId), (p.arguments as { order: number }).order === 1),
      tools: { color: async () => [{ type: 'text', text: 'blue' }] },
    })
    expect(r.reason).toEqual({ kind: 'completed' })
    expect(r.turns).toEqual([1])
    expect(r.admitted).toBe(true)
    expect(asked.sort()).toEqual(['k1', 'k2'])
    const log2 = await t.events(s2.id)
    expect(r.events).toEqual(log2.filter((e) => e.seq >= ofType(log2, 'turn/start')[0]!.seq))
    const results = Object.fromEntries(ofType(log2, 'tool/result').map((e) => [d(e).message.source.callId, d(e).message.content[0]]))
    expect(results.k1).toMatchObject({ isError: false, content: [{ type: 'text', text: 'order 1 is fine' }] })
    expect(results.k2).toMatchObject({ isError: true, content: [{ type: 'text', text: expect.stringMatching(/denied/) }] })
    expect(results.k3).toMatchObject({ isError: false, content: [{ type: 'text', text: 'blue' }] })
    expect(r.messages.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'user', 'user', 'assistant', 'user', 'assistant'])
    expect(textOf(r.messages.at(-1))).toBe('all done')
    expect(frames.some((f) => f.event === 'agent/assistant-stream' && f.data.kind === 'chunk')).toBe(true)
  })

  it('reading: events pages, allEvents, messages, and stream equal the log; watch folds it into a transcript with the partial answer', async () => {
    const s = await client.sessions.create()
    const g = gate()
    t.models.script(s.id, { text: ['one ', 'two ', 'three'], holdAfter: 2, gate: g.promise })
    const w = client.watch(s.id)
    await w.ready
    const seen: TranscriptView[] = []
    w.subscribe((v) => seen.push(v))
    await client.followup(s.id, 'count', { id: 'count-1' })
    const mid = await w.until((v) => v.partial?.text === 'one two ')
    expect(mid).toMatchObject({ status: 'running', turn: 1, partial: { turn: 1, step: 1, gap: false } })
    expect(mid.messages.map((m) => m.role)).toEqual(['system', 'user'])
    g.open()
    const end = await w.until((v) => v.lastTurn !== null && v.status === 'idle')
    expect(end.partial).toBeNull()
    expect(end.lastTurn).toEqual({ turn: 1, reason: { kind: 'completed' } })
    expect(end.inbox).toEqual({ nextTurn: [], nextStep: [] })
    expect(textOf(end.messages.at(-1)!.message)).toBe('one two three')
    w.close()
    await w.done

    const log = await t.events(s.id)
    expectValidLog(log)
    expect(end.headSeq).toBe(log.at(-1)!.seq)
    expect(end.messages.map((m) => m.seq)).toEqual(log.filter((e) => e.surfaceOp).map((e) => e.seq))
    const page = await client.events(s.id, { after: 1, limit: 3 })
    expect(page).toEqual({ events: log.slice(2, 5), headSeq: log.at(-1)!.seq })
    const all = []
    for await (const e of client.allEvents(s.id, { pageSize: 4 })) all.push(e)
    expect(all).toEqual(log)
    expect(await client.messages(s.id)).toEqual((await t.api('GET', `/v1/sessions/${s.id}/messages`)).body.messages)

    // the stream from a seq: the backlog, stream/ready, then live; lastSeq follows it
    const st = client.stream(s.id, { after: 2 })
    const got: StreamFrame[] = []
    for await (const f of st) {
      got.push(f)
      if (f.event === 'agent/status') break
    }
    expect(got.filter((f) => f.event === 'session/event').map((f) => (f as { data: unknown }).data)).toEqual(log.slice(3))
    expect(got.at(-2)).toEqual({ event: 'stream/ready', data: { headSeq: log.at(-1)!.seq } })
    expect(st.lastSeq).toBe(log.at(-1)!.seq)
    expect(st.connections).toBe(1)
  })

  it('admin: createTenant, createKey, deleteKey; a deleted key is 401 unauthorized at once', async () => {
    const tenant = await client.admin.createTenant('sdk-tenant')
    expect(tenant).toMatchObject({ tenant: { id: expect.any(String), name: 'sdk-tenant' }, apiKey: expect.any(String) })
    const key = await client.admin.createKey(tenant.tenant.id)
    const other = new AgentdClient({ baseUrl: t.url, apiKey: key.apiKey })
    const s = await other.sessions.create()
    await expectAgentdError(client.sessions.get(s.id), 404, 'session-not-found')
    await client.admin.deleteKey(key.keyId)
    await expectAgentdError(other.sessions.get(s.id), 401, 'unauthorized')
    await expectAgentdError(new AgentdClient({ baseUrl: t.url, adminToken: 'wrong' }).admin.createTenant('x'), 401, 'unauthorized')
  })

  it('request: any route by method and path, with the key or the admin token, the API errors and the retry rules of its method', async () => {
    const s = await client.sessions.create({ metadata: { via: 'request' } })
    expect(await client.request('GET', `/v1/sessions/${encodeURIComponent(s.id)}`)).toEqual(await client.sessions.get(s.id))
    expect(await client.request('patch', `/v1/sessions/${encodeURIComponent(s.id)}`, { body: { title: 'by request' } })).toMatchObject({ id: s.id, title: 'by request' })
    const page = await client.request<{ sessions: Array<{ id: string }> }>('GET', '/v1/sessions', { query: { limit: 1 } })
    expect(page.sessions.map((x) => x.id)).toEqual([s.id])
    // a keyed POST repeats like a send: the same answer, stored once
    const n = rec.calls.length
    const a = await client.request('POST', `/v1/sessions/${encodeURIComponent(s.id)}/inject`, { body: { content: 'by request' }, idempotencyKey: 'req-key-1' })
    expect(a).toEqual({ messageId: idemMessageId('req-key-1'), seq: expect.any(Number) })
    const head = (await t.events(s.id)).length
    expect(await client.request('POST', `/v1/sessions/${encodeURIComponent(s.id)}/inject`, { body: { content: 'by request' }, idempotencyKey: 'req-key-1' })).toEqual(a)
    expect((await t.events(s.id)).length).toBe(head)
    expect(rec.calls.slice(n).filter((c) => c.url.endsWith('/inject')).map((c) => [c.method, c.headers['idempotency-key'], c.headers.authorization])).toEqual([
      ['POST', 'req-key-1', `Bearer ${t.key}`],
      ['POST', 'req-key-1', `Bearer ${t.key}`],
    ])
    // an empty answer is undefined; admin routes take the admin token
    const tenant = await client.request<{ tenant: { id: string } }>('POST', '/v1/admin/tenants', { body: { name: 'by-request' }, auth: 'admin' })
    const key = await client.request<{ keyId: string }>('POST', `/v1/admin/tenants/${tenant.tenant.id}/keys`, { body: {}, auth: 'admin' })
    expect(await client.request('DELETE', `/v1/admin/keys/${key.keyId}`, { auth: 'admin' })).toBeUndefined()
    await expectAgentdError(client.request('POST', '/v1/admin/tenants', { body: { name: 'x' } }), 401, 'unauthorized')
    await expectAgentdError(client.request('GET', '/v1/sessions/no-such-session'), 404, 'session-not-found')
    await expectAgentdError(client.request('GET', '/v1/no-such-route'), 404, 'not-found')
    const bad = await expectAgentdError(client.request('POST', '/v1/sessions', { body: { bogus: 1 } }), 400, 'bad-request')
    expect(bad.details.length).toBeGreaterThan(0)
    expect(() => client.request('GET', 'v1/sessions')).toThrow(TypeError)
  })

  it('errors carry the API code, status and details, and a refused call changes nothing', async () => {
    const e = await expectAgentdError(client.sessions.create({ bogus: 1 } as never), 400, 'bad-request')
    expect(e.details.length).toBeGreaterThan(0)
    expect(e.details[0]).toEqual({ path: expect.any(String), message: expect.any(String) })
    await expectAgentdError(client.sessions.create({ model: 'nowhere/none' }), 422, 'model-unavailable')
    await expectAgentdError(client.followup('no-such-session', 'hi'), 404, 'session-not-found')
    const s = await client.sessions.create()
    await expectAgentdError(client.followup(s.id, ''), 400, 'bad-request')
    await expectAgentdError(client.followup(s.id, 'x', { id: 'a', idempotencyKey: 'b' }), 400, 'bad-request')
    await expectAgentdError(new AgentdClient({ baseUrl: t.url, apiKey: 'nope' }).sessions.page(), 401, 'unauthorized')
    expect((await client.sessions.get(s.id)).headSeq).toBe(-1)
    // the stream reports a missing session instead of reconnecting forever
    const st = client.stream('no-such-session')
    await expectAgentdError(st.next(), 404, 'session-not-found')
    // a network failure is an AgentdError too (status 0), after the retries a read allows
    const retries: RetryEvent[] = []
    const down = new AgentdClient({ baseUrl: 'http://127.0.0.1:9', apiKey: 'k', retry: { maxAttempts: 2, initialDelayMs: 10 }, onRetry: (r) => retries.push(r) })
    await expectAgentdError(down.sessions.page(), 0, 'network-error')
    expect(retries).toHaveLength(1)
  })
})

describe('retries on 429 (pglite; the limiter is in memory, no database involved)', () => {
  let t: TestApp
  beforeAll(async () => {
    t = await startTestApp({ kind: 'pglite', env: { AGENTD_RATE_LIMIT_PER_MIN: '60' } })
  })
  afterAll(async () => {
    await t?.close()
  })

  it('a send refused with 429 is retried after Retry-After and stored once', async () => {
    const rec = recordingFetch()
    const retries: RetryEvent[] = []
    const client = new AgentdClient({ baseUrl: t.url, apiKey: t.key, fetch: rec.fetch, onRetry: (r) => retries.push(r) })
    const s = await client.sessions.create({ model: 'faux/echo' })
    // spend the budget (60 per minute, refilled one per second)
    for (let i = 0; i < 80; i++) if ((await t.api('GET', `/v1/sessions/${s.id}`)).status === 429) break
    const a = await client.inject(s.id, 'after the limit', { id: 'limited-1' })
    const sends = rec.calls.filter((c) => c.url.endsWith('/inject'))
    expect(sends.map((c) => c.status)).toContain(429)
    expect(sends.at(-1)!.status).toBe(202)
    const limited = retries.filter((r) => r.error.code === 'rate-limited')
    expect(limited.length).toBeGreaterThan(0)
    for (const r of limited) {
      expect(r.error.status).toBe(429)
      expect(r.error.retryAfterMs).toBeGreaterThan(0)
      expect(r.delayMs, 'waits what Retry-After asked').toBeGreaterThanOrEqual(r.error.retryAfterMs!)
    }
    // the log, read with another key of the tenant (this one's budget is spent)
    const other = await t.api('POST', `/v1/admin/tenants/${t.tenantId}/keys`, {}, { key: t.adminToken })
    const log = (await t.api('GET', `/v1/sessions/${s.id}/events`, undefined, { key: other.body.apiKey })).body.events as Array<{ seq: number; type: string; data: unknown }>
    expect(log.filter((e) => e.type === 'agent/inbox/spliced' && d(e).inserted.some((m: { id: string }) => m.id === 'limited-1')).map((e) => e.seq)).toEqual([a.seq])
  })
})

describe('retries on 503 (PostgreSQL reached through a forwarder that plays an outage)', () => {
  let t: TestApp
  let fwd: Forwarder
  beforeAll(async () => {
    const fresh = await freshPgDatabase()
    const real = new URL(fresh.url)
    fwd = await startForwarder(Number(real.port || 5432))
    const url = new URL(fresh.url)
    url.hostname = '127.0.0.1'
    url.port = String(fwd.port)
    const db = openPg(url.toString(), 10)
    const testDb: TestDb = {
      db,
      kind: 'pg',
      url: url.toString(),
      async drop() {
        await db.close()
        await fwd.close()
        await fresh.drop()
      },
    }
    t = await startTestApp({ kind: 'pg', testDb })
  })
  afterAll(async () => {
    await fwd?.up().catch(() => {})
    await t?.close()
  })

  it('a send answered 503 while the database is down is retried after Retry-After and stored once', async () => {
    const retries: RetryEvent[] = []
    const client = new AgentdClient({ baseUrl: t.url, apiKey: t.key, retry: { maxAttempts: 20 }, onRetry: (r) => retries.push(r) })
    const s = await client.sessions.create({ model: 'faux/echo' })
    await fwd.down()
    const sent = client.inject(s.id, 'through the outage', { idempotencyKey: 'outage-1' })
    await until('a 503 to be retried', () => retries.some((r) => r.error.status === 503), 20000)
    await fwd.up()
    const accepted = await sent
    expect(accepted.messageId).toBe(idemMessageId('outage-1'))
    const unavailable = retries.filter((r) => r.error.status === 503)
    for (const r of unavailable) {
      expect(r.error.code).toBe('unavailable')
      expect(r.delayMs, 'waits what Retry-After asked').toBeGreaterThanOrEqual(r.error.retryAfterMs!)
    }
    const log = await t.events(s.id)
    expect(log.filter((e) => e.type === 'agent/inbox/spliced' && d(e).inserted.some((m: { id: string }) => m.id === accepted.messageId)).map((e) => e.seq)).toEqual([accepted.seq])
  })
})

describe("the README's client example", () => {
  let t: TestApp
  beforeAll(async () => {
    t = await startTestApp({ kind: 'pglite' })
  })
  afterAll(async () => {
    await t?.close()
  })

  it('type-checks and runs as written, against a server at the URL it names', async () => {
    const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8')
    const section = readme.slice(readme.indexOf('\n## Clients\n'), readme.indexOf('\n## ', readme.indexOf('\n## Clients\n') + 5))
    const code = /```ts\n([\s\S]*?)```/.exec(section)?.[1]
    expect(code, 'a ts example in the Clients section').toBeDefined()
    expect(code!.trim().split('\n').length).toBeLessThanOrEqual(12)
    expect(code).toContain("from '@agentd/client'")
    expect(code).toContain("'http://127.0.0.1:8080'")
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agentd-readme-'))
    try {
      const file = path.join(dir, 'example.mts')
      fs.writeFileSync(file, code!.replace("'@agentd/client'", `'${path.join(ROOT, 'clients/typescript/src/index.js')}'`).replace("'http://127.0.0.1:8080'", `'${t.url}'`))
      const bin = (n: string) => path.join(ROOT, 'node_modules/.bin', n)
      // asynchronously: the server answering the example runs in this process
      const run = promisify(execFile)
      await run(bin('tsc'), ['--noEmit', '--strict', '--skipLibCheck', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022', '--typeRoots', path.join(ROOT, 'node_modules/@types'), '--types', 'node', file])
      const { stdout } = await run(process.execPath, ['--import', 'tsx', file], { cwd: ROOT, env: { ...process.env, AGENTD_API_KEY: t.key } })
      expect(stdout).toBe('echo: hello agentd\ncompleted after 3 messages\n')
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 60000)
})
