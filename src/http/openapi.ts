// The OpenAPI 3.1 document, generated from the routes fastify registers: their schemas (named ones
// become components.schemas and $refs), operationIds, summaries and route facts (security, tags,
// optional bodies, event streams).

import type { FastifyInstance, RouteOptions } from 'fastify'
import { COMPONENTS } from './schemas.js'

export interface RouteDoc {
  method: string
  /** the route's options as registered; read when the document is made, after every scope set its facts */
  route: RouteOptions
}

/** Records every route as it is added (fastify's onRoute hook). */
export function collectRoutes(app: FastifyInstance, out: RouteDoc[]): void {
  app.addHook('onRoute', (r) => {
    const methods = Array.isArray(r.method) ? r.method : [r.method]
    for (const m of methods) if (m !== 'HEAD') out.push({ method: m.toLowerCase(), route: r })
  })
}

const NAMES = new Map<unknown, string>(Object.entries(COMPONENTS).map(([name, schema]) => [schema, name]))

/** A plain JSON copy of a schema in which every named schema (but `self`) is a $ref. */
function withRefs(schema: unknown, self?: unknown): unknown {
  if (schema !== self && NAMES.has(schema)) return { $ref: `#/components/schemas/${NAMES.get(schema)}` }
  if (Array.isArray(schema)) return schema.map((s) => withRefs(s))
  if (schema === null || typeof schema !== 'object') return schema
  return Object.fromEntries(Object.entries(schema).map(([k, v]) => [k, withRefs(v)]))
}

export function openapiDocument(routes: RouteDoc[], version: string): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {}
  for (const { method, route: r } of routes) {
    if (r.url === '*') continue
    const path = r.url.replace(/:([A-Za-z_]+)/g, '{$1}')
    const s = (r.schema ?? {}) as Record<string, unknown>
    const facts = r.config ?? {}
    const op: Record<string, unknown> = {}
    if (s.operationId) op.operationId = s.operationId
    op.summary = (s.summary as string) ?? `${method.toUpperCase()} ${r.url}`
    const params: unknown[] = [...r.url.matchAll(/:([A-Za-z_]+)/g)].map((m) => ({ name: m[1], in: 'path', required: true, schema: { type: 'string' } }))
    const qs = s.querystring as { properties?: Record<string, unknown> } | undefined
    if (qs?.properties) params.push(...Object.entries(qs.properties).map(([name, schema]) => ({ name, in: 'query', required: false, schema: withRefs(schema) })))
    if (params.length) op.parameters = params
    if (s.body) op.requestBody = { required: !facts.optionalBody, content: { 'application/json': { schema: withRefs(s.body) } } }
    const responses: Record<string, unknown> = {}
    // a 204 has no body at all (RFC 9110 §15.3.5), whatever schema the route gives it
    for (const [code, schema] of Object.entries((s.response as Record<string, unknown>) ?? {})) responses[code] = code === '204' ? { description: 'No content' } : { description: `HTTP ${code}`, content: { 'application/json': { schema: withRefs(schema) } } }
    if (facts.eventStream) responses['200'] = { description: 'text/event-stream of session/event and live frames', content: { 'text/event-stream': { schema: { type: 'string' } } } }
    if (r.wsHandler) responses['101'] = { description: 'WebSocket upgrade; JSON frames {event, id?, data}' }
    if (!Object.keys(responses).length) responses['200'] = { description: 'OK' }
    if (method === 'delete' && !responses['204']) responses['204'] = { description: 'No content' }
    op.responses = responses
    // a tenant route takes the tenant's key, or a token with the scope it needs (API.md §18; OpenAPI
    // 3.1 lets a bearer requirement name roles) unless it is the tenant's own business
    op.security = facts.auth === 'admin' ? [{ adminToken: [] }] : facts.auth === 'tenant' ? (facts.keyOnly ? [{ apiKey: [] }] : [{ apiKey: [] }, { token: [facts.access ?? 'write'] }]) : []
    if (facts.session) op.tags = ['sessions']
    paths[path] = { ...(paths[path] ?? {}), [method]: op }
  }
  const sorted = Object.fromEntries(Object.keys(paths).sort().map((k) => [k, paths[k]]))
  const schemas = Object.fromEntries(Object.entries(COMPONENTS).map(([name, schema]) => [name, withRefs(schema, schema)]))
  return {
    openapi: '3.1.0',
    info: { title: 'agentd', version, description: 'A multi-tenant agent server: durable session logs, live streams over SSE and WebSocket.' },
    components: { schemas, securitySchemes: { apiKey: { type: 'http', scheme: 'bearer' }, token: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' }, adminToken: { type: 'http', scheme: 'bearer' } } },
    paths: sorted,
  }
}
