// API.md §18, browsers on other origins, on one database (docs/testing.md): AGENTD_CORS_ORIGINS answers preflights of
// its origins only (@fastify/cors), a tenant narrows it (403 forbidden), agentd's own origin is always
// let in, and no answer allows credentials or carries one. Without the variable nothing changes.

import crypto from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp } from '../helpers/app.js'

const ALLOWED = 'http://app.example.test'
const ALSO = 'http://other.example.test:8443'
const REFUSED = 'http://evil.example.test'

async function call(url: string, init: RequestInit): Promise<{ status: number; headers: Headers; text: string }> {
  const res = await fetch(url, init)
  return { status: res.status, headers: res.headers, text: await res.text() }
}

describe.each(APP_DB_KINDS)('CORS on %s', (kind) => {
  let t: TestApp
  let token: string
  const seen: Array<{ headers: Headers; text: string }> = []
  const req = async (path: string, init: RequestInit & { origin?: string; credential?: string } = {}) => {
    const headers: Record<string, string> = { ...(init.headers as Record<string, string>) }
    if (init.origin) headers.origin = init.origin
    if (init.credential) headers.authorization = `Bearer ${init.credential}`
    const r = await call(`${t.url}${path}`, { ...init, headers })
    seen.push(r)
    return r
  }
  const preflight = (origin: string, method = 'POST') => req('/v1/sessions', { method: 'OPTIONS', origin, headers: { 'access-control-request-method': method, 'access-control-request-headers': 'authorization,content-type' } })

  beforeAll(async () => {
    t = await startTestApp({ kind, env: { AGENTD_CORS_ORIGINS: `${ALLOWED}, ${ALSO}`, AGENTD_SECRET_KEY: crypto.randomBytes(32).toString('base64') } })
    token = (await t.api('POST', '/v1/tokens', { scopes: ['read', 'write'], subject: 'browser-user' })).body.token
  })
  afterAll(async () => {
    await t?.close()
  })

  it('a preflight from a listed origin is answered; one from any other origin is not (404, no CORS headers)', async () => {
    for (const origin of [ALLOWED, ALSO]) {
      const ok = await preflight(origin)
      expect(ok.status).toBe(204)
      expect(ok.headers.get('access-control-allow-origin')).toBe(origin)
      expect(ok.headers.get('access-control-allow-methods')).toContain('POST')
      expect(ok.headers.get('access-control-allow-headers')?.toLowerCase()).toContain('authorization')
      expect(ok.headers.get('vary')).toMatch(/Origin/)
    }
    const delPreflight = await preflight(ALLOWED, 'DELETE')
    expect(delPreflight.headers.get('access-control-allow-methods')).toContain('DELETE')
    for (const origin of [REFUSED, 'null', `${ALLOWED}.evil.test`, ALLOWED.replace('http:', 'https:')]) {
      const no = await preflight(origin)
      expect(no.status, origin).toBe(404)
      expect(JSON.parse(no.text).error.code).toBe('not-found')
      expect(no.headers.get('access-control-allow-origin'), origin).toBeNull()
    }
    // an OPTIONS that is no preflight (no Origin) is an unknown route, as before
    const bare = await req('/v1/sessions', { method: 'OPTIONS' })
    expect(bare.status).toBe(404)
  })

  it('a request from a listed origin gets its answer with Access-Control-Allow-Origin; another origin is 403; the own origin always passes', async () => {
    const ok = await req('/v1/sessions', { origin: ALLOWED, credential: token })
    expect(ok.status).toBe(200)
    expect(ok.headers.get('access-control-allow-origin')).toBe(ALLOWED)
    // without a credential the page learns it needs one (it may read the 401, as the origin is allowed)
    const none = await req('/v1/sessions', { origin: ALLOWED })
    expect(none.status).toBe(401)
    expect(none.headers.get('access-control-allow-origin')).toBe(ALLOWED)
    for (const credential of [token, t.key]) {
      const refused = await req('/v1/sessions', { origin: REFUSED, credential })
      expect(refused.status).toBe(403)
      expect(JSON.parse(refused.text).error.code).toBe('forbidden')
      expect(refused.headers.get('access-control-allow-origin')).toBeNull()
    }
    // the console, served by agentd itself, sends its own origin
    const own = await req('/v1/sessions', { origin: t.url, credential: t.key })
    expect(own.status).toBe(200)
    // a POST with a body, as a page sends it after the preflight
    const created = await req('/v1/sessions', { method: 'POST', origin: ALSO, credential: token, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: t.models.ref() }) })
    expect(created.status, created.text).toBe(201)
    expect(JSON.parse(created.text).owner).toBe('browser-user')
    // the stream writes its answer itself: it carries the CORS headers all the same (EventSource needs them)
    const ac = new AbortController()
    const stream = await fetch(`${t.url}/v1/sessions/${JSON.parse(created.text).id}/stream?access_token=${token}`, { headers: { origin: ALLOWED }, signal: ac.signal })
    expect(stream.status).toBe(200)
    expect(stream.headers.get('content-type')).toMatch(/^text\/event-stream/)
    expect(stream.headers.get('access-control-allow-origin')).toBe(ALLOWED)
    expect(stream.headers.get('access-control-allow-credentials')).toBeNull()
    ac.abort()
  })

  it("a tenant narrows the deployment's origins: another listed origin is then 403 for its credentials only", async () => {
    const other = await t.api('POST', '/v1/admin/tenants', { name: 'other' }, { key: t.adminToken })
    const narrowed = await t.api('PATCH', `/v1/admin/tenants/${t.tenantId}`, { cors: { origins: [ALLOWED] } }, { key: t.adminToken })
    expect(narrowed.status, narrowed.text).toBe(200)
    expect(narrowed.body.tenant.cors).toEqual({ origins: [ALLOWED] })
    expect((await req('/v1/sessions', { origin: ALLOWED, credential: token })).status).toBe(200)
    for (const credential of [token, t.key]) {
      const r = await req('/v1/sessions', { origin: ALSO, credential })
      expect(r.status).toBe(403)
      expect(JSON.parse(r.text).error).toEqual({ code: 'forbidden', message: `requests from origin ${ALSO} are not allowed for this tenant` })
      // the deployment allows the origin, so the page can read why
      expect(r.headers.get('access-control-allow-origin')).toBe(ALSO)
    }
    // the stream too, with its access_token
    const s = await t.createSession()
    expect((await req(`/v1/sessions/${s.id}/stream?access_token=${t.key}`, { origin: ALSO })).status).toBe(403)
    // another tenant keeps the deployment's list
    expect((await req('/v1/sessions', { origin: ALSO, credential: other.body.apiKey })).status).toBe(200)
    // a tenant's origin the deployment does not list gets no further than the deployment allows
    await t.api('PATCH', `/v1/admin/tenants/${t.tenantId}`, { cors: { origins: [ALLOWED, REFUSED] } }, { key: t.adminToken })
    expect((await req('/v1/sessions', { origin: REFUSED, credential: token })).status).toBe(403)
    expect((await preflight(REFUSED)).status).toBe(404)
    // null removes the tenant's list
    const back = await t.api('PATCH', `/v1/admin/tenants/${t.tenantId}`, { cors: null }, { key: t.adminToken })
    expect(back.body.tenant.cors).toBeNull()
    expect((await req('/v1/sessions', { origin: ALSO, credential: token })).status).toBe(200)
  })

  it('no answer allows credentials (cookies) or carries the token', () => {
    expect(seen.length).toBeGreaterThan(10)
    for (const r of seen) {
      expect(r.headers.get('access-control-allow-credentials')).toBeNull()
      expect(r.text).not.toContain(token)
      for (const [, v] of r.headers) expect(v).not.toContain(token)
    }
  })
})

describe('without AGENTD_CORS_ORIGINS', () => {
  let t: TestApp
  beforeAll(async () => {
    t = await startTestApp({ kind: 'pglite' })
  })
  afterAll(async () => {
    await t?.close()
  })

  it('no preflight is answered and no answer carries CORS headers; requests are served as before', async () => {
    const pre = await call(`${t.url}/v1/sessions`, { method: 'OPTIONS', headers: { origin: ALLOWED, 'access-control-request-method': 'GET' } })
    expect(pre.status).toBe(404)
    expect(pre.headers.get('access-control-allow-origin')).toBeNull()
    const r = await call(`${t.url}/v1/sessions`, { headers: { origin: ALLOWED, authorization: `Bearer ${t.key}` } })
    expect(r.status).toBe(200)
    expect(r.headers.get('access-control-allow-origin')).toBeNull()
  })
})
