// API.md §10: while PostgreSQL cannot be reached, requests that need it are 503 unavailable with
// Retry-After (never 500, never a reset); /healthz stays 200 and /readyz says 503; once the
// database is back, the same server answers normally again.

import pino from 'pino'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadConfig } from '../../src/config.js'
import { startApp, type App } from '../../src/app.js'
import { freshPgDatabase } from '../helpers/db.js'
import { errorShapeViolation } from '../faults/lib/contract.js'
import { CuttableProxy } from '../faults/lib/proxy.js'
import { wireRequest } from '../faults/lib/wire.js'
import { until } from '../helpers/wait.js'

describe('the database unreachable (pg)', () => {
  let db: Awaited<ReturnType<typeof freshPgDatabase>>
  let proxy: CuttableProxy
  let app: App
  let key: string
  beforeAll(async () => {
    db = await freshPgDatabase()
    const u = new URL(db.url)
    proxy = new CuttableProxy({ host: u.hostname, port: Number(u.port || 5432) })
    await proxy.open()
    app = await startApp(loadConfig({ PORT: '0', HOST: '127.0.0.1', DATABASE_URL: proxy.url(db.url), AGENTD_ADMIN_TOKEN: 'admin', LOG_LEVEL: 'silent' }), { log: pino({ level: 'silent' }) })
    const t = await wireRequest(app.url!, { method: 'POST', path: '/v1/admin/tenants', headers: { authorization: 'Bearer admin', 'content-type': 'application/json' }, body: '{"name":"u"}' })
    key = t.body.apiKey
  })
  afterAll(async () => {
    await proxy?.open()
    await app?.close()
    await proxy?.cut()
    await db?.drop()
  })

  it('is 503 unavailable with Retry-After on every route that needs it, and recovers', async () => {
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' }
    const made = await wireRequest(app.url!, { method: 'POST', path: '/v1/sessions', headers, body: '{"id":"s1"}' })
    expect(made.status).toBe(201)
    await proxy.cut()
    const calls: Array<[string, string, string | undefined]> = [
      ['GET', '/v1/sessions', undefined],
      ['GET', '/v1/sessions/s1', undefined],
      ['POST', '/v1/sessions', '{}'],
      ['POST', '/v1/sessions/s1/inject', '{"content":"x"}'],
      ['GET', '/v1/sessions/s1/events', undefined],
    ]
    for (let round = 0; round < 2; round++) {
      for (const [method, path, body] of calls) {
        const r = await wireRequest(app.url!, { method, path, headers, body, timeoutMs: 30000 })
        expect(r.error, `${method} ${path}`).toBeUndefined()
        expect(r.status, `${method} ${path}: ${r.text}`).toBe(503)
        expect(r.body.error.code).toBe('unavailable')
        expect(Number(r.headers['retry-after'])).toBeGreaterThan(0)
        expect(errorShapeViolation(r.status, r.body, { retryAfter: r.headers['retry-after'] as string })).toBeUndefined()
      }
    }
    expect((await wireRequest(app.url!, { method: 'GET', path: '/healthz' })).status).toBe(200)
    const ready = await wireRequest(app.url!, { method: 'GET', path: '/readyz' })
    expect(ready.status).toBe(503)
    expect(errorShapeViolation(ready.status, ready.body, { retryAfter: (ready.headers['retry-after'] as string) ?? null })).toBeUndefined()

    await proxy.open()
    await until('the server answers again', async () => (await wireRequest(app.url!, { method: 'GET', path: '/v1/sessions/s1', headers })).status === 200, 30000)
    expect((await wireRequest(app.url!, { method: 'POST', path: '/v1/sessions/s1/inject', headers, body: '{"content":"back"}' })).status).toBe(202)
  })
})
