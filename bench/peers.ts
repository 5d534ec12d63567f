// `--peers`: the LangGraph JS + PostgresSaver peer (../shared/peers/langgraph, when present) run at the
// same C levels in the same run as agentd's throughput, so agentd ÷ LangGraph is a ratio of one sitting.
// The peers folder may be read-only: it is copied once per peers version into the temp directory and
// `npm ci` runs in the copy's langgraph/ folder (its own pinned dependencies, not agentd's).

import { execFile } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { freshPg } from './lib.js'

/** Where the peer programs are: AGENTD_PEERS_DIR, else ../shared/peers beside the repository. */
export function peersDir(): string {
  const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
  return path.resolve(process.env.AGENTD_PEERS_DIR ?? path.join(repo, '..', 'shared', 'peers'))
}

export function peersPresent(): boolean {
  return fs.existsSync(path.join(peersDir(), 'langgraph', 'bench.mjs'))
}

function run(cmd: string, args: string[], cwd: string, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { cwd, timeout: timeoutMs, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${cmd} ${args.join(' ')} (in ${cwd}) failed: ${err.message}\n${stderr}`))
      else resolve(stdout)
    })
  })
}

let prepared: Promise<string> | undefined

/** A writable copy of the peers folder with langgraph's dependencies installed; returns its langgraph/ path. */
export function prepareLanggraph(): Promise<string> {
  prepared ??= (async () => {
    const src = peersDir()
    const lock = fs.readFileSync(path.join(src, 'langgraph', 'package-lock.json'))
    const bench = fs.readFileSync(path.join(src, 'langgraph', 'bench.mjs'))
    const tag = crypto.createHash('sha256').update(lock).update(bench).digest('hex').slice(0, 12)
    const root = path.join(os.tmpdir(), `agentd-bench-peers-${tag}`)
    const lg = path.join(root, 'peers', 'langgraph')
    if (!fs.existsSync(path.join(lg, 'node_modules', '.package-lock.json'))) {
      fs.rmSync(root, { recursive: true, force: true })
      fs.mkdirSync(root, { recursive: true })
      fs.cpSync(src, path.join(root, 'peers'), { recursive: true, filter: (p) => !p.includes(`${path.sep}node_modules`) && !p.includes(`${path.sep}results`) })
      process.stdout.write(`   peers: npm ci in ${lg}\n`)
      await run('npm', ['ci', '--no-audit', '--no-fund'], lg, 600_000)
    }
    return lg
  })()
  return prepared
}

export interface PeerLevel {
  sessions: number
  turns: number
  turnsPerSec: number
  p50: number
  p99: number
  clientCpuMsPerTurn: number
  writeTxPerTurn?: number
}

/** One LangGraph run (default durability, createReactAgent, pool 10) at C sessions × N turns, on a fresh database. */
export async function runLanggraph(sessions: number, turns: number, warmup = 2): Promise<PeerLevel> {
  const lg = await prepareLanggraph()
  const db = await freshPg()
  const out = path.join(os.tmpdir(), `agentd-bench-langgraph-${process.pid}-${sessions}.json`)
  try {
    await run(process.execPath, ['bench.mjs', '--database-url', db.url, '--sessions', String(sessions), '--turns', String(turns), '--warmup', String(warmup), '--out', out], lg, 900_000)
    const r = JSON.parse(fs.readFileSync(out, 'utf8'))
    return { sessions, turns, turnsPerSec: r.turnsPerSecond, p50: r.latencyMs.p50, p99: r.latencyMs.p99, clientCpuMsPerTurn: r.clientCpuMsPerTurn, writeTxPerTurn: r.perTurn?.writeTransactions }
  } finally {
    fs.rmSync(out, { force: true })
    await db.drop()
  }
}
