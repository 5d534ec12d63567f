// API.md §18 over real sockets on one database (docs/testing.md): agentd's own tokens (minted with a key, EdDSA, their
// JWKS), a tenant's own identity provider (a JWKS served by the test, end-user tokens signed with jose),
// scopes, session and subject limits, the bad tokens that are 401 with one message, and verification
// from memory once a token was seen.

import crypto from 'node:crypto'
import { createLocalJWKSet, decodeProtectedHeader, exportJWK, generateKeyPair, jwtVerify, SignJWT, UnsecuredJWT } from 'jose'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TOKEN_REFUSED } from '../../src/http/auth.js'
import { APP_DB_KINDS, countingDb } from '../helpers/db.js'
import { b64, startIdp, type Idp } from '../helpers/idp.js'
import { openSse, startTestApp, type TestApp } from '../helpers/app.js'
import { wsAttempt } from '../helpers/ws.js'

/** a GET that must not stay open: the status of a stream is read and the stream dropped */
async function probe(url: string, headers: Record<string, string> = {}): Promise<{ status: number; body: any }> {
  const ac = new AbortController()
  const res = await fetch(url, { headers, signal: ac.signal })
  if ((res.headers.get('content-type') ?? '').includes('text/event-stream')) {
    ac.abort()
    return { status: res.status, body: undefined }
  }
  const text = await res.text()
  return { status: res.status, body: text ? JSON.parse(text) : undefined }
}

const wsUrl = (u: string) => u.replace(/^http/, 'ws')

/** The next JSON frame a WebSocket receives that matches. */
function nextFrame(ws: import('ws').WebSocket, pred: (f: any) => boolean, timeoutMs = 10000): Promise<any> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no such frame')), timeoutMs)
    const on = (raw: unknown) => {
      const f = JSON.parse(String(raw))
      if (!pred(f)) return
      clearTimeout(timer)
      ws.off('message', on)
      resolve(f)
    }
    ws.on('message', on)
  })
}

describe.each(APP_DB_KINDS)('credentials for browsers and end users on %s', (kind) => {
  let t: TestApp
  let counted: ReturnType<typeof countingDb>
  let idp: Idp
  let idpB: Idp
  let tenantB: { id: string; key: string }
  const mint = async (body: Record<string, unknown>, key = t.key): Promise<string> => {
    const r = await t.api('POST', '/v1/tokens', body, { key })
    expect(r.status, r.text).toBe(201)
    return r.body.token
  }

  beforeAll(async () => {
    t = await startTestApp({
      kind,
      // statements that authenticate: keys, tenants, signing keys (a token's verification must need none after the first)
      wrapDb: (db) => (counted = countingDb(db, /api_keys|FROM tenants|signing_keys/)).db,
      credentials: { jwksCacheMaxAgeMs: 1500 },
      // signing keys are sealed with it (PostgreSQL has no key of its own; the embedded database would make one)
      env: { AGENTD_SECRET_KEY: crypto.randomBytes(32).toString('base64') },
    })
    const b = await t.api('POST', '/v1/admin/tenants', { name: 'tenant-b' }, { key: t.adminToken })
    tenantB = { id: b.body.tenant.id, key: b.body.apiKey }
    idp = await startIdp('a')
    idpB = await startIdp('b')
    for (const [tenantId, p] of [[t.tenantId, idp], [tenantB.id, idpB]] as const) {
      const r = await t.api('PATCH', `/v1/admin/tenants/${tenantId}`, { auth: { issuer: p.issuer, audience: 'agentd-test', jwksUrl: p.jwksUrl } }, { key: t.adminToken })
      expect(r.status, r.text).toBe(200)
    }
  })
  afterAll(async () => {
    await t?.close()
    await idp?.close()
    await idpB?.close()
  })

  it('POST /v1/tokens mints an EdDSA JWT that the keys of /.well-known/jwks.json verify', async () => {
    const before = Date.now()
    const r = await t.api('POST', '/v1/tokens', { scopes: ['read'], subject: 'user-1' })
    expect(r.status, r.text).toBe(201)
    expect(Object.keys(r.body).sort()).toEqual(['expiresAt', 'token'])
    const jwks = await fetch(`${t.url}/.well-known/jwks.json`)
    expect(jwks.status).toBe(200)
    const set = (await jwks.json()) as { keys: Array<Record<string, unknown>> }
    expect(set.keys.length).toBeGreaterThan(0)
    for (const k of set.keys) {
      expect(k).toMatchObject({ kty: 'OKP', crv: 'Ed25519', alg: 'EdDSA', use: 'sig' })
      // the public half only
      expect(k).not.toHaveProperty('d')
    }
    const header = decodeProtectedHeader(r.body.token)
    expect(header).toMatchObject({ alg: 'EdDSA', typ: 'JWT' })
    expect(set.keys.map((k) => k.kid)).toContain(header.kid)
    // any JOSE library verifies it with the published keys
    const { payload } = await jwtVerify(r.body.token, createLocalJWKSet(set as never), { issuer: 'agentd', audience: 'agentd', algorithms: ['EdDSA'] })
    expect(payload).toMatchObject({ tenant: t.tenantId, scope: 'read', sub: 'user-1' })
    // default lifetime 900 s
    expect(payload.exp! - payload.iat!).toBe(900)
    expect(new Date(r.body.expiresAt).getTime()).toBe(payload.exp! * 1000)
    expect(payload.exp! * 1000).toBeGreaterThanOrEqual(Math.floor(before / 1000) * 1000 + 900_000)
    const short = await t.api('POST', '/v1/tokens', { scopes: ['read', 'write'], ttlSeconds: 60, sessions: ['a', 'b'] })
    const p2 = (await jwtVerify(short.body.token, createLocalJWKSet(set as never))).payload
    expect(p2.exp! - p2.iat!).toBe(60)
    expect(p2).toMatchObject({ scope: 'read write', sessions: ['a', 'b'] })
    expect(p2).not.toHaveProperty('sub')
  })

  it('minting takes a valid body, a tenant key (a token is 403) and nothing else; a refusal mints nothing', async () => {
    const bad: unknown[] = [{}, { scopes: [] }, { scopes: ['admin'] }, { scopes: ['read', 'read'] }, { scopes: 'read' }, { scopes: ['read'], ttlSeconds: 0 }, { scopes: ['read'], ttlSeconds: 86401 }, { scopes: ['read'], ttlSeconds: 1.5 }, { scopes: ['read'], subject: '' }, { scopes: ['read'], subject: 'x'.repeat(257) }, { scopes: ['read'], sessions: [] }, { scopes: ['read'], sessions: ['bad id'] }, { scopes: ['read'], agents: ['a/b'] }, { scopes: ['read'], extra: 1 }]
    for (const body of bad) {
      const r = await t.api('POST', '/v1/tokens', body)
      expect(r.status, JSON.stringify(body)).toBe(400)
      expect(r.body.error.code).toBe('bad-request')
    }
    // a token too long to be accepted is not minted
    const long = await t.api('POST', '/v1/tokens', { scopes: ['read'], sessions: Array.from({ length: 100 }, (_, i) => `s${i}-${'x'.repeat(150)}`) })
    expect(long.status).toBe(400)
    expect(long.body.error.details[0].path).toBe('body')
    const token = await mint({ scopes: ['read', 'write'] })
    const byToken = await t.api('POST', '/v1/tokens', { scopes: ['read'] }, { key: token })
    expect(byToken.status).toBe(403)
    expect(byToken.body.error.code).toBe('forbidden')
    expect((await t.api('POST', '/v1/tokens', { scopes: ['read'] }, { key: null })).status).toBe(401)
    expect((await t.api('POST', '/v1/tokens', { scopes: ['read'] }, { key: t.adminToken })).status).toBe(401)
  })

  it('a read-only token streams its session and reads it; every write, WebSocket op included, is 403 and writes nothing', async () => {
    const s = await t.createSession({ tools: [{ name: 'ask', execution: { type: 'client' } }] })
    const reader = await mint({ scopes: ['read'], sessions: [s.id] })
    const sse = await openSse(`${t.url}/v1/sessions/${s.id}/stream?access_token=${reader}`)
    try {
      expect(sse.status).toBe(200)
      await sse.waitFor((f) => f.event === 'stream/ready')
      // the key runs a turn; the read-only token's stream sees it
      t.models.script(s.id, { text: ['seen by the reader'] })
      expect((await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })).status).toBe(202)
      await sse.waitFor((f) => f.event === 'session/event' && f.json?.type === 'turn/end')
    } finally {
      sse.close()
    }
    await t.waitIdle(s.id)
    const before = await t.events(s.id)
    for (const [m, p] of [['GET', `/v1/sessions/${s.id}`], ['GET', `/v1/sessions/${s.id}/events`], ['GET', `/v1/sessions/${s.id}/messages`], ['GET', `/v1/sessions/${s.id}/inbox`], ['GET', `/v1/sessions/${s.id}/pending`], ['GET', '/v1/sessions']]) {
      const r = await t.api(m, p, undefined, { key: reader })
      expect(r.status, `${m} ${p}`).toBe(200)
    }
    const writes: Array<[string, string, unknown]> = [
      ['POST', `/v1/sessions/${s.id}/followup`, { content: 'from the reader' }],
      ['POST', `/v1/sessions/${s.id}/steer`, { content: 'x' }],
      ['POST', `/v1/sessions/${s.id}/inject`, { content: 'x' }],
      ['POST', `/v1/sessions/${s.id}/cancel`, {}],
      ['POST', `/v1/sessions/${s.id}/tool-results`, { callId: 'c1', content: 'x' }],
      ['POST', `/v1/sessions/${s.id}/approvals/c1`, { decision: 'allow' }],
      ['DELETE', `/v1/sessions/${s.id}/inbox/m1`, undefined],
      ['PATCH', `/v1/sessions/${s.id}`, { title: 'renamed' }],
      ['POST', `/v1/sessions/${s.id}/fork`, {}],
      ['POST', `/v1/sessions/${s.id}/compact`, undefined],
      ['DELETE', `/v1/sessions/${s.id}`, undefined],
      ['POST', '/v1/sessions', { id: s.id }],
    ]
    for (const [m, p, b] of writes) {
      const r = await t.api(m, p, b, { key: reader })
      expect(r.status, `${m} ${p}`).toBe(403)
      expect(r.body.error.code).toBe('forbidden')
    }
    // the WebSocket opens for reading; its input ops are refused one by one
    const ws = await wsAttempt(`${wsUrl(t.url)}/v1/sessions/${s.id}/ws?access_token=${reader}`)
    expect(ws.open).toBe(true)
    if (ws.open) {
      const err = nextFrame(ws.ws, (f) => f.event === 'error')
      ws.ws.send(JSON.stringify({ op: 'followup', content: 'through the socket' }))
      expect((await err).data.code).toBe('forbidden')
      const err2 = nextFrame(ws.ws, (f) => f.event === 'error')
      ws.ws.send(JSON.stringify({ op: 'cancel' }))
      expect((await err2).data.code).toBe('forbidden')
      ws.ws.close()
    }
    expect(await t.events(s.id)).toEqual(before)
    expect((await t.api('GET', `/v1/sessions/${s.id}`)).body.title).toBeNull()
  })

  it('a token limited to session A reaches A and is 404 on B as on a missing session; it lists and creates only A', async () => {
    const a = await t.createSession()
    const b = await t.createSession()
    const token = await mint({ scopes: ['read', 'write'], sessions: [a.id, 'not-yet'] })
    expect((await t.api('GET', `/v1/sessions/${a.id}`, undefined, { key: token })).status).toBe(200)
    for (const [m, p, body] of [['GET', `/v1/sessions/${b.id}`, undefined], ['GET', `/v1/sessions/${b.id}/events`, undefined], ['POST', `/v1/sessions/${b.id}/followup`, { content: 'x' }], ['POST', `/v1/sessions/${b.id}/cancel`, {}], ['DELETE', `/v1/sessions/${b.id}`, undefined]] as Array<[string, string, unknown]>) {
      const r = await t.api(m, p, body, { key: token })
      expect(r.status, `${m} ${p}`).toBe(404)
      expect(r.body).toEqual({ error: { code: 'session-not-found', message: `session ${b.id} not found` } })
    }
    expect((await probe(`${t.url}/v1/sessions/${b.id}/stream?access_token=${token}`)).status).toBe(404)
    const ws = await wsAttempt(`${wsUrl(t.url)}/v1/sessions/${b.id}/ws?access_token=${token}`)
    expect(ws.open ? 101 : ws.status).toBe(404)
    const list = await t.api('GET', '/v1/sessions', undefined, { key: token })
    expect(list.body.sessions.map((x: { id: string }) => x.id)).toEqual([a.id])
    // it creates only the ids it lists
    expect((await t.api('POST', '/v1/sessions', { model: t.models.ref() }, { key: token })).status).toBe(403)
    expect((await t.api('POST', '/v1/sessions', { id: 'other', model: t.models.ref() }, { key: token })).status).toBe(403)
    const made = await t.api('POST', '/v1/sessions', { id: 'not-yet', model: t.models.ref() }, { key: token })
    expect(made.status, made.text).toBe(201)
    expect((await t.api('GET', '/v1/sessions/other')).status).toBe(404)
    expect((await t.api('GET', `/v1/sessions/${b.id}`)).body.headSeq).toBe(-1)
  })

  it('a token limited to agent A reaches, lists and creates only sessions made from A; it reads A and not B; defining agents takes a key', async () => {
    for (const id of ['agent-a', 'agent-b']) expect((await t.api('POST', '/v1/agents', { id, name: id, model: t.models.ref() })).status).toBe(201)
    const a = (await t.api('POST', '/v1/sessions', { agent: 'agent-a' })).body
    const b = (await t.api('POST', '/v1/sessions', { agent: 'agent-b' })).body
    const inline = await t.createSession()
    const token = await mint({ scopes: ['read', 'write'], agents: ['agent-a'] })
    expect((await t.api('GET', `/v1/sessions/${a.id}`, undefined, { key: token })).status).toBe(200)
    for (const id of [b.id, inline.id]) {
      const r = await t.api('GET', `/v1/sessions/${id}`, undefined, { key: token })
      expect(r.status, id).toBe(404)
      expect(r.body).toEqual({ error: { code: 'session-not-found', message: `session ${id} not found` } })
      expect((await t.api('POST', `/v1/sessions/${id}/followup`, { content: 'x' }, { key: token })).status, id).toBe(404)
    }
    const list = await t.api('GET', '/v1/sessions?limit=200', undefined, { key: token })
    expect(list.body.sessions.map((x: { id: string }) => x.id)).toEqual([a.id])
    // the agents: it reads its own, the other is as missing as an unknown one
    expect((await t.api('GET', '/v1/agents/agent-a', undefined, { key: token })).status).toBe(200)
    expect((await t.api('GET', '/v1/agents/agent-b', undefined, { key: token })).status).toBe(404)
    expect((await t.api('GET', '/v1/agents/agent-b/versions/1', undefined, { key: token })).status).toBe(404)
    expect((await t.api('GET', '/v1/agents?limit=200', undefined, { key: token })).body.agents.map((x: { id: string }) => x.id)).toEqual(['agent-a'])
    // it creates sessions of its agents only
    expect((await t.api('POST', '/v1/sessions', { agent: 'agent-b' }, { key: token })).status).toBe(403)
    expect((await t.api('POST', '/v1/sessions', { model: t.models.ref() }, { key: token })).status).toBe(403)
    expect((await t.api('POST', '/v1/sessions', { agent: 'agent-a@1' }, { key: token })).status).toBe(201)
    // defining agents is the tenant's: any token, whatever its scopes, is 403 and changes nothing
    const writer = await mint({ scopes: ['read', 'write'] })
    for (const [m, p, body] of [['POST', '/v1/agents', { id: 'agent-c', name: 'c', model: t.models.ref() }], ['PATCH', '/v1/agents/agent-a', { system: 'changed' }], ['DELETE', '/v1/agents/agent-b', undefined]] as Array<[string, string, unknown]>) {
      const r = await t.api(m, p, body, { key: writer })
      expect(r.status, `${m} ${p}`).toBe(403)
      expect(r.body.error.code).toBe('forbidden')
    }
    expect((await t.api('GET', '/v1/agents/agent-c')).status).toBe(404)
    expect((await t.api('GET', '/v1/agents/agent-a')).body.version).toBe(1)
    expect((await t.api('GET', '/v1/agents/agent-b')).status).toBe(200)
  })

  it('a subject owns the sessions it creates, lists and reaches only those, and answers their tool calls and approvals; others are 404', async () => {
    const u1 = await mint({ scopes: ['read', 'write'], subject: 'user-1' })
    const u1read = await mint({ scopes: ['read'], subject: 'user-1' })
    const u2 = await mint({ scopes: ['read', 'write'], subject: 'user-2' })
    // the approval is of an http tool (denied, so never called): a client tool that also waits for approval
    // is not what this test is about
    const tools = [{ name: 'ask', execution: { type: 'client' } }, { name: 'wipe', execution: { type: 'http', url: 'http://127.0.0.1:9/never' }, approval: 'always' }]
    const c1 = await t.api('POST', '/v1/sessions', { id: 'u1-chat', model: t.models.ref(), tools }, { key: u1 })
    expect(c1.status, c1.text).toBe(201)
    expect(c1.body.owner).toBe('user-1')
    const c2 = await t.api('POST', '/v1/sessions', { model: t.models.ref() }, { key: u2 })
    expect(c2.body.owner).toBe('user-2')
    const keyMade = await t.createSession()
    expect(keyMade.owner).toBeNull()
    // each lists only its own; the key lists all three with their owners
    expect((await t.api('GET', '/v1/sessions', undefined, { key: u1 })).body.sessions.map((x: any) => x.id)).toEqual(['u1-chat'])
    expect((await t.api('GET', '/v1/sessions', undefined, { key: u2 })).body.sessions.map((x: any) => x.id)).toEqual([c2.body.id])
    const all = (await t.api('GET', '/v1/sessions?limit=200')).body.sessions
    expect(all.find((x: any) => x.id === 'u1-chat').owner).toBe('user-1')
    expect(all.find((x: any) => x.id === c2.body.id).owner).toBe('user-2')
    // another subject, and the subject's session with another id, are 404 exactly as a missing one
    for (const [who, id] of [[u2, 'u1-chat'], [u1, c2.body.id], [u1, keyMade.id]]) {
      const r = await t.api('GET', `/v1/sessions/${id}`, undefined, { key: who })
      expect(r.status).toBe(404)
      expect(r.body.error.code).toBe('session-not-found')
    }
    // the same id and body again: the owner's create is idempotent, another subject's a conflict
    expect((await t.api('POST', '/v1/sessions', { id: 'u1-chat', model: t.models.ref(), tools }, { key: u1 })).status).toBe(200)
    expect((await t.api('POST', '/v1/sessions', { id: 'u1-chat', model: t.models.ref(), tools }, { key: u2 })).status).toBe(409)
    // a fork keeps the owner
    const fork = await t.api('POST', '/v1/sessions/u1-chat/fork', {}, { key: u1 })
    expect(fork.status, fork.text).toBe(201)
    expect(fork.body.owner).toBe('user-1')

    // a client call, then an approval: only a credential reaching the session with write answers
    t.models.script('u1-chat', { toolCalls: [{ id: 'call-1', name: 'ask', arguments: { q: 'ok?' } }] }, { toolCalls: [{ id: 'call-2', name: 'wipe', arguments: {} }] }, { text: ['done'] })
    expect((await t.api('POST', '/v1/sessions/u1-chat/followup', { content: 'go' }, { key: u1 })).status).toBe(202)
    const pending = async (kind: string) => {
      for (let i = 0; i < 400; i++) {
        const calls = (await t.api('GET', '/v1/sessions/u1-chat/pending', undefined, { key: u1read })).body.toolCalls
        if (calls.length) return calls.map((c: any) => `${c.callId}:${c.kind}`)
        await new Promise((r) => setTimeout(r, 25))
      }
      throw new Error(`no ${kind} call pending`)
    }
    expect(await pending('client')).toEqual(['call-1:client'])
    expect((await t.api('POST', '/v1/sessions/u1-chat/tool-results', { callId: 'call-1', content: 'yes' }, { key: u2 })).status).toBe(404)
    expect((await t.api('POST', '/v1/sessions/u1-chat/tool-results', { callId: 'call-1', content: 'yes' }, { key: u1read })).status).toBe(403)
    expect((await t.api('POST', '/v1/sessions/u1-chat/tool-results', { callId: 'call-1', content: 'yes' }, { key: u1 })).status).toBe(202)
    expect(await pending('approval')).toEqual(['call-2:approval'])
    expect((await t.api('POST', '/v1/sessions/u1-chat/approvals/call-2', { decision: 'deny' }, { key: u2 })).status).toBe(404)
    expect((await t.api('POST', '/v1/sessions/u1-chat/approvals/call-2', { decision: 'deny' }, { key: u1read })).status).toBe(403)
    expect((await t.api('POST', '/v1/sessions/u1-chat/approvals/call-2', { decision: 'deny', reason: 'no' }, { key: u1 })).status).toBe(202)
    const log = await t.waitForTurnEnd('u1-chat', 1)
    const results = log.filter((e) => e.type === 'tool/result').map((e) => e.data as any)
    expect(results.map((r) => [r.message.source.callId, r.message.content[0].isError])).toEqual([['call-1', false], ['call-2', true]])
    expect(results[1].error.code).toBe('TOOL_DENIED')
  })

  it("the tenant's own business takes its key: a token is 403 on tokens, secrets, webhooks and usage", async () => {
    const token = await mint({ scopes: ['read', 'write'] })
    for (const [m, p, b] of [['POST', '/v1/tokens', { scopes: ['read'] }], ['GET', '/v1/secrets', undefined], ['PUT', '/v1/secrets/X', { value: 'v' }], ['DELETE', '/v1/secrets/X', undefined], ['GET', '/v1/webhooks', undefined], ['POST', '/v1/webhooks', { url: 'http://127.0.0.1:9/x', events: ['turn.completed'] }], ['GET', '/v1/usage', undefined]] as Array<[string, string, unknown]>) {
      const r = await t.api(m, p, b, { key: token })
      expect(r.status, `${m} ${p}`).toBe(403)
      expect(r.body.error.code).toBe('forbidden')
    }
    expect((await t.api('GET', '/v1/secrets')).body.secrets).toEqual([])
    expect((await t.api('GET', '/v1/webhooks')).body.webhooks).toEqual([])
  })

  it('bad tokens are 401 with one and the same message on every route, header or access_token', async () => {
    const s = await t.createSession()
    const good = await mint({ scopes: ['read', 'write'], ttlSeconds: 1 })
    const [h, p, sig] = good.split('.')
    const claims = JSON.parse(Buffer.from(p, 'base64url').toString())
    const kid = decodeProtectedHeader(good).kid
    const jwk = ((await (await fetch(`${t.url}/.well-known/jwks.json`)).json()) as { keys: any[] }).keys.find((k) => k.kid === kid)
    const stranger = await generateKeyPair('EdDSA', { extractable: true })
    const now = Math.floor(Date.now() / 1000)
    const own = { iss: 'agentd', aud: 'agentd', tenant: t.tenantId, scope: 'read write', iat: now, exp: now + 600, jti: 'x' }
    const idpClaims = { aud: 'agentd-test', sub: 'end-user' }
    const bad: Record<string, string> = {
      // the payload changed after signing: another tenant, more rights
      'a tampered payload': `${h}.${b64({ ...claims, tenant: tenantB.id, scope: 'read write' })}.${sig}`,
      'a tampered signature': `${h}.${p}.${sig.slice(0, -2)}${sig.endsWith('AA') ? 'BB' : 'AA'}`,
      'alg none': new UnsecuredJWT(own).encode(),
      'alg none with a known kid': `${b64({ alg: 'none', kid, typ: 'JWT' })}.${b64(own)}.`,
      // key confusion: HMAC with the public key as its secret
      'HS256 keyed with the public key': await new SignJWT(own).setProtectedHeader({ alg: 'HS256', kid, typ: 'JWT' }).sign(Buffer.from(JSON.stringify(jwk))),
      'HS256 keyed with the raw public key': await new SignJWT(own).setProtectedHeader({ alg: 'HS256', kid, typ: 'JWT' }).sign(Buffer.from(jwk.x, 'base64url')),
      'an unknown kid': await new SignJWT(own).setProtectedHeader({ alg: 'EdDSA', kid: 'nobody-has-this', typ: 'JWT' }).sign(stranger.privateKey),
      'a known kid, signed by another key': await new SignJWT(own).setProtectedHeader({ alg: 'EdDSA', kid, typ: 'JWT' }).sign(stranger.privateKey),
      'a 20 KB token': `${h}.${b64({ ...claims, pad: 'x'.repeat(20_000) })}.${sig}`,
      'not a JWT': 'not-a-jwt',
      'three empty parts': '..',
      'garbage base64': 'e30.e30.e30',
      // the tenant's provider: wrong audience or issuer, expired beyond the leeway, another tenant's provider's key
      'wrong aud': await idp.sign({ ...idpClaims, aud: 'someone-else' }),
      'wrong iss': await idp.sign({ ...idpClaims, iss: `${idp.issuer}other` }),
      'expired end-user token': await idp.sign({ ...idpClaims, exp: now - 120 }),
      'signed by the other tenant’s provider': await idpB.sign({ ...idpClaims, iss: idp.issuer }),
      'HS256 with the provider’s public key': await new SignJWT({ ...idpClaims, iss: idp.issuer, exp: now + 300 }).setProtectedHeader({ alg: 'HS256', kid: idp.keys[0].kid }).sign(Buffer.from(JSON.stringify(idp.keys[0].publicJwk))),
      'no subject': await idp.sign({ aud: 'agentd-test' }),
    }
    // the good token works until it expires (1 s, no leeway), then is refused too
    expect((await t.api('GET', `/v1/sessions/${s.id}`, undefined, { key: good })).status).toBe(200)
    await new Promise((r) => setTimeout(r, Math.max(0, claims.exp * 1000 - Date.now()) + 50))
    bad['expired'] = good
    const routes: Array<[string, string, unknown]> = [['GET', '/v1/sessions', undefined], ['GET', `/v1/sessions/${s.id}`, undefined], ['POST', `/v1/sessions/${s.id}/followup`, { content: 'x' }], ['POST', '/v1/sessions', {}]]
    for (const [what, token] of Object.entries(bad)) {
      for (const [m, path, body] of routes) {
        const r = await t.api(m, path, body, { key: token })
        expect(r.status, `${what}: ${m} ${path}`).toBe(401)
        expect(r.body, `${what}: ${m} ${path}`).toEqual({ error: { code: 'unauthorized', message: TOKEN_REFUSED } })
      }
      const stream = await probe(`${t.url}/v1/sessions/${s.id}/stream?access_token=${encodeURIComponent(token)}`)
      expect(stream, `${what}: stream`).toEqual({ status: 401, body: { error: { code: 'unauthorized', message: TOKEN_REFUSED } } })
      const ws = await wsAttempt(`${wsUrl(t.url)}/v1/sessions/${s.id}/ws`, { authorization: `Bearer ${token}` })
      expect(ws.open ? 101 : ws.status, `${what}: ws`).toBe(401)
    }
    expect(await t.events(s.id)).toEqual([])
  })

  it('end users of the tenant’s own provider: their subject owns what they create, with 30 s of leeway and no more', async () => {
    const now = Math.floor(Date.now() / 1000)
    const alice = await idp.sign({ aud: 'agentd-test', sub: 'alice' })
    const bob = await idp.sign({ aud: ['other', 'agentd-test'], sub: 'bob' })
    const made = await t.api('POST', '/v1/sessions', { id: 'alice-1', model: t.models.ref() }, { key: alice })
    expect(made.status, made.text).toBe(201)
    expect(made.body.owner).toBe('alice')
    expect((await t.api('GET', '/v1/sessions/alice-1', undefined, { key: bob })).status).toBe(404)
    expect((await t.api('GET', '/v1/sessions', undefined, { key: bob })).body.sessions).toEqual([])
    expect((await t.api('GET', '/v1/sessions', undefined, { key: alice })).body.sessions.map((x: any) => x.id)).toEqual(['alice-1'])
    t.models.script('alice-1', { text: ['hi alice'] })
    expect((await t.api('POST', '/v1/sessions/alice-1/followup', { content: 'hello' }, { key: alice })).status).toBe(202)
    await t.waitForTurnEnd('alice-1', 1)
    // a token of the same user minted later reaches the same sessions; one of agentd's with that subject too
    const aliceAgain = await idp.sign({ aud: 'agentd-test', sub: 'alice', jti: 'second' })
    expect((await t.api('GET', '/v1/sessions/alice-1', undefined, { key: aliceAgain })).status).toBe(200)
    expect((await t.api('GET', '/v1/sessions/alice-1', undefined, { key: await mint({ scopes: ['read'], subject: 'alice' }) })).status).toBe(200)
    // leeway: 10 s past exp or before nbf is accepted, 60 s is not
    expect((await t.api('GET', '/v1/sessions', undefined, { key: await idp.sign({ aud: 'agentd-test', sub: 'alice', exp: now - 10 }) })).status).toBe(200)
    expect((await t.api('GET', '/v1/sessions', undefined, { key: await idp.sign({ aud: 'agentd-test', sub: 'alice', nbf: now + 10 }) })).status).toBe(200)
    expect((await t.api('GET', '/v1/sessions', undefined, { key: await idp.sign({ aud: 'agentd-test', sub: 'alice', exp: now - 60 }) })).status).toBe(401)
    expect((await t.api('GET', '/v1/sessions', undefined, { key: await idp.sign({ aud: 'agentd-test', sub: 'alice', nbf: now + 60 }) })).status).toBe(401)
    // an ES256 key of the provider (a kid not in the cached set fetches it again, at most once per
    // cooldown: 1.5 s here, as the cache's age), and tenant b's provider leading to tenant b
    const es = await idp.addKey('ES256')
    await new Promise((r) => setTimeout(r, 1600))
    expect((await t.api('GET', '/v1/sessions/alice-1', undefined, { key: await idp.sign({ aud: 'agentd-test', sub: 'alice' }, { key: es }) })).status).toBe(200)
    const bUser = await idpB.sign({ aud: 'agentd-test', sub: 'alice' })
    expect((await t.api('GET', '/v1/sessions/alice-1', undefined, { key: bUser })).status).toBe(404)
    expect((await t.api('POST', '/v1/sessions', { id: 'alice-1', model: t.models.ref() }, { key: bUser })).status).toBe(201)
    expect((await t.api('GET', '/v1/sessions/alice-1', undefined, { key: tenantB.key })).body.owner).toBe('alice')
    // another subject claim
    const r = await t.api('PATCH', `/v1/admin/tenants/${t.tenantId}`, { auth: { issuer: idp.issuer, audience: 'agentd-test', jwksUrl: idp.jwksUrl, subjectClaim: 'email' } }, { key: t.adminToken })
    expect(r.body.tenant.auth).toEqual({ issuer: idp.issuer, audience: 'agentd-test', jwksUrl: idp.jwksUrl, subjectClaim: 'email' })
    const byEmail = await idp.sign({ aud: 'agentd-test', sub: 'alice', email: 'alice@example.com', jti: 'email' })
    const m2 = await t.api('POST', '/v1/sessions', { model: t.models.ref() }, { key: byEmail })
    expect(m2.body.owner).toBe('alice@example.com')
    expect((await t.api('GET', '/v1/sessions/alice-1', undefined, { key: byEmail })).status).toBe(404)
    // removing the provider: its tokens stop at once, cached ones included
    const gone = await t.api('PATCH', `/v1/admin/tenants/${t.tenantId}`, { auth: null }, { key: t.adminToken })
    expect(gone.body.tenant.auth).toBeNull()
    expect((await t.api('GET', '/v1/sessions', undefined, { key: byEmail })).status).toBe(401)
    expect((await t.api('GET', `/v1/admin/tenants/${t.tenantId}`, undefined, { key: t.adminToken })).body.tenant.auth).toBeNull()
    const back = await t.api('PATCH', `/v1/admin/tenants/${t.tenantId}`, { auth: { issuer: idp.issuer, audience: 'agentd-test', jwksUrl: idp.jwksUrl } }, { key: t.adminToken })
    expect(back.body.tenant.auth.subjectClaim).toBe('sub')
  })

  it("a key the provider removes from its key set stops working once the cached set is fetched again", async () => {
    const old = idp.keys[0]
    const token = await idp.sign({ aud: 'agentd-test', sub: 'carol' }, { key: old })
    expect((await t.api('GET', '/v1/sessions', undefined, { key: token })).status).toBe(200)
    const next = await idp.addKey('RS256')
    idp.removeKey(old.kid)
    // the key set is cached for 1.5 s here (10 minutes by default): until then the token still works
    expect((await t.api('GET', '/v1/sessions', undefined, { key: token })).status).toBe(200)
    await new Promise((r) => setTimeout(r, 1700))
    const r = await t.api('GET', '/v1/sessions', undefined, { key: token })
    expect(r.status).toBe(401)
    expect(r.body.error.message).toBe(TOKEN_REFUSED)
    expect((await t.api('GET', '/v1/sessions', undefined, { key: await idp.sign({ aud: 'agentd-test', sub: 'carol' }, { key: next }) })).status).toBe(200)
  })

  it('PATCH of the provider refuses an address the guard refuses, agentd’s issuer and an issuer another tenant has; a refusal changes nothing', async () => {
    const before = (await t.api('GET', `/v1/admin/tenants/${t.tenantId}`, undefined, { key: t.adminToken })).body.tenant
    const tries: Array<[unknown, string]> = [
      [{ auth: { issuer: 'x', audience: 'y', jwksUrl: 'http://10.1.2.3/jwks.json' } }, 'body.auth.jwksUrl'],
      [{ auth: { issuer: 'x', audience: 'y', jwksUrl: 'ftp://127.0.0.1/jwks.json' } }, 'body.auth.jwksUrl'],
      [{ auth: { issuer: 'agentd', audience: 'y', jwksUrl: idp.jwksUrl } }, 'body.auth.issuer'],
      [{ auth: { issuer: idpB.issuer, audience: 'agentd-test', jwksUrl: idpB.jwksUrl } }, 'body.auth'],
      [{ auth: { issuer: 'x', audience: 'y' } }, 'body.auth.jwksUrl'],
      [{ cors: { origins: ['https://app.example.com/path'] } }, 'body.cors.origins[0]'],
      [{ limits: { requestsPerMin: 5 }, auth: { issuer: 'agentd', audience: 'y', jwksUrl: idp.jwksUrl } }, 'body.auth.issuer'],
      [{}, 'body'],
    ]
    for (const [body, path] of tries) {
      const r = await t.api('PATCH', `/v1/admin/tenants/${t.tenantId}`, body, { key: t.adminToken })
      expect(r.status, JSON.stringify(body)).toBe(400)
      expect(r.body.error.details.map((d: any) => d.path), JSON.stringify(body)).toContain(path)
    }
    expect((await t.api('GET', `/v1/admin/tenants/${t.tenantId}`, undefined, { key: t.adminToken })).body.tenant).toEqual(before)
    // only the admin token
    expect((await t.api('PATCH', `/v1/admin/tenants/${t.tenantId}`, { auth: null }, { key: t.key })).status).toBe(401)
  })

  it('a token is verified once: later requests with it read no key, tenant or signing key', async () => {
    const s = await t.createSession()
    const own = await mint({ scopes: ['read', 'write'], sessions: [s.id] })
    const endUser = await idp.sign({ aud: 'agentd-test', sub: 'dave' })
    for (const token of [own, endUser]) {
      expect((await t.api('GET', '/v1/sessions', undefined, { key: token })).status).toBe(200)
      const n0 = counted.n()
      for (let i = 0; i < 20; i++) {
        expect((await t.api('GET', '/v1/sessions', undefined, { key: token })).status).toBe(200)
        expect((await t.api('GET', `/v1/sessions/${token === own ? s.id : 'none'}`, undefined, { key: token })).status).toBe(token === own ? 200 : 404)
      }
      expect(counted.n() - n0).toBe(0)
    }
    // a key, by contrast, is read on every request
    const n0 = counted.n()
    for (let i = 0; i < 5; i++) await t.api('GET', '/v1/sessions')
    expect(counted.n() - n0).toBe(5)
  })
})
