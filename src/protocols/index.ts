// The client protocols (API.md §17): views of the sessions, one module per protocol, on a shared core —
// spans (span.ts), the item model their ops speak (items.ts) and the live source (source.ts).
export * from './items.js'
export * from './span.js'
export * from './source.js'

import type { FastifyInstance } from 'fastify'
import type { HttpDeps } from '../http/index.js'
import { responsesRoutes } from './responses-routes.js'
import { uiRoutes } from './ui-routes.js'
import { agUiRoutes } from './ag-ui-routes.js'
import { a2aRoutes } from './a2a-routes.js'
import { a2aPush } from './a2a-push.js'
import { mcpRoutes } from './mcp-routes.js'

/** Registers every client protocol's routes under the /v1 scope `v1` (HttpDeps.protocols). */
export async function protocolRoutes(v1: FastifyInstance, deps: HttpDeps): Promise<void> {
  // API.md §17.1
  await v1.register(responsesRoutes, deps)
  // API.md §17.2, §17.3
  await v1.register(uiRoutes, deps)
  await v1.register(agUiRoutes, deps)
  // API.md §17.4
  await v1.register(a2aRoutes, { ...deps, push: a2aPush(deps.db, deps.webhooks) })
  // API.md §17.5
  await v1.register(mcpRoutes, deps)
}
