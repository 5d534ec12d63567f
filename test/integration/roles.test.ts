// AGENTD_ROLE (API.md §1): an `api` process serves HTTP and drives nothing; a `worker` drives sessions
// and answers only the operations routes; together on one PostgreSQL database they run a turn.

import pino from 'pino'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadConfig } from '../../src/config.js'
import { startApp, type App } from '../../src/app.js'
import { freshPgDatabase } from '../helpers/db.js'
import { ScriptedModels } from '../helpers/scripted.js'
import { leaveCrashedTurn } from '../helpers/crashed.js'
import { expectValidLog } from '../helpers/invariants.js'

describe('api and worker processes on one database', () => {
  let db: Awaited<ReturnType<typeof freshPgDatabase>>
  let api: App
  let worker: App
  let models: ScriptedModels
  const start = (role: string) =>
    startApp(loadConfig({ PORT: '0', HOST: '127.0.0.1', DATABASE_URL: db.url, AGENTD_ROLE: role, AGENTD_ADMIN_TOKEN: 'admin', LOG_LEVEL: 'silent' }), {
      log: pino({ level: 'silent' }),
      llm: { extraProviders: [models.provider], defaultModel: models.ref(), models: { providers: {} } },
    })
  beforeAll(async () => {
    db = await freshPgDatabase()
    models = new ScriptedModels()
    api = await start('api')
    worker = await start('worker')
  })
  afterAll(async () => {
    await api?.close()
    await worker?.close()
    models?.close()
    await db?.drop()
  })

  it('refuses AGENTD_ROLE api or worker without DATABASE_URL', () => {
    expect(() => loadConfig({ AGENTD_ROLE: 'worker' })).toThrow(/needs DATABASE_URL/)
    expect(() => loadConfig({ AGENTD_ROLE: 'api' })).toThrow(/needs DATABASE_URL/)
  })

  it('a followup accepted by the api process runs on the worker; the worker answers only operations routes', async () => {
    const call = async (app: App, method: string, path: string, body?: unknown, key?: string) => {
      const res = await fetch(app.url + path, { method, headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), ...(body ? { 'content-type': 'application/json' } : {}) }, body: body ? JSON.stringify(body) : undefined })
      return { status: res.status, body: (await res.json().catch(() => undefined)) as any }
    }
    const tenant = await call(api, 'POST', '/v1/admin/tenants', { name: 'roles' }, 'admin')
    expect(tenant.status).toBe(201)
    const key = tenant.body.apiKey
    const s = await call(api, 'POST', '/v1/sessions', {}, key)
    models.script(s.body.id, { text: ['from the worker'] })
    expect((await call(api, 'POST', `/v1/sessions/${s.body.id}/followup`, { content: 'hello' }, key)).status).toBe(202)
    const deadline = Date.now() + 10000
    let events: Array<{ type: string; data: any }> = []
    while (Date.now() < deadline) {
      events = (await call(api, 'GET', `/v1/sessions/${s.body.id}/events`, undefined, key)).body.events
      if (events.some((e) => e.type === 'turn/end')) break
      await new Promise((r) => setTimeout(r, 50))
    }
    expect(events.find((e) => e.type === 'turn/end')?.data.reason).toEqual({ kind: 'completed' })
    // the lease is the worker's; the api process drives nothing
    expect(worker.host!.agent((await api.db.query<{ key: string }>('SELECT key FROM sessions WHERE id = $1', [s.body.id])).rows[0].key)).toBeDefined()
    expect(api.host!.size).toBe(0)
    // the worker serves health and metrics, not the API
    expect((await call(worker, 'GET', '/healthz')).status).toBe(200)
    expect((await call(worker, 'GET', '/readyz')).status).toBe(200)
    expect((await call(worker, 'GET', `/v1/sessions/${s.body.id}`, undefined, key)).status).toBe(404)
    expect((await call(worker, 'POST', '/v1/admin/tenants', { name: 'x' }, 'admin')).status).toBe(404)
  })

  it('SPEC §19 on a worker: a turn its holder died in, found by the worker scan with no new delivery, is repaired and continued; the claimed prompt is admitted by the continuation with its id', async () => {
    const call = async (method: string, path: string, body?: unknown, key?: string) => {
      const res = await fetch(api.url + path, { method, headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), ...(body ? { 'content-type': 'application/json' } : {}) }, body: body ? JSON.stringify(body) : undefined })
      return { status: res.status, body: (await res.json().catch(() => undefined)) as any }
    }
    const key = (await call('POST', '/v1/admin/tenants', { name: 'roles-crash' }, 'admin')).body.apiKey
    const s = await call('POST', '/v1/sessions', {}, key)
    models.script(s.body.id, { text: ['answered after the crash'] })
    const crashed = await leaveCrashedTurn(api.db, s.body.id, { cancel: false })
    const deadline = Date.now() + 15000
    let events: Array<{ type: string; seq: number; time: number; data: any }> = []
    while (Date.now() < deadline) {
      events = (await call('GET', `/v1/sessions/${s.body.id}/events`, undefined, key)).body.events
      if (events.some((e) => e.type === 'turn/end' && e.data.turn === 2)) break
      await new Promise((r) => setTimeout(r, 50))
    }
    expect(events.slice(crashed.events.length, crashed.events.length + 3).map((e) => e.type)).toEqual(['step/end', 'turn/end', 'session/end-seed'])
    const turn2 = events.filter((e) => e.seq > crashed.events.length + 2)
    expect(turn2[0]).toMatchObject({ type: 'turn/start', data: { turn: 2, continues: 1 } })
    const users = events.filter((e) => e.type === 'user/message')
    expect(users.map((e) => e.data.id)).toEqual([crashed.prompt.id])
    expect(events.find((e) => e.type === 'turn/end' && e.data.turn === 2)?.data.reason).toEqual({ kind: 'completed' })
    expect(worker.host!.agent(crashed.key)).toBeDefined()
    expect(api.host!.size).toBe(0)
    expectValidLog(events as never)
  })
})
