// Shared bench machinery: fresh databases (PostgreSQL or PGlite), an agentd app started in-process
// with a tenant, a Db wrapper that counts transactions and statements, HTTP/SSE clients over raw
// node:http, and small statistics helpers.

import crypto from 'node:crypto'
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import pg from 'pg'
import pino from 'pino'
import type { PGlite } from '@electric-sql/pglite'
import type { Provider } from '@earendil-works/pi-ai'
import { loadConfig } from '../src/config.js'
import { startApp, type App } from '../src/app.js'
import type { Context } from '../src/hooks/index.js'
import { migrate, openPg, openPglite, type Db, type Queryable, type QueryResult } from '../src/store/index.js'

export type Kind = 'pg' | 'pglite'
export const ADMIN_TOKEN = 'bench-admin-token'

// ---------------------------------------------------------------------------------------------
// Databases

export const PG_BASE = process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/'

export function pgUrl(database: string): string {
  const u = new URL(PG_BASE)
  u.pathname = `/${database}`
  return u.toString()
}

const RUN_TAG = `${new Date().toISOString().replace(/[-:TZ.]/g, '').slice(0, 14)}_${crypto.randomBytes(2).toString('hex')}`
let dbCounter = 0

/** All databases this run created and has not dropped yet (dropped on exit too). */
const live = new Set<{ drop(): Promise<void> }>()

export async function dropAll(): Promise<void> {
  for (const d of [...live]) await d.drop().catch(() => {})
}

/** A fresh PostgreSQL database agentd_bench_<ts>_<n>; drop() removes it. */
export async function freshPg(): Promise<{ name: string; url: string; drop(): Promise<void> }> {
  const name = `agentd_bench_${RUN_TAG}_${++dbCounter}`
  const admin = new pg.Client({ connectionString: pgUrl('postgres') })
  await admin.connect()
  try {
    await admin.query(`CREATE DATABASE ${name}`)
  } finally {
    await admin.end()
  }
  const h = {
    name,
    url: pgUrl(name),
    async drop() {
      live.delete(h)
      const c = new pg.Client({ connectionString: pgUrl('postgres') })
      await c.connect()
      try {
        await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
      } finally {
        await c.end()
      }
    },
  }
  live.add(h)
  return h
}

/** A fresh temporary directory (PGlite data dir lives in <dir>/pgdata, as agentd lays it out). */
export function freshDir(prefix = 'agentd-bench-'): { dir: string; drop(): Promise<void> } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix))
  const h = {
    dir,
    async drop() {
      live.delete(h)
      fs.rmSync(dir, { recursive: true, force: true })
    },
  }
  live.add(h)
  return h
}

let template: Promise<string> | undefined

/**
 * A fresh PGlite data directory (layout of agentd: <dir>/pgdata): a copy of one migrated template
 * made once per run, since PGlite's initdb costs seconds of WASM. Migrations are then a no-op.
 */
export async function freshPgliteDir(): Promise<{ dir: string; drop(): Promise<void> }> {
  template ??= (async () => {
    const t = freshDir('agentd-bench-template-')
    const db = await openPglite(`${t.dir}/pgdata`)
    await migrate(db)
    await db.close()
    return t.dir
  })()
  const src = await template
  const d = freshDir()
  fs.cpSync(src, d.dir, { recursive: true })
  return d
}

/** Per-turn statement mix between two counter snapshots (bySql deltas / turns, largest first). */
export function sqlMix(a: DbCounters, b: DbCounters, turns: number): Record<string, number> {
  const out: Array<[string, number]> = []
  for (const [k, v] of Object.entries(b.bySql)) {
    const d = v - (a.bySql[k] ?? 0)
    if (d > 0) out.push([k, Math.round((d / turns) * 100) / 100])
  }
  return Object.fromEntries(out.sort((x, y) => y[1] - x[1]))
}

export const snapshot = (c: DbCounters): DbCounters => ({ ...c, bySql: { ...c.bySql } })

/** Counts what agentd asks of its database (no change to src: a wrapper around the Db it is given). */
export interface DbCounters {
  transactions: number
  statements: number
  /** statements outside a transaction */
  autocommit: number
  /** of those, statements that write (INSERT/UPDATE/DELETE, also inside a WITH): each is a commit */
  autocommitWrites: number
  /** statements by their first words (diagnostics): "tx|auto: SELECT key, next_seq …" → count */
  bySql: Record<string, number>
}

// memoized per SQL text: the counting wrapper runs in the server's process and must not add to its CPU
const keyCache = new Map<string, { tx: string; auto: string; writes: boolean }>()
function sqlInfo(sql: string): { tx: string; auto: string; writes: boolean } {
  // keyed by length and head, not the whole text: a text the server builds per call is a fresh string,
  // and hashing all of it on every statement showed in the server's profile
  const id = `${sql.length}\u0000${sql.slice(0, 200)}`
  let k = keyCache.get(id)
  if (!k) {
    const head = sql.slice(0, 200).replace(/\s+/g, ' ').trim().slice(0, 70)
    k = { tx: `tx: ${head}`, auto: `auto: ${head}`, writes: /\b(INSERT|UPDATE|DELETE)\b/i.test(sql.slice(0, 2000)) }
    if (keyCache.size < 10_000) keyCache.set(id, k)
  }
  return k
}

export function countingDb(inner: Db, c: DbCounters): Db {
  const wrapQ = (q: Queryable): Queryable => ({
    query<T>(sql: string, params?: unknown[]): Promise<QueryResult<T>> {
      c.statements++
      const k = sqlInfo(sql).tx
      c.bySql[k] = (c.bySql[k] ?? 0) + 1
      return q.query<T>(sql, params)
    },
  })
  return {
    kind: inner.kind,
    query<T>(sql: string, params?: unknown[]) {
      c.statements++
      c.autocommit++
      const info = sqlInfo(sql)
      if (info.writes) c.autocommitWrites++
      const k = info.auto
      c.bySql[k] = (c.bySql[k] ?? 0) + 1
      return inner.query<T>(sql, params)
    },
    transaction<T>(fn: (tx: Queryable) => Promise<T>) {
      c.transactions++
      return inner.transaction((tx) => fn(wrapQ(tx)))
    },
    exec: (sql: string) => inner.exec(sql),
    withConnection: (fn) => inner.withConnection(fn),
    close: () => inner.close(),
  }
}

/** What the floor replays against: a pg pool (same size as agentd's) or the same PGlite instance. */
export type RawDb = { kind: 'pg'; pool: pg.Pool } | { kind: 'pglite'; pglite: PGlite }

export interface BenchDb {
  kind: Kind
  /** agentd's Db (counting) */
  db: Db
  counters: DbCounters
  url?: string
  dataDir?: string
  raw(): RawDb
  /** closes everything and removes the database */
  drop(): Promise<void>
}

export const POOL_SIZE = 20 // agentd's default pool size (src/store/db.ts openDb)

export async function openBenchDb(kind: Kind): Promise<BenchDb> {
  const counters: DbCounters = { transactions: 0, statements: 0, autocommit: 0, autocommitWrites: 0, bySql: {} }
  if (kind === 'pg') {
    const fresh = await freshPg()
    const inner = openPg(fresh.url, POOL_SIZE)
    let pool: pg.Pool | undefined
    return {
      kind,
      db: countingDb(inner, counters),
      counters,
      url: fresh.url,
      raw: () => {
        if (!pool) {
          pool = new pg.Pool({ connectionString: fresh.url, max: POOL_SIZE })
          pool.on('error', () => {}) // an idle client dropped at teardown must not end the run
        }
        return { kind: 'pg', pool }
      },
      async drop() {
        await pool?.end().catch(() => {})
        await inner.close().catch(() => {})
        await fresh.drop()
      },
    }
  }
  const d = await freshPgliteDir()
  const inner = await openPglite(`${d.dir}/pgdata`)
  return {
    kind,
    db: countingDb(inner, counters),
    counters,
    dataDir: d.dir,
    raw: () => ({ kind: 'pglite', pglite: (inner as unknown as { pglite: PGlite }).pglite }),
    async drop() {
      await inner.close().catch(() => {})
      await d.drop()
    },
  }
}

// ---------------------------------------------------------------------------------------------
// The app in-process

export interface BenchApp {
  app: App
  url: string
  key: string
  tenantId: string
  bdb: BenchDb
  close(): Promise<void>
}

export interface BenchAppOptions {
  plugins?: Array<(root: Context) => void>
  extraProviders?: Provider[]
  env?: Record<string, string>
}

/** startApp on a fresh database, listening on 127.0.0.1:<random>, with a tenant created by the admin route. */
export async function startBenchApp(kind: Kind, o: BenchAppOptions = {}): Promise<BenchApp> {
  const bdb = await openBenchDb(kind)
  const dataDir = bdb.dataDir ?? freshDir().dir
  const env: Record<string, string> = {
    PORT: '0',
    HOST: '127.0.0.1',
    AGENTD_ADMIN_TOKEN: ADMIN_TOKEN,
    AGENTD_DATA_DIR: dataDir,
    LOG_LEVEL: 'silent',
    AGENTD_RATE_LIMIT_PER_MIN: '100000000',
    ...(bdb.url ? { DATABASE_URL: bdb.url } : {}),
    ...(o.env ?? {}),
  }
  const config = loadConfig(env)
  const app = await startApp(config, {
    listen: true,
    db: bdb.db,
    log: pino({ level: 'silent' }),
    llm: { extraProviders: o.extraProviders ?? [] },
    plugins: o.plugins,
  })
  const url = app.url!
  // a server alone on PostgreSQL forwards its doorbells and live frames to other processes only for a
  // grace after its bus connects (src/bus/pg.ts presence): measure it as it runs after that
  const bus = app.bus as { forwarding?: boolean }
  for (const until = Date.now() + 30_000; bus.forwarding === true && Date.now() < until; ) await sleep(100)
  const r = await request('POST', `${url}/v1/admin/tenants`, ADMIN_TOKEN, { name: 'bench' })
  if (r.status !== 201) throw new Error(`tenant creation failed: ${r.status} ${r.text}`)
  return {
    app,
    url,
    key: r.json.apiKey,
    tenantId: r.json.tenant.id,
    bdb,
    async close() {
      await app.close()
      await bdb.drop()
    },
  }
}

// ---------------------------------------------------------------------------------------------
// HTTP

export const keepAlive = new http.Agent({ keepAlive: true, maxSockets: 256 })

export function request(method: string, url: string, key: string | undefined, body?: unknown, agent: http.Agent | false = keepAlive): Promise<{ status: number; text: string; json: any }> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body)
    const headers: Record<string, string> = {}
    if (key) headers.authorization = `Bearer ${key}`
    if (payload !== undefined) {
      headers['content-type'] = 'application/json'
      headers['content-length'] = String(Buffer.byteLength(payload))
    }
    const req = http.request(url, { method, headers, agent }, (res) => {
      const parts: Buffer[] = []
      res.on('data', (b: Buffer) => parts.push(b))
      res.on('end', () => {
        const text = Buffer.concat(parts).toString('utf8')
        let json: unknown
        try {
          json = text ? JSON.parse(text) : undefined
        } catch {
          json = undefined
        }
        resolve({ status: res.statusCode ?? 0, text, json })
      })
      res.on('error', reject)
    })
    req.on('error', reject)
    if (payload !== undefined) req.write(payload)
    req.end()
  })
}

export async function createSession(url: string, key: string, body: Record<string, unknown>): Promise<{ id: string; headSeq: number }> {
  const r = await request('POST', `${url}/v1/sessions`, key, body)
  if (r.status !== 201) throw new Error(`create session: ${r.status} ${r.text}`)
  return r.json
}

export async function getEvents(url: string, key: string, id: string): Promise<any[]> {
  const out: any[] = []
  let after = -1
  for (;;) {
    const r = await request('GET', `${url}/v1/sessions/${id}/events?after=${after}&limit=5000`, key)
    if (r.status !== 200) throw new Error(`events: ${r.status} ${r.text}`)
    out.push(...r.json.events)
    if (!r.json.events.length || r.json.events.at(-1).seq >= r.json.headSeq) return out
    after = r.json.events.at(-1).seq
  }
}

export interface SseFrame {
  event?: string
  id?: string
  data?: string
}

/**
 * An SSE subscription over raw node:http (agent:false: one socket each, no pool limit). Frames are
 * parsed incrementally and handed to onFrame with the receive time (ms, sub-ms resolution).
 */
export function openSse(url: string, key: string, onFrame: (f: SseFrame, at: number) => void): { ready: Promise<void>; close(): void; closed: Promise<void> } {
  let closeFn = () => {}
  let resolveClosed!: () => void
  const closed = new Promise<void>((r) => (resolveClosed = r))
  const ready = new Promise<void>((resolve, reject) => {
    const req = http.request(url, { method: 'GET', agent: false, headers: { accept: 'text/event-stream', authorization: `Bearer ${key}` } }, (res) => {
      if (res.statusCode !== 200) {
        reject(new Error(`SSE ${url}: ${res.statusCode}`))
        res.resume()
        return
      }
      res.setEncoding('utf8')
      let buf = ''
      let isReady = false
      res.on('data', (chunk: string) => {
        const at = now()
        buf += chunk
        let i: number
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i)
          buf = buf.slice(i + 2)
          const f: SseFrame = {}
          let start = 0
          while (start <= block.length) {
            let end = block.indexOf('\n', start)
            if (end < 0) end = block.length
            const line = block.slice(start, end)
            start = end + 1
            if (!line || line.charCodeAt(0) === 58) continue
            const c = line.indexOf(':')
            const k = line.slice(0, c)
            const v = line.charCodeAt(c + 1) === 32 ? line.slice(c + 2) : line.slice(c + 1)
            if (k === 'event') f.event = v
            else if (k === 'id') f.id = v
            else if (k === 'data') f.data = f.data === undefined ? v : `${f.data}\n${v}`
          }
          if (f.event === undefined && f.data === undefined) continue
          if (!isReady && f.event === 'stream/ready') {
            isReady = true
            resolve()
          }
          onFrame(f, at)
        }
      })
      res.on('close', () => {
        if (!isReady) reject(new Error(`SSE ${url} closed before stream/ready`))
        resolveClosed()
      })
      res.on('error', () => {})
    })
    req.on('error', (e) => {
      reject(e)
      resolveClosed()
    })
    req.end()
    closeFn = () => req.destroy()
  })
  return { ready, close: () => closeFn(), closed }
}

// ---------------------------------------------------------------------------------------------
// Time and statistics

/** Wall clock in ms with sub-ms resolution (comparable with Date.now() and across processes). */
export const now = () => performance.timeOrigin + performance.now()

/** USER_HZ: the unit of /proc's CPU times, 100 on every Linux architecture node runs on */
const CLOCK_TICKS = 100

/**
 * CPU time (ms, user + system) of every PostgreSQL process on this machine (its backends, WAL
 * writer, checkpointer), from /proc; null when none is visible (PostgreSQL runs elsewhere, or not on
 * Linux). A window's difference is the database's share of the machine's cores: on one machine the
 * server, the database and the load generator share them. Clock ticks (usually 10 ms) make it a
 * figure for windows of a second or more. A backend that exits inside the window is counted too: the
 * postmaster reaps it, and its times move to the postmaster's cutime and cstime, which are added
 * (without them a pool closing idle connections made the difference negative).
 */
export function dbCpuMs(): number | null {
  let dirs: string[]
  try {
    dirs = fs.readdirSync('/proc')
  } catch {
    return null
  }
  let ticks = 0
  let seen = false
  for (const d of dirs) {
    if (d.charCodeAt(0) < 48 || d.charCodeAt(0) > 57) continue
    let stat: string
    try {
      stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8')
    } catch {
      continue
    }
    // pid (comm) state ppid … : of the fields after the comm's closing parenthesis, utime and stime are
    // the 12th and 13th, and cutime and cstime (children waited for) the 14th and 15th
    const close = stat.lastIndexOf(')')
    if (stat.slice(stat.indexOf('(') + 1, close) !== 'postgres') continue
    const f = stat.slice(close + 2).split(' ')
    ticks += Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])
    seen = true
  }
  return seen ? (ticks * 1000) / CLOCK_TICKS : null
}

export function quantile(sorted: number[], q: number): number {
  if (!sorted.length) return NaN
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))
  return sorted[i]
}

export interface Dist {
  n: number
  p50: number
  p90: number
  p99: number
  mean: number
  min: number
  max: number
}

export function dist(xs: number[]): Dist {
  const s = [...xs].sort((a, b) => a - b)
  const mean = s.reduce((a, b) => a + b, 0) / (s.length || 1)
  return { n: s.length, p50: quantile(s, 0.5), p90: quantile(s, 0.9), p99: quantile(s, 0.99), mean, min: s[0] ?? NaN, max: s[s.length - 1] ?? NaN }
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms))

export const round = (x: number, d = 2) => (Number.isFinite(x) ? Math.round(x * 10 ** d) / 10 ** d : x)

/** Runs fn over items with at most `limit` in flight. */
export async function pool<T, R>(items: T[], limit: number, fn: (x: T, i: number) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length)
  let next = 0
  const worker = async () => {
    for (;;) {
      const i = next++
      if (i >= items.length) return
      out[i] = await fn(items[i], i)
    }
  }
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker))
  return out
}

/**
 * POSTs `body` and reads the SSE answer until it ends: the receive times of the frames `counts` picks
 * (a protocol's streamed text frames: Responses, the AI SDK UI stream, AG-UI).
 */
export async function postSseTimes(url: string, key: string, body: unknown, counts: (frame: string) => boolean): Promise<number[]> {
  const res = await fetch(url, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) })
  if (res.status !== 200 || !res.body) throw new Error(`${url}: ${res.status}`)
  const out: number[] = []
  const reader = res.body.getReader()
  const dec = new TextDecoder()
  let buf = ''
  for (;;) {
    const { value, done } = await reader.read()
    if (done) break
    const at = now()
    buf += dec.decode(value, { stream: true })
    let i: number
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const frame = buf.slice(0, i)
      buf = buf.slice(i + 2)
      if (counts(frame)) out.push(at)
    }
  }
  return out
}
