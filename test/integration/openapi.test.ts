// The committed openapi/openapi.json is what the server serves at GET /openapi.json (API.md §8), it is
// OpenAPI 3.1, and it documents every route of API.md §3–§8.

import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startTestApp, type TestApp } from '../helpers/app.js'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const FILE = path.join(ROOT, 'openapi/openapi.json')
const STALE = 'openapi/openapi.json is stale or missing: run `npm run openapi` and commit the result'

/** API.md §3–§8, §16 and §18, as OpenAPI paths: [method, path, security scheme or null for none] */
const ROUTES: Array<[string, string, 'apiKey' | 'adminToken' | null]> = [
  // §3 admin
  ['post', '/v1/admin/tenants', 'adminToken'],
  ['post', '/v1/admin/tenants/{tenantId}/keys', 'adminToken'],
  ['delete', '/v1/admin/keys/{keyId}', 'adminToken'],
  // §4 sessions
  ['post', '/v1/sessions', 'apiKey'],
  ['get', '/v1/sessions', 'apiKey'],
  ['get', '/v1/sessions/{id}', 'apiKey'],
  ['patch', '/v1/sessions/{id}', 'apiKey'],
  ['delete', '/v1/sessions/{id}', 'apiKey'],
  ['post', '/v1/sessions/{id}/fork', 'apiKey'],
  ['post', '/v1/sessions/{id}/compact', 'apiKey'],
  // §16 agents
  ['post', '/v1/agents', 'apiKey'],
  ['get', '/v1/agents', 'apiKey'],
  ['get', '/v1/agents/{id}', 'apiKey'],
  ['get', '/v1/agents/{id}/versions/{version}', 'apiKey'],
  ['patch', '/v1/agents/{id}', 'apiKey'],
  ['delete', '/v1/agents/{id}', 'apiKey'],
  // §5 inbox
  ['post', '/v1/sessions/{id}/followup', 'apiKey'],
  ['post', '/v1/sessions/{id}/steer', 'apiKey'],
  ['post', '/v1/sessions/{id}/inject', 'apiKey'],
  ['get', '/v1/sessions/{id}/inbox', 'apiKey'],
  ['delete', '/v1/sessions/{id}/inbox/{messageId}', 'apiKey'],
  ['post', '/v1/sessions/{id}/cancel', 'apiKey'],
  // §6 reading
  ['get', '/v1/sessions/{id}/events', 'apiKey'],
  ['get', '/v1/sessions/{id}/messages', 'apiKey'],
  ['get', '/v1/sessions/{id}/stream', 'apiKey'],
  ['get', '/v1/sessions/{id}/ws', 'apiKey'],
  // §7 waiting tools
  ['get', '/v1/sessions/{id}/pending', 'apiKey'],
  ['post', '/v1/sessions/{id}/tool-results', 'apiKey'],
  ['post', '/v1/sessions/{id}/approvals/{callId}', 'apiKey'],
  // §18 credentials
  ['post', '/v1/tokens', 'apiKey'],
  ['get', '/.well-known/jwks.json', null],
  ['patch', '/v1/admin/tenants/{tenantId}', 'adminToken'],
  // §8 operations
  ['get', '/healthz', null],
  ['get', '/readyz', null],
  ['get', '/metrics', null],
  ['get', '/', null],
]

interface Operation {
  operationId?: string
  summary?: string
  parameters?: Array<{ name: string; in: string; required?: boolean }>
  requestBody?: { content: Record<string, { schema: unknown }> }
  responses: Record<string, { description: string; content?: Record<string, { schema: unknown }> }>
  security?: Array<Record<string, unknown>>
}
type Doc = { openapi: string; info: { title: string; version: string }; paths: Record<string, Record<string, Operation>>; components?: { securitySchemes?: Record<string, unknown>; schemas?: Record<string, any> } }

/** Every $ref in a JSON value. */
function refsOf(v: unknown, out: string[] = []): string[] {
  if (Array.isArray(v)) v.forEach((x) => refsOf(x, out))
  else if (v && typeof v === 'object') for (const [k, x] of Object.entries(v)) k === '$ref' ? out.push(String(x)) : refsOf(x, out)
  return out
}

describe('openapi/openapi.json', () => {
  let t: TestApp
  let served: Doc
  let committed: string | undefined
  beforeAll(async () => {
    t = await startTestApp({ kind: 'pglite' })
    const res = await fetch(`${t.url}/openapi.json`)
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toMatch(/^application\/json/)
    served = (await res.json()) as Doc
    committed = fs.existsSync(FILE) ? fs.readFileSync(FILE, 'utf8') : undefined
  })
  afterAll(async () => {
    await t?.close()
  })

  it('is exactly what the server serves at GET /openapi.json (regenerate with `npm run openapi`)', () => {
    expect(committed, STALE).toBeDefined()
    expect(JSON.parse(committed!), STALE).toEqual(served)
    // the generator's format too, so a hand edit that keeps the meaning still shows up as a diff
    expect(committed, STALE).toBe(`${JSON.stringify(served, null, 2)}\n`)
  })

  it('is OpenAPI 3.1 with both bearer schemes', () => {
    expect(served.openapi).toMatch(/^3\.1\.\d+$/)
    expect(served.info.title).toBe('agentd')
    expect(served.info.version).toBe(JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')).version)
    expect(served.components?.securitySchemes).toMatchObject({
      apiKey: { type: 'http', scheme: 'bearer' },
      token: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' },
      adminToken: { type: 'http', scheme: 'bearer' },
    })
  })

  it('documents every route of API.md §3–§8 with its path parameters and security', () => {
    const missing = ROUTES.filter(([m, p]) => !served.paths[p]?.[m]).map(([m, p]) => `${m.toUpperCase()} ${p}`)
    expect(missing, `routes of API.md missing from the document: ${missing.join(', ')}`).toEqual([])
    for (const [method, p, scheme] of ROUTES) {
      const op = served.paths[p][method]
      const where = `${method.toUpperCase()} ${p}`
      expect(op.summary, where).toBeTruthy()
      expect(Object.keys(op.responses).length, where).toBeGreaterThan(0)
      const templated = [...p.matchAll(/\{(\w+)\}/g)].map((x) => x[1])
      const pathParams = (op.parameters ?? []).filter((x) => x.in === 'path')
      expect(pathParams.map((x) => x.name).sort(), where).toEqual([...templated].sort())
      for (const pp of pathParams) expect(pp.required, `${where} path parameter ${pp.name}`).toBe(true)
      // a tenant route takes a token too, with the scope its method needs, unless it is the tenant's own
      // business (API.md §18): its tokens, secrets, webhooks and usage, and the agents it defines
      const keyOnly = /^\/v1\/(tokens|secrets|webhooks|usage)/.test(p) || (/^\/v1\/agents/.test(p) && method !== 'get')
      const token = scheme === 'apiKey' && !keyOnly ? [{ token: [method === 'get' ? 'read' : 'write'] }] : []
      expect(op.security, where).toEqual(scheme ? [{ [scheme]: [] }, ...token] : [])
    }
  })

  it('describes the bodies and answers clients rely on', () => {
    const op = (m: string, p: string) => served.paths[p][m]
    // bodies: JSON schemas from the route definitions
    for (const [m, p] of [
      ['post', '/v1/sessions'],
      ['patch', '/v1/sessions/{id}'],
      ['post', '/v1/sessions/{id}/followup'],
      ['post', '/v1/sessions/{id}/steer'],
      ['post', '/v1/sessions/{id}/inject'],
      ['post', '/v1/sessions/{id}/tool-results'],
      ['post', '/v1/sessions/{id}/approvals/{callId}'],
      ['post', '/v1/admin/tenants'],
    ]) {
      expect(op(m, p).requestBody?.content['application/json']?.schema, `${m} ${p} request body`).toBeTruthy()
    }
    // answers
    expect(Object.keys(op('post', '/v1/sessions').responses)).toContain('201')
    expect(Object.keys(op('post', '/v1/sessions/{id}/followup').responses)).toContain('202')
    expect(Object.keys(op('delete', '/v1/sessions/{id}').responses)).toContain('204')
    expect(Object.keys(op('put', '/v1/secrets/{name}').responses)).toContain('204')
    // every route says what it answers when it succeeds, not only its errors
    for (const [p, item] of Object.entries(served.paths)) for (const [m, o] of Object.entries(item)) expect(Object.keys(o.responses).filter((c) => /^(1|2)\d\d$/.test(c)), `${m.toUpperCase()} ${p}`).not.toEqual([])
    expect(Object.keys(op('post', '/v1/admin/tenants').responses)).toContain('201')
    expect(op('get', '/v1/sessions/{id}/stream').responses['200']?.content).toHaveProperty('text/event-stream')
    expect(op('get', '/v1/sessions/{id}/ws').responses).toHaveProperty('101')
    // query parameters of the list and read routes
    const query = (m: string, p: string) => (op(m, p).parameters ?? []).filter((x) => x.in === 'query').map((x) => x.name)
    expect(query('get', '/v1/sessions')).toEqual(expect.arrayContaining(['limit', 'cursor']))
    expect(query('get', '/v1/sessions/{id}/events')).toEqual(expect.arrayContaining(['after', 'limit']))
  })

  it('names every operation (unique camelCase operationIds) for generated clients', () => {
    const ids: string[] = []
    for (const [p, ops] of Object.entries(served.paths)) {
      for (const [m, op] of Object.entries(ops)) {
        expect(op.operationId, `${m.toUpperCase()} ${p} has an operationId`).toMatch(/^[a-z][A-Za-z0-9]*$/)
        ids.push(op.operationId!)
      }
    }
    expect(new Set(ids).size, `duplicate operationIds: ${ids.join(', ')}`).toBe(ids.length)
    const id = (m: string, p: string) => served.paths[p][m].operationId
    expect(id('post', '/v1/sessions')).toBe('createSession')
    expect(id('get', '/v1/sessions')).toBe('listSessions')
    expect(id('get', '/v1/sessions/{id}')).toBe('getSession')
    expect(id('post', '/v1/sessions/{id}/followup')).toBe('followup')
    expect(id('post', '/v1/sessions/{id}/steer')).toBe('steer')
    expect(id('post', '/v1/sessions/{id}/inject')).toBe('inject')
    expect(id('get', '/v1/sessions/{id}/stream')).toBe('streamSession')
  })

  it('has named component schemas, referenced by $ref, every $ref resolving', () => {
    const schemas = served.components?.schemas ?? {}
    for (const name of ['SessionObject', 'ToolSpec', 'ErrorBody', 'SessionEvent', 'UserMessage', 'CreateSessionBody']) expect(schemas[name], name).toBeTruthy()
    const refs = refsOf(served)
    for (const r of refs) {
      const m = /^#\/components\/schemas\/(\w+)$/.exec(r)
      expect(m && schemas[m[1]], `${r} resolves`).toBeTruthy()
    }
    const body = (m: string, p: string) => served.paths[p][m].requestBody?.content['application/json'].schema
    const answer = (m: string, p: string, code: string) => served.paths[p][m].responses[code]?.content?.['application/json']?.schema
    expect(body('post', '/v1/sessions')).toEqual({ $ref: '#/components/schemas/CreateSessionBody' })
    expect(answer('get', '/v1/sessions/{id}', '200')).toEqual({ $ref: '#/components/schemas/SessionObject' })
    expect(answer('get', '/v1/sessions/{id}', '404')).toEqual({ $ref: '#/components/schemas/ErrorBody' })
    expect(schemas.CreateSessionBody.properties.tools.items).toEqual({ $ref: '#/components/schemas/ToolSpec' })
    expect(schemas.EventsPage.properties.events.items).toEqual({ $ref: '#/components/schemas/SessionEvent' })
    // API.md §10's codes, all of them, as the error code's enumeration
    const codes = refsOf(schemas.ErrorBody).length ? schemas.ErrorCode.anyOf.map((x: { const: string }) => x.const) : []
    expect(codes.sort()).toEqual(['bad-request', 'forbidden', 'fork-unavailable', 'idempotency-conflict', 'internal', 'model-unavailable', 'not-found', 'payload-too-large', 'queue-item-not-found', 'rate-limited', 'secrets-unavailable', 'session-busy', 'session-conflict', 'session-not-found', 'tool-call-not-pending', 'unauthorized', 'unavailable', 'unsupported-media-type'])
  })
})
