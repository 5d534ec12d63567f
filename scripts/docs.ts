// Writes docs/api.md, the HTTP API reference, from three sources so it cannot drift from the code:
//   scripts/docs/api.template.md   the explanations, in our words, with directives that place the rest;
//   openapi/openapi.json           every route: parameters, bodies, answers (itself generated from the
//                                  route schemas by `npm run openapi`, and checked by a test);
//   src/session/catalogue.ts, src/errors.ts   the event types and the error codes the code knows.
// The generator refuses a template that leaves out a route, an event type or an error code, or names one
// that does not exist, and checks every event example against the event catalogue.
//
//   npm run docs             regenerate docs/api.md
//   npm run docs -- --check  fail when docs/api.md differs from what would be generated
//
// Directives (HTML comments, each alone on a line):
//   <!-- generated -->              the notice that the file is generated
//   <!-- route METHOD /path -->     one operation of openapi.json (path as OpenAPI writes it: {id})
//   <!-- schemas -->                the named schemas of components.schemas, when the document has any
//   <!-- event TYPE -->             a heading for a durable event type; its section needs a ```json example
//   <!-- frame NAME -->             a heading for a live frame
//   <!-- errors -->                 checks the markdown table that follows against src/errors.ts

import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { ERROR_STATUS } from '../src/errors.js'
import { checkEventShape, KNOWN_EVENT_TYPES } from '../src/session/index.js'
import { writeOrCheck } from './generated.js'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
export const API_DOC = path.join(ROOT, 'docs/api.md')
export const API_TEMPLATE = path.join(ROOT, 'scripts/docs/api.template.md')
const OPENAPI = path.join(ROOT, 'openapi/openapi.json')

type Schema = Record<string, any>
interface Operation {
  operationId?: string
  summary?: string
  description?: string
  parameters?: Schema[]
  requestBody?: Schema
  responses?: Record<string, Schema>
  security?: Array<Record<string, unknown>>
}
export interface OpenApiDoc {
  paths: Record<string, Record<string, Operation>>
  components?: { schemas?: Record<string, Schema>; [k: string]: Record<string, Schema> | undefined }
}

const METHODS = ['get', 'put', 'post', 'patch', 'delete']

export class DocsError extends Error {}
const fail = (why: string): never => {
  throw new DocsError(why)
}

/** Anchors are written explicitly, so links do not depend on how a renderer makes heading slugs. */
export const anchor = (...parts: string[]) =>
  parts
    .join('-')
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-|-$/g, '')

// ------------------------------------------------------------------------------------------------
// JSON Schema → a TypeScript-like notation that reads well in a code block

interface Render {
  doc: OpenApiDoc
  /** named schemas a rendering referred to */
  refs: Set<string>
}

const refName = (ref: string) => decodeURIComponent(ref.replace(/#$/, '').split('/').at(-1)!)

/** Texts from the route schemas may point at the contract's sections (SPEC §14, API.md §10), which users do not have. */
export const userText = (s: string) =>
  s
    .replace(/\s*\(?\b(?:SPEC|API\.md|DESIGN\.md)(?:\s*§\s*[\w.]+(?:\s*[,–-]\s*§?\s*[\w.]+)*)?\)?/g, '')
    .replace(/\s+([.,;])/g, '$1')
    .trim()

/** Follows a `$ref` to a component that is not a schema (a response, a parameter, a request body). */
function follow(o: Schema | undefined, doc: OpenApiDoc): Schema | undefined {
  let cur = o
  for (let i = 0; cur?.$ref && i < 10; i++) {
    const m = /^#\/components\/([^/]+)\/(.+)$/.exec(cur.$ref as string)
    if (!m) fail(`cannot follow ${cur.$ref}`)
    cur = doc.components?.[m![1]]?.[decodeURIComponent(m![2])] ?? fail(`${cur.$ref} is not in the document`)
  }
  return cur
}

/** What a schema constrains, in words, for a comment beside its field. */
function notes(s: Schema, inCode = true): string {
  const out: string[] = []
  if (typeof s.description === 'string' && userText(s.description)) out.push(userText(s.description))
  if (s.type === 'string' || s.minLength !== undefined || s.maxLength !== undefined) {
    if (s.minLength !== undefined && s.maxLength !== undefined) out.push(`${s.minLength}–${s.maxLength} characters`)
    else if (s.maxLength !== undefined) out.push(`at most ${s.maxLength} characters`)
    else if (s.minLength !== undefined && s.minLength > 0) out.push(`at least ${s.minLength} character${s.minLength === 1 ? '' : 's'}`)
  }
  if (s.pattern !== undefined) out.push(inCode ? `matches ${s.pattern}` : `matches \`${s.pattern}\``)
  if (s.format === 'date-time') out.push('ISO-8601 time')
  else if (s.format !== undefined) out.push(`format ${s.format}`)
  if (s.minimum !== undefined && s.maximum !== undefined) out.push(`${s.minimum} to ${s.maximum}`)
  else if (s.minimum !== undefined) out.push(`at least ${s.minimum}`)
  else if (s.maximum !== undefined) out.push(`at most ${s.maximum}`)
  if (s.maxItems !== undefined) out.push(`at most ${s.maxItems} items`)
  if (s.type === 'array' && s.items && !s.items.$ref && typeof s.items.description === 'string' && s.description === undefined && userText(s.items.description)) out.push(`each: ${userText(s.items.description)}`)
  return out.join('; ')
}

const isEmpty = (s: Schema | undefined) => !s || Object.keys(s).filter((k) => k !== 'description').length === 0

function typeOf(s: Schema | undefined, r: Render, indent: number): string {
  if (isEmpty(s)) return 'any JSON'
  s = s!
  if (s.$ref) {
    const name = refName(s.$ref)
    r.refs.add(name)
    return name
  }
  if ('const' in s) return JSON.stringify(s.const)
  if (Array.isArray(s.enum)) return s.enum.map((v: unknown) => JSON.stringify(v)).join(' | ')
  const union = s.anyOf ?? s.oneOf
  if (Array.isArray(union)) return union.map((u: Schema) => typeOf(u, r, indent)).join(' | ')
  if (Array.isArray(s.allOf)) return s.allOf.map((u: Schema) => typeOf(u, r, indent)).join(' & ')
  if (Array.isArray(s.type)) return s.type.map((t: string) => typeOf({ ...s, type: t }, r, indent)).join(' | ')
  switch (s.type) {
    case 'string':
    case 'integer':
    case 'number':
    case 'boolean':
    case 'null':
      return s.type
    case 'array': {
      const item = typeOf(s.items, r, indent)
      return /[\s|&]/.test(item) && !/^"[^"]*"$/.test(item) ? `Array<${item}>` : `${item}[]`
    }
    case 'object':
    case undefined:
      return objectOf(s, r, indent)
    default:
      return 'any JSON'
  }
}

function objectOf(s: Schema, r: Render, indent: number): string {
  const props = Object.entries((s.properties ?? {}) as Record<string, Schema>)
  const extra = s.additionalProperties
  if (!props.length) {
    if (extra && typeof extra === 'object' && !isEmpty(extra)) return `{ [key: string]: ${typeOf(extra, r, indent)} }`
    return extra === false ? '{}' : 'object'
  }
  const required = new Set<string>(s.required ?? [])
  const fields = props.map(([k, v]) => ({ key: `${/^[A-Za-z_$][\w$]*$/.test(k) ? k : JSON.stringify(k)}${required.has(k) ? '' : '?'}`, type: typeOf(v, r, indent + 2), note: notes(v) }))
  const open = extra === true || (extra && typeof extra === 'object' && isEmpty(extra))
  // small objects without comments stay on one line
  const inline = `{ ${[...fields.map((f) => `${f.key}: ${f.type}`), ...(open ? ['…'] : [])].join(', ')} }`
  if (!fields.some((f) => f.note || f.type.includes('\n')) && inline.length <= 60) return inline
  const pad = ' '.repeat(indent)
  const lines = ['{']
  for (const f of fields) {
    const [first, ...rest] = f.type.split('\n')
    lines.push(`${pad}  ${f.key}: ${first}${f.note ? `  // ${f.note}` : ''}`, ...rest)
  }
  if (open) lines.push(`${pad}  …  // other fields are allowed`)
  lines.push(`${pad}}`)
  return lines.join('\n')
}

function codeBlock(s: Schema | undefined, r: Render): string[] {
  const out: string[] = []
  if (s && !s.$ref && typeof s.description === 'string' && userText(s.description)) out.push(userText(s.description), '')
  out.push('```ts', typeOf(s, r, 0), '```')
  return out
}

// ------------------------------------------------------------------------------------------------
// One operation

const SECURITY: Record<string, string> = {
  apiKey: 'a tenant API key (`Authorization: Bearer <key>`)',
  token: 'a [token](#tokens)',
  adminToken: 'the admin token (`Authorization: Bearer $AGENTD_ADMIN_TOKEN`)',
}

function renderOperation(method: string, p: string, op: Operation, doc: OpenApiDoc): string[] {
  const r: Render = { doc, refs: new Set() }
  const out: string[] = [`<a id="${anchor('route', method, p)}"></a>`, '', `### ${method.toUpperCase()} ${p}`, '']
  const facts: string[] = []
  const summary = op.summary && userText(op.summary)
  if (summary) facts.push(`${summary.replace(/\.$/, '')}.`)
  // a requirement's roles are the token scopes the route needs
  const schemes = (op.security ?? []).flatMap((s) => Object.entries(s).map(([k, roles]) => `${SECURITY[k] ?? `\`${k}\``}${Array.isArray(roles) && roles.length ? ` with scope ${roles.map((x) => `\`${x}\``).join(', ')}` : ''}`))
  facts.push(schemes.length ? `Needs ${schemes.join(' or ')}.` : 'Needs no key.')
  if (op.operationId) facts.push(`Operation id \`${op.operationId}\`.`)
  out.push(facts.join(' '), '')
  if (op.description && userText(op.description)) out.push(userText(op.description), '')

  const params = (op.parameters ?? []).map((x) => follow(x, doc)!)
  for (const where of ['path', 'query', 'header']) {
    const list = params.filter((x) => x.in === where)
    if (!list.length) continue
    out.push(`${where === 'path' ? 'Path' : where === 'query' ? 'Query' : 'Header'} parameters:`, '')
    for (const x of list) {
      const note = [x.description && userText(x.description), notes(x.schema ?? {}, false)].filter(Boolean).join('; ')
      out.push(`- \`${x.name}\`${x.required ? '' : ' (optional)'}: ${typeOf(x.schema, r, 0).replace(/\n\s*/g, ' ')}${note ? ` — ${note}` : ''}`)
    }
    out.push('')
  }

  const body = follow(op.requestBody, doc)
  if (body) {
    const media = Object.keys(body.content ?? {})
    out.push(`Body (${media.map((m) => `\`${m}\``).join(', ')}${body.required ? '' : '; may be left out'}):`, '')
    out.push(...codeBlock(body.content?.[media[0]]?.schema, r), '')
  }

  // answers with the same body are shown once, under all their statuses (200 and 201 of an idempotent create)
  const errors: string[] = []
  const shown = new Map<string, { codes: string[]; lines: string[] }>()
  for (const [code, raw] of Object.entries(op.responses ?? {}).sort(([a], [b]) => a.localeCompare(b))) {
    if (Number(code) >= 400) {
      errors.push(code)
      continue
    }
    const res = follow(raw, doc)!
    const told = typeof res.description === 'string' ? userText(res.description) : ''
    const said = told && !/^(HTTP \d+|OK|No content)$/i.test(told) ? `${told.replace(/\.$/, '')}.` : ''
    const content = res.content as Record<string, { schema?: Schema }> | undefined
    const json = content?.['application/json']
    let lines: string[]
    if (code === '204') lines = [said || 'No body.']
    else if (json) lines = [...(said ? [said, ''] : []), ...codeBlock(json.schema, r)]
    else if (content && Object.keys(content).length) lines = [`${said ? `${said} ` : ''}Content: ${Object.keys(content).map((m) => `\`${m}\``).join(', ')}.`]
    else lines = [said || 'No body.']
    const key = JSON.stringify(lines)
    const entry = shown.get(key)
    if (entry) entry.codes.push(code)
    else shown.set(key, { codes: [code], lines })
  }
  for (const { codes, lines } of shown.values()) {
    const head = `Answer ${codes.map((c) => `\`${c}\``).join(', ')}`
    if (lines.length === 1) out.push(`${head} — ${lines[0]}`, '')
    else out.push(`${head}:`, '', ...lines, '')
  }
  if (errors.length) out.push(`Errors: ${errors.map((c) => `\`${c}\``).join(', ')}, each with the [error body](#errors).`, '')
  if (r.refs.size) out.push(`Types: ${[...r.refs].sort().map((n) => `[${n}](#${anchor('schema', n)})`).join(', ')}.`, '')
  return out
}

function renderSchemas(doc: OpenApiDoc): string[] {
  const schemas = doc.components?.schemas ?? {}
  if (!Object.keys(schemas).length) return []
  const out: string[] = ['<a id="schemas"></a>', '', '## Schemas', '', 'The named shapes the routes above refer to.', '']
  for (const name of Object.keys(schemas).sort()) {
    const r: Render = { doc, refs: new Set() }
    out.push(`<a id="${anchor('schema', name)}"></a>`, '', `### ${name}`, '', ...codeBlock(schemas[name], r), '')
    if (r.refs.size) out.push(`Types: ${[...r.refs].sort().map((n) => `[${n}](#${anchor('schema', n)})`).join(', ')}.`, '')
  }
  return out
}

// ------------------------------------------------------------------------------------------------
// The template

const DIRECTIVE = /^<!--\s*(generated|route|schemas|event|frame|errors)\b\s*(.*?)\s*-->\s*$/

/** The lines of `lines` from `start` up to the next directive or a heading of level ≤ `level`. */
function sectionAfter(lines: string[], start: number, level: number): string[] {
  const out: string[] = []
  for (let i = start; i < lines.length; i++) {
    if (DIRECTIVE.test(lines[i])) break
    const h = /^(#+)\s/.exec(lines[i])
    if (h && h[1].length <= level) break
    out.push(lines[i])
  }
  return out
}

function checkEventExample(type: string, section: string[]): void {
  const text = section.join('\n')
  const m = /```json\n([\s\S]*?)```/.exec(text)
  if (!m) fail(`event ${type}: its section needs a \`\`\`json example of a stored event`)
  let e: { seq?: unknown; time?: unknown; type?: unknown; data?: unknown }
  try {
    e = JSON.parse(m![1])
  } catch (x) {
    return fail(`event ${type}: the example is not JSON (${(x as Error).message})`)
  }
  if (e.type !== type) fail(`event ${type}: the example's type is ${JSON.stringify(e.type)}`)
  if (!Number.isInteger(e.seq) || !Number.isInteger(e.time)) fail(`event ${type}: the example needs an integer seq and time`)
  try {
    checkEventShape(type, e.data)
  } catch (x) {
    fail(`event ${type}: the example does not pass the event catalogue: ${(x as Error).message}`)
  }
}

function checkErrorTable(section: string[]): void {
  const rows = section.filter((l) => /^\|/.test(l) && !/^\|[\s:|-]+\|$/.test(l.trim())).slice(1)
  const seen = new Map<string, number>()
  for (const row of rows) {
    const cells = row.split('|').slice(1, -1).map((c) => c.trim())
    const status = Number(cells[0])
    for (const m of cells[1].matchAll(/`([a-z-]+)`/g)) {
      if (seen.has(m[1])) fail(`error table: ${m[1]} is listed twice`)
      seen.set(m[1], status)
    }
  }
  const codes = ERROR_STATUS as Record<string, number>
  for (const [code, status] of Object.entries(codes)) {
    if (!seen.has(code)) fail(`error table: ${code} (${status}) is missing`)
    if (seen.get(code) !== status) fail(`error table: ${code} is ${status}, not ${seen.get(code)}`)
  }
  for (const code of seen.keys()) if (!(code in codes)) fail(`error table: ${code} is not a code the server uses (src/errors.ts)`)
}

export interface Rendered {
  text: string
  /** the live frame names the reference documents */
  frames: string[]
}

/** docs/api.md as it should be. Throws DocsError naming what the template or the document lacks. */
export function renderApiDoc(o: { template?: string; openapi?: OpenApiDoc } = {}): Rendered {
  const template = o.template ?? fs.readFileSync(API_TEMPLATE, 'utf8')
  const doc = o.openapi ?? (JSON.parse(fs.readFileSync(OPENAPI, 'utf8')) as OpenApiDoc)
  const operations = new Map<string, Operation>()
  for (const [p, item] of Object.entries(doc.paths)) for (const m of METHODS) if (item[m]) operations.set(`${m.toUpperCase()} ${p}`, item[m])

  const lines = template.split('\n')
  const out: string[] = []
  const placed = new Set<string>()
  const events = new Set<string>()
  const frames: string[] = []
  let errors = false
  lines.forEach((line, i) => {
    const d = DIRECTIVE.exec(line)
    if (!d) return void out.push(line)
    const [, kind, arg] = d
    if (kind === 'generated') {
      out.push('<!-- Generated by `npm run docs`: edit scripts/docs/api.template.md, not this file. -->')
    } else if (kind === 'route') {
      const [method, p] = arg.split(/\s+/)
      const key = `${method?.toUpperCase()} ${p}`
      const op = operations.get(key) ?? fail(`route ${key}: openapi/openapi.json has no such operation`)
      if (placed.has(key)) fail(`route ${key} is placed twice`)
      placed.add(key)
      out.push(...renderOperation(method.toLowerCase(), p, op, doc).slice(0, -1))
    } else if (kind === 'schemas') {
      out.push(...renderSchemas(doc).slice(0, -1))
    } else if (kind === 'event') {
      if (!KNOWN_EVENT_TYPES.has(arg)) fail(`event ${arg} is not in the event catalogue (src/session/catalogue.ts)`)
      if (events.has(arg)) fail(`event ${arg} is documented twice`)
      events.add(arg)
      checkEventExample(arg, sectionAfter(lines, i + 1, 4))
      out.push(`<a id="${anchor('event', arg)}"></a>`, '', `#### \`${arg}\``)
    } else if (kind === 'frame') {
      if (frames.includes(arg)) fail(`frame ${arg} is documented twice`)
      frames.push(arg)
      out.push(`<a id="${anchor('frame', arg)}"></a>`, '', `#### \`${arg}\``)
    } else {
      errors = true
      checkErrorTable(sectionAfter(lines, i + 1, 3))
    }
  })
  const unplaced = [...operations.keys()].filter((k) => !placed.has(k))
  if (unplaced.length) fail(`the template places no <!-- route … --> for: ${unplaced.join(', ')}`)
  const undocumented = [...KNOWN_EVENT_TYPES].filter((t) => !events.has(t))
  if (undocumented.length) fail(`the template documents no <!-- event … --> for: ${undocumented.join(', ')}`)
  if (!errors) fail('the template has no <!-- errors --> table')
  return { text: `${out.join('\n').replace(/\n{3,}/g, '\n\n').trimEnd()}\n`, frames }
}

async function main(): Promise<void> {
  writeOrCheck(API_DOC, renderApiDoc().text, { command: 'npm run docs', check: process.argv.slice(2).includes('--check') })
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().then(
    () => process.exit(0),
    (e) => {
      process.stderr.write(`docs: ${e instanceof DocsError ? e.message : ((e as Error)?.stack ?? e)}\n`)
      process.exit(1)
    },
  )
}
