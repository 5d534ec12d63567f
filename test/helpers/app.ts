// An agentd app started in-process on a fresh database (PostgreSQL or PGlite), listening on a real
// port, with a tenant and its key; helpers to call the API, read SSE over a real socket, and wait.

import fs from 'node:fs'
import path from 'node:path'
import pino from 'pino'
import { afterAll, beforeAll } from 'vitest'
import { loadConfig } from '../../src/config.js'
import { LOG_REDACT, startApp, type App, type StartOptions } from '../../src/app.js'
import type { Context } from '../../src/hooks/index.js'
import type { SessionEvent } from '../../src/session/index.js'
import type { Db } from '../../src/store/index.js'
import { openTestDb, type DbKind, type TestDb } from './db.js'
import { ScriptedModels, type ScriptedModelDef } from './scripted.js'

export interface TestAppOptions {
  kind: DbKind
  env?: Record<string, string>
  /** applied after the built-in plugins; they get the test database */
  plugins?: Array<(root: Context, db: Db) => void>
  models?: ScriptedModelDef[]
  /** reuse a database (restart tests) */
  testDb?: TestDb
  logLevel?: string
  /** the clock of tenant budget periods (StartOptions.clock) */
  clock?: () => number
  /** MCP tools/call timeout (StartOptions.mcpCallTimeoutMs) */
  mcpCallTimeoutMs?: number
  /** where the server's log lines go (with the server's own redaction), e.g. to search them */
  logStream?: { write(line: string): void }
  /** the webhook deliverer's timing (StartOptions.webhooks) */
  webhooks?: StartOptions['webhooks']
  /** the database as the server sees it, e.g. a counting wrapper (helpers/db.ts countingDb) */
  wrapDb?: (db: Db) => Db
  /** the PostgreSQL bus's presence heartbeat (StartOptions.busHeartbeatMs) */
  busHeartbeatMs?: number
  /** the PostgreSQL bus's window for doorbells and pokes (StartOptions.busWindowMs) */
  busWindowMs?: number
  /** tokens' clock, identity providers' key-set cache, key reload interval (StartOptions.credentials) */
  credentials?: StartOptions['credentials']
}

export interface TestApp {
  app: App
  url: string
  key: string
  tenantId: string
  adminToken: string
  models: ScriptedModels
  testDb: TestDb
  api<T = any>(method: string, path: string, body?: unknown, opts?: { key?: string | null; headers?: Record<string, string>; raw?: string; contentType?: string }): Promise<{ status: number; body: T; text: string; headers: Headers }>
  createSession(body?: Record<string, unknown>): Promise<{ id: string; [k: string]: unknown }>
  events(id: string, after?: number): Promise<SessionEvent[]>
  waitFor(id: string, pred: (e: SessionEvent, all: SessionEvent[]) => boolean, timeoutMs?: number): Promise<SessionEvent[]>
  waitForTurnEnd(id: string, turn: number, timeoutMs?: number): Promise<SessionEvent[]>
  waitIdle(id: string, timeoutMs?: number): Promise<SessionEvent[]>
  close(opts?: { keepDb?: boolean }): Promise<void>
}

export const ADMIN_TOKEN = 'test-admin-token'

/** How long waitFor and waitIdle wait for the bus before they read the session again anyway. */
const RECHECK_MS = 200

export async function startTestApp(o: TestAppOptions): Promise<TestApp> {
  const testDb = o.testDb ?? (await openTestDb(o.kind))
  const models = new ScriptedModels(o.models)
  const env: Record<string, string> = {
    PORT: '0',
    HOST: '127.0.0.1',
    AGENTD_ADMIN_TOKEN: ADMIN_TOKEN,
    AGENTD_DATA_DIR: testDb.dataDir ?? fs.mkdtempSync(path.join(process.env.TMPDIR ?? '/tmp', 'agentd-app-')),
    AGENTD_TOOL_HOSTS: '127.0.0.1,localhost',
    LOG_LEVEL: o.logLevel ?? process.env.TEST_LOG_LEVEL ?? 'silent',
    // a test that closes the app while a turn waits (a client tool, a held model) need not wait the
    // default 10 s grace for it; a test of the grace itself sets its own
    AGENTD_SHUTDOWN_GRACE_MS: '1000',
    ...(testDb.url ? { DATABASE_URL: testDb.url } : {}),
    ...(o.env ?? {}),
  }
  const config = loadConfig(env)
  const opts: StartOptions = {
    db: o.wrapDb ? o.wrapDb(testDb.db) : testDb.db,
    log: o.logStream ? pino({ level: config.logLevel, redact: LOG_REDACT }, o.logStream) : pino({ level: config.logLevel }),
    llm: { extraProviders: [models.provider], defaultModel: models.ref(), models: { providers: {} } },
    plugins: o.plugins?.map((p) => (root: Context) => p(root, testDb.db)),
    clock: o.clock,
    mcpCallTimeoutMs: o.mcpCallTimeoutMs,
    webhooks: o.webhooks,
    busHeartbeatMs: o.busHeartbeatMs,
    busWindowMs: o.busWindowMs,
    credentials: o.credentials,
  }
  const app = await startApp(config, opts)
  const url = app.url!
  const call = async (method: string, p: string, body?: unknown, c: { key?: string | null; headers?: Record<string, string>; raw?: string; contentType?: string } = {}) => {
    const headers: Record<string, string> = { ...(c.headers ?? {}) }
    if (c.key !== null) headers.authorization = `Bearer ${c.key ?? key}`
    let payload: string | undefined
    if (c.raw !== undefined) {
      payload = c.raw
      headers['content-type'] = c.contentType ?? 'application/json'
    } else if (body !== undefined) {
      payload = JSON.stringify(body)
      headers['content-type'] = 'application/json'
    }
    const res = await fetch(url + p, { method, headers, body: payload })
    const text = await res.text()
    let parsed: unknown
    try {
      parsed = text ? JSON.parse(text) : undefined
    } catch {
      parsed = undefined
    }
    return { status: res.status, body: parsed as any, text, headers: res.headers }
  }
  /**
   * What waitFor and waitIdle wait on between two reads over HTTP: the next thing the app's bus says of
   * the session — a commit in this process or a doorbell of another one, a live frame such as its
   * status (not the model's streamed chunks), a poke — or RECHECK_MS, whichever comes first (instead of reading every 25 ms). Armed before
   * the read it follows, so nothing that happens after that read is missed.
   */
  const keys = new Map<string, string>()
  const change = async (id: string): Promise<{ next: Promise<void>; cancel(): void }> => {
    let key = keys.get(id)
    if (!key) {
      const { rows } = await app.db.query<{ key: string }>('SELECT key FROM sessions WHERE tenant_id = $1 AND id = $2', [tenantId, id])
      if (rows[0]) keys.set(id, (key = rows[0].key))
    }
    let done!: () => void
    const next = new Promise<void>((r) => (done = r))
    const timer = setTimeout(() => done(), RECHECK_MS)
    const off = key ? app.bus.live.subscribe(key, { commit: () => done(), live: (f) => void (f.event !== 'agent/assistant-stream' && done()), poke: () => done(), reset: () => done() }) : () => {}
    return {
      next,
      cancel() {
        clearTimeout(timer)
        off()
        done()
      },
    }
  }
  const admin = await call('POST', '/v1/admin/tenants', { name: 'test' }, { key: ADMIN_TOKEN })
  if (admin.status !== 201) throw new Error(`tenant creation failed: ${admin.status} ${admin.text}`)
  const key: string = admin.body.apiKey
  const tenantId: string = admin.body.tenant.id
  const t: TestApp = {
    app,
    url,
    key,
    tenantId,
    adminToken: ADMIN_TOKEN,
    models,
    testDb,
    api: call,
    async createSession(body = {}) {
      const r = await call('POST', '/v1/sessions', { model: models.ref(), ...body })
      if (r.status !== 201) throw new Error(`create session: ${r.status} ${r.text}`)
      return r.body
    },
    async events(id, after = -1) {
      const out: SessionEvent[] = []
      for (;;) {
        const r = await call('GET', `/v1/sessions/${encodeURIComponent(id)}/events?after=${after}&limit=5000`)
        if (r.status !== 200) throw new Error(`events: ${r.status} ${r.text}`)
        out.push(...r.body.events)
        if (!r.body.events.length || r.body.events.at(-1).seq >= r.body.headSeq) return out
        after = r.body.events.at(-1).seq
      }
    },
    async waitFor(id, pred, timeoutMs = 10000) {
      const deadline = Date.now() + timeoutMs
      for (;;) {
        const wake = await change(id)
        try {
          const evs = await t.events(id)
          if (evs.some((e) => pred(e, evs))) return evs
          if (Date.now() > deadline) throw new Error(`timed out waiting in session ${id}; log: ${evs.map((e) => e.type).join(' ')}`)
          await wake.next
        } finally {
          wake.cancel()
        }
      }
    },
    waitForTurnEnd(id, turn, timeoutMs) {
      return t.waitFor(id, (e) => e.type === 'turn/end' && (e.data as { turn: number }).turn === turn, timeoutMs)
    },
    async waitIdle(id, timeoutMs = 10000) {
      const deadline = Date.now() + timeoutMs
      for (;;) {
        const wake = await change(id)
        try {
          const s = await call('GET', `/v1/sessions/${encodeURIComponent(id)}`)
          const evs = await t.events(id)
          const open = evs.filter((e) => e.type === 'turn/start').length - evs.filter((e) => e.type === 'turn/end').length
          if (s.body?.status === 'idle' && open === 0) return evs
          if (Date.now() > deadline) throw new Error(`session ${id} not idle after ${timeoutMs} ms`)
          await wake.next
        } finally {
          wake.cancel()
        }
      }
    },
    async close(c = {}) {
      await app.close()
      models.close()
      if (!c.keepDb) await testDb.drop()
    },
  }
  return t
}

/** One SSE frame. */
export interface SseFrame {
  event?: string
  id?: string
  data?: string
  json?: any
  comment?: string
}

/** An SSE reader over fetch: collects frames until closed. */
export async function openSse(url: string, headers: Record<string, string> = {}): Promise<{ status: number; frames: SseFrame[]; done: Promise<void>; close(): void; waitFor(pred: (f: SseFrame) => boolean, timeoutMs?: number): Promise<SseFrame> }> {
  const ac = new AbortController()
  const res = await fetch(url, { headers: { accept: 'text/event-stream', ...headers }, signal: ac.signal })
  const frames: SseFrame[] = []
  const listeners = new Set<() => void>()
  const done = (async () => {
    if (!res.body) return
    const reader = res.body.getReader()
    const dec = new TextDecoder()
    let buf = ''
    try {
      for (;;) {
        const { value, done: end } = await reader.read()
        if (end) break
        buf += dec.decode(value, { stream: true })
        let i: number
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i)
          buf = buf.slice(i + 2)
          const f: SseFrame = {}
          for (const line of block.split('\n')) {
            if (line.startsWith(':')) f.comment = line.slice(1).trim()
            else {
              const c = line.indexOf(':')
              const k = line.slice(0, c)
              const v = line.slice(c + 1).replace(/^ /, '')
              if (k === 'event') f.event = v
              else if (k === 'id') f.id = v
              else if (k === 'data') f.data = f.data === undefined ? v : `${f.data}\n${v}`
            }
          }
          if (f.data !== undefined) {
            try {
              f.json = JSON.parse(f.data)
            } catch {
              // not JSON
            }
          }
          frames.push(f)
          for (const l of [...listeners]) l()
        }
      }
    } catch {
      // aborted
    }
  })()
  return {
    status: res.status,
    frames,
    done,
    close: () => ac.abort(),
    waitFor(pred, timeoutMs = 10000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const f = frames.find(pred)
          if (f) {
            listeners.delete(check)
            clearTimeout(timer)
            resolve(f)
          }
        }
        const timer = setTimeout(() => {
          listeners.delete(check)
          reject(new Error(`SSE: timed out; frames: ${frames.map((f) => f.event).join(' ')}`))
        }, timeoutMs)
        listeners.add(check)
        check()
      })
    },
  }
}

/**
 * Two apps in this process on one PostgreSQL database, each with its own PgBus: `driver` drives
 * sessions, `api` (AGENTD_ROLE=api) only serves HTTP. Started before the suite's tests, closed after.
 */
export function driverAndApi(): { readonly driver: TestApp; readonly api: TestApp } {
  const apps = {} as { driver: TestApp; api: TestApp }
  beforeAll(async () => {
    apps.driver = await startTestApp({ kind: 'pg' })
    apps.api = await startTestApp({ kind: 'pg', testDb: apps.driver.testDb, env: { AGENTD_ROLE: 'api' } })
  })
  afterAll(async () => {
    await apps.api?.close({ keepDb: true })
    await apps.driver?.close()
  })
  return apps
}
