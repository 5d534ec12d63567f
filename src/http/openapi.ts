// The OpenAPI 3.1 document, generated from the route schemas fastify registers.

import type { FastifyInstance } from 'fastify'

export interface RouteDoc {
  method: string
  url: string
  schema?: Record<string, unknown>
}

/** Records every route as it is added (fastify's onRoute hook). */
export function collectRoutes(app: FastifyInstance, out: RouteDoc[]): void {
  app.addHook('onRoute', (r) => {
    const methods = Array.isArray(r.method) ? r.method : [r.method]
    for (const m of methods) if (m !== 'HEAD') out.push({ method: m.toLowerCase(), url: r.url, schema: r.schema as Record<string, unknown> | undefined })
  })
}

const SESSION_ROUTE = /^\/v1\/sessions\/:id/

export function openapiDocument(routes: RouteDoc[], version: string): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {}
  for (const r of routes) {
    if (r.url === '*') continue
    const path = r.url.replace(/:([A-Za-z_]+)/g, '{$1}')
    const params = [...r.url.matchAll(/:([A-Za-z_]+)/g)].map((m) => ({ name: m[1], in: 'path', required: true, schema: { type: 'string' } }))
    const s = r.schema ?? {}
    const op: Record<string, unknown> = { summary: (s.summary as string) ?? `${r.method.toUpperCase()} ${r.url}` }
    if (params.length) op.parameters = params
    const qs = s.querystring as { properties?: Record<string, unknown> } | undefined
    if (qs?.properties) {
      op.parameters = [...((op.parameters as unknown[]) ?? []), ...Object.entries(qs.properties).map(([name, schema]) => ({ name, in: 'query', required: false, schema }))]
    }
    if (s.body) op.requestBody = { required: !['cancel', 'fork', 'compact'].some((x) => r.url.endsWith(x)), content: { 'application/json': { schema: s.body } } }
    const responses: Record<string, unknown> = {}
    for (const [code, schema] of Object.entries((s.response as Record<string, unknown>) ?? {})) responses[code] = { description: `HTTP ${code}`, content: { 'application/json': { schema } } }
    if (r.url.endsWith('/stream')) responses['200'] = { description: 'text/event-stream of session/event and live frames', content: { 'text/event-stream': { schema: { type: 'string' } } } }
    if (r.url.endsWith('/ws')) responses['101'] = { description: 'WebSocket upgrade; JSON frames {event, id?, data}' }
    if (!Object.keys(responses).length) responses['200'] = { description: 'OK' }
    if (r.method === 'delete' && !responses['204']) responses['204'] = { description: 'No content' }
    op.responses = responses
    const publicRoute = !r.url.startsWith('/v1/')
    op.security = publicRoute ? [] : r.url.startsWith('/v1/admin') ? [{ adminToken: [] }] : [{ apiKey: [] }]
    if (SESSION_ROUTE.test(r.url)) op.tags = ['sessions']
    paths[path] = { ...(paths[path] ?? {}), [r.method]: op }
  }
  const sorted = Object.fromEntries(Object.keys(paths).sort().map((k) => [k, paths[k]]))
  return {
    openapi: '3.1.0',
    info: { title: 'agentd', version, description: 'A multi-tenant agent server: durable session logs, live streams over SSE and WebSocket.' },
    components: { securitySchemes: { apiKey: { type: 'http', scheme: 'bearer' }, adminToken: { type: 'http', scheme: 'bearer' } } },
    paths: sorted,
  }
}
