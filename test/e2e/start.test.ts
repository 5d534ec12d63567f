// Starting the server as a user does (`node --import tsx src/main.ts`, what `npm start` runs): a bad
// setting stops the start with one line naming its variable, exit code 2, and nothing written to the
// data directory; the first embedded start shows tenant "default"'s key once, and a later start on the
// same data directory says where the key is without showing it (API.md §3); it also creates the
// tenant's agent `default` (API.md §16). A busy port and a database that cannot be reached stop the
// start the same way, before anything is written.

import { spawn, spawnSync } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import pg from 'pg'
import { afterAll, describe, expect, it } from 'vitest'
import { runtimeProblem } from '../../src/runtime.js'
import { openPglite } from '../../src/store/index.js'
import { section } from '../helpers/markdown.js'
import { adminUrl, baseUrl } from '../helpers/db-urls.js'
import { serverArgs } from '../helpers/server-build.js'

const PROJECT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'agentd-start-'))
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }))

interface Run {
  code: number | null
  stdout: string
  stderr: string
}

/** The environment of a user's shell: none of the server's own variables unless given. */
function userEnv(env: Record<string, string>): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = {}
  for (const [k, v] of Object.entries(process.env)) if (!/^(AGENTD_|DATABASE_URL$|PORT$|HOST$|LOG_LEVEL$)/.test(k)) out[k] = v
  return { ...out, PORT: '0', ...env }
}

/**
 * How a start runs the server: `npm start`'s own command (`node --import tsx src/main.ts`, tsx
 * transpiling every module as it loads, again in each process) where the start itself is the subject —
 * the first start's key, a later start, the image's health check, one refused setting — and elsewhere
 * the same sources transpiled once for the whole run (test/helpers/server-build.ts: the transform tsx
 * uses, the same paths), which starts in well under half the time: a refused setting, a busy port or
 * an unreachable database is the server's own code either way.
 */
type How = 'npm start' | 'transpiled'
const commandOf = (how: How) => (how === 'npm start' ? ['--import', 'tsx', 'src/main.ts'] : serverArgs())

/**
 * Starts the server; `stopWhen` returns true on the output seen so far to have it stopped with SIGTERM
 * (else it must exit on its own).
 */
function start(env: Record<string, string>, stopWhen?: (stdout: string) => boolean, how: How = 'transpiled'): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, commandOf(how), { cwd: PROJECT, env: userEnv(env), stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    let stopped = false
    const timer = setTimeout(() => child.kill('SIGKILL'), 60000)
    child.stdout.on('data', (c) => {
      stdout += c
      if (!stopped && stopWhen?.(stdout)) {
        stopped = true
        child.kill('SIGTERM')
      }
    })
    child.stderr.on('data', (c) => (stderr += c))
    child.on('error', reject)
    child.on('close', (code) => {
      clearTimeout(timer)
      resolve({ code, stdout, stderr })
    })
  })
}

const write = (name: string, text: string) => {
  const f = path.join(tmp, name)
  fs.writeFileSync(f, text)
  return f
}

describe('a bad setting', () => {
  const models = (body: unknown) => write(`models-${Math.random().toString(36).slice(2)}.json`, JSON.stringify(body))
  const local = (extra: Record<string, unknown>) => ({ providers: { local: { api: 'openai-completions', baseUrl: 'http://127.0.0.1:11434/v1', models: [{ id: 'qwen3' }], ...extra } } })
  const cases: Array<{ name: string; env: () => Record<string, string>; variable: string; problem: RegExp }> = [
    { name: 'a models file with an unknown field', env: () => ({ AGENTD_MODELS: models({ providers: { local: { api: 'openai-completions', baseUrl: 'http://127.0.0.1:11434/v1', models: [{ id: 'qwen3', contxtWindow: 8 }] } } }) }), variable: 'AGENTD_MODELS', problem: /providers\.local\.models\[0\]\.contxtWindow: unknown field$/ },
    { name: 'a models file that is not JSON', env: () => ({ AGENTD_MODELS: write('broken.json', '{"providers": {') }), variable: 'AGENTD_MODELS', problem: /not valid JSON/ },
    { name: 'a models file that is not there', env: () => ({ AGENTD_MODELS: path.join(tmp, 'absent.json') }), variable: 'AGENTD_MODELS', problem: /cannot read it/ },
    { name: 'a models file with an unknown api', env: () => ({ AGENTD_MODELS: models(local({ api: 'telepathy' })) }), variable: 'AGENTD_MODELS', problem: /providers\.local\.api: unknown pi-ai API "telepathy" \(known: anthropic-messages, .*openai-completions, openai-responses.*\)$/ },
    { name: 'a default model that does not resolve', env: () => ({ AGENTD_DEFAULT_MODEL: 'nowhere/nothing' }), variable: 'AGENTD_DEFAULT_MODEL', problem: /"nowhere\/nothing" does not resolve/ },
    { name: 'a compaction model that does not resolve', env: () => ({ AGENTD_COMPACTION_MODEL: 'nowhere/nothing' }), variable: 'AGENTD_COMPACTION_MODEL', problem: /"nowhere\/nothing" does not resolve/ },
    { name: 'a malformed tool host', env: () => ({ AGENTD_TOOL_HOSTS: '10.0.0.0/99' }), variable: 'AGENTD_TOOL_HOSTS', problem: /malformed entry "10\.0\.0\.0\/99"/ },
    { name: 'a plugin module that is not there', env: () => ({ AGENTD_PLUGINS: path.join(tmp, 'absent-plugin.mjs') }), variable: 'AGENTD_PLUGINS', problem: /absent-plugin\.mjs failed to load/ },
    { name: 'a plugin that throws while loading', env: () => ({ AGENTD_PLUGINS: write('throws.mjs', "export default () => { throw new Error('no licence') }") }), variable: 'AGENTD_PLUGINS', problem: /throws\.mjs failed to load: no licence$/ },
    { name: 'a port that is not a number', env: () => ({ PORT: 'eighty' }), variable: 'PORT', problem: /must be a whole number/ },
  ]

  it.each(cases)('$name: one line naming $variable, exit code 2, nothing written', async (c) => {
    const { env, variable, problem } = c
    const dataDir = path.join(tmp, `data-${variable}-${Math.random().toString(36).slice(2)}`)
    const r = await start({ AGENTD_DATA_DIR: dataDir, ...env() }, undefined, c === cases[0] ? 'npm start' : 'transpiled')
    expect(r.code, r.stdout + r.stderr).toBe(2)
    const lines = r.stderr.split('\n').filter(Boolean)
    expect(lines, r.stderr).toHaveLength(1)
    expect(lines[0].startsWith(`agentd: ${variable}`), lines[0]).toBe(true)
    expect(lines[0]).toMatch(problem)
    expect(r.stdout, 'no key, no log line: nothing started').toBe('')
    expect(fs.existsSync(dataDir), 'the data directory was not created').toBe(false)
  })
})

describe('the embedded tenant key', () => {
  it('is shown once on the first start, kept in the api-key file, and only pointed to on a later start; the backup section names every file of the data directory', async () => {
    const dataDir = path.join(tmp, 'data-key')
    const listening = (out: string) => /"msg":"agentd listening"/.test(out)
    let url = ''
    const first = await start(
      { AGENTD_DATA_DIR: dataDir, LOG_LEVEL: 'info' },
      (out) => {
        const m = /"url":"(http:[^"]+)","role"/.exec(out)
        if (m) url = m[1]
        return listening(out)
      },
      'npm start',
    )
    expect(first.code, first.stdout + first.stderr).toBe(0)
    const file = path.join(dataDir, 'api-key')
    const key = fs.readFileSync(file, 'utf8').trim()
    expect(key.length).toBeGreaterThan(20)
    expect(fs.statSync(file).mode & 0o777).toBe(0o600)
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/)
    // the server runs on the Node.js it declares (docs/runtime.md), as npm start starts it
    const node = /"msg":"agentd listening"/.test(first.stdout) ? /"node":"(v[\d.]+)"/.exec(first.stdout)?.[1] : undefined
    expect(node, 'the listening line names the Node.js version').toBeDefined()
    expect(runtimeProblem(node!)).toBeUndefined()
    // the key comes right after the words that announce it, once, and the words point at no other line
    expect(first.stdout).toContain(`agentd: created tenant "default". Its API key, shown only this once and kept in ${file}:\n\n    ${key}\n`)
    expect(first.stdout.split(key)).toHaveLength(2)
    expect(first.stdout).not.toMatch(/\b(below|above)\b/)

    const second = await start({ AGENTD_DATA_DIR: dataDir, LOG_LEVEL: 'info' }, listening, 'npm start')
    expect(second.code, second.stdout + second.stderr).toBe(0)
    expect(second.stdout).toContain(`agentd: the API key of tenant "default" is in ${file}\n`)
    expect(second.stdout).not.toContain(key)
    expect(fs.readFileSync(file, 'utf8').trim(), 'the key file is left as it was').toBe(key)

    // API.md §16: the first start also made tenant "default"'s agent `default` (faux/echo, no tools), once
    const db = await openPglite(path.join(dataDir, 'pgdata'))
    try {
      const { rows } = await db.query<Record<string, unknown>>(
        `SELECT t.name AS tenant, a.id, a.version, v.model, v.tools, a.deleted_at FROM agents a JOIN tenants t ON t.id = a.tenant_id
         JOIN agent_versions v ON v.tenant_id = a.tenant_id AND v.agent_id = a.id`,
      )
      expect(rows).toEqual([{ tenant: 'default', id: 'default', version: 1, model: 'faux/echo', tools: '[]', deleted_at: null }])
    } finally {
      await db.close()
    }

    // a backup of the embedded database is a copy of the data directory: docs/operations.md names all of it
    const backups = section(fs.readFileSync(path.join(PROJECT, 'docs/operations.md'), 'utf8'), /^## Backups/)
    const entries = fs.readdirSync(dataDir).sort()
    expect(entries).toEqual(['api-key', 'pgdata', 'secret-key'])
    for (const entry of entries) expect(backups, `docs/operations.md, Backups: ${entry}`).toContain(`\`${entry}\``)
  }, 120000)
})

/** A port this test holds open, as another program would. */
function holdPort(): Promise<{ port: number; release(): Promise<void> }> {
  return new Promise((resolve, reject) => {
    const server = net.createServer((socket) => socket.destroy())
    server.on('error', reject)
    server.listen(0, '127.0.0.1', () => resolve({ port: (server.address() as net.AddressInfo).port, release: () => new Promise<void>((r) => server.close(() => r())) }))
  })
}

/** An empty PostgreSQL database (no tables), and a look at what a start left in it. */
async function emptyPgDatabase(): Promise<{ url: string; tables(): Promise<string[]>; drop(): Promise<void> }> {
  const name = `agentd_start_${crypto.randomBytes(4).toString('hex')}`
  const admin = new pg.Client({ connectionString: adminUrl() })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${name}`)
  await admin.end()
  const url = baseUrl(name)
  return {
    url,
    async tables() {
      const c = new pg.Client({ connectionString: url })
      await c.connect()
      const r = await c.query<{ t: string }>(`SELECT schemaname || '.' || tablename AS t FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1`)
      await c.end()
      return r.rows.map((x) => x.t)
    },
    async drop() {
      const c = new pg.Client({ connectionString: adminUrl() })
      await c.connect()
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
      await c.end()
    },
  }
}

const oneLine = (r: Run) => {
  const lines = r.stderr.split('\n').filter(Boolean)
  expect(lines, r.stderr).toHaveLength(1)
  return lines[0]
}

describe('a busy port', () => {
  it('on the embedded database: one line naming the port, exit code 2, no data directory, no key', async () => {
    const held = await holdPort()
    try {
      const dataDir = path.join(tmp, 'data-busy-port')
      const r = await start({ AGENTD_DATA_DIR: dataDir, PORT: String(held.port), LOG_LEVEL: 'info' })
      expect(r.code, r.stdout + r.stderr).toBe(2)
      expect(oneLine(r)).toBe(`agentd: PORT: 127.0.0.1:${held.port} is already in use by another process; stop it or choose another PORT`)
      expect(r.stdout, 'no key, no log line').toBe('')
      expect(fs.existsSync(dataDir), 'the data directory was not created').toBe(false)
    } finally {
      await held.release()
    }
  }, 60000)

  it('on PostgreSQL: one line naming the port, exit code 2, nothing migrated', async () => {
    const held = await holdPort()
    const db = await emptyPgDatabase()
    try {
      const r = await start({ DATABASE_URL: db.url, PORT: String(held.port), AGENTD_SECRET_KEY: crypto.randomBytes(32).toString('base64') })
      expect(r.code, r.stdout + r.stderr).toBe(2)
      expect(oneLine(r)).toBe(`agentd: PORT: 127.0.0.1:${held.port} is already in use by another process; stop it or choose another PORT`)
      expect(await db.tables(), 'no table was created').toEqual([])
    } finally {
      await held.release()
      await db.drop()
    }
  }, 60000)

  it('two starts at once on one port and one data directory: one serves, the other stops before it touches the data', async () => {
    const free = await holdPort()
    await free.release()
    const dataDir = path.join(tmp, 'data-race')
    const env = { AGENTD_DATA_DIR: dataDir, PORT: String(free.port), LOG_LEVEL: 'info' }
    const listening = (out: string) => /"msg":"agentd listening"/.test(out)
    const runs = await Promise.all([start(env, listening), start(env, listening)])
    const served = runs.filter((r) => listening(r.stdout))
    const refused = runs.filter((r) => !listening(r.stdout))
    expect(served, runs.map((r) => r.stdout + r.stderr).join('\n----\n')).toHaveLength(1)
    expect(served[0].code).toBe(0)
    expect(refused[0].code, refused[0].stdout + refused[0].stderr).toBe(2)
    expect(oneLine(refused[0])).toBe(`agentd: PORT: 127.0.0.1:${free.port} is already in use by another process; stop it or choose another PORT`)
    expect(refused[0].stdout, 'the refused start showed no key and logged nothing').toBe('')
    // the one key was shown by the start that served, and the data directory is whole: a later start reads it
    const key = fs.readFileSync(path.join(dataDir, 'api-key'), 'utf8').trim()
    expect(served[0].stdout.split(key)).toHaveLength(2)
    const again = await start({ ...env, PORT: '0' }, listening)
    expect(again.code, again.stdout + again.stderr).toBe(0)
    expect(again.stdout).toContain(`agentd: the API key of tenant "default" is in ${path.join(dataDir, 'api-key')}\n`)
  }, 120000)
})

describe('a DATABASE_URL that cannot be reached', () => {
  const cases: Array<{ name: string; url: () => Promise<string>; host: string | (() => string) }> = [
    { name: 'nothing listens on its port', url: async () => `postgres://agentd:hunter2-secret@127.0.0.1:${await closedPort()}/agentd`, host: () => `127.0.0.1:${lastClosed}` },
    { name: 'its host name does not resolve', url: async () => 'postgres://agentd:hunter2-secret@db.invalid:5433/agentd', host: 'db.invalid:5433' },
    { name: 'its database does not exist', url: async () => withPassword(baseUrl(`agentd_absent_${crypto.randomBytes(4).toString('hex')}`)), host: () => hostOf(baseUrl('x')) },
  ]
  let lastClosed = 0
  const withPassword = (url: string) => {
    const u = new URL(url)
    u.password = 'hunter2-secret'
    return u.toString()
  }
  const hostOf = (url: string) => `${new URL(url).hostname}:${new URL(url).port || '5432'}`
  const closedPort = async () => {
    const p = await holdPort()
    await p.release()
    lastClosed = p.port
    return p.port
  }

  it.each(cases)('$name: one line naming DATABASE_URL and the host, never the password; exit code 2, nothing written', async ({ url, host }) => {
    const dataDir = path.join(tmp, `data-db-${Math.random().toString(36).slice(2)}`)
    const databaseUrl = await url()
    const r = await start({ DATABASE_URL: databaseUrl, AGENTD_DATA_DIR: dataDir })
    expect(r.code, r.stdout + r.stderr).toBe(2)
    const line = oneLine(r)
    expect(line.startsWith(`agentd: DATABASE_URL: cannot connect to PostgreSQL at ${typeof host === 'string' ? host : host()} (`), line).toBe(true)
    expect(r.stderr + r.stdout).not.toContain('hunter2')
    expect(r.stdout).toBe('')
    expect(fs.existsSync(dataDir)).toBe(false)
  }, 60000)
})

describe("the Docker image's health check", () => {
  it('runs on this Node.js as the image runs it: 0 while the server answers /healthz, 1 once it is gone', async () => {
    // the final stage's HEALTHCHECK, exec form: ["node", "-e", "<script>"]; the script reads PORT
    const dockerfile = fs.readFileSync(path.join(PROJECT, 'Dockerfile'), 'utf8').replace(/\\\n\s*/g, ' ')
    const m = /^HEALTHCHECK\s+(?:--\S+\s+)*CMD\s+(\[.*\])\s*$/m.exec(dockerfile)
    expect(m, 'the Dockerfile has an exec-form HEALTHCHECK').not.toBeNull()
    const [cmd, ...args] = JSON.parse(m![1]) as string[]
    expect(cmd).toBe('node')
    const check = (port: string) => spawnSync(process.execPath, args, { env: { ...process.env, PORT: port }, encoding: 'utf8', timeout: 20000 }).status
    let port = ''
    let whileUp: number | null = null
    const r = await start(
      { AGENTD_DATA_DIR: path.join(tmp, 'data-healthcheck'), LOG_LEVEL: 'info' },
      (out) => {
        const url = /"msg":"agentd listening"/.test(out) ? /"url":"http:\/\/127\.0\.0\.1:(\d+)"/.exec(out) : null
        if (!url) return false
        port = url[1]
        whileUp = check(port)
        return true
      },
      'npm start',
    )
    expect(r.code, r.stdout + r.stderr).toBe(0)
    expect(whileUp).toBe(0)
    expect(check(port)).toBe(1)
  }, 90000)
})
