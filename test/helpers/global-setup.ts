// Runs once before the whole suite: builds a migrated PostgreSQL template database and a migrated
// PGlite data directory, so each test file gets a fresh database of its own in well under a second.
// The PostgreSQL server is DATABASE_URL's (or the local default); when it cannot be used, the suite
// stops with one line saying what is missing instead of every test failing at setup.

import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import pg from 'pg'
import { migrate, openPg, openPglite } from '../../src/store/index.js'
import { adminCandidates, baseUrl, configuredUrl, shownUrl, TEMPLATE_DB } from './db-urls.js'
import { buildServer } from './server-build.js'
import { sdkBuildPaths } from './sdk-build.js'

type Provide = (k: 'pgTemplate' | 'pgliteTemplate' | 'pgAdminUrl' | 'sdkBuildDir', v: string) => void

/** What keeps the suite from using the server, said in one line. */
export class SetupProblem extends Error {}
const stop = (problem: string): never => {
  throw new SetupProblem(problem)
}

const pgCode = (e: unknown) => (e as { code?: string })?.code

/** Connects to the first candidate database that exists; explains in one line what is wrong otherwise. */
export async function connectAdmin(candidates: string[] = adminCandidates()): Promise<{ client: pg.Client; url: string }> {
  for (const url of candidates) {
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10000 })
    try {
      await client.connect()
      return { client, url }
    } catch (e) {
      await client.end().catch(() => {})
      // 3D000: the database does not exist; the server is there, so try its other databases
      if (pgCode(e) === '3D000') continue
      const where = shownUrl(url)
      if (pgCode(e) === '28P01' || pgCode(e) === '28000') stop(`PostgreSQL at ${where} refused the login (${(e as Error).message}); set DATABASE_URL to a user it accepts`)
      stop(`cannot reach PostgreSQL at ${where} (${(e as Error).message || pgCode(e) || String(e)}); start a PostgreSQL server there or set DATABASE_URL to one`)
    }
  }
  return stop(`none of the databases ${candidates.map((u) => new URL(u).pathname.slice(1)).join(', ')} exists on the PostgreSQL server of ${shownUrl(candidates[0] ?? configuredUrl())}; set DATABASE_URL to a database that does`)
}

/** CREATE DATABASE, with the privilege problem said in one line. */
export async function createDatabase(client: pg.Client, name: string, user: string): Promise<void> {
  try {
    await client.query(`CREATE DATABASE ${name}`)
  } catch (e) {
    // 42501: insufficient privilege
    if (pgCode(e) === '42501') stop(`PostgreSQL user "${user}" may not create databases; grant it with \`ALTER ROLE "${user}" CREATEDB\` or set DATABASE_URL to a user that has CREATEDB`)
    throw e
  }
}

/** The user a URL logs in as (libpq's default is the OS user). */
const userOf = (url: string) => decodeURIComponent(new URL(url).username) || os.userInfo().username

export default async function setup({ provide }: { provide: Provide }) {
  // the server end-to-end tests spawn, transpiled once (server-build.ts)
  await buildServer()
  // PostgreSQL: a template database, migrated once
  const tmpl = `${TEMPLATE_DB}_${process.pid}`
  let adminUrl: string
  try {
    const admin = await connectAdmin()
    adminUrl = admin.url
    await admin.client.query(`DROP DATABASE IF EXISTS ${tmpl}`)
    await createDatabase(admin.client, tmpl, userOf(adminUrl)).finally(() => admin.client.end())
  } catch (e) {
    if (!(e instanceof SetupProblem)) throw e
    // one line on stderr and out: a thrown error would print as a wall of text, then every test would fail
    process.stderr.write(`\nnpm test: ${e.message} (README.md, "Tests", lists what the suite needs)\n\n`)
    process.exit(1)
  }
  const db = openPg(baseUrl(tmpl), 2)
  await migrate(db)
  await db.close()

  // PGlite: a migrated data directory to copy
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agentd-pglite-tmpl-'))
  const lite = await openPglite(path.join(dir, 'pgdata'))
  await migrate(lite)
  await lite.close()

  // the client library's build, made by the first test file that needs it (sdk-build.ts)
  const sdk = sdkBuildPaths(path.join(os.tmpdir(), `agentd-sdk-build-${process.pid}-${Date.now()}`))

  provide('pgAdminUrl', adminUrl)
  provide('pgTemplate', tmpl)
  provide('pgliteTemplate', dir)
  provide('sdkBuildDir', sdk.dir)
  return async () => {
    fs.rmSync(dir, { recursive: true, force: true })
    for (const p of Object.values(sdk)) fs.rmSync(p, { recursive: true, force: true })
    const c = new pg.Client({ connectionString: adminUrl })
    await c.connect()
    // leftover per-file databases of this run, then the template
    const { rows } = await c.query(`SELECT datname FROM pg_database WHERE datname LIKE $1`, [`${TEMPLATE_DB}_${process.pid}%`])
    for (const r of rows) await c.query(`DROP DATABASE IF EXISTS ${r.datname} WITH (FORCE)`).catch(() => {})
    await c.end()
  }
}
