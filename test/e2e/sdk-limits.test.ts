// @agentd/client for API.md §15 against a real agentd on one database (docs/testing.md): admin.tenant and
// admin.setLimits read and write a tenant's limits (null removes one, bad input is an AgentdError and
// changes nothing), and usage() answers the ledger by day, model and session with the limits.

import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { AgentdClient, AgentdError } from '../../clients/typescript/src/index.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { APP_DB_KINDS } from '../helpers/db.js'

describe.each(APP_DB_KINDS)('@agentd/client limits and usage on %s', (kind) => {
  let t: TestApp
  let client: AgentdClient
  beforeAll(async () => {
    t = await startTestApp({ kind })
    client = new AgentdClient({ baseUrl: t.url, apiKey: t.key, adminToken: t.adminToken })
  })
  afterAll(async () => {
    await t?.close()
  })

  it('admin.tenant and admin.setLimits: set, read back, remove with null; a bad limit is 400 and changes nothing', async () => {
    expect(await client.admin.tenant(t.tenantId)).toEqual({ id: t.tenantId, name: 'test', limits: {}, auth: null, cors: null })
    expect((await client.admin.setLimits(t.tenantId, { maxRunningSessions: 3, costUsdPerMonth: 9.5 })).limits).toEqual({ maxRunningSessions: 3, costUsdPerMonth: 9.5 })
    expect((await client.admin.setLimits(t.tenantId, { maxRunningSessions: null, tokensPerDay: 1000 })).limits).toEqual({ costUsdPerMonth: 9.5, tokensPerDay: 1000 })
    const e = await client.admin.setLimits(t.tenantId, { tokensPerDay: -1 }).catch((x) => x)
    expect(e).toBeInstanceOf(AgentdError)
    expect({ status: e.status, code: e.code }).toEqual({ status: 400, code: 'bad-request' })
    expect((await client.admin.tenant(t.tenantId)).limits).toEqual({ costUsdPerMonth: 9.5, tokensPerDay: 1000 })
    const missing = await client.admin.tenant('00000000-0000-4000-8000-000000000000').catch((x) => x)
    expect({ status: missing.status, code: missing.code }).toEqual({ status: 404, code: 'not-found' })
  })

  it("usage(): the settled attempts of the tenant's sessions by day, model and session, with the limits", async () => {
    const s = await t.createSession()
    t.models.script(s.id, { text: ['counted'], usage: { input: 21, output: 4 } })
    await client.followup(s.id, 'count me')
    await t.waitForTurnEnd(s.id, 1)
    const today = new Date().toISOString().slice(0, 10)
    const row = { inputTokens: 21, outputTokens: 4, cacheReadTokens: 0, cacheWriteTokens: 0, costUsd: 0, attempts: 1 }
    expect(await client.usage()).toEqual({ usage: [row], limits: { costUsdPerMonth: 9.5, tokensPerDay: 1000 } })
    expect((await client.usage({ groupBy: 'day' })).usage).toEqual([{ day: today, ...row }])
    expect((await client.usage({ groupBy: 'model' })).usage).toEqual([{ model: t.models.ref(), ...row }])
    expect((await client.usage({ groupBy: 'session', from: today, to: today })).usage).toEqual([{ sessionId: s.id, ...row }])
    expect((await client.usage({ from: '2020-01-01', to: '2020-01-31', groupBy: 'day' })).usage).toEqual([])
    const bad = await client.usage({ from: '2020-02-30' }).catch((x) => x)
    expect({ status: bad.status, code: bad.code }).toEqual({ status: 400, code: 'bad-request' })
  })
})
