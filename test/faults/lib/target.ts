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
import { ScriptedModels } from '../../helpers/scripted.js'
import type { DbKind } from './part.js'

export interface Target {
  app: App
  url: string
  adminToken: string
  db: Db
  models: ScriptedModels
  tools: ToolServer
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
async function freshDatabase(kind: DbKind, server?: string): Promise<{ env: Record<string, string>; db: Db; drop(): Promise<void> }> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'agentd-faults-'))
  if (kind === 'pglite') {
    const db = await openDb({ dataDir })
    return { env: { AGENTD_DATA_DIR: dataDir }, db, drop: async () => fs.rmSync(dataDir, { recursive: true, force: true }) }
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
export async function startTarget(kind: DbKind, env: Record<string, string> = {}, o: { pgServer?: string } = {}): Promise<Target> {
  const fresh = await freshDatabase(kind, o.pgServer)
  const tools = await startToolServer()
  const models = new ScriptedModels()
  const adminToken = `faults-${crypto.randomBytes(8).toString('hex')}`
  const config = loadConfig({
    PORT: '0',
    HOST: '127.0.0.1',
    AGENTD_ADMIN_TOKEN: adminToken,
    AGENTD_TOOL_HOSTS: '127.0.0.1,localhost',
    AGENTD_RATE_LIMIT_PER_MIN: '1000000',
    LOG_LEVEL: process.env.FAULTS_LOG_LEVEL ?? 'silent',
    ...fresh.env,
    ...env,
  })
  const app = await startApp(config, {
    db: fresh.db,
    log: pino({ level: config.logLevel }),
    llm: { extraModels: models.models, defaultModel: models.ref(), models: { providers: {} } },
  })
  return {
    app,
    url: app.url!,
    adminToken,
    db: fresh.db,
    models,
    tools,
    async close() {
      await app.close()
      models.close()
      await tools.close()
      await fresh.db.close()
      await fresh.drop()
    },
  }
}
