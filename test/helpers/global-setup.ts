// Runs once before the whole suite: builds a migrated PostgreSQL template database and a migrated
// PGlite data directory, so each test file gets a fresh database of its own in well under a second.

import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import pg from 'pg'
import { migrate, openPglite } from '../../src/store/index.js'
import { adminUrl, baseUrl, TEMPLATE_DB } from './db-urls.js'

export default async function setup({ provide }: { provide: (k: string, v: unknown) => void }) {
  // PostgreSQL: a template database, migrated once
  const admin = new pg.Client({ connectionString: adminUrl() })
  await admin.connect()
  const tmpl = `${TEMPLATE_DB}_${process.pid}`
  await admin.query(`DROP DATABASE IF EXISTS ${tmpl}`)
  await admin.query(`CREATE DATABASE ${tmpl}`)
  await admin.end()
  const { openPg } = await import('../../src/store/index.js')
  const db = openPg(baseUrl(tmpl), 2)
  await migrate(db)
  await db.close()

  // PGlite: a migrated data directory to copy
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agentd-pglite-tmpl-'))
  const lite = await openPglite(path.join(dir, 'pgdata'))
  await migrate(lite)
  await lite.close()

  provide('pgTemplate', tmpl)
  provide('pgliteTemplate', dir)
  return async () => {
    fs.rmSync(dir, { recursive: true, force: true })
    const c = new pg.Client({ connectionString: adminUrl() })
    await c.connect()
    // leftover per-file databases of this run, then the template
    const { rows } = await c.query(`SELECT datname FROM pg_database WHERE datname LIKE $1`, [`${TEMPLATE_DB}_${process.pid}%`])
    for (const r of rows) await c.query(`DROP DATABASE IF EXISTS ${r.datname} WITH (FORCE)`).catch(() => {})
    await c.end()
  }
}
