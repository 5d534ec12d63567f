// agentd runs on Node.js 24 LTS (docs/runtime.md): the suite itself must run on it, the entry point must
// refuse an older Node.js in one line, every statement of the requirement must agree, and what `npm ci`
// fetches when the system's Node.js is older must be pinned and new enough.

import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import semver from 'semver'
import { describe, expect, it } from 'vitest'
import { MIN_NODE, runtimeProblem } from '../../src/runtime.js'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const read = (rel: string) => fs.readFileSync(path.join(ROOT, rel), 'utf8')
const pkg = JSON.parse(read('package.json')) as {
  engines: { node: string }
  agentd: { node: { version: string; integrity: Record<string, string> } }
  scripts: Record<string, string>
}
const MIN = `${MIN_NODE.major}.${MIN_NODE.minor}.0`

describe('the runtime', () => {
  it(`this suite runs on Node.js ${MIN_NODE.major}.${MIN_NODE.minor} or newer`, () => {
    expect(runtimeProblem(process.version), `the suite runs on ${process.version} (${process.execPath})`).toBeUndefined()
    expect(semver.gte(process.version, MIN)).toBe(true)
  })

  it('the entry check refuses every older Node.js in one line, and accepts the 24 LTS line and later', () => {
    for (const old of ['v18.20.8', 'v20.19.0', 'v20.20.2', 'v22.19.0', 'v24.10.0']) {
      const problem = runtimeProblem(old)
      expect(problem, old).toMatch(new RegExp(`^agentd needs Node\\.js ${MIN_NODE.major}\\.${MIN_NODE.minor} or newer, and this is ${old.replace(/\./g, '\\.')}\\.`))
      expect(problem).not.toContain('\n')
    }
    for (const ok of ['v24.11.0', 'v24.22.3', 'v25.0.0', 'v26.10.0']) expect(runtimeProblem(ok), ok).toBeUndefined()
  })

  it('package.json engines, .nvmrc, the pinned Node.js and the Dockerfile agree with the entry check', () => {
    expect(pkg.engines.node).toBe(`>=${MIN_NODE.major}.${MIN_NODE.minor}`)
    expect(read('.nvmrc').trim()).toBe(String(MIN_NODE.major))
    expect(semver.satisfies(pkg.agentd.node.version, pkg.engines.node)).toBe(true)
    expect(semver.major(pkg.agentd.node.version)).toBe(MIN_NODE.major)
    for (const m of read('Dockerfile').matchAll(/^FROM\s+node:(\d+)/gm)) expect(Number(m[1])).toBe(MIN_NODE.major)
  })

  it('npm ci brings the pinned Node.js through its postinstall, checked against a pinned integrity', () => {
    expect(pkg.scripts.postinstall).toBe('node scripts/node-runtime.mjs')
    // and again before the README's commands: an `npm install <package>` prunes links npm did not make
    for (const s of ['prestart', 'pretest']) expect(pkg.scripts[s], s).toBe('node scripts/node-runtime.mjs')
    for (const platform of ['linux-x64', 'linux-arm64']) expect(pkg.agentd.node.integrity[platform], platform).toMatch(/^sha512-[A-Za-z0-9+/]{86}==$/)
    // the script must run on the old Node.js it replaces: nothing newer than what Node 18 parses
    const text = read('scripts/node-runtime.mjs')
    expect(text).not.toMatch(/from '(?!node:)/)
  })

  it("npm running on the linked Node.js (node_modules/.bin first on the shell's PATH) keeps the link", () => {
    // a copy of the project's script beside a linked Node.js of its own: the real one this suite runs on
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'agentd-runtime-'))
    try {
      fs.mkdirSync(path.join(tmp, 'scripts'))
      fs.copyFileSync(path.join(ROOT, 'scripts/node-runtime.mjs'), path.join(tmp, 'scripts/node-runtime.mjs'))
      fs.copyFileSync(path.join(ROOT, 'package.json'), path.join(tmp, 'package.json'))
      const bin = path.join(tmp, 'node_modules/.agentd-node', pkg.agentd.node.version, 'bin')
      fs.mkdirSync(bin, { recursive: true })
      fs.symlinkSync(process.execPath, path.join(bin, 'node'))
      fs.mkdirSync(path.join(tmp, 'node_modules/.bin'))
      const link = path.join(tmp, 'node_modules/.bin/node')
      fs.symlinkSync(path.relative(path.dirname(link), path.join(bin, 'node')), link)
      // npm started from that PATH: its Node.js is the link (a pre-script's environment says so)
      const r = spawnSync(process.execPath, [path.join(tmp, 'scripts/node-runtime.mjs')], { encoding: 'utf8', env: { ...process.env, npm_node_execpath: link } })
      expect(r.status, r.stderr).toBe(0)
      expect(fs.readlinkSync(link)).toBe(path.relative(path.dirname(link), path.join(bin, 'node')))
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true })
    }
  })

  it('the entry point itself refuses an older Node.js before loading the server', () => {
    // a Node.js older than the minimum on this machine (the system's), if there is one; else the
    // check above covers the message and this test has nothing older to run
    const candidates = ['/usr/bin/node', '/usr/local/bin/node'].filter((p) => fs.existsSync(p))
    const old = candidates
      .map((p) => ({ p, v: spawnSync(p, ['--version'], { encoding: 'utf8' }).stdout.trim() }))
      .find(({ v }) => /^v\d/.test(v) && runtimeProblem(v) !== undefined && semver.gte(v, '18.19.0'))
    if (!old) return
    const r = spawnSync(old.p, ['--import', 'tsx', 'src/main.ts'], { cwd: ROOT, encoding: 'utf8', env: { ...process.env, PORT: '0', AGENTD_DATA_DIR: '/nonexistent/never-written' }, timeout: 30000 })
    expect(r.status).toBe(1)
    expect(r.stderr.trim()).toBe(runtimeProblem(old.v))
    expect(fs.existsSync('/nonexistent/never-written')).toBe(false)
  })
})

describe('dependencies', () => {
  it(`every production dependency in the lockfile runs on Node.js ${MIN_NODE.major}.${MIN_NODE.minor}`, () => {
    const lock = JSON.parse(read('package-lock.json')) as { packages: Record<string, { dev?: boolean; engines?: { node?: string } | string[]; version?: string }> }
    const unfit: string[] = []
    let checked = 0
    for (const [where, entry] of Object.entries(lock.packages)) {
      if (!where || entry.dev) continue
      const range = !Array.isArray(entry.engines) ? entry.engines?.node : undefined
      if (!range) continue
      checked++
      // the whole supported line: its first LTS release and the pinned one must both satisfy the range
      for (const v of [MIN, pkg.agentd.node.version]) if (!semver.satisfies(v, range)) unfit.push(`${where.replace(/^.*node_modules\//, '')}@${entry.version} wants node ${range}; ${v} is not in it`)
    }
    expect(checked).toBeGreaterThan(10)
    expect(unfit).toEqual([])
  })
})
