// Browsers on other origins (API.md §18): AGENTD_CORS_ORIGINS lists the origins whose preflights are
// answered and whose requests get Access-Control-Allow-Origin; @fastify/cors speaks the protocol. A
// tenant narrows the list further in the auth hook (auth.ts: 403 forbidden). No answer ever allows
// credentials (cookies): the credential is the bearer token the page sends itself.

import cors from '@fastify/cors'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { HttpDeps } from './deps.js'

export const corsPlugin = fp(async (app: FastifyInstance, deps: HttpDeps) => {
  const allowed = new Set(deps.config.corsOrigins)
  // without origins nothing changes: no preflight is answered (OPTIONS is 404 as any unknown route)
  if (!allowed.size) return
  await app.register(cors, {
    // a refused origin gets no CORS headers, and its preflight the 404 of an unknown route
    origin: (origin, cb) => cb(null, origin !== undefined && allowed.has(origin)),
    methods: ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'],
    // allowedHeaders left out: the headers a preflight asks for are allowed (protocol clients send
    // their own); what guards the API is the bearer credential, which a page has only when given one
    exposedHeaders: ['retry-after'],
    credentials: false,
    maxAge: 600,
    // an OPTIONS without Access-Control-Request-Method is answered as a preflight, not with the plugin's
    // own plain-text 400 (every error here has API.md §10's shape)
    strictPreflight: false,
  })
}, { name: 'agentd-cors' })
