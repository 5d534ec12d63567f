// HTTP's door: the fastify app of API.md and what it needs from the rest of the server.
export { buildHttp } from './app.js'
export { Listener } from './listener.js'
export type { DriverControl, HttpDeps } from './deps.js'
export { VERSION } from './ops.js'

// What the client protocols (src/protocols, API.md §17) build their routes from: they are route
// plugins over the same feed, auth and errors as the native API, registered by the server (src/app.ts)
// through HttpDeps.protocols, so http/ never imports them.
export { batch, parseAfter, PING_MS, subscribe, type Subscription, type Transport } from './feed.js'
export { reaches, sessionFilter, tokenRefusal } from './auth.js'
export { toApiError } from './errors.js'
export { deliverInput, type InputDelivery } from './deliver.js'
export { confirmKey, sessionNamed } from './session.js'
export { changeSession } from './sessions.js'
export { OpenBody } from './schemas.js'
export * as schemas from './schemas.js'
