// The suite's own setup (test/helpers/global-setup.ts) on a real PostgreSQL server: it works from a
// DATABASE_URL whose database does not exist, and when the server cannot be used it stops with one
// line naming what is missing (README.md, "Tests"). PostgreSQL only: PGlite needs no server.

import { spawn } from 'node:child_process'
import crypto from 'node:crypto'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import pg from 'pg'
import { afterAll, describe, expect, it } from 'vitest'
import { adminUrl, baseUrl } from '../helpers/db-urls.js'
import { connectAdmin, createDatabase, SetupProblem } from '../helpers/global-setup.js'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const missingDb = () => `agentd_no_such_db_${crypto.randomBytes(4).toString('hex')}`

/** The problem connectAdmin/createDatabase reports, which must be one line. */
async function problemOf(p: Promise<unknown>): Promise<string> {
  const e = await p.then(
    () => undefined,
    (x: unknown) => x,
  )
  expect(e).toBeInstanceOf(SetupProblem)
  const message = (e as Error).message
  expect(message).not.toMatch(/\n/)
  return message
}

/**
 * The suite's global setup and teardown, as `npm test` runs them before and after every file, in a child
 * process with another DATABASE_URL (test/helpers/setup-alone.ts): a nested vitest run would start the
 * whole runner again, inside the suite's own, for the same code.
 */
function setupAlone(databaseUrl: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const env: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: databaseUrl, NO_COLOR: '1' }
  for (const k of Object.keys(env)) if (k.startsWith('VITEST')) delete env[k]
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', path.join(ROOT, 'test/helpers/setup-alone.ts')], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (c) => (stdout += c))
    child.stderr.on('data', (c) => (stderr += c))
    child.on('error', reject)
    child.on('close', (code) => resolve({ code, stdout, stderr }))
  })
}

describe('test setup on PostgreSQL', () => {
  const roles: string[] = []
  afterAll(async () => {
    const c = new pg.Client({ connectionString: adminUrl() })
    await c.connect()
    for (const r of roles) await c.query(`DROP ROLE IF EXISTS ${r}`).catch(() => {})
    await c.end()
  })

  it('connects through the server\'s own database when the configured one does not exist', async () => {
    const { client, url } = await connectAdmin([baseUrl(missingDb()), baseUrl('postgres')])
    try {
      expect(new URL(url).pathname).toBe('/postgres')
      const { rows } = await client.query('SELECT current_database() AS db')
      expect(rows[0].db).toBe('postgres')
    } finally {
      await client.end()
    }
  })

  it('says in one line when no candidate database exists', async () => {
    const a = missingDb()
    const b = missingDb()
    const message = await problemOf(connectAdmin([baseUrl(a), baseUrl(b)]))
    expect(message).toContain(`none of the databases ${a}, ${b} exists`)
    expect(message).toContain('DATABASE_URL')
  })

  it('says in one line when no server answers, hiding the password', async () => {
    const message = await problemOf(connectAdmin(['postgres://someone:s3cret@127.0.0.1:1/x']))
    expect(message).toMatch(/^cannot reach PostgreSQL at postgres:\/\/someone:\*\*\*@127\.0\.0\.1:1\/x \(.+\); start a PostgreSQL server there or set DATABASE_URL to one$/)
    expect(message).not.toContain('s3cret')
  })

  it('says in one line when the user may not create databases', async () => {
    const role = `agentd_nocreatedb_${crypto.randomBytes(4).toString('hex')}`
    const c = new pg.Client({ connectionString: adminUrl() })
    await c.connect()
    await c.query(`CREATE ROLE ${role} LOGIN NOCREATEDB`)
    await c.end()
    roles.push(role)
    const u = new URL(adminUrl())
    u.username = role
    u.password = ''
    const { client } = await connectAdmin([u.toString()])
    try {
      const message = await problemOf(createDatabase(client, missingDb(), role))
      expect(message).toBe(`PostgreSQL user "${role}" may not create databases; grant it with \`ALTER ROLE "${role}" CREATEDB\` or set DATABASE_URL to a user that has CREATEDB`)
    } finally {
      await client.end()
    }
  })

  it('sets a run up and tears it down from a DATABASE_URL naming a database that does not exist', async () => {
    // the setup npm test runs: vitest.config.ts names it
    const config = (await import('../../vitest.config.js')).default as { test?: { globalSetup?: string[] } }
    expect(config.test?.globalSetup).toEqual(['test/helpers/global-setup.ts'])
    const r = await setupAlone(baseUrl(missingDb()))
    expect(r.code, r.stdout + r.stderr).toBe(0)
    expect(r.stdout).toContain('global setup provided pgAdminUrl, pgTemplate, pgliteTemplate, sdkBuildDir\n')
  }, 120000)

  it('stops a run with one line when the server cannot be reached', async () => {
    const r = await setupAlone('postgres://postgres@127.0.0.1:1/test')
    expect(r.code).toBe(1)
    const lines = (r.stdout + r.stderr).split('\n').filter((l) => /^npm test: /.test(l))
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatch(/^npm test: cannot reach PostgreSQL at postgres:\/\/postgres@127\.0\.0\.1:1\/test \(.+\); start a PostgreSQL server there or set DATABASE_URL to one \(README\.md, "Tests", lists what the suite needs\)$/)
    expect(r.stdout + r.stderr).not.toMatch(/\n\s+at /) // no stack trace
  }, 120000)
})
