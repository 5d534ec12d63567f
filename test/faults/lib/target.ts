// The server under attack: the real app, in this process, listening on a real port, on a fresh
// database of its own (a PGlite directory or a new PostgreSQL database, dropped afterwards), with an
// admin token, a scripted model that can call tools, and a local tool server its http tools may reach.

import crypto from 'node:crypto'
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import pg from 'pg'
import pino from 'pino'
import { loadConfig } from '../../../src/config.js'
import { startApp, type App } from '../../../src/app.js'
import { openDb, type Db } from '../../../src/store/index.js'
import { baseUrl } from '../../helpers/db-urls.js'
import { faultsAdminUrl } from './pg-admin.js'
import { wireRequest } from './wire.js'
import { ScriptedModels } from '../../helpers/scripted.js'
import type { DbKind } from './part.js'
import { LeakWatch } from './leaks.js'
import { startOtlpReceiver } from '../../helpers/otlp-receiver.js'
import { tracingRuntime } from '../../../src/tracing/index.js'

export interface Target {
  app: App
  url: string
  adminToken: string
  db: Db
  models: ScriptedModels
  tools: ToolServer
  /** what the secrets check looks for and what the server printed (its pino stream, at trace level) */
  leaks: LeakWatch
  /** the secrets check over what it printed, its database and its data directory: one line per leak */
  leakCheck(): Promise<string[]>
  close(): Promise<void>
}

export interface ToolServer {
  url: string
  /** calls received */
  calls: number
  close(): Promise<void>
}

/** A tool server for http tools (API.md §4): answers every call with a short text. */
export async function startToolServer(): Promise<ToolServer> {
  const ts: ToolServer = { url: '', calls: 0, close: async () => {} }
  const server = http.createServer((req, res) => {
    let body = ''
    req.setEncoding('utf8')
    req.on('data', (c: string) => (body += c))
    req.on('end', () => {
      ts.calls++
      let name = '?'
      try {
        name = String(JSON.parse(body).name)
      } catch {
        // not JSON: still answered
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ content: `tool ${name} ran` }))
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()))
  ts.url = `http://127.0.0.1:${(server.address() as { port: number }).port}/tool`
  ts.close = () => new Promise<void>((r) => server.close(() => r()))
  return ts
}

/** A fresh database: a PGlite directory, or a new PostgreSQL database on the configured server. */
async function freshDatabase(kind: DbKind, server?: string): Promise<{ env: Record<string, string>; dataDir: string; db: Db; drop(): Promise<void> }> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'agentd-faults-'))
  if (kind === 'pglite') {
    const db = await openDb({ dataDir })
    return { env: { AGENTD_DATA_DIR: dataDir }, dataDir, db, drop: async () => fs.rmSync(dataDir, { recursive: true, force: true }) }
  }
  const name = `agentd_faults_${process.pid}_${crypto.randomBytes(4).toString('hex')}`
  const adminUrl = server ?? (await faultsAdminUrl())
  const admin = async (sql: string) => {
    const c = new pg.Client({ connectionString: adminUrl })
    await c.connect()
    try {
      await c.query(sql)
    } finally {
      await c.end()
    }
  }
  await admin(`CREATE DATABASE ${name}`)
  const url = server ? Object.assign(new URL(server), { pathname: `/${name}` }).toString() : baseUrl(name)
  const db = await openDb({ databaseUrl: url, dataDir })
  return {
    env: { DATABASE_URL: url, AGENTD_DATA_DIR: dataDir },
    dataDir,
    db,
    drop: async () => {
      await admin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
      fs.rmSync(dataDir, { recursive: true, force: true })
    },
  }
}

/** A fresh, empty PostgreSQL database on the configured server (the servers started on it migrate it). */
export async function freshPgServerDatabase(): Promise<{ url: string; drop(): Promise<void> }> {
  const f = await freshDatabase('pg')
  await f.db.close()
  return { url: f.env.DATABASE_URL, drop: f.drop }
}

/** The server under attack; `pgServer` is a PostgreSQL server URL to make its database on (default: the configured one). */
export async function startTarget(kind: DbKind, env: Record<string, string> = {}, o: { pgServer?: string; traces?: boolean } = {}): Promise<Target> {
  const fresh = await freshDatabase(kind, o.pgServer)
  const tools = await startToolServer()
  const models = new ScriptedModels()
  const adminToken = `faults-${crypto.randomBytes(8).toString('hex')}`
  const leaks = new LeakWatch()
  leaks.add('admin token', adminToken)
  // PostgreSQL needs a key for the secret routes; the embedded database generates one into its data directory
  const secretKey = kind === 'pg' ? crypto.randomBytes(32).toString('base64') : undefined
  leaks.add('secret key', secretKey)
  // provider keys to leak: a literal in the models file and one read from the environment
  const literalKey = `faults-provider-literal-${crypto.randomBytes(12).toString('hex')}`
  const envKey = `faults-provider-env-${crypto.randomBytes(12).toString('hex')}`
  leaks.add('provider key', literalKey)
  leaks.add('provider key', envKey)
  // API.md §19: with `traces`, the server exports its spans (contents captured: the most it may say) to a
  // receiver whose every body the check searches like a log
  const otlp = o.traces ? await startOtlpReceiver({ onRaw: (text) => leaks.print('the exported spans', `${text}\n`) }) : undefined
  const tracing = otlp ? { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: '50', OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'true' } : {}
  const providerModels = [{ id: 'm', contextWindow: 8192, maxTokens: 1024 }]
  const config = loadConfig({
    PORT: '0',
    HOST: '127.0.0.1',
    AGENTD_ADMIN_TOKEN: adminToken,
    AGENTD_TOOL_HOSTS: '127.0.0.1,localhost',
    AGENTD_RATE_LIMIT_PER_MIN: '1000000',
    ...(secretKey ? { AGENTD_SECRET_KEY: secretKey } : {}),
    ...tracing,
    ...fresh.env,
    ...env,
  })
  // everything the server logs, at its most talkative level, is kept for the check (FAULTS_LOG_LEVEL also prints it)
  const shown = process.env.FAULTS_LOG_LEVEL
  const log = pino({ level: 'trace' }, leaks.stream('the server', shown && shown !== 'silent' ? process.stdout : undefined))
  const app = await startApp(config, {
    db: fresh.db,
    log,
    llm: {
      extraProviders: [models.provider],
      defaultModel: models.ref(),
      env: { ...process.env, FAULTS_PROVIDER_KEY: envKey },
      models: {
        providers: {
          leaklit: { api: 'openai-completions', baseUrl: 'http://127.0.0.1:9/v1', apiKey: literalKey, models: providerModels },
          leakenv: { api: 'openai-completions', baseUrl: 'http://127.0.0.1:9/v1', apiKey: 'env:FAULTS_PROVIDER_KEY', models: providerModels },
        },
      },
    },
  })
  const keyFile = path.join(fresh.dataDir, 'secret-key')
  return {
    app,
    url: app.url!,
    adminToken,
    db: fresh.db,
    models,
    tools,
    leaks,
    async leakCheck() {
      await tracingRuntime()?.flush()
      // the generated key is a secret everywhere but in its own file
      if (fs.existsSync(keyFile)) {
        const k = fs.readFileSync(keyFile, 'utf8').trim()
        leaks.add('secret key', k)
        leaks.keyFile(keyFile, k)
      }
      return leaks.check({ db: fresh.db, dataDirs: [fresh.dataDir] })
    },
    async close() {
      leaks.stop()
      await app.close()
      leaks.discard()
      models.close()
      await tools.close()
      await otlp?.close()
      await fresh.db.close()
      await fresh.drop()
    },
  }
}

/**
 * Puts a tenant secret with a long random value (API.md §13) and tells the secrets check to look for
 * it; the status of the answer (204, or 409 secrets-unavailable when the server has no key).
 */
export async function putSecret(target: Pick<Target, 'url' | 'leaks'>, apiKey: string, name: string): Promise<number> {
  const value = `faults-secret-${crypto.randomBytes(16).toString('hex')}`
  target.leaks.add('secret value', value)
  const r = await wireRequest(target.url, { method: 'PUT', path: `/v1/secrets/${name}`, headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' }, body: JSON.stringify({ value }) })
  return r.status
}
