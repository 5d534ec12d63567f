// API.md §1 AGENTD_RATE_LIMIT_PER_MIN and §10: beyond the per-key budget, 429 rate-limited with
// Retry-After; another key has its own budget; streams are exempt.

import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openSse, startTestApp, type TestApp } from '../helpers/app.js'

describe('rate limits per API key', () => {
  let t: TestApp
  beforeAll(async () => {
    t = await startTestApp({ kind: 'pglite', env: { AGENTD_RATE_LIMIT_PER_MIN: '5' } })
  })
  afterAll(async () => {
    await t?.close()
  })

  it('answers 429 rate-limited with Retry-After past the budget, per key, and leaves streams alone', async () => {
    const s = await t.createSession() // 1 request of the budget
    const codes: number[] = []
    for (let i = 0; i < 6; i++) codes.push((await t.api('GET', `/v1/sessions/${s.id}`)).status)
    expect(codes.slice(0, 4)).toEqual([200, 200, 200, 200])
    expect(codes.slice(4)).toEqual([429, 429])
    const limited = await t.api('GET', '/v1/sessions')
    expect(limited.status).toBe(429)
    expect(limited.body.error.code).toBe('rate-limited')
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0)
    // the stream is exempt
    const sse = await openSse(`${t.url}/v1/sessions/${s.id}/stream`, { authorization: `Bearer ${t.key}` })
    expect(sse.status).toBe(200)
    await sse.waitFor((f) => f.event === 'stream/ready')
    sse.close()
    // another key of the same tenant has its own budget
    const k = await t.api('POST', `/v1/admin/tenants/${t.tenantId}/keys`, {}, { key: t.adminToken })
    expect((await t.api('GET', `/v1/sessions/${s.id}`, undefined, { key: k.body.apiKey })).status).toBe(200)
  })
})
