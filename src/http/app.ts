// The fastify app of API.md, composed of plugins: connections, errors, input checks, metrics, the
// operations routes and the /v1 scope (its auth and session loading, then the route groups).

import Fastify, { LogController, type FastifyInstance } from 'fastify'
import websocket from '@fastify/websocket'
import type { HttpDeps } from './deps.js'
import { secondsSince } from '../metrics.js'
import { connectionsPlugin } from './connections.js'
import { errorsPlugin, frameworkErrors, handleClientError } from './errors.js'
import { inputPlugin } from './input.js'
import { Listener } from './listener.js'
import { authPlugin } from './auth.js'
import { sessionLoading } from './session.js'
import { opsRoutes } from './ops.js'
import { adminRoutes } from './admin.js'
import { sessionRoutes } from './sessions.js'
import { agentRoutes } from './agents.js'
import { inboxRoutes } from './inbox.js'
import { eventRoutes } from './events.js'
import { streamRoutes } from './streams.js'
import { toolRoutes } from './tools.js'
import { limitRoutes } from './limits.js'
import { usageRoutes } from './usage.js'
import { secretRoutes } from './secrets.js'
import { webhookRoutes } from './webhooks.js'
import { jwksRoute, tokenRoutes } from './tokens.js'
import { corsPlugin } from './cors.js'
import { collectRoutes, type RouteDoc } from './openapi.js'
import { httpTracing } from '../tracing/index.js'

/** Path parameters this long are refused (400); a session id of the longest allowed, escaped, fits. */
const MAX_PARAM_LENGTH = 1000

export async function buildHttp(deps: HttpDeps): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: deps.log,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: deps.config.bodyLimit,
    // the server, its timeouts and its port are the listener's (bound before the start wrote anything)
    serverFactory: (deps.listener ?? new Listener(deps.config)).serverFactory,
    // in-flight requests finish on close (connectionsPlugin closes their connections after them)
    forceCloseConnections: 'idle',
    return503OnClosing: false,
    clientErrorHandler: handleClientError,
    frameworkErrors,
    // verbose: a schema error carries its schema, so details can say what the field would have to be (errors.ts)
    ajv: { customOptions: { removeAdditional: false, coerceTypes: false, allErrors: true, useDefaults: false, verbose: true } },
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: MAX_PARAM_LENGTH },
  }) as unknown as FastifyInstance
  const routes: RouteDoc[] = []
  collectRoutes(app, routes)
  // API.md §19: the request spans, before every hook and route
  const traced = httpTracing()
  if (traced) await app.register(traced)

  await app.register(connectionsPlugin)
  await app.register(errorsPlugin)
  await app.register(inputPlugin)
  app.addHook('onRequest', async (req) => {
    ;(req as unknown as { started: bigint }).started = process.hrtime.bigint()
  })
  app.addHook('onResponse', async (req, reply) => {
    const started = (req as unknown as { started?: bigint }).started
    deps.metrics.http(req.method, req.routeOptions.url ?? 'unmatched', reply.statusCode, started ? secondsSince(started) : 0)
  })
  await app.register(websocket, { options: { maxPayload: deps.config.bodyLimit } })

  await app.register(corsPlugin, deps)
  await app.register(opsRoutes, { deps, routes })
  // a worker process (AGENTD_ROLE=worker) drives sessions and answers only the operations routes
  if (deps.config.role !== 'worker') {
    await app.register(jwksRoute, deps)
    await app.register(async (v1) => {
      await v1.register(authPlugin, deps)
      await v1.register(sessionLoading, deps)
      await v1.register(adminRoutes, deps)
      await v1.register(sessionRoutes, deps)
      await v1.register(agentRoutes, deps)
      await v1.register(inboxRoutes, deps)
      await v1.register(eventRoutes, deps)
      await v1.register(streamRoutes, deps)
      await v1.register(toolRoutes, deps)
      await v1.register(limitRoutes, deps)
      await v1.register(usageRoutes, deps)
      await v1.register(secretRoutes, deps)
      await v1.register(webhookRoutes, deps)
      await v1.register(tokenRoutes, deps)
      // API.md §17: the client protocols, views of the same sessions (src/protocols)
      if (deps.protocols) await deps.protocols(v1, deps)
    }, { prefix: '/v1' })
  }
  return app
}
