// API.md §10: while PostgreSQL cannot be reached, requests that need it are 503 unavailable with
// Retry-After (never 500, never a reset); /healthz stays 200 and /readyz says 503; once the
// database is back, the same server answers normally again. While a server starts (its port bound
// before anything is written, its database not yet migrated), every request is 503 the same way.

import net from 'node:net'
import pino from 'pino'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadConfig } from '../../src/config.js'
import { startApp, type App } from '../../src/app.js'
import { DB_KINDS, freshPgDatabase, openTestDb } from '../helpers/db.js'
import { gate } from '../helpers/scripted.js'
import type { Db } from '../../src/store/index.js'
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

/** A port nothing listens on right now. */
const freePort = () =>
  new Promise<number>((resolve) => {
    const s = net.createServer()
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as net.AddressInfo
      s.close(() => resolve(port))
    })
  })

describe.each(DB_KINDS)('a server that is starting (%s)', (kind) => {
  it('holds its port before the database is ready: 503 unavailable with Retry-After, /healthz 200, then it serves', async () => {
    const test = await openTestDb(kind)
    // the start stops at its first use of the database (the migration) until the gate opens
    const held = gate()
    const db = new Proxy(test.db, {
      get(target, p) {
        const v = Reflect.get(target, p)
        if (typeof v !== 'function') return v
        if (p === 'close') return v.bind(target)
        return async (...args: unknown[]) => (await held.promise, v.apply(target, args))
      },
    }) as Db
    const port = await freePort()
    const url = `http://127.0.0.1:${port}`
    const starting = startApp(loadConfig({ PORT: String(port), HOST: '127.0.0.1', AGENTD_ADMIN_TOKEN: 'admin', LOG_LEVEL: 'silent', ...(test.url ? { DATABASE_URL: test.url } : { AGENTD_DATA_DIR: test.dataDir! }) }), { db, log: pino({ level: 'silent' }) })
    let app: App | undefined
    try {
      await until('the port answers', async () => (await wireRequest(url, { method: 'GET', path: '/healthz' })).status === 200, 30000)
      for (const [method, path, body] of [['GET', '/readyz', undefined], ['GET', '/v1/sessions', undefined], ['POST', '/v1/admin/tenants', '{"name":"early"}'], ['GET', '/v1/sessions/x/ws', undefined]] as const) {
        const r = await wireRequest(url, { method, path, headers: { authorization: 'Bearer admin', 'content-type': 'application/json' }, body })
        expect(r.error, `${method} ${path}`).toBeUndefined()
        expect([r.status, r.body?.error?.code, r.headers['retry-after']], `${method} ${path}: ${r.text}`).toEqual([503, 'unavailable', '1'])
        expect(errorShapeViolation(r.status, r.body, { retryAfter: r.headers['retry-after'] as string })).toBeUndefined()
      }
      held.open()
      app = await starting
      expect(app.url).toBe(url)
      expect((await wireRequest(url, { method: 'GET', path: '/readyz' })).status).toBe(200)
      const made = await wireRequest(url, { method: 'POST', path: '/v1/admin/tenants', headers: { authorization: 'Bearer admin', 'content-type': 'application/json' }, body: '{"name":"later"}' })
      expect(made.status).toBe(201)
      // nothing the early requests asked for was done
      expect((await test.db.query<{ name: string }>('SELECT name FROM tenants ORDER BY name')).rows.map((r) => r.name)).toEqual(['later'])
    } finally {
      held.open()
      await (app ?? (await starting.catch(() => undefined)))?.close()
      await test.drop()
    }
  })
})
