// Real agentd server processes (`node --import tsx src/main.ts`) on one PostgreSQL database, with a
// marker-routed OpenAI chat-completions mock and a local http tool server. Every process is spawned
// without a shell, so its pid is node's own; close() (and, as a safety net, process exit) SIGKILLs
// every process still running.

import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import pg from 'pg'
import { freshPgDatabase } from '../helpers/db.js'
import { serverArgs } from '../helpers/server-build.js'

const PROJECT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

// ---------------------------------------------------------------------------------------------
// The model: an OpenAI chat-completions server (streaming only). A request is routed by the marker
// `[[m:…]]` found in its messages (the session's system prompt carries it); each marker has a FIFO
// of steps and an optional fallback.

export const MARKER_RE = /\[\[m:[^\]]+\]\]/

export interface MockStep {
  /** text deltas */
  chunks?: string[]
  toolCalls?: Array<{ id: string; name: string; arguments: object }>
  /** after `holdAfter` text deltas, wait for `gate` (or the client going away) */
  holdAfter?: number
  gate?: Promise<unknown>
  /** after the deltas, never finish: wait until the client goes away */
  hang?: boolean
  delayMs?: number
  /** answer this HTTP error status instead of a stream (with `headers`, e.g. retry-after-ms) */
  status?: number
  headers?: Record<string, string>
}

export interface MockRequest {
  marker: string | null
  body: any
  /** the request's headers (lower-case names) */
  headers: http.IncomingHttpHeaders
  at: number
  /** the client closed the connection before the answer ended */
  closedEarly: boolean
  finished: boolean
}

export interface MockLlm {
  readonly baseUrl: string
  script(marker: string, ...steps: Array<MockStep | ((r: MockRequest) => MockStep)>): void
  fallback(marker: string, step: MockStep | ((r: MockRequest) => MockStep)): void
  requests(marker: string): MockRequest[]
  waitForRequest(marker: string, n: number, timeoutMs?: number): Promise<MockRequest>
  /** the most requests of one marker that were in flight at the same time */
  maxInFlight(marker: string): number
  close(): Promise<void>
}

const textOf = (content: unknown): string =>
  typeof content === 'string' ? content : Array.isArray(content) ? content.map((p: any) => (p?.type === 'text' ? (p.text ?? '') : '')).join('\n') : ''

/**
 * A request's body, or null when the client's connection broke before it was whole. The mock servers'
 * handlers are async: a throw there would be an unhandled rejection in the test process, and a killed
 * agentd process breaks its connections at any byte.
 */
async function readBody(req: http.IncomingMessage): Promise<string | null> {
  let raw = ''
  req.setEncoding('utf8')
  try {
    for await (const c of req) raw += c
  } catch {
    return null
  }
  return raw
}

export async function startMockLlm(): Promise<MockLlm> {
  const queues = new Map<string, Array<MockStep | ((r: MockRequest) => MockStep)>>()
  const fallbacks = new Map<string, MockStep | ((r: MockRequest) => MockStep)>()
  const records: MockRequest[] = []
  const inFlight = new Map<string, number>()
  const maxFlight = new Map<string, number>()
  const open = new Set<http.ServerResponse>()

  const server = http.createServer(async (req, res) => {
    const raw = await readBody(req)
    if (raw === null) return // the agentd process went away mid-request (a kill); nothing to answer
    let body: any
    try {
      body = JSON.parse(raw)
    } catch {
      body = undefined
    }
    let marker: string | null = null
    for (const m of body?.messages ?? []) {
      const hit = textOf(m?.content).match(MARKER_RE)
      if (hit) {
        marker = hit[0]
        break
      }
    }
    const rec: MockRequest = { marker, body, headers: { ...req.headers }, at: Date.now(), closedEarly: false, finished: false }
    records.push(rec)
    const mk = marker ?? '?'
    inFlight.set(mk, (inFlight.get(mk) ?? 0) + 1)
    maxFlight.set(mk, Math.max(maxFlight.get(mk) ?? 0, inFlight.get(mk)!))
    open.add(res)
    let gone = false
    let counted = true
    const leave = () => {
      if (!counted) return
      counted = false
      inFlight.set(mk, (inFlight.get(mk) ?? 1) - 1)
    }
    let goneResolve!: () => void
    const goneP = new Promise<void>((r) => (goneResolve = r))
    res.on('close', () => {
      open.delete(res)
      if (!rec.finished) rec.closedEarly = true
      gone = true
      leave()
      goneResolve()
    })
    const q = marker ? queues.get(marker) : undefined
    let step = q?.shift() ?? (marker ? fallbacks.get(marker) : undefined)
    if (!step) {
      rec.finished = true
      leave()
      res.writeHead(500, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ error: { message: `mock: no scripted answer for ${marker}`, type: 'server_error' } }))
      return
    }
    const s: MockStep = typeof step === 'function' ? step(rec) : step
    if (s.delayMs) await sleep(s.delayMs)
    if (gone) return
    if (s.status) {
      rec.finished = true
      leave()
      res.writeHead(s.status, { 'content-type': 'application/json', ...(s.headers ?? {}) })
      res.end(JSON.stringify({ error: { message: `mock: scripted ${s.status}`, type: s.status === 429 ? 'rate_limit_error' : 'server_error' } }))
      return
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
    const id = `chatcmpl-${records.length}`
    const send = (data: unknown) => {
      if (!gone) res.write(`data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`)
    }
    const chunk = (delta: object, finish: string | null = null) => ({ id, object: 'chat.completion.chunk', created: 0, model: body?.model ?? 'x', choices: [{ index: 0, delta, finish_reason: finish }] })
    send(chunk({ role: 'assistant', content: '' }))
    let n = 0
    for (const t of s.chunks ?? []) {
      send(chunk({ content: t }))
      n++
      if (s.holdAfter !== undefined && n === s.holdAfter && s.gate) await Promise.race([s.gate, goneP])
      if (gone) return
    }
    ;(s.toolCalls ?? []).forEach((tc, index) => {
      send(chunk({ tool_calls: [{ index, id: tc.id, type: 'function', function: { name: tc.name, arguments: '' } }] }))
      send(chunk({ tool_calls: [{ index, function: { arguments: JSON.stringify(tc.arguments) } }] }))
    })
    if (s.hang) return // settles when the client goes away
    if (s.gate && s.holdAfter === undefined) await Promise.race([s.gate, goneP])
    if (gone) return
    send(chunk({}, s.toolCalls?.length ? 'tool_calls' : 'stop'))
    send({ id, object: 'chat.completion.chunk', created: 0, model: 'x', choices: [], usage: { prompt_tokens: 10, completion_tokens: 5 } })
    send('[DONE]')
    rec.finished = true
    leave()
    res.end()
  })
  server.keepAliveTimeout = 1000
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  const port = (server.address() as net.AddressInfo).port
  const forMarker = (m: string) => records.filter((r) => r.marker === m)
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    script(marker, ...steps) {
      queues.set(marker, [...(queues.get(marker) ?? []), ...steps])
    },
    fallback(marker, step) {
      fallbacks.set(marker, step)
    },
    requests: forMarker,
    async waitForRequest(marker, n, timeoutMs = 10000) {
      const deadline = Date.now() + timeoutMs
      for (;;) {
        const r = forMarker(marker)[n - 1]
        if (r) return r
        if (Date.now() > deadline) throw new Error(`mock: no request #${n} for ${marker} within ${timeoutMs} ms (got ${forMarker(marker).length})`)
        await sleep(20)
      }
    },
    maxInFlight: (m) => maxFlight.get(m) ?? 0,
    async close() {
      for (const r of open) r.destroy()
      server.closeAllConnections()
      await new Promise<void>((r) => server.close(() => r()))
    },
  }
}

// ---------------------------------------------------------------------------------------------
// Tools: POST /hold/:key blocks until release(key) (or the caller goes away); POST /echo answers at once.

export interface ToolCallRecord {
  route: 'hold' | 'echo'
  key?: string
  body: any
  headers: http.IncomingHttpHeaders
  /** the caller went away before the answer */
  closedEarly: boolean
}

export interface ToolServer {
  readonly url: string
  calls(route?: 'hold' | 'echo', key?: string): ToolCallRecord[]
  release(key: string): void
  waitForCalls(route: 'hold' | 'echo', n: number, key?: string, timeoutMs?: number): Promise<ToolCallRecord[]>
  close(): Promise<void>
}

export async function startToolServer(): Promise<ToolServer> {
  const records: ToolCallRecord[] = []
  const released = new Set<string>()
  const waiting = new Map<string, Array<() => void>>()
  const server = http.createServer(async (req, res) => {
    const raw = await readBody(req)
    if (raw === null) return
    let body: any
    try {
      body = JSON.parse(raw)
    } catch {
      body = raw
    }
    const m = (req.url ?? '').match(/^\/(hold|echo)(?:\/([^/?]+))?/)
    if (!m) {
      res.writeHead(404).end()
      return
    }
    const rec: ToolCallRecord = { route: m[1] as 'hold' | 'echo', key: m[2], body, headers: { ...req.headers }, closedEarly: false }
    records.push(rec)
    let finished = false
    res.on('close', () => {
      if (!finished) rec.closedEarly = true
    })
    if (rec.route === 'hold') {
      const key = rec.key ?? ''
      if (!released.has(key)) {
        await new Promise<void>((r) => {
          const l = waiting.get(key) ?? []
          l.push(r)
          waiting.set(key, l)
          res.on('close', () => r())
        })
      }
    }
    if (res.destroyed) return
    finished = true
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ content: rec.route === 'echo' ? `echo ${JSON.stringify(body?.arguments ?? null)}` : `held ${rec.key} done` }))
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  const port = (server.address() as net.AddressInfo).port
  const calls = (route?: 'hold' | 'echo', key?: string) => records.filter((r) => (!route || r.route === route) && (key === undefined || r.key === key))
  return {
    url: `http://127.0.0.1:${port}`,
    calls,
    release(key) {
      released.add(key)
      for (const w of waiting.get(key) ?? []) w()
      waiting.delete(key)
    },
    async waitForCalls(route, n, key, timeoutMs = 10000) {
      const deadline = Date.now() + timeoutMs
      for (;;) {
        const c = calls(route, key)
        if (c.length >= n) return c
        if (Date.now() > deadline) throw new Error(`tool server: ${n} ${route} call(s) did not arrive within ${timeoutMs} ms (got ${c.length})`)
        await sleep(20)
      }
    },
    async close() {
      for (const k of waiting.keys()) released.add(k)
      for (const l of waiting.values()) for (const w of l) w()
      server.closeAllConnections()
      await new Promise<void>((r) => server.close(() => r()))
    },
  }
}

// ---------------------------------------------------------------------------------------------
// Processes

export interface Proc {
  readonly index: number
  readonly port: number
  readonly url: string
  readonly child: ChildProcess
  readonly pid: number
  readonly alive: boolean
  /** resolves when the process has exited */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>
  /** its stdout and stderr, for diagnostics */
  output(): string
}

const children = new Set<ChildProcess>()
let exitHookInstalled = false
function installExitHook(): void {
  if (exitHookInstalled) return
  exitHookInstalled = true
  process.on('exit', () => {
    for (const c of children) {
      try {
        c.kill('SIGKILL')
      } catch {
        // already gone
      }
    }
  })
}

export async function freePort(): Promise<number> {
  const srv = net.createServer()
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r))
  const port = (srv.address() as net.AddressInfo).port
  await new Promise<void>((r) => srv.close(() => r()))
  return port
}

export interface ApiResult<T = any> {
  status: number
  body: T
  text: string
}

export interface ClusterOptions {
  processes: number
  env?: Record<string, string>
  /** where the database comes from (default: a fresh one of the test run's template; the fault suite brings its own) */
  database?: () => Promise<{ url: string; drop(): Promise<void> }>
  /** the models file's provider key (default a fixed literal); `env:NAME` reads it from `env` */
  providerKey?: string
  /** everything every process prints, whole (output() keeps only the tail) */
  onOutput?(index: number, chunk: Buffer): void
}

export interface Cluster {
  readonly dbUrl: string
  readonly pool: pg.Pool
  readonly llm: MockLlm
  readonly tools: ToolServer
  readonly procs: Proc[]
  /** the processes' data directories live under it (data-i); removed by close() */
  readonly dir: string
  /** the tenant's API key */
  key: string
  readonly adminToken: string
  /** (re)starts process i on a fresh port; resolves once GET /readyz answers 200 */
  start(i: number): Promise<Proc>
  /** starts every process that is not running */
  ensureUp(): Promise<void>
  /** a call to process i with the tenant's key, or with `key` (another credential) */
  api<T = any>(i: number, method: string, p: string, body?: unknown, key?: string): Promise<ApiResult<T>>
  /** creates a session with a fresh marker in its system prompt */
  createSession(i: number, body?: Record<string, unknown>): Promise<{ id: string; marker: string }>
  events(i: number, id: string): Promise<any[]>
  waitFor(i: number, id: string, pred: (e: any, all: any[]) => boolean, timeoutMs?: number, intervalMs?: number): Promise<any[]>
  waitForTurnEnd(i: number, id: string, turn: number, timeoutMs?: number): Promise<any[]>
  /** the lease row of a session */
  lease(id: string): Promise<{ owner: string | null; token: number; runState: string; openTurn: number | null }>
  /** the index of the live process whose pid is in the session's lease owner, or -1 */
  holder(id: string): Promise<number>
  /** waits until some live process holds the session's lease; its index */
  waitForHolder(id: string, timeoutMs?: number): Promise<number>
  close(): Promise<void>
}

export const ownerPid = (owner: string | null): number | undefined => {
  const m = owner?.match(/:(\d+):[0-9a-f]+$/)
  return m ? Number(m[1]) : undefined
}

let markers = 0

export async function startCluster(o: ClusterOptions): Promise<Cluster> {
  installExitHook()
  const fresh = await (o.database ?? freshPgDatabase)()
  const pool = new pg.Pool({ connectionString: fresh.url, max: 4 })
  // an idle client whose connection breaks emits 'error' on the pool; without a listener that is an
  // uncaught exception in the test process. The next query through the pool reports any real outage.
  pool.on('error', () => {})
  const llm = await startMockLlm()
  const tools = await startToolServer()
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agentd-procs-'))
  const modelsFile = path.join(dir, 'models.json')
  fs.writeFileSync(
    modelsFile,
    JSON.stringify({ providers: { mock: { api: 'openai-completions', baseUrl: llm.baseUrl, apiKey: o.providerKey ?? 'literal-key', models: [{ id: 'scripted', contextWindow: 8192, maxTokens: 1024 }] } } }),
  )
  const adminToken = `admin-${Math.random().toString(36).slice(2)}`
  const procs: Proc[] = []

  const start = async (i: number): Promise<Proc> => {
    const prev = procs[i]
    if (prev?.alive) throw new Error(`process ${i} is already running`)
    const port = await freePort()
    const env: Record<string, string> = {}
    for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('AGENTD_') && k !== 'DATABASE_URL' && k !== 'NODE_OPTIONS') env[k] = v
    Object.assign(env, {
      PORT: String(port),
      HOST: '127.0.0.1',
      DATABASE_URL: fresh.url,
      AGENTD_ADMIN_TOKEN: adminToken,
      AGENTD_MODELS: modelsFile,
      AGENTD_DEFAULT_MODEL: 'mock/scripted',
      AGENTD_TOOL_HOSTS: '127.0.0.1',
      AGENTD_DATA_DIR: path.join(dir, `data-${i}`),
      AGENTD_RATE_LIMIT_PER_MIN: '1000000',
      LOG_LEVEL: 'warn',
      ...(o.env ?? {}),
    })
    const child = spawn(process.execPath, serverArgs(), { cwd: PROJECT, env, stdio: ['ignore', 'pipe', 'pipe'] })
    children.add(child)
    child.on('error', () => {}) // a failed spawn or kill shows as `exited` or a readiness timeout below
    let out = ''
    const keep = (b: Buffer) => {
      o.onOutput?.(i, b)
      // AGENTD_TEST_PROCESS_LOGS=dir keeps each process's output in a file, for diagnosis
      if (process.env.AGENTD_TEST_PROCESS_LOGS) fs.appendFileSync(path.join(process.env.AGENTD_TEST_PROCESS_LOGS, `p${i}.log`), b)
      out += b.toString()
      if (out.length > 200_000) out = out.slice(-100_000)
    }
    child.stdout!.on('data', keep)
    child.stderr!.on('data', keep)
    let alive = true
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) =>
      child.on('exit', (code, signal) => {
        alive = false
        children.delete(child)
        r({ code, signal })
      }),
    )
    const p: Proc = {
      index: i,
      port,
      url: `http://127.0.0.1:${port}`,
      child,
      pid: child.pid!,
      get alive() {
        return alive
      },
      exited,
      output: () => out,
    }
    procs[i] = p
    const deadline = Date.now() + 45000
    for (;;) {
      if (!alive) throw new Error(`process ${i} exited before it was ready:\n${out}`)
      try {
        const r = await fetch(`${p.url}/readyz`)
        if (r.status === 200) break
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline) {
        child.kill('SIGKILL')
        throw new Error(`process ${i} not ready within 45 s:\n${out}`)
      }
      await sleep(100)
    }
    return p
  }

  const call = async (i: number, method: string, p: string, body?: unknown, key?: string): Promise<ApiResult> => {
    const headers: Record<string, string> = { authorization: `Bearer ${key ?? c.key}` }
    if (body !== undefined) headers['content-type'] = 'application/json'
    const res = await fetch(procs[i].url + p, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
    const text = await res.text()
    let parsed: any
    try {
      parsed = text ? JSON.parse(text) : undefined
    } catch {
      parsed = undefined
    }
    return { status: res.status, body: parsed, text }
  }

  const c: Cluster = {
    dbUrl: fresh.url,
    pool,
    llm,
    tools,
    procs,
    dir,
    key: '',
    adminToken,
    start,
    async ensureUp() {
      await Promise.all(Array.from({ length: o.processes }, (_, i) => (procs[i]?.alive ? undefined : start(i))))
    },
    api: call,
    async createSession(i, body = {}) {
      const marker = `[[m:${process.pid}-${++markers}]]`
      const r = await call(i, 'POST', '/v1/sessions', { model: 'mock/scripted', system: `You are a test agent ${marker}`, ...body })
      if (r.status !== 201) throw new Error(`create session: ${r.status} ${r.text}`)
      return { id: r.body.id, marker }
    },
    async events(i, id) {
      const out: any[] = []
      let after = -1
      for (;;) {
        const r = await call(i, 'GET', `/v1/sessions/${encodeURIComponent(id)}/events?after=${after}&limit=5000`)
        if (r.status !== 200) throw new Error(`events: ${r.status} ${r.text}`)
        out.push(...r.body.events)
        if (!r.body.events.length || r.body.events.at(-1).seq >= r.body.headSeq) return out
        after = r.body.events.at(-1).seq
      }
    },
    async waitFor(i, id, pred, timeoutMs = 10000, intervalMs = 25) {
      const deadline = Date.now() + timeoutMs
      for (;;) {
        const evs = await c.events(i, id)
        if (evs.some((e) => pred(e, evs))) return evs
        if (Date.now() > deadline) throw new Error(`timed out waiting in session ${id}; log: ${evs.map((e) => e.type + (e.type === 'turn/end' ? JSON.stringify(e.data.reason) : '')).join(' ')}`)
        await sleep(intervalMs)
      }
    },
    waitForTurnEnd(i, id, turn, timeoutMs) {
      return c.waitFor(i, id, (e) => e.type === 'turn/end' && e.data.turn === turn, timeoutMs)
    },
    async lease(id) {
      const { rows } = await pool.query('SELECT lease_owner, lease_token, run_state, open_turn FROM sessions WHERE id = $1', [id])
      if (!rows[0]) throw new Error(`no session ${id}`)
      return { owner: rows[0].lease_owner, token: Number(rows[0].lease_token), runState: rows[0].run_state, openTurn: rows[0].open_turn }
    },
    async holder(id) {
      const pid = ownerPid((await c.lease(id)).owner)
      return procs.findIndex((p) => p?.alive && p.pid === pid)
    },
    async waitForHolder(id, timeoutMs = 10000) {
      const deadline = Date.now() + timeoutMs
      for (;;) {
        const h = await c.holder(id)
        if (h >= 0) return h
        if (Date.now() > deadline) throw new Error(`no live process holds the lease of ${id}: ${JSON.stringify(await c.lease(id))}`)
        await sleep(25)
      }
    },
    async close() {
      for (const p of procs) if (p?.alive) p.child.kill('SIGKILL')
      await Promise.all(procs.map((p) => p?.exited))
      await tools.close()
      await llm.close()
      await pool.end()
      await fresh.drop()
      fs.rmSync(dir, { recursive: true, force: true })
    },
  }

  try {
    await c.ensureUp()
    const admin = await call(0, 'POST', '/v1/admin/tenants', { name: 'procs' }, adminToken)
    if (admin.status !== 201) throw new Error(`tenant creation failed: ${admin.status} ${admin.text}`)
    c.key = admin.body.apiKey
  } catch (e) {
    await c.close().catch(() => {})
    throw e
  }
  return c
}

/** An http ToolSpec calling the tool server. */
export function httpTool(tools: ToolServer, name: string, route: 'hold' | 'echo', key?: string): Record<string, unknown> {
  return {
    name,
    description: `${name} (${route})`,
    parameters: { type: 'object', properties: {} },
    execution: { type: 'http', url: `${tools.url}/${route}${key ? `/${key}` : ''}`, timeoutMs: 60000 },
  }
}
