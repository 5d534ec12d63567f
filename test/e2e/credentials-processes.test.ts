// Tokens across real server processes on one PostgreSQL (API.md §18): a token minted by one process is
// accepted by the other (one signing key, kept in the database), and end users — of agentd's own
// tokens and of the tenant's identity provider — see and reach only their own sessions through either
// process, and run turns in them.

import crypto from 'node:crypto'
import { decodeProtectedHeader } from 'jose'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startIdp, type Idp } from '../helpers/idp.js'
import { startCluster, type Cluster } from './helpers-processes.js'

describe('credentials across two agentd processes', () => {
  let c: Cluster
  let idp: Idp
  beforeAll(async () => {
    c = await startCluster({ processes: 2, env: { AGENTD_SECRET_KEY: crypto.randomBytes(32).toString('base64') } })
    idp = await startIdp()
    const { rows } = await c.pool.query<{ tenant_id: string }>('SELECT tenant_id FROM api_keys LIMIT 1')
    const r = await fetch(`${c.procs[1].url}/v1/admin/tenants/${rows[0].tenant_id}`, {
      method: 'PATCH',
      headers: { authorization: `Bearer ${c.adminToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ auth: { issuer: idp.issuer, audience: 'agentd-e2e', jwksUrl: idp.jwksUrl } }),
    })
    expect(r.status).toBe(200)
  }, 120_000)
  afterAll(async () => {
    await c?.close()
    await idp?.close()
  })

  const mint = async (i: number, body: Record<string, unknown>) => {
    const r = await c.api(i, 'POST', '/v1/tokens', body)
    expect(r.status, r.text).toBe(201)
    return r.body.token as string
  }

  it('both processes sign with the same key and accept each other’s tokens', async () => {
    const t0 = await mint(0, { scopes: ['read'] })
    const t1 = await mint(1, { scopes: ['read'] })
    expect(decodeProtectedHeader(t0).kid).toBe(decodeProtectedHeader(t1).kid)
    for (const i of [0, 1]) for (const token of [t0, t1]) expect((await c.api(i, 'GET', '/v1/sessions', undefined, token)).status).toBe(200)
    const sets = await Promise.all(c.procs.map(async (p) => (await fetch(`${p.url}/.well-known/jwks.json`)).json()))
    expect(sets[0]).toEqual(sets[1])
  })

  it('an end user sees and reaches only their own sessions through either process, and runs turns in them', async () => {
    const alice = await mint(0, { scopes: ['read', 'write'], subject: 'alice' })
    const bob = await idp.sign({ aud: 'agentd-e2e', sub: 'bob' })
    const marker = (who: string) => `[[m:creds-${who}-${crypto.randomBytes(3).toString('hex')}]]`
    const ma = marker('alice')
    const mb = marker('bob')
    const a = await c.api(0, 'POST', '/v1/sessions', { model: 'mock/scripted', system: `agent ${ma}` }, alice)
    const b = await c.api(1, 'POST', '/v1/sessions', { model: 'mock/scripted', system: `agent ${mb}` }, bob)
    expect([a.status, b.status]).toEqual([201, 201])
    expect([a.body.owner, b.body.owner]).toEqual(['alice', 'bob'])
    const keyMade = await c.createSession(0)
    for (const i of [0, 1]) {
      expect((await c.api(i, 'GET', '/v1/sessions', undefined, alice)).body.sessions.map((s: any) => s.id)).toEqual([a.body.id])
      expect((await c.api(i, 'GET', '/v1/sessions', undefined, bob)).body.sessions.map((s: any) => s.id)).toEqual([b.body.id])
      for (const [token, id] of [[alice, b.body.id], [bob, a.body.id], [alice, keyMade.id], [bob, keyMade.id]]) {
        for (const [m, p, body] of [['GET', `/v1/sessions/${id}`, undefined], ['GET', `/v1/sessions/${id}/events`, undefined], ['POST', `/v1/sessions/${id}/followup`, { content: 'not mine' }]] as Array<[string, string, unknown]>) {
          const r = await c.api(i, m, p, body, token)
          expect(r.status, `process ${i}: ${m} ${p}`).toBe(404)
          expect(r.body.error.code).toBe('session-not-found')
        }
      }
    }
    // each runs a turn in their own session through the process that did not create it
    c.llm.script(ma, { chunks: ['hello alice'] })
    c.llm.script(mb, { chunks: ['hello bob'] })
    expect((await c.api(1, 'POST', `/v1/sessions/${a.body.id}/followup`, { content: 'hi' }, alice)).status).toBe(202)
    expect((await c.api(0, 'POST', `/v1/sessions/${b.body.id}/followup`, { content: 'hi' }, bob)).status).toBe(202)
    await c.waitForTurnEnd(0, a.body.id, 1, 20000)
    await c.waitForTurnEnd(1, b.body.id, 1, 20000)
    const texts = async (i: number, id: string, token: string) => JSON.stringify((await c.api(i, 'GET', `/v1/sessions/${id}/messages`, undefined, token)).body.messages)
    expect(await texts(1, a.body.id, alice)).toContain('hello alice')
    expect(await texts(0, b.body.id, bob)).toContain('hello bob')
    // nothing of bob's reached alice's log, nor the reverse
    expect(JSON.stringify(await c.events(0, a.body.id))).not.toContain('bob')
    expect(JSON.stringify(await c.events(0, b.body.id))).not.toContain('alice')
  })
})
