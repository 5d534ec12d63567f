// HTTP's door: the fastify app of API.md and what it needs from the rest of the server.
export { buildHttp, type DriverControl, type HttpDeps } from './app.js'
