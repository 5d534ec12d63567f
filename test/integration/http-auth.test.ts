// API.md §3 (authentication and tenants) over real sockets on one database (docs/testing.md): bearer keys, revoked
// keys, admin routes, ?access_token on stream and ws only, and tenant isolation on every session route.

import pino from 'pino'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadConfig } from '../../src/config.js'
import { startApp } from '../../src/app.js'
import { tenants } from '../../src/store/index.js'
import { APP_DB_KINDS, openTestDb } from '../helpers/db.js'
import { openSse, startTestApp, type TestApp } from '../helpers/app.js'
import { expectValidLog } from '../helpers/invariants.js'
import { gate } from '../helpers/scripted.js'
import { wsAttempt } from '../helpers/ws.js'

/** A GET that must not be an open stream: answers status and parsed body, aborting a 200 stream. */
async function probe(url: string, headers: Record<string, string>): Promise<{ status: number; body: any }> {
  const ac = new AbortController()
  const res = await fetch(url, { headers, signal: ac.signal })
  if ((res.headers.get('content-type') ?? '').includes('text/event-stream')) {
    ac.abort()
    return { status: res.status, body: undefined }
  }
  const text = await res.text()
  let body: any
  try {
    body = JSON.parse(text)
  } catch {
    body = undefined
  }
  return { status: res.status, body }
}

const wsUrl = (httpUrl: string) => httpUrl.replace(/^http/, 'ws')

describe.each(APP_DB_KINDS)('authentication and tenants on %s', (kind) => {
  let t: TestApp
  let keyB: string
  let tenantB: string
  beforeAll(async () => {
    t = await startTestApp({ kind })
    const r = await t.api('POST', '/v1/admin/tenants', { name: 'tenant-b' }, { key: t.adminToken })
    expect(r.status).toBe(201)
    keyB = r.body.apiKey
    tenantB = r.body.tenant.id
  })
  afterAll(async () => {
    await t?.close()
  })

  it('no key, a malformed key, an unknown key, an empty bearer and a non-Bearer scheme are 401 unauthorized', async () => {
    const s = await t.createSession()
    // an unknown key shaped like a real one: the right format, a prefix nobody has
    const unknown = `agd_${'0'.repeat(12)}_${'A'.repeat(43)}`
    // the real key with one character of its secret changed
    const tampered = t.key.slice(0, -1) + (t.key.endsWith('A') ? 'B' : 'A')
    const variants: Array<Record<string, string>> = [
      {},
      { authorization: 'Bearer' },
      { authorization: 'Bearer ' },
      { authorization: 'Bearer not-a-key' },
      { authorization: `Bearer ${unknown}` },
      { authorization: `Bearer ${tampered}` },
      { authorization: `Basic ${Buffer.from(`user:${t.key}`).toString('base64')}` },
      { authorization: `Token ${t.key}` },
      { authorization: t.key },
      { authorization: `Bearer ${t.key} extra` },
      { authorization: `Bearer ${t.adminToken}` },
    ]
    const routes: Array<[string, string, unknown]> = [
      ['GET', '/v1/sessions', undefined],
      ['POST', '/v1/sessions', { model: t.models.ref() }],
      ['GET', `/v1/sessions/${s.id}`, undefined],
      ['GET', `/v1/sessions/${s.id}/events`, undefined],
      ['POST', `/v1/sessions/${s.id}/inject`, { content: 'x' }],
    ]
    for (const headers of variants) {
      for (const [method, path, body] of routes) {
        const r = await t.api(method, path, body, { key: null, headers })
        expect(r.status, `${method} ${path} with ${JSON.stringify(headers)}`).toBe(401)
        expect(r.body.error.code).toBe('unauthorized')
        expect(typeof r.body.error.message).toBe('string')
      }
    }
    // nothing was written by any of them
    expect((await t.events(s.id)).length).toBe(0)
    expect((await t.app.db.query<{ n: number }>('SELECT count(*)::int AS n FROM sessions')).rows[0].n).toBe(1)
    // the real key works
    expect((await t.api('GET', `/v1/sessions/${s.id}`)).status).toBe(200)
  })

  it('a key added through the admin route works, and stops working at once when revoked', async () => {
    const s = await t.createSession()
    const added = await t.api('POST', `/v1/admin/tenants/${t.tenantId}/keys`, {}, { key: t.adminToken })
    expect(added.status).toBe(201)
    expect(typeof added.body.keyId).toBe('string')
    expect(typeof added.body.apiKey).toBe('string')
    const k2: string = added.body.apiKey
    expect(k2).not.toBe(t.key)
    // the new key belongs to the same tenant: it sees the session
    const seen = await t.api('GET', `/v1/sessions/${s.id}`, undefined, { key: k2 })
    expect(seen.status).toBe(200)
    expect(seen.body.id).toBe(s.id)
    const del = await t.api('DELETE', `/v1/admin/keys/${added.body.keyId}`, undefined, { key: t.adminToken })
    expect(del.status).toBe(204)
    for (const [m, p, b] of [
      ['GET', `/v1/sessions/${s.id}`, undefined],
      ['GET', '/v1/sessions', undefined],
      ['POST', `/v1/sessions/${s.id}/inject`, { content: 'after revoke' }],
    ] as Array<[string, string, unknown]>) {
      const r = await t.api(m, p, b, { key: k2 })
      expect(r.status, `${m} ${p}`).toBe(401)
      expect(r.body.error.code).toBe('unauthorized')
    }
    // also on the stream (header and access_token) and the WebSocket
    const sse = await probe(`${t.url}/v1/sessions/${s.id}/stream`, { authorization: `Bearer ${k2}` })
    expect(sse.status).toBe(401)
    expect((await probe(`${t.url}/v1/sessions/${s.id}/stream?access_token=${k2}`, {})).status).toBe(401)
    const ws = await wsAttempt(`${wsUrl(t.url)}/v1/sessions/${s.id}/ws`, { authorization: `Bearer ${k2}` })
    expect(ws.open).toBe(false)
    if (!ws.open) expect(ws.status).toBe(401)
    // revoking again: the key is gone
    expect((await t.api('DELETE', `/v1/admin/keys/${added.body.keyId}`, undefined, { key: t.adminToken })).status).toBe(404)
    // the tenant's first key is untouched, and the revoked key wrote nothing
    expect((await t.api('GET', `/v1/sessions/${s.id}`)).status).toBe(200)
    expect(await t.events(s.id)).toEqual([])
  })

  it('a session route reads the key and the session together: a known prefix with a wrong secret is 401, not 404 or 200', async () => {
    const s = await t.createSession()
    // same prefix as the tenant's key, another secret of the same shape
    const forged = t.key.slice(0, t.key.lastIndexOf('_') + 1) + 'A'.repeat(43)
    expect(forged).not.toBe(t.key)
    for (const [m, p, b] of [
      ['GET', `/v1/sessions/${s.id}`, undefined],
      ['GET', '/v1/sessions/no-such-session', undefined],
      ['POST', `/v1/sessions/${s.id}/followup`, { content: 'forged' }],
    ] as Array<[string, string, unknown]>) {
      const r = await t.api(m, p, b, { key: forged })
      expect(r.status, `${m} ${p}`).toBe(401)
      expect(r.body.error.code).toBe('unauthorized')
    }
    // the real key: the session, and 404 for an id the tenant does not have
    expect((await t.api('GET', `/v1/sessions/${s.id}`)).status).toBe(200)
    expect((await t.api('GET', '/v1/sessions/no-such-session')).status).toBe(404)
    expect(await t.events(s.id)).toEqual([])
  })

  it('admin routes take the admin token only: a tenant key or no token is 401', async () => {
    const tries: Array<[string, string, unknown]> = [
      ['POST', '/v1/admin/tenants', { name: 'x' }],
      ['POST', `/v1/admin/tenants/${t.tenantId}/keys`, undefined],
      ['DELETE', `/v1/admin/keys/${crypto.randomUUID()}`, undefined],
    ]
    const tenantsBefore = (await t.app.db.query<{ n: number }>('SELECT count(*)::int AS n FROM tenants')).rows[0].n
    const keysBefore = (await t.app.db.query<{ n: number }>('SELECT count(*)::int AS n FROM api_keys')).rows[0].n
    for (const [m, p, b] of tries) {
      for (const key of [t.key, keyB, null, 'wrong-admin-token']) {
        const r = await t.api(m, p, b, { key })
        expect(r.status, `${m} ${p} with ${key}`).toBe(401)
        expect(r.body.error.code).toBe('unauthorized')
      }
    }
    expect((await t.app.db.query<{ n: number }>('SELECT count(*)::int AS n FROM tenants')).rows[0].n).toBe(tenantsBefore)
    expect((await t.app.db.query<{ n: number }>('SELECT count(*)::int AS n FROM api_keys')).rows[0].n).toBe(keysBefore)
    // with the admin token they work
    const created = await t.api('POST', '/v1/admin/tenants', { name: 'tenant-c' }, { key: t.adminToken })
    expect(created.status).toBe(201)
    expect(created.body.tenant.name).toBe('tenant-c')
    expect(typeof created.body.tenant.id).toBe('string')
    expect(typeof created.body.apiKey).toBe('string')
    expect((await t.api('GET', '/v1/sessions', undefined, { key: created.body.apiKey })).body).toEqual({ sessions: [], nextCursor: null })
    // an unknown tenant is 404 for key creation
    const missing = await t.api('POST', `/v1/admin/tenants/${crypto.randomUUID()}/keys`, {}, { key: t.adminToken })
    expect(missing.status).toBe(404)
  })

  it('the key route has no body fields, so it also accepts no body at all (API.md §3, §10)', async () => {
    const added = await t.api('POST', `/v1/admin/tenants/${tenantB}/keys`, undefined, { key: t.adminToken })
    expect(added.status, added.text).toBe(201)
    expect((await t.api('GET', '/v1/sessions', undefined, { key: added.body.apiKey })).status).toBe(200)
  })

  it('admin routes answer 404 when AGENTD_ADMIN_TOKEN is unset', async () => {
    // a server of its own, on a fresh database, without an admin token; its tenant comes from the store
    const db = await openTestDb(kind)
    const env: Record<string, string> = {
      PORT: '0',
      HOST: '127.0.0.1',
      AGENTD_ADMIN_TOKEN: '',
      LOG_LEVEL: 'silent',
      ...(db.url ? { DATABASE_URL: db.url } : { AGENTD_DATA_DIR: db.dataDir! }),
    }
    const app = await startApp(loadConfig(env), { db: db.db, log: pino({ level: 'silent' }), listen: false, llm: { extraProviders: [t.models.provider], defaultModel: t.models.ref(), models: { providers: {} } } })
    try {
      const own = await tenants.createTenant(db.db, 'direct')
      const count = async () => (await db.db.query<{ n: number }>('SELECT count(*)::int AS n FROM tenants')).rows[0].n
      const tenantsBefore = await count()
      for (const auth of [`Bearer ${t.adminToken}`, undefined, `Bearer ${own.apiKey}`, 'Bearer anything']) {
        const headers: Record<string, string> = auth ? { authorization: auth } : {}
        const a = await app.http!.inject({ method: 'POST', url: '/v1/admin/tenants', headers: { ...headers, 'content-type': 'application/json' }, payload: JSON.stringify({ name: 'nope' }) })
        expect(a.statusCode, `tenants with ${auth}`).toBe(404)
        expect(JSON.parse(a.body).error.code).toBe('not-found')
        const b = await app.http!.inject({ method: 'POST', url: `/v1/admin/tenants/${own.tenant.id}/keys`, headers: { ...headers, 'content-type': 'application/json' }, payload: '{}' })
        expect(b.statusCode).toBe(404)
        expect(JSON.parse(b.body).error.code).toBe('not-found')
        const c = await app.http!.inject({ method: 'DELETE', url: `/v1/admin/keys/${own.keyId}`, headers })
        expect(c.statusCode).toBe(404)
        expect(JSON.parse(c.body).error.code).toBe('not-found')
      }
      expect(await count()).toBe(tenantsBefore)
      // the key was not revoked, and the tenant routes of that server work as usual
      const list = await app.http!.inject({ method: 'GET', url: '/v1/sessions', headers: { authorization: `Bearer ${own.apiKey}` } })
      expect(list.statusCode).toBe(200)
      expect(JSON.parse(list.body)).toEqual({ sessions: [], nextCursor: null })
    } finally {
      await app.close()
      await db.drop()
    }
  })

  it('another tenant gets 404 session-not-found on every session route and changes nothing', async () => {
    const s = await t.createSession({ id: 'owned-by-a', metadata: { owner: 'a' } })
    t.models.script(s.id, { text: ['hello'] })
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })
    await t.waitForTurnEnd(s.id, 1)
    await t.waitIdle(s.id)
    const inj = await t.api('POST', `/v1/sessions/${s.id}/inject`, { content: 'pending context', id: 'pending-1' })
    expect(inj.status).toBe(202)
    const before = { events: await t.events(s.id), session: (await t.api('GET', `/v1/sessions/${s.id}`)).body, inbox: (await t.api('GET', `/v1/sessions/${s.id}/inbox`)).body }
    expect(before.inbox.nextStep.map((m: any) => m.id)).toEqual(['pending-1'])

    const id = s.id
    const calls: Array<[string, string, unknown]> = [
      ['GET', `/v1/sessions/${id}`, undefined],
      ['PATCH', `/v1/sessions/${id}`, { title: 'stolen' }],
      ['POST', `/v1/sessions/${id}/fork`, {}],
      ['POST', `/v1/sessions/${id}/fork`, undefined],
      ['POST', `/v1/sessions/${id}/compact`, undefined],
      ['POST', `/v1/sessions/${id}/followup`, { content: 'b says hi' }],
      ['POST', `/v1/sessions/${id}/steer`, { content: 'b steers' }],
      ['POST', `/v1/sessions/${id}/inject`, { content: 'b injects' }],
      ['POST', `/v1/sessions/${id}/followup`, { content: 'b again', id: 'pending-1' }],
      ['GET', `/v1/sessions/${id}/inbox`, undefined],
      ['DELETE', `/v1/sessions/${id}/inbox/pending-1`, undefined],
      ['POST', `/v1/sessions/${id}/cancel`, {}],
      ['POST', `/v1/sessions/${id}/cancel`, undefined],
      ['GET', `/v1/sessions/${id}/events`, undefined],
      ['GET', `/v1/sessions/${id}/events?after=2&limit=3`, undefined],
      ['GET', `/v1/sessions/${id}/messages`, undefined],
      ['GET', `/v1/sessions/${id}/pending`, undefined],
      ['POST', `/v1/sessions/${id}/tool-results`, { callId: 'c1', content: 'x' }],
      ['POST', `/v1/sessions/${id}/approvals/c1`, { decision: 'allow' }],
      ['DELETE', `/v1/sessions/${id}`, undefined],
    ]
    for (const [m, p, b] of calls) {
      const r = await t.api(m, p, b, { key: keyB })
      expect(r.status, `${m} ${p}`).toBe(404)
      expect(r.body.error.code, `${m} ${p}`).toBe('session-not-found')
    }
    // the same answer as for a session that does not exist at all
    const ghost = await t.api('GET', '/v1/sessions/no-such-session', undefined, { key: keyB })
    expect(ghost.status).toBe(404)
    expect(ghost.body.error.code).toBe('session-not-found')

    // the stream, by header and by access_token
    for (const [url, headers] of [
      [`${t.url}/v1/sessions/${id}/stream`, { authorization: `Bearer ${keyB}` }],
      [`${t.url}/v1/sessions/${id}/stream?access_token=${keyB}`, {}],
    ] as Array<[string, Record<string, string>]>) {
      const r = await probe(url, headers)
      expect(r.status, url).toBe(404)
      expect(r.body.error.code).toBe('session-not-found')
    }
    // the WebSocket is refused with an HTTP 404 before the upgrade
    for (const [url, headers] of [
      [`${wsUrl(t.url)}/v1/sessions/${id}/ws`, { authorization: `Bearer ${keyB}` }],
      [`${wsUrl(t.url)}/v1/sessions/${id}/ws?access_token=${keyB}`, {}],
    ] as Array<[string, Record<string, string>]>) {
      const r = await wsAttempt(url, headers)
      expect(r.open, url).toBe(false)
      if (r.open) r.ws.close()
      else {
        expect(r.status).toBe(404)
        expect(r.body?.error?.code).toBe('session-not-found')
      }
    }
    // B's list is empty
    const listB = await t.api('GET', '/v1/sessions', undefined, { key: keyB })
    expect(listB.status).toBe(200)
    expect(listB.body).toEqual({ sessions: [], nextCursor: null })

    // nothing B did changed the owner's session, log or inbox, and B owns no session
    const after = { events: await t.events(s.id), session: (await t.api('GET', `/v1/sessions/${s.id}`)).body, inbox: (await t.api('GET', `/v1/sessions/${s.id}/inbox`)).body }
    expect(after).toEqual(before)
    expect((await t.app.db.query<{ n: number }>('SELECT count(*)::int AS n FROM sessions WHERE tenant_id = $1', [tenantB])).rows[0].n).toBe(0)
    expect(t.models.requestsOf(s.id).length).toBe(1)
    expectValidLog(after.events)
  })

  it('another tenant cannot cancel, steer or read a running turn of the owner', async () => {
    const s = await t.createSession()
    const g = gate()
    t.models.script(s.id, { text: ['slow'], gate: g.promise })
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'go' })
    await t.models.waitForRequest(s.id, 1)
    const r1 = await t.api('POST', `/v1/sessions/${s.id}/cancel`, undefined, { key: keyB })
    expect(r1.status).toBe(404)
    const r2 = await t.api('POST', `/v1/sessions/${s.id}/steer`, { content: 'hijack' }, { key: keyB })
    expect(r2.status).toBe(404)
    g.open()
    const evs = await t.waitForTurnEnd(s.id, 1)
    expect((evs.find((e) => e.type === 'turn/end')!.data as any).reason).toEqual({ kind: 'completed' })
    expect(evs.filter((e) => e.type === 'user/message').map((e) => (e.data as any).content)).toEqual([[{ type: 'text', text: 'go' }]])
    expectValidLog(evs)
  })

  it('?access_token is accepted on stream and ws, and nowhere else', async () => {
    const s = await t.createSession()
    await t.api('POST', `/v1/sessions/${s.id}/inject`, { content: 'one event' })
    const sse = await openSse(`${t.url}/v1/sessions/${s.id}/stream?access_token=${encodeURIComponent(t.key)}`)
    try {
      expect(sse.status).toBe(200)
      const ready = await sse.waitFor((f) => f.event === 'stream/ready')
      expect(ready.json).toEqual({ headSeq: 0 })
      expect(sse.frames[0].event).toBe('session/event')
      expect(sse.frames[0].json.type).toBe('agent/inbox/spliced')
    } finally {
      sse.close()
    }
    const ws = await wsAttempt(`${wsUrl(t.url)}/v1/sessions/${s.id}/ws?access_token=${encodeURIComponent(t.key)}`)
    expect(ws.open).toBe(true)
    if (ws.open) ws.ws.close()
    // a wrong access_token is 401 on both
    expect((await probe(`${t.url}/v1/sessions/${s.id}/stream?access_token=agd_bogus`, {})).status).toBe(401)
    const badWs = await wsAttempt(`${wsUrl(t.url)}/v1/sessions/${s.id}/ws?access_token=agd_bogus`)
    expect(badWs.open).toBe(false)
    if (!badWs.open) expect(badWs.status).toBe(401)
    // every other route ignores it
    const q = `access_token=${encodeURIComponent(t.key)}`
    const others: Array<[string, string, unknown]> = [
      ['GET', `/v1/sessions?${q}`, undefined],
      ['GET', `/v1/sessions/${s.id}?${q}`, undefined],
      ['GET', `/v1/sessions/${s.id}/events?${q}`, undefined],
      ['GET', `/v1/sessions/${s.id}/messages?${q}`, undefined],
      ['GET', `/v1/sessions/${s.id}/inbox?${q}`, undefined],
      ['POST', `/v1/sessions/${s.id}/inject?${q}`, { content: 'via query' }],
      ['POST', `/v1/sessions?${q}`, { model: t.models.ref() }],
    ]
    for (const [m, p, b] of others) {
      const r = await t.api(m, p, b, { key: null })
      expect(r.status, `${m} ${p}`).toBe(401)
      expect(r.body.error.code).toBe('unauthorized')
    }
    expect((await t.events(s.id)).length).toBe(1)
  })

  it('client-chosen session ids are per tenant', async () => {
    const a = await t.api('POST', '/v1/sessions', { id: 'same-id', model: t.models.ref(), metadata: { owner: 'a' } })
    expect(a.status).toBe(201)
    // B uses the same id with another body: a new session of its own, not a conflict
    const b = await t.api('POST', '/v1/sessions', { id: 'same-id', model: t.models.ref(), metadata: { owner: 'b' } }, { key: keyB })
    expect(b.status).toBe(201)
    expect(b.body.id).toBe('same-id')
    expect(b.body.metadata).toEqual({ owner: 'b' })
    // A's exact body on B's key meets B's own session (another body): a conflict, never A's session
    const b2 = await t.api('POST', '/v1/sessions', { id: 'same-id', model: t.models.ref(), metadata: { owner: 'a' } }, { key: keyB })
    expect(b2.status).toBe(409)
    expect(b2.body.error.code).toBe('session-conflict')
    expect((await t.api('GET', '/v1/sessions/same-id')).body.metadata).toEqual({ owner: 'a' })
    expect((await t.api('GET', '/v1/sessions/same-id', undefined, { key: keyB })).body.metadata).toEqual({ owner: 'b' })
    // input to one does not reach the other
    t.models.script('same-id', { text: ['for a'] })
    await t.api('POST', '/v1/sessions/same-id/inject', { content: 'only b' }, { key: keyB })
    const evB = await t.api('GET', '/v1/sessions/same-id/events', undefined, { key: keyB })
    expect(evB.body.events.map((e: any) => e.type)).toEqual(['agent/inbox/spliced'])
    expect((await t.api('GET', '/v1/sessions/same-id/events')).body.events).toEqual([])
    expect((await t.api('GET', '/v1/sessions/same-id/inbox')).body).toEqual({ nextTurn: [], nextStep: [] })
    // deleting A's leaves B's
    expect((await t.api('DELETE', '/v1/sessions/same-id')).status).toBe(204)
    expect((await t.api('GET', '/v1/sessions/same-id')).status).toBe(404)
    const still = await t.api('GET', '/v1/sessions/same-id', undefined, { key: keyB })
    expect(still.status).toBe(200)
    expect(still.body.headSeq).toBe(0)
    const listB = await t.api('GET', '/v1/sessions', undefined, { key: keyB })
    expect(listB.body.sessions.map((x: any) => x.id)).toEqual(['same-id'])
  })
})
