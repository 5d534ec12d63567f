// A PostgreSQL server of the fault suite's own: a fresh cluster (initdb) in a temporary directory, on
// a free port, that a part may stop and start again at will — never the machine's shared server,
// which other tests use. The binaries come from FAULTS_PG_BIN, else `pg_config --bindir`, else the
// newest /usr/lib/postgresql/N/bin. Run as root, the cluster belongs to the `postgres` user (initdb
// refuses root) and each command runs as that user through runuser.

import { execFileSync, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'

export interface PrivatePg {
  /** postgres://postgres@127.0.0.1:PORT/postgres */
  url: string
  port: number
  /** stops the server: `fast` disconnects clients and shuts down cleanly, `immediate` is a crash */
  stop(mode?: 'fast' | 'immediate'): void
  start(): void
  /** stops it and removes the cluster */
  destroy(): void
}

function binDir(): string | null {
  const candidates = [process.env.FAULTS_PG_BIN]
  try {
    candidates.push(execFileSync('pg_config', ['--bindir'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim())
  } catch {
    // no pg_config on PATH
  }
  try {
    const versions = fs.readdirSync('/usr/lib/postgresql').filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(b) - Number(a))
    for (const v of versions) candidates.push(`/usr/lib/postgresql/${v}/bin`)
  } catch {
    // not a Debian layout
  }
  for (const c of candidates) if (c && fs.existsSync(path.join(c, 'initdb')) && fs.existsSync(path.join(c, 'pg_ctl'))) return c
  return null
}

async function freePort(): Promise<number> {
  const s = net.createServer()
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()))
  const port = (s.address() as net.AddressInfo).port
  await new Promise<void>((r) => s.close(() => r()))
  return port
}

/** Why a private server cannot be had here, or null when it can. */
export function privatePgUnavailable(): string | null {
  if (!binDir()) return 'no PostgreSQL server binaries (initdb, pg_ctl) found; set FAULTS_PG_BIN'
  if (process.getuid?.() === 0 && spawnSync('runuser', ['-u', 'postgres', '--', 'true']).status !== 0) return 'running as root without a postgres user to own the cluster'
  return null
}

export async function startPrivatePg(): Promise<PrivatePg> {
  const bin = binDir()
  if (!bin) throw new Error(privatePgUnavailable()!)
  const root = process.getuid?.() === 0
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agentd-faults-pg-'))
  const data = path.join(dir, 'data')
  if (root) {
    const pw = execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim()
    const gid = execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim()
    fs.chownSync(dir, Number(pw), Number(gid))
  }
  const run = (tool: string, args: string[]) => {
    const cmd = root ? 'runuser' : path.join(bin, tool)
    const argv = root ? ['-u', 'postgres', '--', path.join(bin, tool), ...args] : args
    const r = spawnSync(cmd, argv, { encoding: 'utf8', cwd: dir })
    if (r.status !== 0) throw new Error(`${tool} ${args.join(' ')} failed (${r.status}): ${(r.stderr || r.stdout || '').trim().slice(-500)}`)
  }
  const port = await freePort()
  run('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '-E', 'UTF8', '--no-sync', '--no-instructions'])
  // fsync off is safe here: the suite stops the server process, never the machine, so what PostgreSQL
  // wrote reaches the disk anyway; synchronous_commit stays on, or a commit it acknowledged could be lost
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c max_connections=200`
  let running = false
  const pg: PrivatePg = {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    start() {
      run('pg_ctl', ['-D', data, '-o', options, '-l', path.join(dir, 'log'), '-w', '-t', '60', 'start'])
      running = true
    },
    stop(mode = 'fast') {
      run('pg_ctl', ['-D', data, '-m', mode, '-w', '-t', '60', 'stop'])
      running = false
    },
    destroy() {
      try {
        if (running) pg.stop('immediate')
      } finally {
        fs.rmSync(dir, { recursive: true, force: true })
      }
    },
  }
  try {
    pg.start()
  } catch (e) {
    fs.rmSync(dir, { recursive: true, force: true })
    throw e
  }
  // a test run that dies leaves no server behind
  process.once('exit', () => {
    if (running) spawnSync(root ? 'runuser' : path.join(bin, 'pg_ctl'), root ? ['-u', 'postgres', '--', path.join(bin, 'pg_ctl'), '-D', data, '-m', 'immediate', 'stop'] : ['-D', data, '-m', 'immediate', 'stop'])
  })
  return pg
}
