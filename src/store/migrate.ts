// Migration runner: applies migrations/NNNN_name.sql in order under an advisory lock, so several
// processes starting together migrate an empty database once; refuses a database newer than the code.

import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { statement, type Db } from './db.js'

export const MIGRATIONS_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../migrations')
const LOCK_KEY = 0x61676e74 // "agnt"

export interface Migration {
  version: number
  name: string
  sql: string
}

export class SchemaTooNewError extends Error {
  constructor(readonly dbVersion: number, readonly codeVersion: number) {
    super(`the database schema is at version ${dbVersion}, newer than this agentd (${codeVersion}); upgrade agentd before starting it on this database`)
    this.name = 'SchemaTooNewError'
  }
}

export function loadMigrations(dir = MIGRATIONS_DIR): Migration[] {
  const files = fs.readdirSync(dir).filter((f) => /^\d{4}_[\w-]+\.sql$/.test(f)).sort()
  return files.map((f) => ({ version: Number(f.slice(0, 4)), name: f.replace(/\.sql$/, ''), sql: fs.readFileSync(path.join(dir, f), 'utf8') }))
}

export const latestVersion = (migrations = loadMigrations()) => migrations.reduce((m, x) => Math.max(m, x.version), 0)

/** Applies what is missing; returns the versions applied by this call. */
export async function migrate(db: Db, migrations = loadMigrations()): Promise<number[]> {
  const codeVersion = latestVersion(migrations)
  return db.withConnection(async (conn) => {
    await conn.query('SELECT pg_advisory_lock($1)', [LOCK_KEY])
    try {
      await conn.exec('CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at bigint NOT NULL)')
      const { rows } = await conn.query<{ version: number }>('SELECT version FROM schema_migrations ORDER BY version')
      const applied = new Set(rows.map((r) => r.version))
      const dbVersion = rows.reduce((m, r) => Math.max(m, r.version), 0)
      if (dbVersion > codeVersion) throw new SchemaTooNewError(dbVersion, codeVersion)
      const done: number[] = []
      for (const m of migrations) {
        if (applied.has(m.version)) continue
        await conn.exec('BEGIN')
        try {
          await conn.exec(m.sql)
          await conn.query('INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)', [m.version, m.name, Date.now()])
          await conn.exec('COMMIT')
        } catch (e) {
          await conn.exec('ROLLBACK')
          throw new Error(`migration ${m.name} failed: ${(e as Error).message}`)
        }
        done.push(m.version)
      }
      return done
    } finally {
      await conn.query('SELECT pg_advisory_unlock($1)', [LOCK_KEY])
    }
  })
}

// every readiness probe asks it; [] for parameters, or it would not be prepared (db.ts StatementNames)
const SCHEMA_VERSION = statement('schema_version', 'SELECT max(version) AS v FROM schema_migrations')

/** Whether the database answers and its schema is the code's (GET /readyz). */
export async function schemaCurrent(db: Db, codeVersion = latestVersion()): Promise<boolean> {
  const { rows } = await db.query<{ v: number | null }>(SCHEMA_VERSION, [])
  return (rows[0]?.v ?? 0) === codeVersion
}
