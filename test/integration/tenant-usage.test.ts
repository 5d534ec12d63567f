// API.md §15 routes on one database (docs/testing.md): GET /v1/usage sums to the sessions' `usage` (the kinds its rows
// have: API.md §15 lists no reasoningTokens) for the same period and groups by day, model and session (a deleted session's usage stays); the admin routes read
// and set limits, and bad input — negative or non-numeric limits, unknown fields, a foreign tenant —
// is 400/404 with nothing written; requestsPerMin is one bucket for all of a tenant's keys.

import crypto from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp } from '../helpers/app.js'

const today = () => new Date().toISOString().slice(0, 10)
const sum = (rows: any[]) =>
  rows.reduce(
    (a, r) => ({ inputTokens: a.inputTokens + r.inputTokens, outputTokens: a.outputTokens + r.outputTokens, cacheReadTokens: a.cacheReadTokens + r.cacheReadTokens, cacheWriteTokens: a.cacheWriteTokens + r.cacheWriteTokens, costUsd: a.costUsd + r.costUsd }),
    { inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0, costUsd: 0 },
  )
const close = (u: { costUsd: number }) => ({ ...u, costUsd: Math.round(u.costUsd * 1e9) / 1e9 })

describe.each(APP_DB_KINDS)('limits and usage routes on %s', (kind) => {
  let t: TestApp
  beforeAll(async () => {
    t = await startTestApp({ kind, models: [{ id: 'scripted' }, { id: 'other' }] })
  })
  afterAll(async () => {
    await t?.close()
  })
  const admin = (method: string, path: string, body?: unknown, raw?: string) => t.api(method, path, body, { key: t.adminToken, ...(raw !== undefined ? { raw } : {}) })
  const run = async (id: string, n: number) => {
    expect((await t.api('POST', `/v1/sessions/${id}/followup`, { content: `turn ${n}` })).status).toBe(202)
    await t.waitForTurnEnd(id, n)
  }

  it('GET /v1/usage sums to the sessions’ usage, by day, model and session; a deleted session’s usage stays', async () => {
    const a = await t.createSession()
    const b = await t.createSession({ model: t.models.ref('other') })
    t.models.script(a.id, { text: ['a1'], usage: { input: 10, output: 5 } }, { text: ['a2'], usage: { input: 20, output: 7, cacheRead: 3, cacheWrite: 2, costUsd: 0.125 } })
    // b: a failed attempt with usage (EMPTY_RESPONSE, retried), then a success
    t.models.script(b.id, { usage: { input: 2, output: 0 } }, { text: ['b1'], usage: { input: 4, output: 1, costUsd: 0.25 } })
    await run(a.id, 1)
    await run(a.id, 2)
    await run(b.id, 1)
    const sessions = await Promise.all([a.id, b.id].map(async (id) => (await t.api('GET', `/v1/sessions/${id}`)).body.usage))
    const total = (await t.api('GET', '/v1/usage')).body
    expect(total.limits).toEqual({})
    expect(total.usage).toHaveLength(1)
    expect(close(sum(total.usage))).toEqual(close(sum(sessions)))
    expect(total.usage[0].attempts).toBe(4)
    const byDay = (await t.api('GET', '/v1/usage?groupBy=day')).body.usage
    expect(byDay.map((r: any) => r.day)).toEqual([today()])
    expect(close(sum(byDay))).toEqual(close(sum(sessions)))
    const byModel = (await t.api('GET', '/v1/usage?groupBy=model')).body.usage
    expect(byModel.map((r: any) => [r.model, r.attempts])).toEqual([
      [t.models.ref('other'), 2],
      [t.models.ref('scripted'), 2],
    ])
    expect(close(sum(byModel.filter((r: any) => r.model === t.models.ref('other'))))).toEqual(close(sum([sessions[1]])))
    const bySession = (await t.api('GET', `/v1/usage?groupBy=session&from=${today()}&to=${today()}`)).body.usage
    expect(bySession.map((r: any) => r.sessionId).sort()).toEqual([a.id, b.id].sort())
    for (const [i, id] of [a.id, b.id].entries()) expect(close(sum(bySession.filter((r: any) => r.sessionId === id)))).toEqual(close(sum([sessions[i]])))
    // another period holds nothing of it
    expect((await t.api('GET', '/v1/usage?from=2020-01-01&to=2020-12-31&groupBy=day')).body.usage).toEqual([])
    // usage is billed: deleting a session leaves it in the ledger
    expect((await t.api('DELETE', `/v1/sessions/${a.id}`)).status).toBe(204)
    expect(close(sum((await t.api('GET', '/v1/usage')).body.usage))).toEqual(close(sum(sessions)))
    // another tenant sees only its own
    const other = await admin('POST', '/v1/admin/tenants', { name: 'other' })
    const theirs = await t.api('GET', '/v1/usage?groupBy=session', undefined, { key: other.body.apiKey })
    expect(theirs.body).toEqual({ usage: [], limits: {} })
  })

  it('GET /v1/usage refuses a bad groupBy, date or range, and unknown parameters (400)', async () => {
    for (const q of ['groupBy=planet', 'from=2024-13-01', 'to=2024-02-30', 'from=yesterday', 'from=2024-03-02&to=2024-03-01', 'tenant=x', 'from=2024-03-01T00:00:00Z', 'from=0000-01-01', 'to=10000-01-01']) {
      const r = await t.api('GET', `/v1/usage?${q}`)
      expect([q, r.status, r.body.error.code]).toEqual([q, 400, 'bad-request'])
    }
    expect((await t.api('GET', '/v1/usage', undefined, { key: null })).status).toBe(401)
    // the widest range there is
    expect((await t.api('GET', '/v1/usage?from=0001-01-01&to=9999-12-31&groupBy=day')).status).toBe(200)
  })

  it('admin: GET and PATCH a tenant’s limits; null removes one; an absent one stays', async () => {
    const created = await admin('POST', '/v1/admin/tenants', { name: 'limited' })
    const id = created.body.tenant.id
    // no identity provider and the deployment's origins (API.md §18) until set
    expect((await admin('GET', `/v1/admin/tenants/${id}`)).body).toEqual({ tenant: { id, name: 'limited', limits: {}, auth: null, cors: null } })
    const set = await admin('PATCH', `/v1/admin/tenants/${id}`, { limits: { maxRunningSessions: 20, costUsdPerMonth: 50, tokensPerDay: 1000000, requestsPerMin: 600 } })
    expect(set.status).toBe(200)
    expect(set.body.tenant.limits).toEqual({ maxRunningSessions: 20, costUsdPerMonth: 50, tokensPerDay: 1000000, requestsPerMin: 600 })
    expect((await admin('PATCH', `/v1/admin/tenants/${id}`, { limits: { tokensPerDay: null, costUsdPerMonth: 0.01 } })).body.tenant.limits).toEqual({ maxRunningSessions: 20, costUsdPerMonth: 0.01, requestsPerMin: 600 })
    expect((await admin('PATCH', `/v1/admin/tenants/${id}`, { limits: {} })).body.tenant.limits).toEqual({ maxRunningSessions: 20, costUsdPerMonth: 0.01, requestsPerMin: 600 })
    // the tenant's own key sees its limits on the usage route
    expect((await t.api('GET', '/v1/usage', undefined, { key: created.body.apiKey })).body.limits).toEqual({ maxRunningSessions: 20, costUsdPerMonth: 0.01, requestsPerMin: 600 })
  })

  it('admin: bad limits, unknown fields and foreign tenants are 400/404 and change nothing', async () => {
    const id = (await admin('POST', '/v1/admin/tenants', { name: 'guarded' })).body.tenant.id
    await admin('PATCH', `/v1/admin/tenants/${id}`, { limits: { maxRunningSessions: 3 } })
    const bad: unknown[] = [
      { limits: { maxRunningSessions: -1 } },
      { limits: { maxRunningSessions: 0 } },
      { limits: { maxRunningSessions: 1.5 } },
      { limits: { tokensPerDay: '100' } },
      { limits: { costUsdPerMonth: 0 } },
      { limits: { costUsdPerMonth: -5 } },
      { limits: { requestsPerMin: true } },
      { limits: { maxRunningSessions: 2, planets: 9 } },
      { limits: { maxRunningSessions: 2 }, name: 'renamed' },
      { limits: [] },
      { limits: null },
      {},
    ]
    for (const body of bad) {
      const r = await admin('PATCH', `/v1/admin/tenants/${id}`, body)
      expect([JSON.stringify(body), r.status, r.body.error.code]).toEqual([JSON.stringify(body), 400, 'bad-request'])
    }
    expect((await admin('PATCH', `/v1/admin/tenants/${id}`, undefined, '{"limits": {"maxRunningSessions": 1e400}}')).status).toBe(400)
    for (const foreign of [crypto.randomUUID(), 'not-a-uuid', '00000000-0000-0000-0000-00000000000g']) {
      expect((await admin('GET', `/v1/admin/tenants/${foreign}`)).status).toBe(404)
      const r = await admin('PATCH', `/v1/admin/tenants/${foreign}`, { limits: { maxRunningSessions: 1 } })
      expect([r.status, r.body.error.code]).toEqual([404, 'not-found'])
    }
    // a tenant key is not the admin token
    expect((await t.api('PATCH', `/v1/admin/tenants/${id}`, { limits: { maxRunningSessions: 1 } })).status).toBe(401)
    expect((await admin('GET', `/v1/admin/tenants/${id}`)).body.tenant.limits).toEqual({ maxRunningSessions: 3 })
  })

  it("requestsPerMin is one budget for all of the tenant's keys; other tenants keep the default", async () => {
    const created = await admin('POST', '/v1/admin/tenants', { name: 'chatty' })
    const id = created.body.tenant.id
    const second = (await admin('POST', `/v1/admin/tenants/${id}/keys`, {})).body.apiKey
    await admin('PATCH', `/v1/admin/tenants/${id}`, { limits: { requestsPerMin: 4 } })
    const codes: number[] = []
    for (const key of [created.body.apiKey, second, created.body.apiKey, second, created.body.apiKey, second]) codes.push((await t.api('GET', '/v1/sessions', undefined, { key })).status)
    expect(codes).toEqual([200, 200, 200, 200, 429, 429])
    const limited = await t.api('GET', '/v1/usage', undefined, { key: second })
    expect(limited.body.error.code).toBe('rate-limited')
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0)
    // the test tenant has no requestsPerMin: its key still goes
    expect((await t.api('GET', '/v1/sessions')).status).toBe(200)
    // removing the limit gives the keys the default budget, each its own
    await admin('PATCH', `/v1/admin/tenants/${id}`, { limits: { requestsPerMin: null } })
    expect((await t.api('GET', '/v1/sessions', undefined, { key: second })).status).toBe(200)
  })
})
