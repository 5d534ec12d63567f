// Session logs kept as fixtures (test/fixtures/pi-ai-0.73): an agentd app whose models-file routes point at a
// local wire server (helpers/wire-server.ts) for each provider API, the export of a session (its row and
// its durable events, as stored) and its import into another database, and the replay that makes a loaded
// session send its next model request. Used by the script that wrote the fixtures and by the test that
// replays them on the current build, so both take exactly the same steps.

import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import pino from 'pino'
import { startApp, type App } from '../../src/app.js'
import { loadConfig } from '../../src/config.js'
import type { SessionEvent } from '../../src/session/index.js'
import type { Db } from '../../src/store/index.js'
import { anthropicStream, completionsStream, responsesStream, type SseEvent, type WireRequest, type WireServer } from './wire-server.js'

export const FIXTURE_APIS = ['anthropic-messages', 'openai-responses', 'openai-completions'] as const
export type FixtureApi = (typeof FIXTURE_APIS)[number]

/** The route of each API's fixture session: a models-file provider named after the API, one reasoning model. */
export const FIXTURE_ROUTES: Record<FixtureApi, { provider: string; model: string }> = {
  'anthropic-messages': { provider: 'wire-anthropic', model: 'claude-sonnet-4-5' },
  'openai-responses': { provider: 'wire-responses', model: 'gpt-5-mini' },
  'openai-completions': { provider: 'wire-chat', model: 'deepseek-reasoner' },
}

/** The models file of a fixture app: every route served by the wire server at `origin`. */
export function fixtureModels(origin: string) {
  // a small context window keeps manual compaction's retained tail to the last exchange (SPEC §12.7)
  const model = (api: FixtureApi) => ({ id: FIXTURE_ROUTES[api].model, reasoning: true, contextWindow: 600, maxTokens: 2048, cost: { input: 3, output: 15 } })
  return {
    providers: {
      'wire-anthropic': { api: 'anthropic-messages', baseUrl: origin, apiKey: 'sk-ant-fixture-key', models: [model('anthropic-messages')] },
      'wire-responses': { api: 'openai-responses', baseUrl: `${origin}/v1`, apiKey: 'sk-fixture-responses-key', models: [model('openai-responses')] },
      'wire-chat': { api: 'openai-completions', baseUrl: `${origin}/v1`, apiKey: 'sk-fixture-chat-key', models: [model('openai-completions')] },
    },
  }
}

/** A session as stored: its row (every column but the tenant's) and its durable events, bodies as stored. */
export interface SessionFixture {
  /** how and from which commit this file was written */
  generatedBy: string
  api: FixtureApi
  sessionId: string
  session: Record<string, unknown>
  events: Array<{ seq: number; time: number; type: string; body: string }>
  /** the followup that makes the loaded session send its next request */
  nextPrompt: string
  /** that request as the generating build sent it: path and body, byte for byte */
  nextRequest: { path: string; body: string }
}

export interface FixtureApp {
  app: App
  url: string
  key: string
  tenantId: string
  api<T = any>(method: string, p: string, body?: unknown): Promise<{ status: number; body: T; text: string }>
  events(id: string): Promise<SessionEvent[]>
  waitIdle(id: string, timeoutMs?: number): Promise<SessionEvent[]>
  close(): Promise<void>
}

const ADMIN = 'fixture-admin-token'

/**
 * Starts agentd on `db` with the fixture routes of the wire server at `origin` (or the models file
 * `models`), and creates a tenant.
 */
export async function startFixtureApp(o: { db: Db; origin: string; databaseUrl?: string; dataDir?: string; models?: unknown }): Promise<FixtureApp> {
  const env: Record<string, string> = {
    PORT: '0',
    HOST: '127.0.0.1',
    AGENTD_ADMIN_TOKEN: ADMIN,
    AGENTD_DATA_DIR: o.dataDir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'agentd-fixture-')),
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    AGENTD_SHUTDOWN_GRACE_MS: '1000',
    ...(o.databaseUrl ? { DATABASE_URL: o.databaseUrl } : {}),
  }
  const config = loadConfig(env)
  const app = await startApp(config, { db: o.db, log: pino({ level: config.logLevel }), llm: { models: o.models ?? fixtureModels(o.origin) } })
  const url = app.url!
  const call = async (method: string, p: string, body?: unknown, key?: string) => {
    const res = await fetch(url + p, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      body: body === undefined ? undefined : JSON.stringify(body),
    })
    const text = await res.text()
    let parsed: unknown
    try {
      parsed = text ? JSON.parse(text) : undefined
    } catch {
      parsed = undefined
    }
    return { status: res.status, body: parsed as any, text }
  }
  const admin = await call('POST', '/v1/admin/tenants', { name: 'fixture' }, ADMIN)
  if (admin.status !== 201) throw new Error(`tenant creation failed: ${admin.status} ${admin.text}`)
  const key: string = admin.body.apiKey
  const f: FixtureApp = {
    app,
    url,
    key,
    tenantId: admin.body.tenant.id,
    api: (method, p, body) => call(method, p, body, key),
    async events(id) {
      const r = await call('GET', `/v1/sessions/${encodeURIComponent(id)}/events?after=-1&limit=5000`, undefined, key)
      if (r.status !== 200) throw new Error(`events: ${r.status} ${r.text}`)
      return r.body.events
    },
    async waitIdle(id, timeoutMs = 15000) {
      const deadline = Date.now() + timeoutMs
      for (;;) {
        const s = await call('GET', `/v1/sessions/${encodeURIComponent(id)}`, undefined, key)
        const evs = await f.events(id)
        const open = evs.filter((e) => e.type === 'turn/start').length - evs.filter((e) => e.type === 'turn/end').length
        if (s.body?.status === 'idle' && open === 0) return evs
        if (Date.now() > deadline) throw new Error(`session ${id} not idle after ${timeoutMs} ms; log: ${evs.map((e) => e.type).join(' ')}`)
        await new Promise((r) => setTimeout(r, 25))
      }
    },
    close: () => app.close(),
  }
  return f
}

/** The stored session `id` of `tenantId`: its row (as JSON, without the tenant) and its events. */
export async function exportSession(db: Db, tenantId: string, id: string): Promise<Pick<SessionFixture, 'session' | 'events'>> {
  const row = await db.query<{ j: string }>('SELECT row_to_json(s)::text AS j FROM sessions s WHERE tenant_id = $1 AND id = $2', [tenantId, id])
  if (!row.rows[0]) throw new Error(`no session ${id}`)
  const { tenant_id: _t, ...session } = JSON.parse(row.rows[0].j) as Record<string, unknown>
  const evs = await db.query<{ seq: number; time: string | number; type: string; body: string }>('SELECT seq, time, type, body FROM session_events WHERE session_key = $1 ORDER BY seq', [session.key])
  return { session, events: evs.rows.map((e) => ({ seq: Number(e.seq), time: Number(e.time), type: e.type, body: e.body })) }
}

/**
 * Writes a fixture's session into `db` under `tenantId`, not held by any driver: the columns the fixture
 * has (a later schema's new columns take their defaults) and its events, bodies as they were stored.
 */
export async function importSession(db: Db, tenantId: string, f: Pick<SessionFixture, 'session' | 'events'>): Promise<void> {
  const row: Record<string, unknown> = { ...f.session, tenant_id: tenantId, lease_owner: null, lease_expires_at: null }
  const cols = Object.keys(row)
  for (const c of cols) if (!/^[a-z_]+$/.test(c)) throw new Error(`unexpected column ${c}`)
  await db.transaction(async (tx) => {
    await tx.query(`INSERT INTO sessions (${cols.join(', ')}) SELECT ${cols.join(', ')} FROM json_populate_record(NULL::sessions, $1::json)`, [JSON.stringify(row)])
    for (const e of f.events) await tx.query('INSERT INTO session_events (session_key, seq, time, type, body) VALUES ($1, $2, $3, $4, $5)', [row.key, e.seq, e.time, e.type, e.body])
  })
}

/** A short closing answer in the wire format of `api`. */
export function closingReply(api: FixtureApi, n: number): SseEvent[] {
  const model = FIXTURE_ROUTES[api].model
  if (api === 'anthropic-messages') {
    return anthropicStream({ id: `msg_close_${n}`, model, blocks: [{ type: 'text', text: 'Noted.' }], stopReason: 'end_turn', usage: { input_tokens: 40 }, deltaUsage: { output_tokens: 3 } })
  }
  if (api === 'openai-responses') {
    return responsesStream({ id: `resp_close_${n}`, model, items: [{ type: 'message', id: `msg_close_${n}`, text: 'Noted.' }], usage: { input_tokens: 40, output_tokens: 3 } })
  }
  return completionsStream({ id: `chatcmpl-close-${n}`, model, text: 'Noted.', usage: { prompt_tokens: 40, completion_tokens: 3 } })
}

/**
 * What a session sends next: a followup with `prompt` is posted, the model request it causes is taken
 * from the wire server (answered with a short closing text) and the session is left idle.
 */
export async function sendNext(f: FixtureApp, wire: WireServer, api: FixtureApi, sessionId: string, prompt: string): Promise<WireRequest> {
  const n = wire.requests.length
  wire.script({ sse: closingReply(api, n) })
  const r = await f.api('POST', `/v1/sessions/${encodeURIComponent(sessionId)}/followup`, { content: prompt })
  if (r.status !== 202) throw new Error(`followup: ${r.status} ${r.text}`)
  const req = await wire.waitForRequest(n)
  await f.waitIdle(sessionId)
  return req
}
