// The fuzz part: requests generated from openapi/openapi.json by fast-check — valid ones first (they
// create sessions that run turns with http tools), then broken ones (missing, unknown and mistyped
// fields, huge and deeply nested values, NULs and lone surrogates, bad JSON and content types,
// garbage path ids and query values, another tenant's key, garbage auth, tokens: real ones with random
// rights and forged or expired ones with random claims, API.md §18; a body on a route that takes none,
// JSON strings with CR LF, a raw NUL or `..` in the path, `Connection: close` with the body still on its
// way). Every answer is checked: a whole answer, no 5xx, §10's shape, tenant and owner isolation, no
// connection reset (before or after the answer); /healthz stays up; at the end every session log passes
// the SPEC §15 checker. Routes added to the document are fuzzed without changing this file.

import crypto from 'node:crypto'
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import fc from 'fast-check'
import { decodeProtectedHeader, generateKeyPair, SignJWT, UnsecuredJWT, type CryptoKey } from 'jose'
import { b64, startIdp, type Idp } from '../helpers/idp.js'
import { violations as logViolations } from '../helpers/invariants.js'
import type { SessionEvent } from '../../src/session/index.js'
import { isJsonRpcRoute, shapeViolation } from './lib/contract.js'
import type { FaultPart, PartContext, PartResult } from './lib/part.js'
import { operations, type Operation } from './lib/operations.js'
import { cleanText, valueOf, type Hints } from './lib/schema-arb.js'
import { putSecret, startTarget, type Target } from './lib/target.js'
import { observeAnswer } from './lib/leaks.js'
import { rawUpload, wireRequest, type WireAnswer } from './lib/wire.js'

const DOC_FILE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../openapi/openapi.json')

type Mutation =
  | { kind: 'missing'; pick: number }
  | { kind: 'unknown'; key: string }
  | { kind: 'mistyped'; pick: number; value: unknown }
  | { kind: 'huge'; pick: number; size: number }
  | { kind: 'deep'; depth: number; array: boolean }
  | { kind: 'unstorable'; where: 'body' | 'key' | 'path' | 'query'; pick: number; text: string }
  | { kind: 'bad-json'; cut: number; garbage: string }
  | { kind: 'content-type'; type: string }
  | { kind: 'path-garbage'; pick: number; text: string }
  | { kind: 'query-garbage'; name: string; text: string }
  | { kind: 'other-tenant' }
  | { kind: 'bad-auth'; header?: string }
  | { kind: 'body-on-bodiless'; body: string }
  | { kind: 'crlf-string'; raw: boolean }
  | { kind: 'raw-path'; pick: number; text: string }
  | { kind: 'close'; pad: boolean }
  | { kind: 'token'; pick: number }
  | { kind: 'forged-token'; form: ForgedForm; claims: Record<string, unknown> }

/** How a token that must be refused is made (API.md §18: each is 401 with the same message). */
type ForgedForm = 'garbage' | 'none' | 'hs256-public-key' | 'hs256-random' | 'stranger' | 'stranger-known-kid' | 'tampered' | 'expired' | 'idp-wrong-aud' | 'idp-expired' | 'idp-stranger'

const FORGED_FORMS: ForgedForm[] = ['garbage', 'none', 'hs256-public-key', 'hs256-random', 'stranger', 'stranger-known-kid', 'tampered', 'expired', 'idp-wrong-aud', 'idp-expired', 'idp-stranger']

/** A real token the run minted (or its identity provider signed), with the rights it was given. */
interface Credential {
  token: string
  tenant: 'a' | 'b'
  scopes: string[]
  subject?: string
  sessions?: string[]
}

/** Random claims for forged tokens: every field agentd reads, with right and wrong values. */
const claimsArb = (tenants: string[]) =>
  fc.record(
    {
      iss: fc.constantFrom('agentd', 'http://127.0.0.1:1/x/', '', 'agentd '),
      aud: fc.oneof(fc.constantFrom('agentd', 'fuzz-aud', ''), fc.array(fc.constantFrom('agentd', 'fuzz-aud', 'x'), { maxLength: 3 })),
      tenant: fc.oneof(fc.constantFrom(...tenants), cleanText(10)),
      scope: fc.constantFrom('read', 'write', 'read write', 'admin', '', 'read  write'),
      sub: fc.oneof(cleanText(12), fc.constant(''), fc.integer()),
      sessions: fc.array(cleanText(8), { maxLength: 4 }),
      exp: fc.integer({ min: -10_000, max: 100_000 }),
      iat: fc.integer({ min: -100_000, max: 10_000 }),
      nbf: fc.integer({ min: -1000, max: 1000 }),
      jti: cleanText(8),
    },
    { requiredKeys: [] },
  )

interface Plan {
  op: number
  /** picks from the pools of known values, by path parameter */
  picks: Record<string, number>
  /** generated values, for parameters no pool knows */
  fallback: Record<string, string>
  query: Record<string, unknown>
  body?: unknown
  mutation?: Mutation
}

const UNSTORABLE = ['\u0000', 'a\u0000b', '\ud800', 'x\udfff', 'end\ud83d', '\udc00\ud800']
/** a body big enough to be still on its way when an early answer comes */
const PAD = JSON.stringify({ pad: 'p'.repeat(70_000) })

function planArb(doc: any, ops: Operation[], hints: Hints, broken: boolean, tenants: string[] = []): fc.Arbitrary<Plan> {
  // what a session does (deliveries, answers, patches) comes up more often than reads and admin
  const weighted = ops.flatMap((o, i) => Array<number>(o.body ? 4 : 1).fill(i))
  return fc.constantFrom(...weighted).chain((i) => {
    const op = ops[i]
    const base = fc.record({
      op: fc.constant(i),
      picks: fc.record(Object.fromEntries(op.pathParams.map((p) => [p, fc.nat()]))),
      fallback: fc.record(Object.fromEntries(op.pathParams.map((p) => [p, cleanText(12).filter((x) => x.trim().length > 0)]))),
      // query values optional, each a value its schema accepts
      query: fc.record(Object.fromEntries(Object.entries(op.query).filter(([k]) => k !== 'access_token').map(([k, s]) => [k, valueOf(doc, s, hints, k)])), { requiredKeys: [] }),
      body: op.body ? valueOf(doc, op.body, hints) : fc.constant(undefined),
    })
    if (!broken) return base
    const kinds: Array<fc.Arbitrary<Mutation>> = [
      fc.record({ kind: fc.constant('unstorable' as const), where: fc.constantFrom(...(['path', 'query', ...(op.body ? ['body', 'key'] : [])] as Array<'body' | 'key' | 'path' | 'query'>)), pick: fc.nat(), text: fc.constantFrom(...UNSTORABLE) }),
      fc.record({ kind: fc.constant('path-garbage' as const), pick: fc.nat(), text: fc.oneof(fc.string({ unit: 'binary', maxLength: 30 }), fc.constantFrom('%', '%ZZ', '%E0%A4%A', '..', '%2e%2e', '%2F', 'a'.repeat(1200), '%C0%AF', '%FF')) }),
      fc.record({ kind: fc.constant('query-garbage' as const), name: fc.constantFrom(...Object.keys(op.query), 'limit', 'after', 'cursor', 'x', '__proto__'), text: fc.oneof(fc.string({ unit: 'binary', maxLength: 30 }), fc.constantFrom('-1', '1e9', '99999999999', '%ZZ', '', '[]', '{}')) }),
      fc.record({ kind: fc.constant('other-tenant' as const) }),
      fc.record({ kind: fc.constant('bad-auth' as const), header: fc.option(fc.oneof(fc.constantFrom('Bearer', 'Bearer ', 'Basic Zm9vOmJhcg==', 'bearer agd_000000000000_AAAA', 'Token x'), fc.string({ unit: 'grapheme-ascii', maxLength: 60 })), { nil: undefined }) }),
      // what a private fuzz run saw reset: bytes sent as they are (node:http refuses a NUL in a path)
      fc.record({ kind: fc.constant('raw-path' as const), pick: fc.nat(), text: fc.constantFrom('\u0000', 'a\u0000b', '..', '../..', '.', 'x/../..') }),
      // the client asks to close, and sends its body (70 KB with pad) once the answer began, as a slower uploader would
      fc.record({ kind: fc.constant('close' as const), pad: fc.boolean() }),
      fc.record({ kind: fc.constant('token' as const), pick: fc.nat() }),
      fc.record({ kind: fc.constant('forged-token' as const), form: fc.constantFrom(...FORGED_FORMS), claims: claimsArb(tenants) }),
    ]
    if (!op.body) kinds.push(fc.record({ kind: fc.constant('body-on-bodiless' as const), body: fc.constantFrom('{}', '{"x":1}', '"a\r\nb"', PAD) }))
    if (op.body) {
      kinds.push(
        fc.record({ kind: fc.constant('missing' as const), pick: fc.nat() }),
        fc.record({ kind: fc.constant('unknown' as const), key: fc.oneof(cleanText(10), fc.constantFrom('__proto__', 'constructor', 'prototype')) }),
        fc.record({ kind: fc.constant('mistyped' as const), pick: fc.nat(), value: fc.oneof(fc.integer(), fc.boolean(), fc.constant(null), fc.constant([]), fc.constant({}), cleanText(5), fc.double()) }),
        fc.record({ kind: fc.constant('huge' as const), pick: fc.nat(), size: fc.constantFrom(70_000, 600_000, 1_100_000, 3_000_000) }),
        fc.record({ kind: fc.constant('deep' as const), depth: fc.constantFrom(50, 1000, 20_000, 200_000), array: fc.boolean() }),
        fc.record({ kind: fc.constant('bad-json' as const), cut: fc.nat(), garbage: fc.constantFrom('', '}', ',', 'NaN', "'", '\u0000', '{"a":', '\\u12') }),
        fc.record({ kind: fc.constant('content-type' as const), type: fc.constantFrom('text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/xml', 'application/json-patch+json', 'text/json', '') }),
        fc.record({ kind: fc.constant('crlf-string' as const), raw: fc.boolean() }),
      )
    }
    return fc.record({ base, mutation: fc.oneof(...kinds) }).map(({ base: b, mutation }) => ({ ...b, mutation }))
  })
}

/** Whether a token reaches a session of its tenant (API.md §18): listed, and owned by its subject. */
function reaches(c: Credential, s: { id: string; owner: string | null }): boolean {
  if (c.sessions && !c.sessions.includes(s.id)) return false
  if (c.subject !== undefined && s.owner !== c.subject) return false
  return true
}

/** Every place in a JSON value: [path of keys, parent, key]. */
function places(v: unknown, out: Array<{ parent: any; key: string | number }> = []): Array<{ parent: any; key: string | number }> {
  if (v && typeof v === 'object') {
    for (const [k, x] of Object.entries(v)) {
      out.push({ parent: v, key: Array.isArray(v) ? Number(k) : k })
      places(x, out)
    }
  }
  return out
}

/** Percent-encoding that survives a lone surrogate (encodeURIComponent throws on one): its would-be bytes. */
function enc(s: string): string {
  try {
    return encodeURIComponent(s)
  } catch {
    return [...s].map((c) => (/[\ud800-\udfff]/.test(c) ? '%ED%A0%80' : encodeURIComponent(c))).join('')
  }
}

function nested(depth: number, array: boolean): string {
  return array ? `${'['.repeat(depth)}1${']'.repeat(depth)}` : `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`
}

interface Built {
  method: string
  path: string
  headers: Record<string, string>
  body?: string | Buffer
  /** written as raw bytes over a socket, the body after the answer began (rawUpload): a path node:http would refuse, an uploader slower than the server */
  raw?: boolean
  /** what the answer must be, beyond the checks every answer gets */
  expect?: { status: number[]; code?: string; why: string }
  /** the session of tenant a it addresses, if any */
  session?: string
  /** the real token it carries (API.md §18), whose rights its answer must keep to */
  credential?: Credential
  /** a token that must be refused, made before it is sent */
  forged?: { form: ForgedForm; claims: Record<string, unknown> }
}

/** Known values learned from answers: session ids of tenant A, and every named string field. */
class Pools {
  readonly sessions: string[] = []
  readonly byName = new Map<string, string[]>()
  /** values never aimed at: the two tenants under test (limits or revoked keys of theirs would turn the rest into 429s and 401s) */
  readonly protect = new Set<string>()
  learn(v: unknown, parent = ''): void {
    if (Array.isArray(v)) return v.forEach((x) => this.learn(x, parent))
    if (!v || typeof v !== 'object') return
    const o = v as Record<string, unknown>
    if (typeof o.id === 'string' && 'headSeq' in o && 'status' in o && !this.sessions.includes(o.id)) {
      this.sessions.push(o.id)
    }
    for (const [k, x] of Object.entries(o)) {
      if (typeof x === 'string' && x.length < 300) this.add(k === 'id' && parent ? `${parent}Id` : k, x)
      else this.learn(x, k)
    }
  }
  private add(name: string, value: string) {
    if (this.protect.has(value)) return
    const list = this.byName.get(name) ?? []
    if (list.length < 200 && !list.includes(value)) list.push(value)
    this.byName.set(name, list)
  }
  /** a session that answered 404 to its owner is gone (deleted): aim at live ones */
  forget(id: string) {
    const i = this.sessions.indexOf(id)
    if (i >= 0) this.sessions.splice(i, 1)
  }
  pick(op: Operation, name: string, n: number): string | undefined {
    const list = name === 'id' && op.session ? this.sessions : this.byName.get(name)
    return list?.length ? list[n % list.length] : undefined
  }
}

/** The scripted model's answer: call the session's first tool when asked to, else echo. */
function agentStep(req: { context: { messages: any[]; tools?: Array<{ name: string }> }; n: number }) {
  const last = req.context.messages.at(-1)
  if (last?.role === 'toolResult') return { text: ['the tool answered'] }
  const text = typeof last?.content === 'string' ? last.content : (last?.content ?? []).map((b: { text?: string }) => b.text ?? '').join('')
  const tool = req.context.tools?.[0]
  if (tool && /tool/.test(text)) return { toolCalls: [{ id: `call_${req.n}`, name: tool.name, arguments: { q: text.slice(0, 20) } }], stop: 'toolUse' as const }
  return { text: [`heard: ${text.slice(0, 40)}`] }
}

/** A request written as raw bytes (rawUpload), read back as a WireAnswer. */
async function rawRequest(base: string, r: Built): Promise<WireAnswer> {
  const body = r.body === undefined ? Buffer.alloc(0) : Buffer.isBuffer(r.body) ? r.body : Buffer.from(r.body)
  const headers = Object.entries({ host: 'fuzz', ...r.headers, ...(r.body === undefined ? {} : { 'content-length': String(body.length) }) })
  const x = await rawUpload(base, `${r.method} ${r.path} HTTP/1.1\r\n${headers.map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`, body, { answerWaitMs: 100, settleMs: 100, timeoutMs: 30000 })
  const a = x.answers[0]
  const answer: WireAnswer = { status: a?.status ?? 0, headers: a?.headers ?? {}, text: a?.body ?? '', body: a?.json, reusedSocket: false }
  if (!a) answer.error = x.reset ?? (x.timedOut ? 'TIMEOUT' : 'NO ANSWER')
  else if (x.reset) answer.lateError = x.reset
  observeAnswer(answer.body)
  return answer
}

export async function runFuzz(ctx: PartContext): Promise<PartResult> {
  const started = Date.now()
  const total = ctx.size === 'long' ? 20_000 : 2_000
  const validCount = Math.round(total * 0.4)
  const doc = JSON.parse(fs.readFileSync(DOC_FILE, 'utf8'))
  const ops = operations(doc).filter((o) => !o.websocket && !o.eventStream)
  // the native session streams, whose isolation is checked below (the protocols' streams address an agent too, and have tests of their own)
  const streams = operations(doc).filter((o) => (o.websocket || o.eventStream) && o.template.startsWith('/v1/sessions/{id}/'))
  // API.md §19: the spans it exports are searched for secrets too
  const target: Target = await startTarget(ctx.db, {}, { traces: true })
  const problems: string[] = []
  const statuses = new Map<number, number>()
  const agent = new http.Agent({ keepAlive: true, maxSockets: 4 })
  let sent = 0
  let noAnswer = 0
  let resets = 0
  let isolationChecks = 0
  let isolationBreaches = 0
  let healthChecks = 0
  let idp: Idp | undefined
  try {
    const admin = { authorization: `Bearer ${target.adminToken}`, 'content-type': 'application/json' }
    const mk = async (name: string) => (await wireRequest(target.url, { method: 'POST', path: '/v1/admin/tenants', headers: admin, body: JSON.stringify({ name }) })).body as { apiKey: string; keyId?: string; tenant: { id: string } }
    const a = await mk('fuzz-a')
    const b = await mk('fuzz-b')
    // secrets of both tenants, one sent as a header by the seed sessions' http tool; generated PUTs put values the check knows too
    for (const [t, n] of [[a, 'FUZZ_TOKEN'], [b, 'FUZZ_TOKEN']] as const) if ((await putSecret(target, t.apiKey, n)) !== 204) problems.push(`PUT /v1/secrets/${n} was not accepted`)
    const generatedSecrets = [0, 1, 2].map(() => `faults-fuzz-secret-${crypto.randomBytes(16).toString('hex')}`)
    for (const v of generatedSecrets) target.leaks.add('secret value', v)
    const hints: Hints = {
      byName: {
        model: [target.models.ref(), 'faux/echo', 'nope/none'],
        url: [target.tools.url, `${target.tools.url}?x=1`],
        content: ['please use a tool', 'hello there', 'tool time', 'what now'],
        text: ['please use a tool', 'hi'],
        decision: ['allow', 'deny'],
        value: generatedSecrets,
        // the JSON-RPC endpoints' methods (API.md §17.4, §17.5), the streaming ones left out (they answer until a task ends)
        method: ['initialize', 'tools/list', 'tools/call', 'ping', 'SendMessage', 'GetTask', 'ListTasks', 'CancelTask', 'message/send', 'tasks/get', 'tasks/cancel', 'CreateTaskPushNotificationConfig', 'ListTaskPushNotificationConfigs'],
      },
    }
    const pools = new Pools()
    const theirs = new Pools()
    /** real tokens with random rights, minted once the valid requests made sessions to name (API.md §18) */
    const creds: Credential[] = []
    // admin routes aim at a tenant of their own, never at a or b
    const c = await mk('fuzz-admin-target')
    for (const t of [a, b]) for (const v of [t.tenant.id, t.keyId]) if (v) pools.protect.add(v)
    pools.learn({ tenant: c.tenant })
    /** requests under /v1 other than admin ones are a tenant's */
    const scopeOf = (r: Built) => (r.path.startsWith('/v1/') && !r.path.startsWith('/v1/admin/') ? 'tenant' : 'other')
    const known = new Set<string>()

    const send = async (r: Built, what: string): Promise<WireAnswer> => {
      const ans = r.raw ? await rawRequest(target.url, r) : await wireRequest(target.url, { ...r, agent, timeoutMs: 30000 })
      sent++
      statuses.set(ans.status, (statuses.get(ans.status) ?? 0) + 1)
      const where = `#${sent} ${what}`
      // a reset before the answer loses it; after it, it may have (the client's kernel drops what it had not read)
      const reset = [ans.error, ans.lateError].find((e) => e === 'ECONNRESET' || e === 'EPIPE')
      if (reset) {
        resets++
        problems.push(`${where}: the connection was reset (${reset}${ans.error ? ', no answer' : ' after the answer'})`)
      }
      if (ans.error) {
        noAnswer++
        problems.push(`${where}: no whole answer (${ans.error})`)
        return ans
      }
      if (ans.status >= 500) problems.push(`${where}: ${ans.status} ${ans.text.slice(0, 200)}`)
      // API.md §17: a protocol's errors take its own shape — JSON-RPC's (§10's code in error.data) for A2A
      // and MCP, OpenAI's (§10's code as its code) for Responses — every other route §10's
      const rpc = isJsonRpcRoute(r.method, r.path)
      const shape = shapeViolation(r.method, r.path, ans.status, ans.body, { head: r.method === 'HEAD', retryAfter: (ans.headers['retry-after'] as string) ?? null })
      if (shape) problems.push(`${where}: ${shape}`)
      // (a JSON-RPC endpoint's refusal before it is reached, such as an unreadable URL, is §10's: code at the top)
      const code = rpc ? (ans.body?.error?.data?.code ?? ans.body?.error?.code) : ans.body?.error?.code
      if (r.expect && !r.expect.status.includes(ans.status)) problems.push(`${where}: ${r.expect.why}: expected ${r.expect.status.join('|')}, got ${ans.status} ${ans.text.slice(0, 200)}`)
      else if (r.expect?.code && code !== r.expect.code) problems.push(`${where}: ${r.expect.why}: expected code ${r.expect.code}, got ${ans.text.slice(0, 200)}`)
      if (r.credential && ans.status < 300) for (const breach of breaches(r, ans)) problems.push(`${where}: ${breach}`)
      if (r.path.startsWith('/v1/tokens') && ans.status === 201 && typeof ans.body?.token === 'string') target.leaks.add('token', ans.body.token)
      // only what tenant a's key got back is a's; ids are per tenant, so b may hold the same id
      if (ans.status === 404 && ans.body?.error?.code === 'session-not-found' && r.session && r.headers.authorization === `Bearer ${a.apiKey}`) pools.forget(r.session)
      if (ans.status < 300 && ans.body && r.headers.authorization === `Bearer ${b.apiKey}`) theirs.learn(ans.body)
      else if (ans.status < 300 && ans.body && (r.headers.authorization === `Bearer ${a.apiKey}` || scopeOf(r) !== 'tenant')) {
        pools.learn(ans.body)
        for (const id of pools.sessions) if (!known.has(id)) {
          known.add(id)
          target.models.fallback(id, agentStep as never)
        }
      }
      return ans
    }

    /** A session object a token's answer shows that the token does not reach: an isolation breach. */
    const breaches = (r: Built, ans: WireAnswer): string[] => {
      const c = r.credential!
      const shown: Array<{ id: string; owner: string | null }> = Array.isArray(ans.body?.sessions) ? ans.body.sessions : r.method === 'GET' && /^\/v1\/sessions\/[^/?]+(\?|$)/.test(r.path) && ans.body?.id ? [ans.body] : []
      const out: string[] = []
      for (const s of shown) {
        if (c.tenant === 'b' && pools.sessions.includes(s.id) && !theirs.sessions.includes(s.id)) out.push(`tenant b's token was shown tenant a's session ${s.id}`)
        else if (c.tenant === 'a' && !reaches(c, s)) out.push(`a token (${JSON.stringify({ subject: c.subject, sessions: c.sessions })}) was shown session ${s.id} of owner ${s.owner}`)
      }
      if (out.length) isolationBreaches += out.length
      return out
    }

    const build = (plan: Plan): Built => {
      const op = ops[plan.op]
      const m = plan.mutation
      const values: Record<string, string> = {}
      for (const p of op.pathParams) values[p] = pools.pick(op, p, plan.picks[p]) ?? plan.fallback[p]
      const fromA = op.pathParams.includes('id') && op.session && pools.sessions.includes(values.id) && !theirs.sessions.includes(values.id)
      let body = plan.body === undefined ? undefined : structuredClone(plan.body)
      let raw: string | undefined
      const query: Record<string, string> = {}
      for (const [k, v] of Object.entries(plan.query)) query[k] = typeof v === 'string' ? v : JSON.stringify(v)
      const headers: Record<string, string> = {}
      if (op.security === 'apiKey') headers.authorization = `Bearer ${a.apiKey}`
      // the MCP transport answers 406 to a client that does not accept both of its answers
      if (op.template === '/v1/mcp') headers.accept = 'application/json, text/event-stream'
      if (op.security === 'adminToken') headers.authorization = `Bearer ${target.adminToken}`
      let expect: Built['expect']
      let credential: Credential | undefined
      let forged: Built['forged']
      let rawPath: string | undefined
      let sendRaw = false
      if (m) {
        const spots = places(body)
        const spot = (n: number) => (spots.length ? spots[n % spots.length] : undefined)
        switch (m.kind) {
          case 'missing': {
            const s = spot(m.pick)
            if (s) Array.isArray(s.parent) ? s.parent.splice(Number(s.key), 1) : delete s.parent[s.key]
            break
          }
          case 'unknown':
            if (body && typeof body === 'object' && !Array.isArray(body)) (body as Record<string, unknown>)[m.key] = 1
            else body = { [m.key]: 1 }
            break
          case 'mistyped': {
            const s = spot(m.pick)
            if (s) s.parent[s.key] = m.value
            else body = m.value
            break
          }
          case 'huge': {
            const s = spot(m.pick)
            const big = 'h'.repeat(m.size)
            if (s) s.parent[s.key] = big
            else body = { huge: big }
            if (m.size > 1024 * 1024) expect = { status: [413], code: 'payload-too-large', why: 'a body over 1 MiB' }
            break
          }
          case 'deep':
            raw = JSON.stringify(body ?? {}).replace(/^\{/, `{"deep":${nested(m.depth, m.array)},`).replace(/,\}$/, '}')
            if (raw.length > 1024 * 1024) expect = { status: [413], code: 'payload-too-large', why: 'a body over 1 MiB' }
            break
          case 'unstorable': {
            if (m.where === 'path' && op.pathParams.length) values[op.pathParams[m.pick % op.pathParams.length]] = `x${m.text}`
            else if (m.where === 'query' || m.where === 'path') query[Object.keys(op.query)[0] ?? 'probe'] = m.text
            else if (m.where === 'key') {
              const s = places(body).filter((p) => p.parent && !Array.isArray(p.parent))
              const target = s.length ? s[m.pick % s.length].parent : body && typeof body === 'object' && !Array.isArray(body) ? body : undefined
              if (target) target[`k${m.text}`] = 'v'
              else body = { [`k${m.text}`]: 'v' }
            } else {
              const s = spots.filter((p) => typeof p.parent[p.key] === 'string')
              if (s.length) {
                const p = s[m.pick % s.length]
                p.parent[p.key] = `${p.parent[p.key]}${m.text}`
              } else body = { text: m.text }
            }
            expect = { status: [400], code: 'bad-request', why: 'text PostgreSQL cannot store' }
            break
          }
          case 'bad-json': {
            const text = JSON.stringify(body ?? {})
            raw = text.slice(0, Math.max(1, m.cut % Math.max(1, text.length))) + m.garbage
            try {
              JSON.parse(raw)
            } catch {
              expect = { status: [400], code: 'bad-request', why: 'malformed JSON' }
            }
            break
          }
          case 'content-type':
            headers['content-type'] = m.type
            raw = JSON.stringify(body ?? {})
            expect = { status: [415], code: 'unsupported-media-type', why: `content-type ${JSON.stringify(m.type)}` }
            break
          case 'path-garbage':
            if (op.pathParams.length) values[op.pathParams[m.pick % op.pathParams.length]] = m.text
            break
          case 'query-garbage':
            query[m.name] = m.text
            break
          case 'other-tenant':
            if (headers.authorization && op.security === 'apiKey') headers.authorization = `Bearer ${b.apiKey}`
            if (fromA && op.security === 'apiKey') {
              expect = { status: [404], code: 'session-not-found', why: "another tenant's session" }
              isolationChecks++
            }
            break
          case 'bad-auth':
            if (m.header === undefined) delete headers.authorization
            else headers.authorization = m.header.replace(/[^\t\x20-\x7e]/g, '')
            if (op.security) expect = { status: [401], code: 'unauthorized', why: 'garbage auth' }
            break
          case 'body-on-bodiless':
            sendRaw = true
            raw = m.body
            if (!op.security && !op.pathParams.length) expect = { status: [400], code: 'bad-request', why: 'a body on a route that takes none' }
            break
          case 'crlf-string':
            // raw CR LF inside a JSON string is not JSON; escaped, it is a string where an object belongs
            raw = m.raw ? '"line one\r\nline two"' : '"line one\\r\\nline two"'
            break
          case 'raw-path':
            sendRaw = true
            if (op.pathParams.length) values[op.pathParams[m.pick % op.pathParams.length]] = m.text
            break
          case 'close':
            sendRaw = true
            headers.connection = 'close'
            if (m.pad) raw = PAD
            break
          case 'forged-token':
            forged = { form: m.form, claims: m.claims }
            // a path whose id came out empty matches no route, which answers 404 before any credential is read
            if (op.security) expect = op.pathParams.some((p) => values[p] === '') ? { status: [401, 404], why: `a forged token (${m.form}) on a path with an empty id` } : { status: [401], code: 'unauthorized', why: `a forged token (${m.form})` }
            break
          case 'token': {
            if (!creds.length) break
            credential = creds[m.pick % creds.length]
            headers.authorization = `Bearer ${credential.token}`
            expect = tokenExpectation(op, credential, values.id, body)
            if (expect?.code === 'session-not-found') isolationChecks++
            break
          }
        }
      }
      // a path whose id came out empty (`/v1/agents/`) matches no route: the router answers 404 before
      // any credential, scope or query is looked at, whatever else the request got wrong
      if (expect && !expect.status.includes(404) && op.pathParams.some((p) => values[p] === '')) expect = { status: [...expect.status, 404], why: `${expect.why}, or 404 on a path with an empty id` }
      // path: each parameter percent-encoded, except garbage meant to arrive as sent
      const asSent = (p: string) => (m?.kind === 'path-garbage' && /%/.test(values[p]) && values[p] === m.text) || (m?.kind === 'raw-path' && values[p] === m.text)
      rawPath = op.template.replace(/\{(\w+)\}/g, (_x, p: string) => (asSent(p) ? values[p] : enc(values[p] ?? 'x')))
      if (m?.kind === 'raw-path' && !op.pathParams.length) rawPath += `/${m.text}`
      const qs = Object.entries(query).map(([k, v]) => `${enc(k)}=${enc(v)}`).join('&')
      if (qs) rawPath += `?${qs}`
      let payload: string | undefined = raw ?? (body === undefined ? undefined : JSON.stringify(body))
      if (payload !== undefined && headers['content-type'] === undefined) headers['content-type'] = 'application/json'
      if (payload !== undefined && !op.body && !m) payload = undefined
      return { method: op.method, path: rawPath, headers, body: payload, expect, session: fromA ? values.id : undefined, raw: sendRaw, credential, forged }
    }

    /**
     * What a real token's answer must be (API.md §18): an admin route 401, a key-only route or a scope
     * it lacks 403, a session of tenant a it does not reach 404 (the sessions of the pools are the
     * key's, owned by nobody, so a subject reaches none of them), a create outside its sessions 403.
     */
    const tokenExpectation = (op: Operation, c: Credential, id: string | undefined, body: unknown): Built['expect'] => {
      if (op.security === 'adminToken') return { status: [401], code: 'unauthorized', why: 'a token on an admin route' }
      if (op.security !== 'apiKey') return undefined
      if (op.tokenScope === null) return { status: [403], code: 'forbidden', why: 'a token on a tenant-key route' }
      if (!c.scopes.includes(op.tokenScope)) return { status: [403], code: 'forbidden', why: `a token without ${op.tokenScope}` }
      const ofA = op.session && id !== undefined && pools.sessions.includes(id) && !theirs.sessions.includes(id)
      if (ofA && !reaches(c, { id, owner: null })) return { status: [404], code: 'session-not-found', why: 'a session the token does not reach' }
      if (op.method === 'POST' && op.template === '/v1/sessions' && c.sessions && !c.sessions.includes((body as { id?: string } | undefined)?.id as string)) return { status: [403], code: 'forbidden', why: 'a create outside the token\'s sessions' }
      return undefined
    }

    const seed = ctx.seed
    const validPlans = fc.sample(planArb(doc, ops, hints, false), { seed, numRuns: validCount })
    // a head start: sessions to aim at before the generated creates made their own
    for (let i = 0; i < 4; i++) {
      await send({ method: 'POST', path: '/v1/sessions', headers: { authorization: `Bearer ${a.apiKey}`, 'content-type': 'application/json' }, body: JSON.stringify({ tools: [{ name: 'lookup', description: 'looks up', parameters: { type: 'object', properties: { q: { type: 'string' } } }, execution: { type: 'http', url: target.tools.url, headers: { 'x-token': 'secret:FUZZ_TOKEN' } } }] }) }, 'seed session')
    }
    const check = async (i: number) => {
      if (i % 50 !== 0) return
      healthChecks++
      const h = await send({ method: 'GET', path: '/healthz', headers: {} }, 'healthz')
      if (h.status !== 200) problems.push(`healthz answered ${h.status} after ${sent} requests`)
    }
    for (let i = 0; i < validPlans.length; i++) {
      const p = validPlans[i]
      await send(build(p), `valid ${ops[p.op].method} ${ops[p.op].template}`)
      await check(i)
    }
    ctx.log(`fuzz: ${sent} valid requests, ${pools.sessions.length} sessions`)

    // credentials (API.md §18): real tokens of both tenants with rights drawn from the seed, and an
    // identity provider of tenant a's whose end users' tokens are real too
    const rng = fc.sample(fc.nat(), { seed: seed + 2, numRuns: 64 })
    const mint = async (key: string, body: Record<string, unknown>): Promise<string | undefined> => {
      const r = await send({ method: 'POST', path: '/v1/tokens', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) }, 'mint a token')
      if (r.status !== 201) problems.push(`POST /v1/tokens ${JSON.stringify(body)} answered ${r.status} ${r.text.slice(0, 200)}`)
      return r.status === 201 ? r.body.token : undefined
    }
    for (const [i, scopes] of [['read'], ['write'], ['read', 'write']].entries()) {
      const named = [...new Set([pools.sessions[rng[i] % Math.max(1, pools.sessions.length)], pools.sessions[rng[i + 3] % Math.max(1, pools.sessions.length)], `fuzz-new-${i}`].filter(Boolean))] as string[]
      for (const rights of [{}, { subject: `fuzz-user-${rng[i + 6] % 2}` }, { sessions: named }, { subject: 'fuzz-user-x', sessions: named }]) {
        const token = await mint(a.apiKey, { scopes, ttlSeconds: 86400, ...rights })
        if (token) creds.push({ token, tenant: 'a', scopes, ...rights })
      }
    }
    const theirToken = await mint(b.apiKey, { scopes: ['read', 'write'], ttlSeconds: 86400 })
    if (theirToken) creds.push({ token: theirToken, tenant: 'b', scopes: ['read', 'write'] })
    idp = await startIdp('fuzz')
    const patched = await send({ method: 'PATCH', path: `/v1/admin/tenants/${a.tenant.id}`, headers: admin, body: JSON.stringify({ auth: { issuer: idp.issuer, audience: 'fuzz-aud', jwksUrl: idp.jwksUrl } }) }, 'identity provider of tenant a')
    if (patched.status !== 200) problems.push(`PATCH of tenant a's identity provider answered ${patched.status}`)
    for (const sub of ['idp-user-1', 'idp-user-2']) {
      const token = await idp.sign({ aud: 'fuzz-aud', sub, exp: Math.floor(Date.now() / 1000) + 86400 })
      target.leaks.add('token', token)
      creds.push({ token, tenant: 'a', scopes: ['read', 'write'], subject: sub })
    }
    // what forged tokens are made of: a real token and key id, the public key, keys nobody trusts, an expired token
    const real = creds[0]?.token ?? ''
    const realKid = real ? decodeProtectedHeader(real).kid : 'none'
    const jwks = (await wireRequest(target.url, { method: 'GET', path: '/.well-known/jwks.json', headers: {} })).body?.keys ?? []
    const publicJwk = jwks.find((k: { kid: string }) => k.kid === realKid) ?? {}
    const stranger = (await generateKeyPair('EdDSA')).privateKey as CryptoKey
    const strangerIdp = await startIdp('stranger')
    const expired = (await mint(a.apiKey, { scopes: ['read', 'write'], ttlSeconds: 1 })) ?? ''
    await new Promise((r) => setTimeout(r, 1100))
    const forge = async (f: { form: ForgedForm; claims: Record<string, unknown> }): Promise<string> => {
      const now = Math.floor(Date.now() / 1000)
      const claims: Record<string, unknown> = { ...f.claims }
      for (const k of ['exp', 'iat', 'nbf']) if (typeof claims[k] === 'number') claims[k] = now + (claims[k] as number)
      const sign = (alg: string, kid: string | undefined, key: CryptoKey | Uint8Array) => new SignJWT(claims).setProtectedHeader({ alg, ...(kid ? { kid } : {}), typ: 'JWT' }).sign(key)
      const [h, , sig] = real.split('.')
      const sub = typeof claims.sub === 'string' && claims.sub ? claims.sub : 'forged-user'
      switch (f.form) {
        case 'garbage':
          return `${b64(f.claims)}.${b64(claims)}.${b64(String(claims.jti ?? 'x'))}`
        case 'none':
          return new UnsecuredJWT(claims).encode()
        case 'hs256-public-key':
          return sign('HS256', realKid, new TextEncoder().encode(JSON.stringify(publicJwk)))
        case 'hs256-random':
          return sign('HS256', realKid, crypto.randomBytes(32))
        case 'stranger':
          return sign('EdDSA', `stranger-${claims.jti ?? 'x'}`, stranger)
        case 'stranger-known-kid':
          return sign('EdDSA', realKid, stranger)
        case 'tampered':
          return `${h}.${b64(claims)}.${sig}`
        case 'expired':
          return expired
        case 'idp-wrong-aud':
          return idp!.sign({ ...claims, iss: idp!.issuer, aud: 'not-ours', sub, exp: now + 600, nbf: now - 1 })
        case 'idp-expired':
          return idp!.sign({ ...claims, iss: idp!.issuer, aud: 'fuzz-aud', sub, exp: now - 120, nbf: now - 600 })
        case 'idp-stranger':
          return strangerIdp.sign({ ...claims, iss: idp!.issuer, aud: 'fuzz-aud', sub, exp: now + 600, nbf: now - 1 })
      }
    }

    const brokenPlans = fc.sample(planArb(doc, ops, hints, true, [a.tenant.id, b.tenant.id]), { seed: seed + 1, numRuns: total - validCount })
    const byKind = new Map<string, number>()
    for (let i = 0; i < brokenPlans.length; i++) {
      const p = brokenPlans[i]
      byKind.set(p.mutation!.kind, (byKind.get(p.mutation!.kind) ?? 0) + 1)
      const r = build(p)
      if (r.forged) r.headers.authorization = `Bearer ${await forge(r.forged)}`
      await send(r, `broken(${p.mutation?.kind}${r.forged ? ` ${r.forged.form}` : ''}) ${ops[p.op].method} ${ops[p.op].template} ${r.path.slice(0, 120)}`)
      await check(i)
    }
    await strangerIdp.close()
    ctx.log(`fuzz: ${sent} requests sent, checking logs`)

    // the other tenant lists none of the first's sessions
    const listed = await wireRequest(target.url, { method: 'GET', path: '/v1/sessions?limit=200', headers: { authorization: `Bearer ${b.apiKey}` } })
    for (const s of listed.body?.sessions ?? []) if (pools.sessions.includes(s.id) && !theirs.sessions.includes(s.id)) problems.push(`tenant b lists tenant a's session ${s.id}`)

    // settle: cancel whatever runs or waits, then every remaining session's log must pass §15
    const auth = { authorization: `Bearer ${a.apiKey}` }
    const all: string[] = []
    let cursor: string | null = null
    do {
      const page: WireAnswer = await wireRequest(target.url, { method: 'GET', path: `/v1/sessions?limit=200${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, headers: auth })
      all.push(...(page.body?.sessions ?? []).map((s: { id: string }) => s.id))
      cursor = page.body?.nextCursor ?? null
    } while (cursor)
    // the streams, opened and closed by each tenant
    const subjectToken = creds.find((c) => c.tenant === 'a' && c.subject && !c.sessions && c.scopes.includes('read'))?.token
    for (const op of streams) {
      for (const id of all.filter((x) => !theirs.sessions.includes(x) && pools.sessions.includes(x)).slice(0, 3)) {
        const p = op.template.replace('{id}', encodeURIComponent(id))
        // a subject's token reaches none of the key's sessions (API.md §18)
        for (const [key, want] of [[a.apiKey, op.template.endsWith('/ws') ? [400] : [200]], [b.apiKey, [404]], ...(subjectToken ? [[subjectToken, [404]]] : [])] as Array<[string, number[]]>) {
          const ac = new AbortController()
          const res = await fetch(`${target.url}${p}`, { headers: { authorization: `Bearer ${key}` }, signal: ac.signal }).catch((e) => e as Error)
          sent++
          if (res instanceof Error) problems.push(`${op.template}: no answer (${res.message})`)
          else {
            statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1)
            if (!want.includes(res.status)) problems.push(`${op.template} as ${key === b.apiKey ? 'the other tenant' : key === subjectToken ? "a subject's token" : 'the owner'}: ${res.status}`)
            if (key !== a.apiKey) isolationChecks++
          }
          ac.abort()
        }
      }
    }
    for (const id of all) await wireRequest(target.url, { method: 'POST', path: `/v1/sessions/${encodeURIComponent(id)}/cancel`, headers: auth })
    const deadline = Date.now() + 30000
    let turns = 0
    let events = 0
    for (const id of all) {
      let log: SessionEvent[] = []
      for (;;) {
        const r = await wireRequest(target.url, { method: 'GET', path: `/v1/sessions/${encodeURIComponent(id)}/events?limit=5000`, headers: auth })
        log = r.body?.events ?? []
        const open = log.filter((e) => e.type === 'turn/start').length - log.filter((e) => e.type === 'turn/end').length
        const s = await wireRequest(target.url, { method: 'GET', path: `/v1/sessions/${encodeURIComponent(id)}`, headers: auth })
        if ((open === 0 && s.body?.status === 'idle') || Date.now() > deadline) break
        await new Promise((r) => setTimeout(r, 50))
      }
      events += log.length
      turns += log.filter((e) => e.type === 'turn/end').length
      for (const v of logViolations(log)) problems.push(`session ${id}: §15: ${v}`)
    }
    const leaked = await target.leakCheck()
    problems.push(...leaked)
    const byClass = (lo: number, hi: number) => [...statuses].filter(([s]) => s >= lo && s < hi).reduce((n, [, c]) => n + c, 0)
    const rows: Array<[string, string | number]> = [
      ['seed', seed],
      ['size', ctx.size],
      ['database', ctx.db],
      ['operations in openapi.json', ops.length + streams.length],
      ['requests sent', sent],
      ['  valid (generated)', validPlans.length],
      ['  broken (generated)', brokenPlans.length],
      ...[...byKind].sort(([x], [y]) => x.localeCompare(y)).map(([k, n]) => [`    ${k}`, n] as [string, number]),
      ['2xx', byClass(200, 300)],
      ['4xx', byClass(400, 500)],
      ['5xx', byClass(500, 600)],
      ['no whole answer', noAnswer],
      ['connection resets', resets],
      ...[...statuses].sort(([x], [y]) => x - y).map(([s, c]) => [`  status ${s}`, c] as [string, number]),
      ['isolation checks', isolationChecks],
      ['tokens of random rights', creds.length],
      ['isolation breaches', isolationBreaches],
      ['healthz checks', healthChecks],
      ['sessions checked (§15)', all.length],
      ['turns ended', turns],
      ['events checked', events],
      ['http tool calls served', target.tools.calls],
      ['secrets looked for', target.leaks.secretCount],
      ['  leaked', leaked.length],
      ['violations', problems.length],
      ['seconds', Math.round((Date.now() - started) / 100) / 10],
    ]
    return { rows, violations: problems }
  } finally {
    agent.destroy()
    await target.close()
    await idp?.close()
  }
}

export const fuzz: FaultPart = { name: 'fuzz', description: 'requests generated from openapi.json, valid then broken', run: runFuzz }
