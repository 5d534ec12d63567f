// Operations (API.md §8): health, readiness, metrics, this API's OpenAPI document and the web console
// with the browser build of the SDK it runs on. None of them needs a key.

import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import type { FastifyInstance, FastifyReply } from 'fastify'
import { ApiError } from '../errors.js'
import type { HttpDeps } from './deps.js'
import { openapiDocument, type RouteDoc } from './openapi.js'
import * as S from './schemas.js'

const HERE = path.dirname(fileURLToPath(import.meta.url))
export const WEB_DIR = path.resolve(HERE, '../../web')
/** The SDK's library build (`tsc -p clients/typescript`): the console imports it as ES modules. */
export const SDK_DIR = path.resolve(HERE, '../../clients/typescript/dist')
export const VERSION = (() => {
  try {
    return JSON.parse(fs.readFileSync(path.resolve(HERE, '../../package.json'), 'utf8')).version as string
  } catch {
    return '0.0.0'
  }
})()

const STATIC_TYPES: Record<string, string> = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8', '.svg': 'image/svg+xml' }

/** false for anything but a readable regular file, a name no file can have (a NUL in it) included */
function isFile(full: string): boolean {
  try {
    return fs.statSync(full).isFile()
  } catch {
    return false
  }
}

export interface OpsOptions {
  deps: HttpDeps
  /** every route of the app, for openapi.json */
  routes: RouteDoc[]
}

export async function opsRoutes(app: FastifyInstance, { deps, routes }: OpsOptions): Promise<void> {
  app.get('/healthz', { schema: { operationId: 'health', summary: 'Liveness', response: { 200: S.Ready } } }, async () => ({ ok: true }))
  app.get('/readyz', { schema: { operationId: 'ready', summary: 'Readiness: the database answers and migrations are current', response: { 200: S.Ready, 503: S.ErrorBody } } }, async (_req, reply) => {
    let ok = false
    try {
      ok = await deps.ready()
    } catch {
      ok = false
    }
    if (ok) return reply.send({ ok: true })
    throw new ApiError('unavailable', 'not ready: the database does not answer or its migrations are not current', undefined, { 'retry-after': '2' })
  })
  app.get('/metrics', { schema: { operationId: 'metrics', summary: 'Prometheus metrics' } }, async (_req, reply) => reply.type(deps.metrics.contentType).send(await deps.metrics.render()))
  let doc: string | undefined
  app.get('/openapi.json', { schema: { operationId: 'openapi', summary: 'This document' } }, async (_req, reply) => {
    doc ??= JSON.stringify(openapiDocument(routes, VERSION))
    return reply.type('application/json').send(doc)
  })
  // the web console: static files of web/, and the SDK's library modules (the files at the top of its
  // build; the terminal client's cli/ and the type declarations are not the console's)
  const serve = async (dir: string, file: string, reply: FastifyReply, only = (_full: string) => true) => {
    const full = path.resolve(dir, file)
    if (!full.startsWith(dir + path.sep) || !only(full) || !isFile(full)) throw new ApiError('not-found', `no file ${file}`)
    return reply.type(STATIC_TYPES[path.extname(full)] ?? 'application/octet-stream').header('cache-control', 'no-cache').send(fs.readFileSync(full))
  }
  const sdkModule = (full: string) => path.dirname(full) === SDK_DIR && full.endsWith('.js')
  if (!fs.existsSync(path.join(SDK_DIR, 'index.js'))) deps.log.warn(`the web console needs the SDK's browser build in ${SDK_DIR}: run npm run build:client`)
  app.get('/', { schema: { operationId: 'console', summary: 'The web console' } }, async (_req, reply) => serve(WEB_DIR, 'index.html', reply))
  app.get('/console/:file', { schema: { operationId: 'consoleAsset', summary: 'Console assets' } }, async (req, reply) => serve(WEB_DIR, (req.params as { file: string }).file, reply))
  app.get('/console/sdk/:file', { schema: { operationId: 'consoleSdkModule', summary: "The SDK's browser build, for the console" } }, async (req, reply) => serve(SDK_DIR, (req.params as { file: string }).file, reply, sdkModule))
}
