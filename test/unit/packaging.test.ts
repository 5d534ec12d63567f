// Packaging stays true to the code: the Dockerfile builds and runs what the server needs on a supported
// Node LTS, docker-compose.yml wires agentd to its database safely, .ci/run runs the README's test command
// on a fresh PostgreSQL database, and the README's commands and curl examples work. (The documentation's
// own checks, configuration variables included, are in docs.test.ts.)

import { execFileSync } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { loadConfig, parseSecretKey } from '../../src/config.js'
import { API_KEY_FILE } from '../../src/embedded-tenant.js'
import { MIGRATIONS_DIR } from '../../src/store/migrate.js'
import { SDK_DIR, WEB_DIR } from '../../src/http/ops.js'
import { section, tableRows } from '../helpers/markdown.js'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')

/** Node.js LTS lines and the day each one stops being supported (nodejs.org release schedule). */
const NODE_LTS_END_OF_LIFE: Record<number, string> = { 20: '2026-04-30', 22: '2027-04-30', 24: '2028-04-30', 26: '2029-04-30' }
/** Build and test tools a production install must not bring. */
const DEV_TOOLS = ['tsx', 'esbuild', 'typescript', 'vite', 'vitest', 'playwright-core', 'supertest']
const read = (rel: string) => fs.readFileSync(path.join(ROOT, rel), 'utf8')

// ---------------------------------------------------------------- Dockerfile

interface Instruction {
  op: string
  args: string
  line: number
}
interface Stage {
  from: string
  name?: string
  body: Instruction[]
}

/** Instructions of a Dockerfile: comments dropped, `\` continuations joined. */
export function parseDockerfile(text: string): Instruction[] {
  const out: Instruction[] = []
  let buf = ''
  let start = 0
  text.split('\n').forEach((raw, i) => {
    const line = raw.replace(/\r$/, '')
    if (!buf && /^\s*(#|$)/.test(line)) return
    if (buf && /^\s*#/.test(line)) return // comment lines inside a continuation
    if (!buf) start = i + 1
    const cont = /\\\s*$/.test(line)
    buf += (buf ? ' ' : '') + line.replace(/\\\s*$/, '').trim()
    if (cont) return
    const m = /^(\S+)\s*(.*)$/.exec(buf)!
    out.push({ op: m[1].toUpperCase(), args: m[2].trim(), line: start })
    buf = ''
  })
  if (buf) throw new Error('Dockerfile ends inside a line continuation')
  return out
}

export function stagesOf(instructions: Instruction[]): Stage[] {
  const stages: Stage[] = []
  for (const ins of instructions) {
    if (ins.op === 'FROM') {
      const m = /^(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?$/i.exec(ins.args)
      if (!m) throw new Error(`bad FROM at line ${ins.line}: ${ins.args}`)
      stages.push({ from: m[1], name: m[2], body: [] })
    } else if (stages.length) stages.at(-1)!.body.push(ins)
    else if (ins.op !== 'ARG') throw new Error(`${ins.op} before the first FROM (line ${ins.line})`)
  }
  return stages
}

/** ENV key=value pairs (both forms), in order. */
function envOf(stage: Stage): Record<string, string> {
  const env: Record<string, string> = {}
  for (const i of stage.body.filter((x) => x.op === 'ENV')) {
    if (!i.args.includes('=')) {
      const [k, ...v] = i.args.split(/\s+/)
      env[k] = v.join(' ')
      continue
    }
    for (const m of i.args.matchAll(/([A-Za-z_][A-Za-z0-9_]*)=("([^"]*)"|\S*)/g)) env[m[1]] = m[3] ?? m[2]
  }
  return env
}

/** The command of CMD/HEALTHCHECK CMD/RUN in exec (JSON) or shell form, as one string. */
function commandText(args: string): string {
  const s = args.replace(/^CMD\s+/i, '')
  if (s.startsWith('[')) return (JSON.parse(s) as string[]).join(' ')
  return s
}

describe('Dockerfile', () => {
  const stages = stagesOf(parseDockerfile(read('Dockerfile')))
  const final = stages.at(-1)!
  const runs = (s: Stage) => s.body.filter((i) => i.op === 'RUN').map((i) => i.args)
  const workdir = (s: Stage) => s.body.filter((i) => i.op === 'WORKDIR').at(-1)?.args ?? '/'
  const copies = (s: Stage) =>
    s.body
      .filter((i) => i.op === 'COPY')
      .map((i) => {
        const flags = [...i.args.matchAll(/--(\w+)=(\S+)/g)].map((m) => [m[1], m[2]])
        const parts = i.args.replace(/--\w+=\S+\s*/g, '').trim().split(/\s+/)
        const dest = parts.at(-1)!
        return { from: Object.fromEntries(flags).from as string | undefined, sources: parts.slice(0, -1), dest: path.posix.resolve(workdir(s), dest) }
      })

  it('is multi-stage on one supported Node LTS line, which the code declares it runs on', () => {
    expect(stages.length).toBeGreaterThanOrEqual(2)
    const images = [...new Set(stages.map((s) => s.from))]
    expect(images, 'every stage starts from the same image, so what is built is what runs').toHaveLength(1)
    const m = /^node:(\d+)(-[a-z0-9-]+)?$/.exec(images[0])
    expect(m, `${images[0]} is an official node image tagged by its major version`).not.toBeNull()
    const major = Number(m![1])
    const eol = NODE_LTS_END_OF_LIFE[major]
    expect(eol, `Node ${major} is an LTS line (known: ${Object.keys(NODE_LTS_END_OF_LIFE).join(', ')})`).toBeDefined()
    expect(new Date().toISOString().slice(0, 10) < eol, `Node ${major} reached its end of life on ${eol}: move the image to a newer LTS line`).toBe(true)
    // package.json's engines range covers both the image and the Node that runs this test (npm test: the pinned Node 24)
    const engines = (JSON.parse(read('package.json')) as { engines: { node: string } }).engines.node
    const min = /^>=(\d+)(?:\.(\d+))?/.exec(engines)
    expect(min, `engines.node is a lower bound, got ${engines}`).not.toBeNull()
    expect(major).toBeGreaterThanOrEqual(Number(min![1]))
    expect(Number(process.versions.node.split('.')[0])).toBeGreaterThanOrEqual(Number(min![1]))
  })

  it('carries no dev tooling: tsx, esbuild and TypeScript are dev dependencies, which the image omits', () => {
    const pkg = JSON.parse(read('package.json')) as { dependencies: Record<string, string>; devDependencies: Record<string, string>; scripts: Record<string, string> }
    for (const tool of DEV_TOOLS) expect(Object.keys(pkg.dependencies), `${tool} is not a production dependency`).not.toContain(tool)
    // what `npm ci --omit=dev` installs: every locked package not marked dev
    const lock = JSON.parse(read('package-lock.json')) as { packages: Record<string, { dev?: boolean }> }
    const shipped = Object.entries(lock.packages).filter(([p, e]) => p && !e.dev).map(([p]) => p.replace(/^.*node_modules\//, ''))
    for (const tool of [...DEV_TOOLS, '@esbuild/linux-x64']) expect(shipped, `the image would carry ${tool}`).not.toContain(tool)
    // `npm ci && npm start` still works from a clone: npm ci installs dev dependencies too
    const starter = pkg.scripts.start.split(/\s+/)[0]
    expect({ ...pkg.dependencies, ...pkg.devDependencies }, `npm start runs ${starter}`).toHaveProperty(starter)
  })

  it('builds with the dev toolchain in an earlier stage and ships production dependencies only', () => {
    const build = stages.slice(0, -1)
    expect(build.some((s) => runs(s).some((r) => /\bnpm ci\b/.test(r))), 'a build stage runs npm ci').toBe(true)
    expect(build.some((s) => runs(s).some((r) => /\bnpm run build\b/.test(r))), 'a build stage runs npm run build').toBe(true)
    const install = runs(final).filter((r) => /\bnpm (ci|install)\b/.test(r))
    expect(install.length, 'the final stage installs its dependencies').toBeGreaterThan(0)
    for (const r of install) expect(r, 'without dev dependencies').toMatch(/\bnpm ci\b.*(--omit=dev|--omit dev|--production|--only=prod)/)
    // dev dependencies must not come in through a copied node_modules either
    for (const c of copies(final)) expect(c.sources.join(' '), 'the final stage copies no node_modules').not.toMatch(/node_modules/)
    expect(runs(final).join('\n'), 'the final stage compiles nothing').not.toMatch(/npm run build|\btsc\b/)
  })

  it('runs as a user that is not root', () => {
    const users = final.body.filter((i) => i.op === 'USER')
    expect(users.length, 'the final stage sets USER').toBeGreaterThan(0)
    const user = users.at(-1)!.args.split(':')[0]
    expect(['root', '0']).not.toContain(user)
    // nothing after USER needs root
    const after = final.body.slice(final.body.indexOf(users.at(-1)!) + 1)
    expect(after.filter((i) => i.op === 'RUN').map((i) => i.args)).toEqual([])
  })

  it('starts dist/main.js, which is where tsconfig.build.json puts src/main.ts', () => {
    const cmd = final.body.filter((i) => i.op === 'CMD').at(-1)
    expect(cmd, 'the final stage has a CMD').toBeDefined()
    expect(JSON.parse(cmd!.args)).toEqual(['node', 'dist/main.js'])
    const tsb = JSON.parse(read('tsconfig.build.json')) as { compilerOptions: { rootDir: string; outDir: string } }
    expect(tsb.compilerOptions.rootDir).toBe('src')
    expect(tsb.compilerOptions.outDir).toBe('dist')
    expect(fs.existsSync(path.join(ROOT, 'src/main.ts'))).toBe(true)
    expect(copies(final).some((c) => c.from && c.sources.some((s) => /\/dist\/?$/.test(s)) && c.dest === path.posix.join(workdir(final), 'dist'))).toBe(true)
  })

  it('copies what the server reads at run time to where it looks for it', () => {
    // the code resolves these from its own file; dist/ has the same depth as src/, so relative to the root
    const needed = [
      path.relative(ROOT, MIGRATIONS_DIR), // migrations
      path.relative(ROOT, WEB_DIR), // web
      path.relative(ROOT, SDK_DIR), // the SDK's build the console imports
      'openapi',
    ]
    expect(needed.slice(0, 3)).toEqual(['migrations', 'web', 'clients/typescript/dist'])
    const dests = copies(final).map((c) => c.dest)
    for (const n of needed) expect(dests, `the final stage copies ${n} into ${workdir(final)}`).toContain(path.posix.join(workdir(final), n))
    // package.json (module type; the version in /openapi.json) lands in the workdir, possibly as "./"
    const pkg = copies(final).find((c) => c.sources.includes('package.json'))
    expect(pkg && (pkg.dest === workdir(final) || pkg.dest === path.posix.join(workdir(final), 'package.json'))).toBe(true)
  })

  it("builds the SDK's library for the console from the sources in the image, without the terminal client, and ships it", () => {
    // what the console imports (GET /console/sdk/:file) is the workspace's `build:lib`: its tsconfig
    // compiles src/ but src/cli into SDK_DIR
    const sdk = 'clients/typescript'
    const scripts = (JSON.parse(read(`${sdk}/package.json`)) as { name: string; scripts: Record<string, string> }).scripts
    expect(scripts['build:lib']).toBe('tsc -p .')
    const tsc = JSON.parse(read(`${sdk}/tsconfig.json`)) as { compilerOptions: { outDir: string; rootDir: string }; include: string[]; exclude: string[] }
    expect(path.resolve(ROOT, sdk, tsc.compilerOptions.outDir)).toBe(SDK_DIR)
    expect(tsc.include).toEqual(['src'])
    expect(tsc.exclude).toContain('src/cli')
    const build = stages.find((s) => copies(final).some((c) => c.from === s.name && c.sources.includes(`${workdir(s)}/${sdk}/dist`)))
    expect(build, `the final stage copies ${sdk}/dist from a build stage`).toBeDefined()
    const body = build!.body
    const sources = body.findIndex((i) => i.op === 'COPY' && !/--from=/.test(i.args) && i.args.split(/\s+/)[0] === '.')
    const builds = body.findIndex((i) => i.op === 'RUN' && /\bnpm run build:lib (-w|--workspace)[ =]@agentd\/client\b/.test(i.args))
    expect(sources, 'the build stage copies the sources').toBeGreaterThanOrEqual(0)
    expect(builds, 'the build stage runs the SDK workspace\'s build:lib').toBeGreaterThan(sources)
    // nothing builds the terminal client there, and a local build (cli/ included) is not in the context
    expect(runs(build!).join('\n')).not.toMatch(/build:client|npm run build (-w|--workspace)|tsconfig\.cli/)
    const ignored = read('.dockerignore').split('\n').map((l) => l.trim())
    expect(ignored).toContain(`${sdk}/dist`)
  })

  it('listens on all interfaces on the exposed port, keeps its data in a volume and checks /healthz', () => {
    const env = envOf(final)
    expect(env.HOST, 'HOST=0.0.0.0, else the server listens on the container loopback only').toBe('0.0.0.0')
    const exposed = final.body.filter((i) => i.op === 'EXPOSE').flatMap((i) => i.args.split(/\s+/).map((p) => p.replace(/\/tcp$/, '')))
    expect(exposed).toContain(env.PORT ?? '8080')
    expect(env.AGENTD_DATA_DIR).toBeDefined()
    const volumes = final.body.filter((i) => i.op === 'VOLUME').flatMap((i) => (i.args.startsWith('[') ? JSON.parse(i.args) : i.args.split(/\s+/)))
    expect(volumes).toContain(env.AGENTD_DATA_DIR)
    const hc = final.body.filter((i) => i.op === 'HEALTHCHECK').at(-1)
    expect(hc, 'the final stage has a HEALTHCHECK').toBeDefined()
    const cmd = commandText(hc!.args.replace(/^(--\S+\s+)*/, ''))
    expect(cmd).toMatch(/\/healthz/)
    // slim images have no curl or wget: the check must use node itself
    expect(cmd).toMatch(/^node\b/)
  })

  it('has a .dockerignore that keeps host node_modules and build output out of the context', () => {
    const ignored = read('.dockerignore').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'))
    for (const p of ['node_modules', 'dist', '.agentd', '.git']) expect(ignored, p).toContain(p)
  })
})

// ---------------------------------------------------------------- docker-compose.yml

type Yaml = string | number | boolean | null | Yaml[] | { [k: string]: Yaml }

/** A small YAML subset: block mappings and sequences by indentation, flow sequences written as JSON,
 *  plain and quoted scalars, comments. Enough for docker-compose.yml; throws on anything else. */
export function parseYaml(text: string): Yaml {
  const lines = text
    .split('\n')
    .map((raw, i) => ({ raw: raw.replace(/\r$/, ''), n: i + 1 }))
    .map(({ raw, n }) => ({ n, indent: raw.length - raw.trimStart().length, text: stripComment(raw).trim() }))
    .filter((l) => l.text !== '')
  let i = 0
  const scalar = (s: string, n: number): Yaml => {
    if (s === '' || s === '~' || s === 'null') return null
    if (s.startsWith('[') || s.startsWith('{')) {
      try {
        return JSON.parse(s)
      } catch {
        throw new Error(`line ${n}: flow collection this parser cannot read: ${s}`)
      }
    }
    if (s.startsWith('"')) return JSON.parse(s)
    if (s.startsWith("'")) return s.slice(1, -1).replace(/''/g, "'")
    if (s === 'true' || s === 'false') return s === 'true'
    if (/^-?\d+(\.\d+)?$/.test(s)) return Number(s)
    return s
  }
  const block = (indent: number): Yaml => {
    if (lines[i].text.startsWith('- ') || lines[i].text === '-') {
      const out: Yaml[] = []
      while (i < lines.length && lines[i].indent === indent && (lines[i].text.startsWith('- ') || lines[i].text === '-')) {
        const l = lines[i]
        const rest = l.text.slice(1).trim()
        i++
        if (rest === '') out.push(i < lines.length && lines[i].indent > indent ? block(lines[i].indent) : null)
        else if (/^[^"'[{][^:]*:(\s|$)/.test(rest)) throw new Error(`line ${l.n}: mappings inside sequence items are not supported`)
        else out.push(scalar(rest, l.n))
      }
      return out
    }
    const out: { [k: string]: Yaml } = {}
    while (i < lines.length && lines[i].indent === indent) {
      const l = lines[i]
      const m = /^("[^"]*"|'[^']*'|[^:]+?):(?:\s+(.*))?$/.exec(l.text)
      if (!m) throw new Error(`line ${l.n}: expected "key: value", got ${l.text}`)
      const key = scalar(m[1], l.n) as string
      if (key in out) throw new Error(`line ${l.n}: duplicate key ${key}`)
      i++
      if (m[2] !== undefined && m[2] !== '') out[key] = scalar(m[2], l.n)
      else if (i < lines.length && lines[i].indent > indent) out[key] = block(lines[i].indent)
      else if (i < lines.length && lines[i].indent === indent && lines[i].text.startsWith('- ')) out[key] = block(indent)
      else out[key] = null
    }
    if (i < lines.length && lines[i].indent > indent) throw new Error(`line ${lines[i].n}: unexpected indentation`)
    return out
  }
  if (!lines.length) return null
  const doc = block(lines[0].indent)
  if (i < lines.length) throw new Error(`line ${lines[i].n}: unexpected dedent`)
  return doc
}

function stripComment(line: string): string {
  let q: string | null = null
  for (let k = 0; k < line.length; k++) {
    const c = line[k]
    if (q) {
      if (c === q) q = null
    } else if (c === '"' || c === "'") q = c
    else if (c === '#' && (k === 0 || /\s/.test(line[k - 1]))) return line.slice(0, k)
  }
  return line
}

/** A compose environment (mapping or KEY=value list) as a record. */
function composeEnv(env: Yaml): Record<string, string> {
  if (!env) return {}
  if (Array.isArray(env)) return Object.fromEntries(env.map((e) => String(e).split(/=(.*)/s).slice(0, 2) as [string, string]))
  return Object.fromEntries(Object.entries(env as Record<string, Yaml>).map(([k, v]) => [k, v === null ? '' : String(v)]))
}

describe('the YAML subset parser used below', () => {
  it('reads nested mappings, sequences, flow sequences and quoting, and refuses what it does not know', () => {
    expect(parseYaml('a:\n  b: 1\n  c: "x # y" # note\n  d:\n    - "p:q"\n    - r\n  e: ["CMD", "x"]\nf:\n')).toEqual({
      a: { b: 1, c: 'x # y', d: ['p:q', 'r'], e: ['CMD', 'x'] },
      f: null,
    })
    expect(() => parseYaml('a:\n  - b: 1\n')).toThrow(/not supported/)
    expect(() => parseYaml('a: 1\n   b: 2\n')).toThrow()
    expect(() => parseYaml('a: 1\na: 2\n')).toThrow(/duplicate/)
  })
})

describe('docker-compose.yml', () => {
  const doc = parseYaml(read('docker-compose.yml')) as Record<string, any>
  const services = doc.services as Record<string, any>

  it('runs agentd after a healthy PostgreSQL', () => {
    expect(Object.keys(services)).toEqual(expect.arrayContaining(['postgres', 'agentd']))
    expect(services.postgres.image).toMatch(/^postgres:15\b/)
    const test = services.postgres.healthcheck?.test
    expect([test].flat().join(' ')).toMatch(/pg_isready/)
    expect(services.agentd.build === '.' || services.agentd.build?.context === '.').toBe(true)
    expect(services.agentd.depends_on?.postgres?.condition).toBe('service_healthy')
  })

  it('points DATABASE_URL at the postgres service with its credentials', () => {
    const pgEnv = composeEnv(services.postgres.environment)
    const env = composeEnv(services.agentd.environment)
    const url = new URL(env.DATABASE_URL)
    expect(url.protocol).toMatch(/^postgres(ql)?:$/)
    expect(url.hostname).toBe('postgres')
    expect(url.port || '5432').toBe('5432')
    expect(decodeURIComponent(url.username)).toBe(pgEnv.POSTGRES_USER)
    expect(decodeURIComponent(url.password)).toBe(pgEnv.POSTGRES_PASSWORD)
    expect(url.pathname.slice(1)).toBe(pgEnv.POSTGRES_DB)
  })

  it('publishes the port on the loopback interface only, and needs an admin token the user chose', () => {
    const env = composeEnv(services.agentd.environment)
    // inside the container the server listens on every interface; the host publishes it on 127.0.0.1
    expect(env.HOST).toBe('0.0.0.0')
    const port = env.PORT ?? '8080'
    expect((services.agentd.ports as Yaml[]).map(String)).toEqual([`127.0.0.1:${port}:${port}`])
    // `:?` makes compose refuse to start when the variable is unset or empty: there is no default token
    expect(env.AGENTD_ADMIN_TOKEN).toMatch(/^\$\{AGENTD_ADMIN_TOKEN:\?[^}]+\}$/)
    expect(services.agentd.restart).toBe('unless-stopped')
    expect(services.postgres.ports, 'PostgreSQL is reachable only by the agentd service').toBeUndefined()
  })

  it('takes AGENTD_SECRET_KEY from the user, never a key of its own, and says how to make one the server accepts', () => {
    const env = composeEnv(services.agentd.environment)
    // unset or empty: the server starts without secrets (409 secrets-unavailable on their routes)
    expect(env.AGENTD_SECRET_KEY).toMatch(/^\$\{AGENTD_SECRET_KEY(:-)?\}$/)
    expect(loadConfig({ AGENTD_SECRET_KEY: '' }).secretKey).toBeUndefined()
    const make = /AGENTD_SECRET_KEY=\$\(openssl rand -base64 (\d+)\)/.exec(read('docker-compose.yml'))
    expect(make, 'docker-compose.yml shows how to make the key').not.toBeNull()
    expect(parseSecretKey(crypto.randomBytes(Number(make![1])).toString('base64'))).toBeInstanceOf(Buffer)
  })

  it('sets only documented configuration variables and keeps the database in a named volume', () => {
    const known = configVariables()
    for (const k of Object.keys(composeEnv(services.agentd.environment))) expect(known, `agentd environment variable ${k}`).toContain(k)
    const vols = (services.postgres.volumes as string[]).map((v) => v.split(':')[0])
    for (const v of vols.filter((x) => !x.startsWith('.') && !x.startsWith('/'))) expect(Object.keys(doc.volumes ?? {})).toContain(v)
    expect(services.postgres.volumes.some((v: string) => v.endsWith(':/var/lib/postgresql/data'))).toBe(true)
  })
})

// ---------------------------------------------------------------- README

/** The variables docs/configuration.md documents (docs.test.ts checks them against src/config.ts). */
function configVariables(): string[] {
  return tableRows(section(read('docs/configuration.md'), /^##\s+variables\b/i)).map((r) => r[0].replace(/`/g, ''))
}

/** The commands in the code blocks of a markdown text. */
function codeLines(text: string): string[] {
  return [...text.matchAll(/```[^\n]*\n([\s\S]*?)```/g)].flatMap((m) => m[1].split('\n').map((l) => l.trim()).filter(Boolean))
}

describe('README.md', () => {
  const readme = read('README.md')
  const setup = section(readme, /^##\s+set[ -]?up\b/i)

  it('gives the two set-up commands', () => {
    const cmds = codeLines(setup)
    expect(cmds).toContain('npm ci && npm start')
    expect(cmds).toContain('npm ci && npm test')
    const pkg = JSON.parse(read('package.json')) as { scripts: Record<string, string> }
    expect(pkg.scripts.start).toBeTruthy()
    expect(pkg.scripts.test).toBeTruthy()
  })

  it('says, in its Docker section, what compose needs for secrets and where the image keeps its first key', () => {
    const docker = section(readme, /^##\s+docker\b/i)
    const make = /AGENTD_SECRET_KEY=\$\(openssl rand -base64 (\d+)\)/.exec(docker)
    expect(make, 'the Docker section shows how to make AGENTD_SECRET_KEY').not.toBeNull()
    expect(parseSecretKey(crypto.randomBytes(Number(make![1])).toString('base64'))).toBeInstanceOf(Buffer)
    expect(docker).toContain('409 secrets-unavailable')
    // the embedded database of the image: its data directory and the key files the server writes there
    const dataDir = envOf(stagesOf(parseDockerfile(read('Dockerfile'))).at(-1)!).AGENTD_DATA_DIR!
    expect(docker).toContain(`\`${path.posix.join(dataDir, API_KEY_FILE)}\``)
    expect(docker).toContain(`\`${path.posix.join(dataDir, 'secret-key')}\``)
    expect(docker).toMatch(/`docker logs [^`]+`/)
  })

  it('uses only routes the server has in its curl examples', () => {
    const doc = JSON.parse(read('openapi/openapi.json')) as { paths: Record<string, unknown> }
    const templates = Object.keys(doc.paths).map((p) => new RegExp(`^${p.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\\\{\w+\\\}|\{\w+\}/g, '[^/]+')}$`))
    const used = [...readme.matchAll(/\$AGENTD(\/[^\s"'?]*)/g)].map((m) => m[1])
    expect(used.length).toBeGreaterThan(5)
    const unknown = used.filter((u) => !templates.some((t) => t.test(u)))
    expect(unknown).toEqual([])
  })
})

// ---------------------------------------------------------------- .ci/run

describe('.ci/run', () => {
  const file = path.join(ROOT, '.ci/run')
  const text = fs.readFileSync(file, 'utf8')
  const commands = text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'))

  it('is an executable bash script that stops on the first error', () => {
    expect(fs.statSync(file).mode & 0o111, 'executable bits').not.toBe(0)
    expect(text.split('\n')[0]).toMatch(/^#!.*\bbash\b/)
    expect(commands).toContain('set -euo pipefail')
    execFileSync('bash', ['-n', file]) // parses
  })

  it('makes sure PostgreSQL runs, on a fresh database dropped afterwards', () => {
    expect(text).toMatch(/pg_isready\s+-h\s+127\.0\.0\.1\s+-p\s+5432/)
    expect(text).toMatch(/pg_ctlcluster\s+--skip-systemctl-redirect\s+\S+\s+main\s+start/)
    expect(text).toMatch(/CREATE DATABASE/)
    expect(text).toMatch(/trap\s+\S+\s+EXIT/)
    expect(text).toMatch(/DROP DATABASE/)
    expect(text).toMatch(/DATABASE_URL=/)
  })

  it('installs with npm ci and then runs exactly the README test command', () => {
    const setup = codeLines(section(read('README.md'), /^##\s+set[ -]?up\b/i))
    const testLine = setup.find((l) => /^npm ci && .*\btest\b/.test(l))
    expect(testLine, 'README set-up section has `npm ci && <test command>`').toBeDefined()
    const testCommand = testLine!.replace(/^npm ci && /, '')
    const ci = commands.indexOf('npm ci')
    const run = commands.indexOf(testCommand)
    expect(ci, '.ci/run runs npm ci').toBeGreaterThanOrEqual(0)
    expect(run, `.ci/run runs \`${testCommand}\``).toBeGreaterThan(ci)
    // with the run's database: DATABASE_URL is exported before the test command
    const exp = commands.findIndex((l) => /^export DATABASE_URL=/.test(l))
    expect(exp).toBeGreaterThanOrEqual(0)
    expect(exp).toBeLessThan(run)
  })
})
