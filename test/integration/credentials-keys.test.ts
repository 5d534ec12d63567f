// The keys agentd signs its tokens with (API.md §18), on one database (docs/testing.md): two servers on one database
// agree on them, a rotation leaves tokens signed before it working until they expire, a retired key
// leaves the key set once its last token has expired, the private halves are stored sealed, a forged
// kid makes a server read the keys at most once per second, and without AGENTD_SECRET_KEY on PostgreSQL
// no token is minted while a tenant's identity provider still works. The clock of the keys is the test's.

import crypto from 'node:crypto'
import { decodeJwt, decodeProtectedHeader, generateKeyPair, SignJWT } from 'jose'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS, countingDb, openTestDb } from '../helpers/db.js'
import { startIdp } from '../helpers/idp.js'
import { startTestApp, type TestApp } from '../helpers/app.js'

const HOUR = 3600_000
const DAY = 24 * HOUR

describe.each(APP_DB_KINDS)('signing keys on %s', (kind) => {
  let now = Date.now()
  const clock = () => now
  let a: TestApp
  let b: TestApp
  let counted: ReturnType<typeof countingDb>
  const env = { AGENTD_SECRET_KEY: crypto.randomBytes(32).toString('base64'), AGENTD_TOKEN_KEY_ROTATION_DAYS: '1' }

  beforeAll(async () => {
    a = await startTestApp({ kind, env, credentials: { clock } })
    // a second server on the same database, with its own key ring (and, on PGlite, no bus shared with the first)
    b = await startTestApp({ kind, env, testDb: a.testDb, credentials: { clock }, wrapDb: (db) => (counted = countingDb(db, /signing_keys/)).db })
  })
  afterAll(async () => {
    await b?.close({ keepDb: true })
    await a?.close()
  })

  const mint = async (app: TestApp, ttlSeconds: number) => {
    const r = await app.api('POST', '/v1/tokens', { scopes: ['read'], ttlSeconds }, { key: a.key })
    expect(r.status, r.text).toBe(201)
    return r.body.token as string
  }
  const status = async (app: TestApp, token: string) => (await app.api('GET', '/v1/sessions', undefined, { key: token })).status
  const kids = async (app: TestApp) => ((await (await fetch(`${app.url}/.well-known/jwks.json`)).json()) as { keys: Array<{ kid: string }> }).keys.map((k) => k.kid).sort()
  const kidOf = (token: string) => decodeProtectedHeader(token).kid!

  it('both servers sign with one key and verify each other’s tokens; a rotation keeps older tokens working until they expire', async () => {
    const t0 = now
    const first = await mint(a, 60)
    const k1 = kidOf(first)
    expect(await status(b, first)).toBe(200)
    // half a day later the same key still signs, on either server
    now = t0 + 12 * HOUR
    const long = await mint(b, 86400)
    expect(kidOf(long)).toBe(k1)
    expect(await kids(a)).toEqual([k1])
    expect(await kids(b)).toEqual([k1])
    // a day after the key was made it has retired: the next token has a new key, made once for both
    now = t0 + DAY + 1000
    const next = await mint(b, 3600)
    const k2 = kidOf(next)
    expect(k2).not.toBe(k1)
    expect(kidOf(await mint(a, 3600))).toBe(k2)
    expect((await a.app.db.query<{ n: number }>('SELECT count(*)::int AS n FROM signing_keys')).rows[0].n).toBe(2)
    // the token signed before the rotation still works on both, and so does the new one
    for (const app of [a, b]) {
      expect(await status(app, long)).toBe(200)
      expect(await status(app, next)).toBe(200)
      expect(await kids(app)).toEqual([k1, k2].sort())
    }
    // once it has expired (no leeway), it is refused on both: a millisecond before its exp it works
    now = decodeJwt(long).exp! * 1000 - 1
    expect(await status(a, long)).toBe(200)
    now += 1
    expect(await status(a, long)).toBe(401)
    expect(await status(b, long)).toBe(401)
    // when the last token the old key can have signed has expired, the key leaves the set and the database
    now = t0 + 2 * DAY + 2 * 60_000
    const third = await mint(a, 60)
    const k3 = kidOf(third)
    expect(k3).not.toBe(k2)
    expect(await kids(a)).toEqual([k2, k3].sort())
    expect(await kids(b)).toEqual([k2, k3].sort())
    expect((await a.app.db.query<{ kid: string }>('SELECT kid FROM signing_keys ORDER BY kid')).rows.map((r) => r.kid)).toEqual([k2, k3].sort())
  })

  it('the private halves are stored sealed: no row holds a private key in the clear', async () => {
    const rows = (await a.app.db.query<{ public_jwk: string; ciphertext: Uint8Array }>('SELECT public_jwk, ciphertext FROM signing_keys')).rows
    expect(rows.length).toBeGreaterThan(0)
    for (const r of rows) {
      const pub = JSON.parse(r.public_jwk)
      expect(pub).toMatchObject({ kty: 'OKP', crv: 'Ed25519' })
      expect(pub).not.toHaveProperty('d')
      const text = Buffer.from(r.ciphertext).toString('latin1')
      expect(text).not.toContain('"d"')
      expect(text).not.toContain(pub.x)
    }
  })

  it('a server whose AGENTD_SECRET_KEY opens no key makes its own; another server meeting its kid reads the keys once and verifies it', async () => {
    now += 5000
    const before = await mint(b, 600)
    const c = await startTestApp({ kind, env: { ...env, AGENTD_SECRET_KEY: crypto.randomBytes(32).toString('base64') }, testDb: a.testDb, credentials: { clock } })
    try {
      const theirs = (await c.api('POST', '/v1/tokens', { scopes: ['read'] }, { key: a.key })).body.token as string
      expect(kidOf(theirs)).not.toBe(kidOf(before))
      // b read its keys moments ago (no rotation, no bus between the two on PGlite): the unknown kid makes it read them again
      now += 1000
      const n0 = counted.n()
      expect(await status(b, theirs)).toBe(200)
      expect(counted.n() - n0).toBeLessThanOrEqual(1)
      // the older key still verifies everywhere, and c verifies what b signs
      expect(await status(c, before)).toBe(200)
      expect(await status(a, theirs)).toBe(200)
    } finally {
      await c.close({ keepDb: true })
    }
  })

  it('a forged kid makes a server read the keys at most once per second', async () => {
    now = Date.now() + 3 * DAY
    const stranger = await generateKeyPair('EdDSA')
    const forged = (i: number) => new SignJWT({ tenant: a.tenantId, scope: 'read', jti: `f${i}` }).setProtectedHeader({ alg: 'EdDSA', kid: `forged-${i}`, typ: 'JWT' }).setIssuer('agentd').setAudience('agentd').setIssuedAt(Math.floor(now / 1000)).setExpirationTime(Math.floor(now / 1000) + 60).sign(stranger.privateKey)
    await mint(b, 60)
    const n0 = counted.n()
    const started = Date.now()
    for (let i = 0; i < 30; i++) {
      // the keys' clock moves 10 ms a request: 300 ms in all, less than one reload interval
      now += 10
      expect(await status(b, await forged(i))).toBe(401)
    }
    expect(counted.n() - n0, `reads of the keys in ${Date.now() - started} ms`).toBeLessThanOrEqual(1)
    now += 1000
    expect(await status(b, await forged(99))).toBe(401)
    expect(counted.n() - n0).toBeLessThanOrEqual(2)
  })
})

describe('PostgreSQL without AGENTD_SECRET_KEY', () => {
  let t: TestApp
  let idp: Awaited<ReturnType<typeof startIdp>>
  beforeAll(async () => {
    // a fresh database, so no signing key exists from another test
    t = await startTestApp({ kind: 'pg', testDb: await openTestDb('pg') })
    idp = await startIdp()
  })
  afterAll(async () => {
    await t?.close()
    await idp?.close()
  })

  it('mints no token (409 secrets-unavailable) and makes no key; the key set is empty; the identity provider’s tokens work', async () => {
    const r = await t.api('POST', '/v1/tokens', { scopes: ['read'] })
    expect(r.status).toBe(409)
    expect(r.body.error.code).toBe('secrets-unavailable')
    expect((await t.app.db.query<{ n: number }>('SELECT count(*)::int AS n FROM signing_keys')).rows[0].n).toBe(0)
    expect(await (await fetch(`${t.url}/.well-known/jwks.json`)).json()).toEqual({ keys: [] })
    expect((await t.api('PATCH', `/v1/admin/tenants/${t.tenantId}`, { auth: { issuer: idp.issuer, audience: 'x', jwksUrl: idp.jwksUrl } }, { key: t.adminToken })).status).toBe(200)
    const user = await idp.sign({ aud: 'x', sub: 'u' })
    const s = await t.api('POST', '/v1/sessions', { model: t.models.ref() }, { key: user })
    expect(s.status, s.text).toBe(201)
    expect(s.body.owner).toBe('u')
  })
})
