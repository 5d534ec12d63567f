// API.md §19: the HTTP server spans, by @fastify/otel — one SERVER span per request, a child of the
// request's own `traceparent` when it has one, active while the route runs (so an input it queues is
// stamped with it). Named `METHOD /route`; `url.path` without the query, which may hold
// `?access_token=` (API.md §18). Lifecycle hooks and handlers get no spans of their own.

import type { FastifyInstance, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { FastifyOtelInstrumentation } from '@fastify/otel'
import type { Span } from '@opentelemetry/api'
import { ATTR_HTTP_RESPONSE_STATUS_CODE, ATTR_HTTP_ROUTE, ATTR_URL_PATH } from '@opentelemetry/semantic-conventions'
import { tracingRuntime } from './setup.js'

const spanOf = (req: FastifyRequest): Span | null | undefined => (req as unknown as { opentelemetry?: () => { span?: Span | null } }).opentelemetry?.().span

/** The fastify plugin to register first, before any route; undefined with tracing off. */
export function httpTracing(): ((app: FastifyInstance) => Promise<void>) | undefined {
  if (!tracingRuntime()) return undefined
  const instrumentation = new FastifyOtelInstrumentation({
    instrumentHooks: false,
    instrumentHandler: false,
    requestHook: (span, request) => {
      const q = request.url.indexOf('?')
      span.setAttribute(ATTR_URL_PATH, q >= 0 ? request.url.slice(0, q) : request.url)
      const route = request.routeOptions.url
      span.updateName(route ? `${request.method} ${route}` : request.method)
      if (route) span.setAttribute(ATTR_HTTP_ROUTE, route)
    },
  })
  return fp(async (app: FastifyInstance) => {
    await app.register(instrumentation.plugin())
    // a stream (SSE, a WebSocket's upgrade) answers outside fastify's reply, whose onSend would end
    // the span: it ends when the response does
    app.addHook('onRequest', (req, reply, done) => {
      reply.raw.once('close', () => {
        const span = spanOf(req)
        if (!span?.isRecording()) return
        span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, reply.raw.statusCode)
        span.end()
      })
      done()
    })
  })
}
