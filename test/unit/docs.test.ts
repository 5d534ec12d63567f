// The documentation stays true to the code: docs/api.md is what `npm run docs` generates from
// openapi/openapi.json, the event catalogue and the error codes; docs/configuration.md lists exactly the
// variables src/config.ts reads, with the defaults it applies; every example models file in
// docs/models.md is accepted; docs/plugins.md shows the example plugins exactly as they are in
// docs/examples (test/integration/docs-examples.test.ts runs them); clients/typescript/README.md names
// every public method and export of the client.

import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'
import * as sdk from '../../clients/typescript/src/index.js'
import { loadConfig } from '../../src/config.js'
import { parseModelsFile } from '../../src/llm/index.js'
import { DocsError, renderApiDoc, type OpenApiDoc } from '../../scripts/docs.js'
import { codeBlocks, section, tableRows } from '../helpers/markdown.js'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const read = (rel: string) => fs.readFileSync(path.join(ROOT, rel), 'utf8')
const STALE = 'docs/api.md is stale: run `npm run docs` and commit the result'

describe('docs/api.md', () => {
  it('is what `npm run docs` generates from openapi/openapi.json, the event catalogue and the error codes', () => {
    expect(read('docs/api.md'), STALE).toBe(renderApiDoc().text)
  })

  it('documents every route of openapi/openapi.json', () => {
    const doc = JSON.parse(read('openapi/openapi.json')) as OpenApiDoc
    const text = read('docs/api.md')
    for (const [p, item] of Object.entries(doc.paths)) for (const m of Object.keys(item)) expect(text, `${m} ${p}`).toContain(`### ${m.toUpperCase()} ${p}\n`)
  })

  it('renders operation ids and named schemas, each schema once in its own section', () => {
    const doc = JSON.parse(read('openapi/openapi.json')) as OpenApiDoc & { components?: { schemas?: Record<string, unknown> } }
    const { text } = renderApiDoc()
    for (const item of Object.values(doc.paths)) for (const op of Object.values(item) as Array<{ operationId?: string }>) expect(text).toContain(`Operation id \`${op.operationId}\`.`)
    const names = Object.keys(doc.components?.schemas ?? {})
    expect(names).toContain('SessionObject')
    for (const n of names) expect(text.split(`<a id="schema-${n.toLowerCase()}"></a>\n\n### ${n}\n`).length - 1, `schema ${n} has one section`).toBe(1)
    expect(text).toContain('Types: [CreateSessionBody](#schema-createsessionbody), [SessionObject](#schema-sessionobject).')
    expect(text.split('lastTurn: LastTurn | null').length - 1, 'the session fields appear once').toBe(1)
    // texts of the route schemas may cite the contract, which users do not have
    expect(text).not.toMatch(/SPEC|API\.md/)
  })

  it('refuses a template that leaves out a route, an event type or an error code', () => {
    const template = fs.readFileSync(path.join(ROOT, 'scripts/docs/api.template.md'), 'utf8')
    const without = (directive: string) => template.replace(`${directive}\n`, '')
    expect(() => renderApiDoc({ template: without('<!-- route GET /v1/sessions/{id}/inbox -->') })).toThrow(/places no <!-- route … --> for: GET \/v1\/sessions\/\{id\}\/inbox/)
    expect(() => renderApiDoc({ template: without('<!-- event compaction/prune -->') })).toThrow(/documents no <!-- event … --> for: compaction\/prune/)
    expect(() => renderApiDoc({ template: template.replace('| 409 | `fork-unavailable` |', '| 409 | `fork-unavailabl` |') })).toThrow(/fork-unavailable \(409\) is missing/)
    expect(() => renderApiDoc({ template: template.replace('| 422 | `model-unavailable` |', '| 400 | `model-unavailable` |') })).toThrow(/model-unavailable is 422, not 400/)
  })

  it('refuses what does not exist, and event examples the event catalogue would refuse', () => {
    const template = fs.readFileSync(path.join(ROOT, 'scripts/docs/api.template.md'), 'utf8')
    expect(() => renderApiDoc({ template: `${template}\n<!-- route GET /v1/nothing -->\n` })).toThrow(/GET \/v1\/nothing: openapi\/openapi.json has no such operation/)
    expect(() => renderApiDoc({ template: `${template}\n<!-- event agent/teleported -->\n` })).toThrow(/agent\/teleported is not in the event catalogue/)
    const bad = template.replace('"type": "turn/start", "data": {"turn": 1}', '"type": "turn/start", "data": {"turn": 0}')
    expect(bad).not.toBe(template)
    expect(() => renderApiDoc({ template: bad })).toThrow(DocsError)
    expect(() => renderApiDoc({ template: bad })).toThrow(/event turn\/start: the example does not pass the event catalogue: turn\/start: turn must be a positive integer/)
  })
})

describe('docs/configuration.md', () => {
  const rows = tableRows(section(read('docs/configuration.md'), /^##\s+Variables\b/))
  const nameOf = (r: string[]) => /^`([A-Z][A-Z0-9_]*)`$/.exec(r[0])?.[1]

  /** Variables src/config.ts reads from the environment. */
  function configTsVariables(): string[] {
    const src = read('src/config.ts')
    const names = new Set<string>()
    for (const m of src.matchAll(/\benv\.([A-Z][A-Z0-9_]*)/g)) names.add(m[1])
    for (const m of src.matchAll(/\(\s*env\s*,\s*'([A-Z][A-Z0-9_]*)'/g)) names.add(m[1])
    return [...names]
  }

  it('has one row per variable src/config.ts reads, and none for a variable it does not', () => {
    const read = configTsVariables()
    expect(read).toEqual(expect.arrayContaining(['PORT', 'HOST', 'DATABASE_URL', 'AGENTD_DATA_DIR', 'AGENTD_MODELS', 'LOG_LEVEL']))
    const documented = rows.map(nameOf)
    expect(documented.every(Boolean), 'every row names one variable').toBe(true)
    expect([...documented].sort()).toEqual([...read].sort())
    for (const r of rows) expect(r, `${r[0]}: variable | default | meaning`).toHaveLength(3)
    for (const r of rows) expect(r[2], `${r[0]} has a meaning`).not.toBe('')
  })

  it('gives the defaults src/config.ts applies', () => {
    const c = loadConfig({})
    const dflt = (name: string) => rows.find((r) => nameOf(r) === name)![1]
    expect(dflt('PORT')).toBe(`\`${c.port}\``)
    expect(dflt('HOST')).toBe(`\`${c.host}\``)
    expect(dflt('AGENTD_ROLE')).toBe(`\`${c.role}\``)
    expect(dflt('AGENTD_MAX_PARALLEL_TOOL_CALLS')).toBe(`\`${c.maxParallelToolCalls}\``)
    expect(dflt('AGENTD_LEASE_TTL_MS')).toBe(`\`${c.leaseTtlMs}\``)
    expect(dflt('AGENTD_IDLE_RELEASE_MS')).toBe(`\`${c.idleReleaseMs}\``)
    expect(dflt('AGENTD_BUILTIN_PLUGINS')).toBe(`\`${c.builtinPlugins.join(',')}\``)
    expect(dflt('AGENTD_RATE_LIMIT_PER_MIN')).toBe(`\`${c.rateLimitPerMin}\``)
    expect(dflt('AGENTD_SHUTDOWN_GRACE_MS')).toBe(`\`${c.shutdownGraceMs}\``)
    expect(dflt('AGENTD_REQUEST_TIMEOUT_MS')).toBe(`\`${c.requestTimeoutMs}\``)
    expect(dflt('AGENTD_SLOW_CONSUMER_MS')).toBe(`\`${c.slowConsumerMs}\``)
    expect(dflt('AGENTD_CONTINUE_AFTER_CRASH')).toBe(`\`${c.continueAfterCrash}\``)
    expect(dflt('LOG_LEVEL')).toBe(`\`${c.logLevel}\``)
    expect(path.relative(process.cwd(), c.dataDir)).toBe(dflt('AGENTD_DATA_DIR').replace(/`/g, '').replace(/^\.\//, ''))
    for (const unset of ['DATABASE_URL', 'AGENTD_ADMIN_TOKEN', 'AGENTD_MODELS', 'AGENTD_TOOL_HOSTS', 'AGENTD_PLUGINS']) expect(dflt(unset), unset).toBe('unset')
    expect(c.databaseUrl ?? c.adminToken ?? c.modelsFile ?? c.toolHosts).toBeUndefined()
    expect(c.plugins).toEqual([])
  })

  it('AGENTD_CONTINUE_AFTER_CRASH takes 0 to 100 and refuses anything else', () => {
    expect(loadConfig({ AGENTD_CONTINUE_AFTER_CRASH: '0' }).continueAfterCrash).toBe(0)
    expect(loadConfig({ AGENTD_CONTINUE_AFTER_CRASH: '100' }).continueAfterCrash).toBe(100)
    for (const bad of ['-1', '101', 'yes', '1.5']) expect(() => loadConfig({ AGENTD_CONTINUE_AFTER_CRASH: bad }), bad).toThrow(/AGENTD_CONTINUE_AFTER_CRASH/)
  })

  it('lists the log levels and roles src/config.ts accepts', () => {
    const meaning = (name: string) => rows.find((r) => nameOf(r) === name)![2]
    for (const level of ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']) {
      expect(meaning('LOG_LEVEL')).toContain(`\`${level}\``)
      expect(() => loadConfig({ LOG_LEVEL: level })).not.toThrow()
    }
    for (const role of ['all', 'api', 'worker']) {
      expect(meaning('AGENTD_ROLE')).toContain(`\`${role}\``)
      expect(() => loadConfig({ AGENTD_ROLE: role, DATABASE_URL: 'postgres://x@127.0.0.1/y' })).not.toThrow()
    }
  })
})

describe('docs/models.md', () => {
  const md = read('docs/models.md')

  it('shows only models files the server accepts', () => {
    const files = codeBlocks(md, 'json')
    expect(files.length).toBeGreaterThanOrEqual(2)
    for (const f of files) expect(() => parseModelsFile(JSON.parse(f))).not.toThrow()
  })

  it('names only fields the models file accepts, and the parser refuses others', () => {
    const base = { api: 'openai-completions', baseUrl: 'http://127.0.0.1:11434/v1', models: [{ id: 'm' }] }
    const withCompat = (key: string) => ({ providers: { p: { ...base, compat: { [key]: false } } } })
    const compat = [...section(md, /^###\s+Compatibility settings/).matchAll(/^- `([A-Za-z]+)`/gm)].map((m) => m[1])
    expect(compat.length).toBeGreaterThan(2)
    for (const k of compat) expect(() => parseModelsFile(withCompat(k)), k).not.toThrow()
    expect(() => parseModelsFile(withCompat('supportsTelepathy'))).toThrow(/unknown field/)
    const providerFields = tableRows(section(md, /^###\s+A provider/)).map((r) => /`(\w+)`/.exec(r[0])![1])
    const modelFields = tableRows(section(md, /^###\s+A model/)).map((r) => /`(\w+)`/.exec(r[0])![1])
    const retryFields = tableRows(section(md, /^###\s+Retries/)).map((r) => /`(\w+)`/.exec(r[0])![1])
    expect(providerFields).toEqual(['api', 'baseUrl', 'apiKey', 'headers', 'compat', 'retry', 'models'])
    // the larger example uses every documented field, and the parser accepts it
    const large = JSON.parse(codeBlocks(md, 'json').at(-1)!)
    const used = (o: unknown, out = new Set<string>()): Set<string> => {
      if (o && typeof o === 'object') for (const [k, v] of Object.entries(o)) (out.add(k), used(v, out))
      return out
    }
    const keys = used(large)
    for (const f of [...providerFields, ...modelFields, ...retryFields.filter((f) => f !== 'mode' && f !== 'jitterRatio')]) expect(keys, `the larger example uses ${f}`).toContain(f)
    expect(() => parseModelsFile({ providers: { p: { ...base, retry: { mode: 'always', jitterRatio: 0.5 } } } })).not.toThrow()
    for (const api of md.match(/`[a-z]+(-[a-z]+)+`/g)!.map((s) => s.slice(1, -1)).filter((s) => /^(openai|azure|anthropic|google|mistral|bedrock)-/.test(s))) {
      expect(() => parseModelsFile({ providers: { p: { ...base, api } } }), api).not.toThrow()
    }
  })
})

describe('docs/plugins.md', () => {
  const md = read('docs/plugins.md')
  const examples = fs.readdirSync(path.join(ROOT, 'docs/examples')).filter((f) => f.endsWith('.mjs'))

  it('shows every example plugin exactly as the file is', () => {
    expect(examples.length).toBeGreaterThanOrEqual(3)
    for (const file of examples) {
      const at = md.indexOf(`[examples/${file}](examples/${file})`)
      expect(at, `docs/plugins.md links examples/${file}`).toBeGreaterThan(0)
      const block = /```js\n([\s\S]*?)```/.exec(md.slice(at))
      expect(block?.[1], `the code block after the link to ${file}`).toBe(fs.readFileSync(path.join(ROOT, 'docs/examples', file), 'utf8'))
    }
  })
})

describe('README.md', () => {
  const readme = read('README.md')

  it('points to docs/configuration.md for the variables, and names only variables that exist', () => {
    const sec = section(readme, /^##\s+configuration\b/i)
    expect(sec).toContain('(docs/configuration.md)')
    const documented = tableRows(section(read('docs/configuration.md'), /^##\s+Variables\b/)).map((r) => r[0].replace(/`/g, ''))
    const named = [...sec.matchAll(/`([A-Z][A-Z0-9_]+)`/g)].map((m) => m[1]).filter((n) => !n.endsWith('_API_KEY'))
    expect(named.length).toBeGreaterThan(3)
    for (const n of named) expect(documented, n).toContain(n)
  })

  it('does not send users to files outside the repository, or to a conformance suite they do not have', () => {
    expect(readme).not.toMatch(/\.\.\/shared|conformance/i)
  })
})

describe('clients/typescript/README.md', () => {
  const readme = read('clients/typescript/README.md')
  /** what the README writes as code: `client.usage({from, to, groupBy})`, `admin.setLimits(…)`, … */
  const spans = [...readme.matchAll(/`([^`\n]+)`/g)].map((m) => m[1]!.trim())
  const named = (ref: string) => spans.some((s) => new RegExp(`^(new |client\\.)?${ref.replace('.', '\\.')}(?![\\w$])`).test(s))

  /** The public methods of the client's classes, as the source declares them (not private, not the constructor). */
  function publicMethods(): Record<string, string[]> {
    const file = ts.createSourceFile('client.ts', read('clients/typescript/src/client.ts'), ts.ScriptTarget.Latest, true)
    const out: Record<string, string[]> = {}
    for (const st of file.statements) {
      if (!ts.isClassDeclaration(st) || !st.name) continue
      out[st.name.text] = st.members
        .filter((m) => ts.isMethodDeclaration(m) && !(ts.getCombinedModifierFlags(m) & (ts.ModifierFlags.Private | ts.ModifierFlags.Protected)))
        .map((m) => (m.name as ts.Identifier).text)
    }
    return out
  }

  it('names every public method of the client, with the object it is called on', () => {
    const methods = publicMethods()
    // the client and the groups it hands out as client.sessions, client.agents, client.admin, client.secrets
    const prefix: Record<string, string> = { AgentdClient: '', SessionsApi: 'sessions.', AgentsApi: 'agents.', AdminApi: 'admin.', SecretsApi: 'secrets.' }
    expect(Object.keys(methods).sort()).toEqual(Object.keys(prefix).sort())
    expect(methods.AgentdClient).toEqual(expect.arrayContaining(['followup', 'usage', 'createWebhook', 'testWebhook']))
    expect(methods.AdminApi).toEqual(expect.arrayContaining(['createTenant', 'setLimits']))
    const missing = Object.entries(methods).flatMap(([cls, ms]) => ms.map((m) => `${prefix[cls]}${m}`)).filter((ref) => !named(ref))
    expect(missing, 'methods the client README does not name').toEqual([])
  })

  it('names every function and class the package exports', () => {
    const values = Object.entries(sdk).filter(([, v]) => typeof v === 'function').map(([k]) => k)
    expect(values).toEqual(expect.arrayContaining(['AgentdClient', 'verifyWebhook', 'AgentdError']))
    // the groups are reached through the client (checked above), not made by users
    const missing = values.filter((k) => !['SessionsApi', 'AgentsApi', 'AdminApi', 'SecretsApi'].includes(k)).filter((k) => !named(k))
    expect(missing, 'exports the client README does not name').toEqual([])
  })
})
