// A fresh database per test file: PostgreSQL cloned from the migrated template, or PGlite copied from
// the migrated template directory. Both are real Postgres; nothing is mocked.

import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import pg from 'pg'
import { afterAll, beforeAll, inject } from 'vitest'
import { openPg, openPglite, type Db } from '../../src/store/index.js'
import { adminUrl, baseUrl } from './db-urls.js'

export type DbKind = 'pg' | 'pglite'
/** Both databases: the store's contract tests and the few others that depend on the database (docs/testing.md). */
export const DB_KINDS: DbKind[] = ['pg', 'pglite']

/**
 * The one database of the integration and end-to-end tests that are not about the store (docs/testing.md,
 * "Which tests run on which database, and why"): PostgreSQL, the database of every deployment with more
 * than one process, where the app's requests really run concurrently (a pool, the PgBus) and which starts
 * in a fraction of PGlite's time. What such a test needs of the store is held on both databases by the
 * store's tests. `TEST_DB=pglite` runs these tests on PGlite instead, `TEST_DB=both` on both.
 */
export const APP_DB_KINDS: DbKind[] = appDbKinds(process.env.TEST_DB)

export function appDbKinds(v: string | undefined): DbKind[] {
  if (!v || v === 'pg') return ['pg']
  if (v === 'pglite') return ['pglite']
  if (v === 'both') return DB_KINDS
  throw new Error(`TEST_DB is pg, pglite or both, not ${JSON.stringify(v)}`)
}

export interface TestDb {
  db: Db
  kind: DbKind
  /** PostgreSQL URL (pg) or data directory (pglite) of this database */
  url?: string
  dataDir?: string
  drop(): Promise<void>
}

declare module 'vitest' {
  export interface ProvidedContext {
    pgTemplate: string
    pgliteTemplate: string
  }
}

/** A fresh PostgreSQL database cloned from the template; its URL for servers started by the test. */
export async function freshPgDatabase(): Promise<{ url: string; name: string; drop(): Promise<void> }> {
  const tmpl = inject('pgTemplate')
  const name = `${tmpl}_${crypto.randomBytes(4).toString('hex')}`
  const admin = new pg.Client({ connectionString: adminUrl() })
  await admin.connect()
  // CREATE DATABASE … TEMPLATE needs the template to have no other sessions; retry briefly
  for (let i = 0; ; i++) {
    try {
      await admin.query(`CREATE DATABASE ${name} TEMPLATE ${tmpl}`)
      break
    } catch (e) {
      if (i > 50 || !/being accessed by other users/.test((e as Error).message)) throw e
      await new Promise((r) => setTimeout(r, 50 + Math.random() * 100))
    }
  }
  await admin.end()
  return {
    url: baseUrl(name),
    name,
    async drop() {
      const c = new pg.Client({ connectionString: adminUrl() })
      await c.connect()
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
      await c.end()
    },
  }
}

/** A fresh PGlite data directory copied from the template. */
export function freshPgliteDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agentd-test-'))
  fs.cpSync(inject('pgliteTemplate'), dir, { recursive: true })
  return dir
}

export async function openTestDb(kind: DbKind): Promise<TestDb> {
  if (kind === 'pg') {
    const fresh = await freshPgDatabase()
    const db = openPg(fresh.url, 10)
    return {
      db,
      kind,
      url: fresh.url,
      async drop() {
        await db.close()
        await fresh.drop()
      },
    }
  }
  const dir = freshPgliteDir()
  const db = await openPglite(path.join(dir, 'pgdata'))
  return {
    db,
    kind,
    dataDir: dir,
    async drop() {
      await db.close()
      fs.rmSync(dir, { recursive: true, force: true })
    },
  }
}

/**
 * In a describe block: a fresh database with one tenant, opened before its tests and dropped after
 * them. `db` is set once the block's beforeAll ran.
 */
export function tenantDb(kind: DbKind, name: string): { db: Db; tenantId: string } {
  const env = { tenantId: crypto.randomUUID() } as { db: Db; tenantId: string }
  let t: TestDb | undefined
  beforeAll(async () => {
    t = await openTestDb(kind)
    env.db = t.db
    await env.db.query('INSERT INTO tenants (id, name, created_at) VALUES ($1, $2, $3)', [env.tenantId, name, Date.now()])
  })
  afterAll(async () => {
    await t?.drop()
  })
  return env
}

/**
 * The db, counting the statements that pass through it (those inside its transactions too), or only
 * those whose text matches `only`.
 */
export function countingDb(db: Db, only?: RegExp): { db: Db; n: () => number } {
  let n = 0
  const counted = (q: Pick<Db, 'query'>): Db['query'] => <T>(sql: string, params?: unknown[]) => {
    if (!only || only.test(sql)) n++
    return q.query<T>(sql, params)
  }
  // what the store keeps on a Db (its unit committer, its key lookups) is the counter's own: units
  // committed through it are counted, the server's own (through the unwrapped Db) are not
  const own: Record<string | symbol, unknown> = {}
  const wrapped = new Proxy(db, {
    get(target, p) {
      if (p === 'query') return counted(target)
      if (p === 'transaction') return <R>(fn: (tx: Pick<Db, 'query'>) => Promise<R>) => target.transaction((tx) => fn({ query: counted(tx) }))
      if (p === 'units' || p === 'lookups') return own[p]
      const v = Reflect.get(target, p)
      return typeof v === 'function' ? v.bind(target) : v
    },
    set(_target, p, v) {
      if (p !== 'units' && p !== 'lookups') return false
      own[p] = v
      return true
    },
  })
  return { db: wrapped, n: () => n }
}
