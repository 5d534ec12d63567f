// HTTP's door: the fastify app of API.md and what it needs from the rest of the server.
export { buildHttp } from './app.js'
export { Listener } from './listener.js'
export type { DriverControl, HttpDeps } from './deps.js'
export { VERSION } from './ops.js'
