// 5. Memory: the RSS (VmRSS of /proc/<pid>/status) of agentd running as a CHILD process
// (`node --import tsx src/main.ts`), so the bench's own clients do not count:
//   idle            — a fresh server, settled
//   + N sessions    — after N sessions were created through the API (and are idle)
//   + C SSE         — with C SSE connections open (one per session, each its own socket)
// The figure per connection is the last delta / C. Floor: bench/floor-server.ts, started the same
// way on the same driver and schema, storing the same rows and holding the same connections.

import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { ADMIN_TOKEN, freshDir, freshPg, freshPgliteDir, openSse, pool, request, sleep, type Kind } from './lib.js'
import { mb, times, yes, type Row } from './report.js'

const plus = (x: number) => `${x >= 0 ? '+' : ''}${mb(x)}`

export interface MemoryOptions {
  sessions: number
  connections: number
  /** wait before sampling (default 2000 ms) */
  settleMs?: number
}

const ROOT = fileURLToPath(new URL('..', import.meta.url))

function rssMB(pid: number): number {
  const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8')
  const m = /VmRSS:\s+(\d+) kB/.exec(s)
  return m ? Number(m[1]) / 1024 : NaN
}

/** RSS after settleMs and two forced full GCs (bench/gc-hook.ts): the median of five samples 100 ms apart. */
export async function settledRss(proc: ChildProcess, settleMs: number): Promise<number> {
  await sleep(settleMs)
  for (let i = 0; i < 2; i++) {
    proc.kill('SIGUSR2')
    await sleep(300)
  }
  const xs: number[] = []
  for (let i = 0; i < 5; i++) {
    xs.push(rssMB(proc.pid!))
    await sleep(100)
  }
  return xs.sort((a, b) => a - b)[2]
}

export interface Child {
  proc: ChildProcess
  url: string
  stop(): Promise<void>
}

/** `cwd`: another checkout's agentd (bench/tracing.ts's baseline); default this one. */
export async function startChild(script: string, env: Record<string, string>, readyMsg: string, cwd = ROOT): Promise<Child> {
  const base = { ...process.env }
  delete base.DATABASE_URL
  const proc = spawn(process.execPath, ['--expose-gc', '--import', 'tsx', '--import', './bench/gc-hook.ts', script], { cwd, env: { ...base, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
  let stderr = ''
  proc.stderr!.on('data', (b: Buffer) => (stderr += b.toString()))
  const url = await new Promise<string>((resolve, reject) => {
    let buf = ''
    const timer = setTimeout(() => reject(new Error(`${script} did not start in 60 s: ${stderr}`)), 60000)
    proc.stdout!.on('data', (b: Buffer) => {
      buf += b.toString()
      let i: number
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i)
        buf = buf.slice(i + 1)
        try {
          const j = JSON.parse(line)
          if (j.msg === readyMsg && j.url) {
            clearTimeout(timer)
            resolve(j.url)
          }
        } catch {
          // not a log line
        }
      }
    })
    proc.on('exit', (code) => {
      clearTimeout(timer)
      reject(new Error(`${script} exited (${code}): ${stderr}`))
    })
  })
  proc.stdout!.resume()
  return {
    proc,
    url,
    stop: () =>
      new Promise<void>((resolve) => {
        if (proc.exitCode !== null) return resolve()
        const hard = setTimeout(() => proc.kill('SIGKILL'), 15000)
        proc.once('exit', () => {
          clearTimeout(hard)
          resolve()
        })
        proc.kill('SIGTERM')
      }),
  }
}

interface Figures {
  idle: number
  sessions: number
  connections: number
  perConnectionKB: number
  createSeconds: number
}

async function measure(child: Child, o: MemoryOptions, create: (i: number) => Promise<string>, streamUrl: (id: string) => string, key: string): Promise<Figures> {
  const idle = await settledRss(child.proc, o.settleMs ?? 2000)
  const t0 = Date.now()
  const ids = await pool(Array.from({ length: o.sessions }, (_, i) => i), 32, (i) => create(i))
  const createSeconds = (Date.now() - t0) / 1000
  const sessions = await settledRss(child.proc, o.settleMs ?? 2000)
  const subs: Array<{ close(): void }> = []
  try {
    await pool(ids.slice(0, o.connections), 25, async (id) => {
      const s = openSse(streamUrl(id), key, () => {})
      subs.push(s)
      await s.ready
    })
    const connections = await settledRss(child.proc, o.settleMs ?? 2000)
    return { idle, sessions, connections, perConnectionKB: ((connections - sessions) * 1024) / o.connections, createSeconds }
  } finally {
    for (const s of subs) s.close()
  }
}

export async function benchMemory(kind: Kind, o: MemoryOptions): Promise<{ rows: Row[]; data: Record<string, unknown> }> {
  const dbEnv = async (): Promise<{ env: Record<string, string>; drop(): Promise<void> }> => {
    if (kind === 'pg') {
      const d = await freshPg()
      return { env: { DATABASE_URL: d.url, AGENTD_DATA_DIR: freshDir().dir }, drop: () => d.drop() }
    }
    const d = await freshPgliteDir()
    return { env: { AGENTD_DATA_DIR: d.dir }, drop: () => d.drop() }
  }
  // agentd and its floor run side by side (each RSS is its own process's)
  const runAgentd = async (): Promise<Figures> => {
    const d = await dbEnv()
    const child = await startChild('src/main.ts', { ...d.env, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', AGENTD_ADMIN_TOKEN: ADMIN_TOKEN, AGENTD_RATE_LIMIT_PER_MIN: '100000000' }, 'agentd listening')
    try {
      const t = await request('POST', `${child.url}/v1/admin/tenants`, ADMIN_TOKEN, { name: 'bench' })
      if (t.status !== 201) throw new Error(`tenant: ${t.status} ${t.text}`)
      const key: string = t.json.apiKey
      return await measure(
        child,
        o,
        async () => {
          const r = await request('POST', `${child.url}/v1/sessions`, key, { model: 'faux/echo' })
          if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`)
          return r.json.id as string
        },
        (id) => `${child.url}/v1/sessions/${id}/stream`,
        key,
      )
    } finally {
      await child.stop()
      await d.drop()
    }
  }
  let floorIds: string[] | undefined
  const runFloor = async (): Promise<Figures> => {
    const d = await dbEnv()
    const child = await startChild(path.join('bench', 'floor-server.ts'), d.env, 'floor listening')
    try {
      return await measure(
        child,
        o,
        // the floor stores the same rows in one statement (its figure is memory, not creation)
        async (i) => {
          if (i === 0) {
            const r = await request('POST', `${child.url}/sessions?n=${o.sessions}`, undefined, {})
            if (r.status !== 201) throw new Error(`floor create: ${r.status} ${r.text}`)
            floorIds = r.json.ids
          }
          while (!floorIds) await sleep(10)
          return floorIds[i]
        },
        (id) => `${child.url}/stream?id=${id}`,
        '',
      )
    } finally {
      await child.stop()
      await d.drop()
    }
  }
  const [agentd, floor] = await Promise.all([runAgentd(), runFloor()])
  const connDelta = agentd.connections - agentd.sessions
  const fconnDelta = floor.connections - floor.sessions
  const rows: Row[] = [
    { measurement: 'RSS idle (fresh server)', db: kind, figure: mb(agentd.idle), floor: mb(floor.idle), ratio: times(agentd.idle / floor.idle), target: '', met: '' },
    {
      measurement: `RSS with ${o.sessions} idle sessions stored`,
      db: kind,
      figure: `${mb(agentd.sessions)} (${plus(agentd.sessions - agentd.idle)})`,
      floor: `${mb(floor.sessions)} (${plus(floor.sessions - floor.idle)})`,
      ratio: times(agentd.sessions / floor.sessions),
      target: '',
      met: '',
    },
    {
      measurement: `RSS with ${o.connections} open SSE connections`,
      db: kind,
      figure: `${mb(agentd.connections)} (${plus(connDelta)})`,
      floor: `${mb(floor.connections)} (${plus(fconnDelta)})`,
      ratio: times(connDelta / fconnDelta),
      target: o.connections === 1000 ? '≤ +100 MB' : '',
      met: o.connections === 1000 ? yes(connDelta <= 100) : '',
    },
    {
      measurement: 'RSS per SSE connection',
      db: kind,
      figure: `${agentd.perConnectionKB.toFixed(1)} kB`,
      floor: `${floor.perConnectionKB.toFixed(1)} kB`,
      ratio: times(agentd.perConnectionKB / floor.perConnectionKB),
      target: '',
      met: '',
    },
  ]
  return { rows, data: { agentd, floor, settleMs: o.settleMs ?? 2000 } }
}
