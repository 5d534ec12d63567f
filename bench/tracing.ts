// 9. Tracing (API.md §19): server CPU per turn with tracing off and on. Two agentd CHILD processes
// (`node --import tsx src/main.ts`, each on a fresh database of its own) run the same faux/echo turns as
// in 1, in alternating blocks so the machine's load hits both alike; each block's CPU is the process's
// own (utime + stime of /proc/<pid>/stat). "On" exports every span (OTLP/HTTP protobuf, batches at the
// SDK's default 5 s) to a receiver in the bench that reads and drops them. With BENCH_TRACING_BASELINE=<checkout>
// a third child runs that checkout's agentd (e.g. the main branch before tracing) the same way, and
// "off" is also set against it.

import fs from 'node:fs'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { ClientProc } from './clientproc.js'
import { ADMIN_TOKEN, createSession, dist, freshDir, freshPg, freshPgliteDir, request, type Kind } from './lib.js'
import { startChild, type Child } from './memory.js'
import { ms, times, yes, type Row } from './report.js'
import { BLOCK } from './turn.js'

export interface TracingOptions {
  turns: number
  warmup: number
}

const TICK_MS = 10 // USER_HZ is 100 on Linux

/** utime + stime of a process, in ms. */
function cpuMs(pid: number): number {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return (Number(f[11]) + Number(f[12])) * TICK_MS
}

/** An OTLP/HTTP receiver that reads each export and answers 200, counting bytes. */
async function sink(): Promise<{ url: string; bytes: () => number; close(): Promise<void> }> {
  let bytes = 0
  const server = http.createServer((req, res) => {
    req.on('data', (c: Buffer) => (bytes += c.length))
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end())
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, bytes: () => bytes, close: () => new Promise((r) => server.close(() => r())) }
}

interface Server {
  child: Child
  key: string
  session: string
  cpuMs: number
  latencies: number[]
  turns: number
  drop(): Promise<void>
}

async function startServer(kind: Kind, env: Record<string, string>, cwd?: string): Promise<Server> {
  const d = kind === 'pg' ? await freshPg() : await freshPgliteDir()
  const dbEnv: Record<string, string> = 'url' in d ? { DATABASE_URL: d.url, AGENTD_DATA_DIR: freshDir().dir } : { AGENTD_DATA_DIR: d.dir }
  const child = await startChild('src/main.ts', { ...dbEnv, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', AGENTD_ADMIN_TOKEN: ADMIN_TOKEN, AGENTD_RATE_LIMIT_PER_MIN: '100000000', ...env }, 'agentd listening', cwd)
  try {
    const t = await request('POST', `${child.url}/v1/admin/tenants`, ADMIN_TOKEN, { name: 'bench' })
    if (t.status !== 201) throw new Error(`tenant: ${t.status} ${t.text}`)
    const s = await createSession(child.url, t.json.apiKey, { model: 'faux/echo' })
    return { child, key: t.json.apiKey, session: s.id, cpuMs: 0, latencies: [], turns: 0, drop: async () => (await child.stop(), await d.drop()) }
  } catch (e) {
    await child.stop()
    await d.drop()
    throw e
  }
}

async function turns(s: Server, n: number, cp: ClientProc, measured: boolean): Promise<void> {
  const head = (await request('GET', `${s.child.url}/v1/sessions/${s.session}`, s.key)).json.headSeq as number
  const c0 = cpuMs(s.child.proc.pid!)
  const r = await cp.call({ op: 'turns', url: s.child.url, key: s.key, sessions: [{ id: s.session, after: head }], turns: n })
  if (!measured) return
  s.cpuMs += cpuMs(s.child.proc.pid!) - c0
  s.latencies.push(...r.latencies)
  s.turns += n
}

export async function benchTracing(kind: Kind, o: TracingOptions, cp: ClientProc): Promise<{ rows: Row[]; data: Record<string, unknown> }> {
  const receiver = await sink()
  const baselineDir = process.env.BENCH_TRACING_BASELINE
  const servers: Record<string, Server> = {}
  try {
    servers.off = await startServer(kind, {})
    servers.on = await startServer(kind, { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, ...(process.env.BENCH_TRACING_PROF ? { NODE_OPTIONS: `--cpu-prof --cpu-prof-dir=${process.env.BENCH_TRACING_PROF}` } : {}) })
    if (baselineDir) servers.baseline = await startServer(kind, {}, baselineDir)
    const modes = Object.keys(servers)
    for (const m of modes) await turns(servers[m], o.warmup, cp, false)
    for (let done = 0; done < o.turns; done += BLOCK) {
      const n = Math.min(BLOCK, o.turns - done)
      for (const m of modes) await turns(servers[m], n, cp, true)
    }
  } finally {
    for (const s of Object.values(servers)) await s.drop().catch(() => {})
    await receiver.close()
  }
  const per = (s: Server) => s.cpuMs / s.turns
  const { off, on, baseline } = servers
  const exported = receiver.bytes()
  const rows: Row[] = [
    { measurement: `server CPU per turn, tracing on / off (${o.turns} + ${o.turns} turns)`, db: kind, figure: ms(per(on)), floor: ms(per(off)), ratio: times(per(on) / per(off)), target: '≤ 1.10×', met: yes(per(on) / per(off) <= 1.1) },
    { measurement: 'turn overhead p50, tracing on / off', db: kind, figure: ms(dist(on.latencies).p50), floor: ms(dist(off.latencies).p50), ratio: times(dist(on.latencies).p50 / dist(off.latencies).p50), target: '', met: '' },
    { measurement: 'OTLP bytes exported per turn (tracing on)', db: kind, figure: String(Math.round(exported / (on.turns + o.warmup))), floor: '', ratio: '', target: '', met: '' },
  ]
  if (baseline) rows.push({ measurement: `server CPU per turn, tracing off / ${baselineDir}`, db: kind, figure: ms(per(off)), floor: ms(per(baseline)), ratio: times(per(off) / per(baseline)), target: '≤ 1.02×', met: yes(per(off) / per(baseline) <= 1.02) })
  const data: Record<string, unknown> = { cpuMsPerTurn: Object.fromEntries(Object.entries(servers).map(([m, s]) => [m, per(s)])), p50: Object.fromEntries(Object.entries(servers).map(([m, s]) => [m, dist(s.latencies).p50])), exportedBytes: exported }
  return { rows, data }
}
