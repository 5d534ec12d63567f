// @agentd/client with tokens (API.md §18) against a real agentd on one database (docs/testing.md): a token
// provider is asked for a token once for concurrent calls, again before the token expires (so no call
// ever meets a 401 for age), and once more when the server refuses the one it has (calls and streams
// go on with the new one); createToken mints, admin.setAuth and setCors set a tenant's provider and
// origins; a read-only token gets 403 on a send, which is not retried.

import crypto from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { AgentdClient, AgentdError, type MintedToken } from '../../clients/typescript/src/index.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { APP_DB_KINDS } from '../helpers/db.js'

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

describe.each(APP_DB_KINDS)('@agentd/client with tokens on %s', (kind) => {
  let t: TestApp
  let backend: AgentdClient
  beforeAll(async () => {
    t = await startTestApp({ kind, env: { AGENTD_SECRET_KEY: crypto.randomBytes(32).toString('base64') } })
    // your backend: the only holder of the key
    backend = new AgentdClient({ baseUrl: t.url, apiKey: t.key, adminToken: t.adminToken })
  })
  afterAll(async () => {
    await t?.close()
  })

  /** a page's client: its token provider calls "the backend", and every answer's status is recorded */
  const pageClient = (provider: () => Promise<MintedToken | string>, o: { tokenRefreshMs?: number } = {}) => {
    const statuses: number[] = []
    const client = new AgentdClient({
      baseUrl: t.url,
      token: provider,
      ...o,
      fetch: async (input, init) => {
        const r = await fetch(input, init)
        statuses.push(r.status)
        return r
      },
    })
    return { client, statuses }
  }

  it('createToken mints with the key; a token cannot mint; apiKey and token together are refused', async () => {
    const minted = await backend.createToken({ scopes: ['read'], subject: 'sdk-user', ttlSeconds: 60 })
    expect(typeof minted.token).toBe('string')
    expect(new Date(minted.expiresAt).getTime() - Date.now()).toBeLessThanOrEqual(60_000)
    const page = new AgentdClient({ baseUrl: t.url, token: minted.token })
    const e = await page.createToken({ scopes: ['read'] }).catch((x) => x)
    expect(e).toBeInstanceOf(AgentdError)
    expect({ status: e.status, code: e.code }).toEqual({ status: 403, code: 'forbidden' })
    expect(() => new AgentdClient({ baseUrl: t.url, apiKey: t.key, token: minted.token })).toThrow(TypeError)
  })

  it('one provider call serves concurrent calls; the token is replaced before it expires, so no call meets a 401', async () => {
    let asked = 0
    const { client, statuses } = pageClient(async () => {
      asked++
      return backend.createToken({ scopes: ['read', 'write'], subject: 'fresh-user', ttlSeconds: 3 })
    })
    await Promise.all(Array.from({ length: 10 }, () => client.sessions.page()))
    expect(asked).toBe(1)
    // six seconds of calls with 3-second tokens: at least two more tokens, asked for before the old ones expired
    const until = Date.now() + 6000
    while (Date.now() < until) {
      await client.sessions.page()
      await sleep(100)
    }
    expect(asked).toBeGreaterThanOrEqual(3)
    expect(statuses.filter((s) => s !== 200)).toEqual([])
  })

  it('a refused token is replaced once and the call repeated; a stream reconnects with the new token', async () => {
    const s = await backend.sessions.create({ model: t.models.ref() })
    // a token that has expired, which the provider claims is good for an hour, then good ones
    const stale = (await backend.createToken({ scopes: ['read', 'write'], ttlSeconds: 1 })).token
    await sleep(1100)
    let asked = 0
    const provider = async (): Promise<MintedToken> => {
      asked++
      if (asked === 1) return { token: stale, expiresAt: Date.now() + 3600_000 }
      return backend.createToken({ scopes: ['read', 'write'], ttlSeconds: 600 })
    }
    const { client, statuses } = pageClient(provider)
    expect((await client.sessions.get(s.id)).id).toBe(s.id)
    expect(asked).toBe(2)
    expect(statuses).toEqual([401, 200])
    // the same for a stream, on a client of its own
    asked = 0
    const streamer = pageClient(provider)
    t.models.script(s.id, { text: ['streamed with a new token'] })
    const stream = streamer.client.stream(s.id)
    const seen: string[] = []
    let ready!: () => void
    const isReady = new Promise<void>((r) => (ready = r))
    const done = (async () => {
      for await (const f of stream) {
        seen.push(f.event)
        if (f.event === 'stream/ready') ready()
        if (f.event === 'session/event' && f.data.type === 'turn/end') break
      }
    })()
    await isReady
    await backend.followup(s.id, 'hello')
    await done
    expect(seen[0]).toBe('client/reconnecting')
    expect(streamer.statuses.slice(0, 2)).toEqual([401, 200])
    expect(asked).toBe(2)
    // a bare string is used until refused
    let bare = 0
    const plain = pageClient(async () => {
      bare++
      return bare === 1 ? stale : (await backend.createToken({ scopes: ['read'], ttlSeconds: 600 })).token
    })
    expect((await plain.client.sessions.page()).sessions.length).toBeGreaterThan(0)
    expect(bare).toBe(2)
  })

  it('a read-only token reads and streams but a send is 403 forbidden, at once (not retried)', async () => {
    const s = await backend.sessions.create({ model: t.models.ref() })
    const { client, statuses } = pageClient(() => backend.createToken({ scopes: ['read'], sessions: [s.id], ttlSeconds: 600 }))
    expect((await client.sessions.get(s.id)).id).toBe(s.id)
    const e = await client.followup(s.id, 'may I?').catch((x) => x)
    expect(e).toBeInstanceOf(AgentdError)
    expect({ status: e.status, code: e.code }).toEqual({ status: 403, code: 'forbidden' })
    expect(statuses).toEqual([200, 403])
    expect((await backend.events(s.id)).events).toEqual([])
  })

  it('admin.setAuth and admin.setCors set and remove a tenant’s identity provider and origins', async () => {
    const auth = { issuer: 'https://login.example.test/', audience: 'sdk', jwksUrl: 'http://127.0.0.1:9/jwks.json' }
    expect((await backend.admin.setAuth(t.tenantId, auth)).auth).toEqual({ ...auth, subjectClaim: 'sub' })
    expect((await backend.admin.setCors(t.tenantId, { origins: ['https://app.example.test'] })).cors).toEqual({ origins: ['https://app.example.test'] })
    expect(await backend.admin.tenant(t.tenantId)).toEqual({ id: t.tenantId, name: 'test', limits: {}, auth: { ...auth, subjectClaim: 'sub' }, cors: { origins: ['https://app.example.test'] } })
    const bad = await backend.admin.setAuth(t.tenantId, { ...auth, jwksUrl: 'http://10.9.9.9/jwks.json' }).catch((x) => x)
    expect({ status: bad.status, code: bad.code }).toEqual({ status: 400, code: 'bad-request' })
    await backend.admin.setAuth(t.tenantId, null)
    const back = await backend.admin.setCors(t.tenantId, null)
    expect({ auth: back.auth, cors: back.cors }).toEqual({ auth: null, cors: null })
  })
})
