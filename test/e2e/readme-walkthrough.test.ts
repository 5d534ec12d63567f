// The README's "Walkthrough with curl", run as written: a server started as `npm start` starts it (on
// PGlite with its embedded tenant, and on PostgreSQL with a tenant made through the admin routes), each
// `sh` block run by bash with curl in a directory where `.agentd/api-key` holds the key, and every output
// block the README shows checked against what its command printed. A README sample is a pattern of the
// real output: `…` skips (text within a line, or whole lines on a line of its own), a line that starts
// with a blank goes on from the line before (a long line broken for reading), and volatile values
// (message ids, idempotency message ids, times) match any value of their kind, the same README value
// always the same real value, so a sample cannot show one event's time on another. A streaming command
// (`curl -N`) runs in the background, as in a terminal of its own; an output block shows the output of
// the latest command whose output has not been shown yet.

import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DB_KINDS, freshPgDatabase, freshPgliteDir, type DbKind } from '../helpers/db.js'
import { section } from '../helpers/markdown.js'
import { sleep, until } from '../helpers/wait.js'
import { freePort } from './helpers-processes.js'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const PLUGIN = path.join(ROOT, 'test/e2e/fixtures/walkthrough-plugin.mjs')
/** the address the README's commands use */
const README_URL = 'http://127.0.0.1:8080'
const ADMIN_TOKEN = 'walkthrough-admin'

/** The walkthrough's fenced blocks in order: commands (`sh`) and what they print (`json` or none). */
export function walkthroughBlocks(readme: string): Array<{ kind: 'sh' | 'out'; text: string }> {
  const sec = section(readme, /^## Walkthrough with curl/)
  // its subsections call servers a test does not have (an MCP server at example.com)
  const own = sec.split(/^### /m)[0]!
  return [...own.matchAll(/^```(\w*)\n([\s\S]*?)^```$/gm)].map((m) => ({ kind: m[1] === 'sh' ? 'sh' : 'out', text: m[2]!.replace(/\n$/, '') }))
}

const ISO_TIME = /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/g
/** trailing blanks and blank lines off; ISO times as epoch milliseconds, so the two forms of one instant are one value */
const normalize = (text: string) =>
  text
    .replace(ISO_TIME, (t) => String(Date.parse(t)))
    .split('\n')
    .map((l) => l.trimEnd())
    .join('\n')
    .replace(/^\n+|\n+$/g, '')

const VOLATILE: Array<[RegExp, string]> = [
  [/^msg_[0-9a-f]{32}$/, 'msg_[0-9a-f]{32}'],
  [/^idem-[0-9a-f]{32}$/, 'idem-[0-9a-f]{32}'],
  [/^\d{13}$/, '\\d{13}'],
]
const TOKEN = /(…|msg_[0-9a-f]{32}|idem-[0-9a-f]{32}|\b\d{13}\b)/
const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')

/** A README sample as a regular expression of the real output (see the top of the file). */
export function samplePattern(sample: string): RegExp {
  const groups = new Map<string, string>()
  // a line that starts with a blank goes on from the line before: a long line broken for reading
  const lines = normalize(sample).replace(/\n +/g, '').split('\n')
  const parts = lines.map((line, i) => {
    const last = i === lines.length - 1
    if (line.trim() === '…') return last ? '[\\s\\S]*' : '(?:[^\\n]*\\n)*?'
    const body = line
      .split(TOKEN)
      .map((piece, k) => {
        if (k % 2 === 0) return escape(piece)
        if (piece === '…') return '[^\\n]*?'
        const known = groups.get(piece)
        if (known) return `\\k<${known}>`
        const name = `v${groups.size}`
        groups.set(piece, name)
        return `(?<${name}>${VOLATILE.find(([re]) => re.test(piece))![1]})`
      })
      .join('')
    return last ? body : `${body}\\n`
  })
  return new RegExp(`^${parts.join('')}$`)
}

export const sampleMatches = (sample: string, real: string) => samplePattern(sample).test(normalize(real))

/** A user's shell environment: none of the server's variables. */
function userEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = {}
  for (const [k, v] of Object.entries(process.env)) if (!/^(AGENTD_|DATABASE_URL$|PORT$|HOST$|LOG_LEVEL$|KEY$)/.test(k)) out[k] = v
  return { ...out, ...extra }
}

interface Command {
  text: string
  shown: boolean
  /** what it printed so far */
  out: () => string
  /** resolves when it exits (never for a stream) */
  done: Promise<void>
  stop(): void
}

describe.each(DB_KINDS)('the README walkthrough, run as written (%s)', (kind: DbKind) => {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'agentd-walkthrough-'))
  let server: ChildProcess | undefined
  let serverOut = ''
  let url = ''
  let dropDb: (() => Promise<void>) | undefined
  const commands: Command[] = []

  beforeAll(async () => {
    const port = await freePort()
    url = `http://127.0.0.1:${port}`
    const env: Record<string, string> = { PORT: String(port), HOST: '127.0.0.1', AGENTD_PLUGINS: PLUGIN, AGENTD_ADMIN_TOKEN: ADMIN_TOKEN, LOG_LEVEL: 'warn' }
    if (kind === 'pglite') {
      // the embedded database in the directory the commands run in, as `npm start` makes it there
      const dataDir = freshPgliteDir()
      fs.symlinkSync(dataDir, path.join(home, '.agentd'))
      env.AGENTD_DATA_DIR = dataDir
    } else {
      const db = await freshPgDatabase()
      dropDb = db.drop
      env.DATABASE_URL = db.url
      env.AGENTD_DATA_DIR = path.join(home, '.agentd')
    }
    server = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], { cwd: ROOT, env: userEnv(env), stdio: ['ignore', 'pipe', 'pipe'] })
    server.stdout!.on('data', (c) => (serverOut += c))
    server.stderr!.on('data', (c) => (serverOut += c))
    await until('the server to be ready', async () => (await fetch(`${url}/readyz`).catch(() => undefined))?.status === 200, 60000, 100)
    if (kind === 'pg') {
      // no embedded tenant on PostgreSQL: one made through the admin routes, its key where the README reads it
      const r = await fetch(`${url}/v1/admin/tenants`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'default' }) })
      expect(r.status).toBe(201)
      fs.mkdirSync(path.join(home, '.agentd'), { recursive: true })
      fs.writeFileSync(path.join(home, '.agentd', 'api-key'), `${((await r.json()) as { apiKey: string }).apiKey}\n`)
    }
    expect(fs.readFileSync(path.join(home, '.agentd', 'api-key'), 'utf8').trim()).toMatch(/\S{20,}/)
  }, 90000)

  afterAll(async () => {
    for (const c of commands) c.stop()
    if (server && server.exitCode === null) {
      const exited = new Promise((r) => server!.once('exit', r))
      server.kill('SIGTERM')
      await Promise.race([exited, sleep(10000)])
      if (server.exitCode === null) server.kill('SIGKILL')
    }
    await dropDb?.()
    fs.rmSync(home, { recursive: true, force: true })
  })

  /** Runs a block with bash in `home`, at the test server's address; each command's output on lines of its own. */
  const run = (block: string): Command => {
    const here = block.replaceAll(README_URL, url)
    // a line ending in a backslash goes on on the next one
    const lines = here.replace(/\\\n\s*/g, '').split('\n')
    const script = ['set -e', ...lines.map((l) => (l.trim() && !l.trim().startsWith('#') ? `${l}\nprintf '\\n'` : l))].join('\n')
    // the variables the walkthrough's first block sets, as in the terminal where it ran; a group of its
    // own, so that a stream's curl goes with it
    const vars = { KEY: fs.readFileSync(path.join(home, '.agentd', 'api-key'), 'utf8').trim(), AGENTD: url }
    const child = spawn('bash', ['-c', script], { cwd: home, env: userEnv(vars), stdio: ['ignore', 'pipe', 'pipe'], detached: true })
    let out = ''
    let err = ''
    child.stdout!.on('data', (c) => (out += c))
    child.stderr!.on('data', (c) => (err += c))
    const done = new Promise<void>((resolve, reject) =>
      child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`${block}\nexited with ${code}: ${err}`)))),
    )
    done.catch(() => {})
    return {
      text: block,
      shown: false,
      out: () => out,
      done,
      stop: () => {
        if (child.exitCode === null && child.signalCode === null) process.kill(-child.pid!, 'SIGTERM')
      },
    }
  }

  it('shows, after each command, what the command prints, up to ids and times', async () => {
    const blocks = walkthroughBlocks(fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8'))
    expect(blocks.filter((b) => b.kind === 'sh').length).toBeGreaterThanOrEqual(7)
    expect(blocks.filter((b) => b.kind === 'out').length).toBeGreaterThanOrEqual(7)
    for (const b of blocks) {
      if (b.kind === 'sh') {
        const c = run(b.text)
        commands.push(c)
        // a stream is watched from its terminal once it shows it is open, as a reader of the README would
        if (/curl -N\b/.test(b.text)) await until('the stream to open', () => c.out().includes('event: stream/ready\n'), 15000, 20)
        else await c.done
        continue
      }
      const c = [...commands].reverse().find((x) => !x.shown)
      expect(c, `README: an output block with no command before it:\n${b.text}`).toBeDefined()
      c!.shown = true
      const streaming = /curl -N\b/.test(c!.text)
      // a stream's output grows: it must come to match
      if (streaming) await until('the stream to print what the README shows', () => sampleMatches(b.text, c!.out()), 15000, 50).catch(() => {})
      // a block of reads is run again while what it reads is still settling (a cancelled turn closing), as
      // a reader would run it a moment later; a difference that stays fails
      const reads = !streaming && !/\s-X\s|\s-d\s/.test(c!.text)
      for (let tries = 0; reads && !sampleMatches(b.text, c!.out()) && tries < 20; tries++) {
        await sleep(250)
        const again = run(c!.text)
        await again.done
        c!.out = again.out
      }
      const real = c!.out().trim()
      expect(sampleMatches(b.text, c!.out()), `README.md, the output of\n${c!.text}\n\nshows\n${b.text}\n\nbut a real run prints\n${real}\n\n(server output: ${serverOut.slice(-2000)})`).toBe(true)
      if (streaming) c!.stop()
    }
    expect(commands.every((c) => c.shown || /curl -N\b/.test(c.text)), 'every command that ends has its output shown').toBe(true)
  }, 120000)
})

describe('a README sample as a pattern', () => {
  it('skips with …, and takes any value of a volatile kind, the same one wherever the sample repeats it', () => {
    const sample = '{"id":"msg_00000000000000000000000000000001","time":1796073611637,…}\n…\n{"again":"msg_00000000000000000000000000000001","at":"2026-11-30T21:20:11.637Z"}'
    const real = (id2: string, at: string) => `{"id":"msg_${'a'.repeat(32)}","time":1800000000000,"x":1}\nline\nmore\n{"again":"msg_${id2}","at":"${at}"}`
    expect(sampleMatches(sample, real('a'.repeat(32), '2027-01-15T08:00:00.000Z'))).toBe(true)
    // the same README value twice: another real value the second time does not match
    expect(sampleMatches(sample, real('b'.repeat(32), '2027-01-15T08:00:00.000Z'))).toBe(false)
    expect(sampleMatches(sample, real('a'.repeat(32), '2027-01-15T08:00:00.001Z'))).toBe(false)
    // what is not elided must be there as shown
    expect(sampleMatches('{"turn":1,…}', '{"turn":2,"x":1}')).toBe(false)
    expect(sampleMatches('a\n…\nb', 'a\nb')).toBe(true)
    expect(sampleMatches('a\nb', 'a\nx\nb')).toBe(false)
  })
})
