// The migration runner on real PostgreSQL and PGlite: each migration applied once and recorded,
// re-runs apply nothing, concurrent runners on one empty database migrate it once, a database newer
// than the code is refused, and data survives closing and reopening.

import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import {
  eventJson,
  getSessionByKey,
  insertSession,
  latestVersion,
  loadMigrations,
  lockSession,
  migrate,
  openPg,
  openPglite,
  readEvents,
  schemaCurrent,
  SchemaTooNewError,
  stamp,
  writeEvents,
  type Db,
  type Migration,
} from '../../src/store/index.js'
import { adminUrl, baseUrl } from '../helpers/db-urls.js'
import { DB_KINDS, freshPgDatabase, freshPgliteDir, openTestDb, type DbKind } from '../helpers/db.js'

// ---- empty databases of either kind, cleaned up after the file ----

const cleanups: Array<() => Promise<void>> = []
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => {})
})

/** A database with no schema at all: `CREATE DATABASE` for pg, a new directory for PGlite. */
async function emptyDatabase(kind: DbKind): Promise<{ open(): Promise<Db> }> {
  if (kind === 'pg') {
    // named after the run's template so the global teardown sweeps it up if we die
    const name = `${inject('pgTemplate')}_mig_${crypto.randomBytes(4).toString('hex')}`
    const admin = new pg.Client({ connectionString: adminUrl() })
    await admin.connect()
    await admin.query(`CREATE DATABASE ${name}`)
    await admin.end()
    const pools: Db[] = []
    cleanups.push(async () => {
      for (const p of pools) await p.close().catch(() => {})
      const c = new pg.Client({ connectionString: adminUrl() })
      await c.connect()
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
      await c.end()
    })
    return {
      async open() {
        const db = openPg(baseUrl(name), 4)
        pools.push(db)
        return db
      },
    }
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agentd-mig-'))
  const dbs: Db[] = []
  cleanups.push(async () => {
    for (const d of dbs) await d.close().catch(() => {})
    fs.rmSync(dir, { recursive: true, force: true })
  })
  return {
    async open() {
      const db = await openPglite(path.join(dir, 'pgdata'))
      dbs.push(db)
      return db
    },
  }
}

const recorded = async (db: Db) =>
  (await db.query<{ version: number; name: string; applied_at: number }>('SELECT version, name, applied_at FROM schema_migrations ORDER BY version')).rows

const tablesOf = async (db: Db) =>
  (await db.query<{ t: string }>("SELECT table_name AS t FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name")).rows.map((r) => r.t)

const MIGRATIONS = loadMigrations()

describe('the migration set', () => {
  // numbers are given out per feature ahead of time, so a branch may lack an earlier one for a while
  it('is numbered from 1 upwards, each number once, and named after its files', () => {
    expect(MIGRATIONS.length).toBeGreaterThan(0)
    const versions = MIGRATIONS.map((m) => m.version)
    expect(versions).toEqual([...new Set(versions)].sort((a, b) => a - b))
    for (const m of MIGRATIONS) expect(m.name.startsWith(String(m.version).padStart(4, '0'))).toBe(true)
    expect(MIGRATIONS[0].name).toBe('0001_init')
    expect(latestVersion()).toBe(versions.at(-1))
  })
})

describe.each(DB_KINDS)('migrations on %s', (kind) => {
  // one empty database for the first two tests: creating a PGlite cluster takes seconds
  let db: Db
  beforeAll(async () => {
    db = await (await emptyDatabase(kind)).open()
  })

  it('a fresh database gets every migration once, recorded in schema_migrations; a second run applies nothing', async () => {
    expect(await tablesOf(db)).toEqual([])
    const t0 = Date.now()
    const applied = await migrate(db)
    expect(applied).toEqual(MIGRATIONS.map((m) => m.version))
    const rows = await recorded(db)
    expect(rows.map((r) => [r.version, r.name])).toEqual(MIGRATIONS.map((m) => [m.version, m.name]))
    for (const r of rows) expect(r.applied_at).toBeGreaterThanOrEqual(t0 - 60_000)
    expect(await tablesOf(db)).toEqual(expect.arrayContaining(['api_keys', 'idempotency', 'pending_calls', 'schema_migrations', 'session_events', 'sessions', 'tenants']))
    expect(await schemaCurrent(db)).toBe(true)
    expect(await migrate(db)).toEqual([])
    expect(await recorded(db)).toEqual(rows)
  })

  it('applies only what is missing, and a failing migration leaves no trace', async () => {
    const next = latestVersion() + 1
    const m2: Migration = { version: next, name: `${String(next).padStart(4, '0')}_extra`, sql: 'CREATE TABLE extra_one (a int); INSERT INTO extra_one VALUES (1);' }
    const m3bad: Migration = { version: next + 1, name: `${String(next + 1).padStart(4, '0')}_bad`, sql: 'CREATE TABLE extra_two (a int); SELECT no_such_function();' }
    await migrate(db, MIGRATIONS)
    // a schema older than the code is not current
    expect(await schemaCurrent(db)).toBe(true)
    expect(await schemaCurrent(db, latestVersion() + 1)).toBe(false)
    // a later code version brings one more migration: only it runs
    expect(await migrate(db, [m2, ...MIGRATIONS])).toEqual([m2.version])
    expect((await db.query<{ a: number }>('SELECT a FROM extra_one')).rows).toEqual([{ a: 1 }])
    // a failing migration throws, records nothing and rolls its statements back
    await expect(migrate(db, [...MIGRATIONS, m2, m3bad])).rejects.toThrow(/_bad/)
    expect((await recorded(db)).map((r) => r.version)).toEqual([...MIGRATIONS.map((m) => m.version), m2.version])
    expect(await tablesOf(db)).not.toContain('extra_two')
    // the advisory lock was released: the runner still works
    expect(await migrate(db, [...MIGRATIONS, m2])).toEqual([])
    // to the real code this database is now too new
    expect(await schemaCurrent(db)).toBe(false)
    await expect(migrate(db)).rejects.toBeInstanceOf(SchemaTooNewError)
  })

  it('a database whose schema is newer than the code is refused (SchemaTooNewError) and not current', async () => {
    const t = await openTestDb(kind)
    try {
      expect(await schemaCurrent(t.db)).toBe(true)
      const future = latestVersion() + 1
      await t.db.query('INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)', [future, `${future}_from_the_future`, Date.now()])
      const tablesBefore = await tablesOf(t.db)
      const err = await migrate(t.db).then(
        () => null,
        (e: unknown) => e,
      )
      expect(err).toBeInstanceOf(SchemaTooNewError)
      expect(err).toMatchObject({ dbVersion: future, codeVersion: latestVersion() })
      expect(await schemaCurrent(t.db)).toBe(false)
      // nothing applied or dropped, and the lock is not held: a second attempt fails the same way at once
      expect(await tablesOf(t.db)).toEqual(tablesBefore)
      await expect(migrate(t.db)).rejects.toBeInstanceOf(SchemaTooNewError)
      expect((await recorded(t.db)).map((r) => r.version)).toEqual([...MIGRATIONS.map((m) => m.version), future])
    } finally {
      await t.drop()
    }
  })

  it('data survives closing and reopening the database', async () => {
    // a migrated database of our own, so closing it is ours to do
    let url: string | undefined
    let dir: string | undefined
    let dropPg: (() => Promise<void>) | undefined
    const open = async (): Promise<Db> => (kind === 'pg' ? openPg(url!, 2) : openPglite(path.join(dir!, 'pgdata')))
    if (kind === 'pg') {
      const fresh = await freshPgDatabase()
      url = fresh.url
      dropPg = fresh.drop
    } else dir = freshPgliteDir()
    let db: Db | undefined
    try {
      db = await open()
      const tenantId = crypto.randomUUID()
      const key = crypto.randomUUID()
      await db.query('INSERT INTO tenants (id, name, created_at) VALUES ($1, $2, $3)', [tenantId, 'durable', 1])
      await insertSession(db, { key, tenantId, id: 'keep-me', model: 'test/scripted', system: 'S', tools: [], metadata: { a: [1, 'é'] }, createHash: 'h', createdAt: 1_700_000_000_000 })
      const written = await db.transaction(async (tx) => {
        const row = (await lockSession(tx, key))!
        return writeEvents(tx, row, stamp(row, [
          { type: 'turn/start', data: { turn: 1 } },
          { type: 'user/message', data: { id: 'u', role: 'user', content: [{ type: 'text', text: 'persist 🙂' }], source: { kind: 'user' } }, surfaceOp: 'append' },
        ], 1_700_000_000_100), { openTurn: 1 })
      })
      await db.close()
      db = undefined
      db = await open()
      expect(await schemaCurrent(db)).toBe(true)
      expect(await migrate(db)).toEqual([])
      const events = await readEvents(db, key)
      expect(events.map((e) => e.json)).toEqual(written.map((e) => e.json))
      const row = (await db.query<{ next_seq: number; last_time: number; open_turn: number; metadata: string }>('SELECT next_seq, last_time, open_turn, metadata FROM sessions WHERE key = $1', [key])).rows[0]
      expect(row).toEqual({ next_seq: 2, last_time: 1_700_000_000_100, open_turn: 1, metadata: JSON.stringify({ a: [1, 'é'] }) })
    } finally {
      await db?.close()
      if (dropPg) await dropPg()
      if (dir) fs.rmSync(dir, { recursive: true, force: true })
    }
  })

  it('0005_last_turn gives existing sessions the lastTurn of their logs', async () => {
    const fresh = await (await emptyDatabase(kind)).open()
    await migrate(fresh, MIGRATIONS.filter((m) => m.version < 5))
    const tenantId = crypto.randomUUID()
    await fresh.query('INSERT INTO tenants (id, name, created_at) VALUES ($1, $2, $3)', [tenantId, 'old', 1])
    const failure = { message: 'rate "limited" — réessayez', code: 'RATE_LIMIT', status: 429, providerRetryAfterMs: 1500 }
    const logs: Record<string, Array<[number, { type: string; data: Record<string, unknown> }]>> = {
      empty: [],
      // turn 1 completed, turn 2 failed: the latest turn/end counts, not the first
      failed: [
        [100, { type: 'turn/start', data: { turn: 1 } }],
        [110, { type: 'turn/end', data: { turn: 1, reason: { kind: 'completed' } } }],
        [200, { type: 'turn/start', data: { turn: 2 } }],
        [230, { type: 'turn/end', data: { turn: 2, reason: { kind: 'error', error: failure } } }],
      ],
      // turn 2 still open: the last turn that ended is 1
      open: [
        [100, { type: 'turn/start', data: { turn: 1 } }],
        [150, { type: 'turn/end', data: { turn: 1, reason: { kind: 'aborted', reason: { kind: 'user' } } } }],
        [300, { type: 'turn/start', data: { turn: 2 } }],
      ],
    }
    const keys: Record<string, string> = {}
    for (const [id, log] of Object.entries(logs)) {
      const key = (keys[id] = crypto.randomUUID())
      await fresh.query("INSERT INTO sessions (key, tenant_id, id, model, create_hash, created_at, updated_at, next_seq) VALUES ($1, $2, $3, 'test/scripted', 'h', 1, 1, $4)", [key, tenantId, id, log.length])
      for (const [seq, [time, e]] of log.entries()) {
        await fresh.query('INSERT INTO session_events (session_key, seq, time, type, body) VALUES ($1, $2, $3, $4, $5)', [key, seq, time, e.type, eventJson({ seq, time, type: e.type, data: e.data as never })])
      }
    }
    expect(await migrate(fresh)).toContain(5)
    const lastTurn = async (id: string) => (await getSessionByKey(fresh, keys[id]))!.lastTurn
    expect(await lastTurn('empty')).toBeNull()
    expect(await lastTurn('failed')).toEqual({ turn: 2, reason: { kind: 'error', error: failure }, time: 230 })
    expect(await lastTurn('open')).toEqual({ turn: 1, reason: { kind: 'aborted', reason: { kind: 'user' } }, time: 150 })
  })
})

describe('concurrent migrate() on one empty PostgreSQL database', () => {
  it('applies each migration exactly once', async () => {
    const empty = await emptyDatabase('pg')
    const pools = await Promise.all([empty.open(), empty.open(), empty.open()])
    const results = await Promise.all(pools.map((p) => migrate(p)))
    // exactly one runner applied everything; the others found it done
    const all = results.flat().sort((a, b) => a - b)
    expect(all).toEqual(MIGRATIONS.map((m) => m.version))
    expect(results.filter((r) => r.length > 0)).toHaveLength(1)
    const rows = await recorded(pools[0])
    expect(rows.map((r) => r.version)).toEqual(MIGRATIONS.map((m) => m.version))
    expect(await schemaCurrent(pools[1])).toBe(true)
  })

  it('holds later runners while a slow migration runs, so none sees a half-migrated schema', async () => {
    const empty = await emptyDatabase('pg')
    const [a, b] = await Promise.all([empty.open(), empty.open()])
    const slow: Migration = { version: latestVersion() + 1, name: 'slow', sql: 'CREATE TABLE slow_marker (a int); SELECT pg_sleep(0.3); INSERT INTO slow_marker VALUES (1);' }
    const list = [...MIGRATIONS, slow]
    const first = migrate(a, list)
    // start the second once the first holds the lock (its CREATE TABLE schema_migrations has run)
    for (let i = 0; i < 200; i++) {
      const { rows } = await b.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")
      if (rows[0].n > 0) break
      await new Promise((r) => setTimeout(r, 5))
    }
    const second = migrate(b, list)
    const [r1, r2] = await Promise.all([first, second])
    expect(r1).toEqual(list.map((m) => m.version))
    expect(r2).toEqual([])
    expect((await b.query('SELECT a FROM slow_marker')).rows).toEqual([{ a: 1 }])
    expect((await recorded(b)).map((r) => r.version)).toEqual(list.map((m) => m.version))
  })
})

describe.each(DB_KINDS)('0004 on %s carries existing data over', (kind) => {
  it('usage from the logs (failed attempts, compaction summaries, not a fork\'s copied prefix), slots from open turns, wake order from run state', async () => {
    const db = await (await emptyDatabase(kind)).open()
    await migrate(db, MIGRATIONS.filter((m) => m.version < 4))
    const tenantId = crypto.randomUUID()
    await db.query('INSERT INTO tenants (id, name, created_at) VALUES ($1, $2, $3)', [tenantId, 'before', 1])
    const session = async (id: string, o: { createHash?: string; updatedAt?: number; runState?: string; openTurn?: number } = {}) => {
      const key = crypto.randomUUID()
      await db.query(
        "INSERT INTO sessions (key, tenant_id, id, model, create_hash, created_at, updated_at, run_state, open_turn) VALUES ($1, $2, $3, 'p/m1', $4, 1, $5, $6, $7)",
        [key, tenantId, id, o.createHash ?? 'h', o.updatedAt ?? 1, o.runState ?? 'idle', o.openTurn ?? null],
      )
      return key
    }
    const events = async (key: string, list: Array<[number, string, unknown]>) => {
      for (const [i, [time, type, data]] of list.entries()) {
        await db.query('INSERT INTO session_events (session_key, seq, time, type, body) VALUES ($1, $2, $3, $4, $5)', [key, i, time, type, JSON.stringify({ seq: i, time, type, data })])
      }
    }
    const may31 = Date.UTC(2030, 4, 31, 23, 59, 59, 999)
    const jun1 = Date.UTC(2030, 5, 1)
    const usageChunk = (inputTokens: number, outputTokens: number) => ({ type: 'chunk', time: may31, chunk: { type: 'usage', usage: { inputTokens, outputTokens } } })
    const own: Array<[number, string, unknown]> = [
      [may31, 'request/header', { header: { config: { provider: 'p', model: 'm1' } }, reason: 'initial' }],
      // a failed attempt: its usage is the last usage chunk, its model the header's
      [may31, 'assistant/attempt', { turn: 1, step: 1, stream: [usageChunk(4, 1), usageChunk(5, 2)] }],
      [jun1, 'assistant/message', { turn: 1, step: 1, message: { source: { kind: 'model', provider: 'p', model: 'm1' } }, stream: [], usage: { inputTokens: 10, outputTokens: 3, cacheReadTokens: 2, costUsd: 0.25 } }],
    ]
    const s1 = await session('plain')
    await events(s1, [...own, [jun1, 'compaction/summary', { compactionId: 'c', provider: 'p', model: 'm2', usage: { inputTokens: 7, outputTokens: 1 } }], [jun1, 'assistant/attempt', { turn: 2, step: 1, stream: [] }]])
    // a fork: the source's events copied up to its first session/end-seed, then its own
    const forkHash = crypto.createHash('sha256').update('fork:ses_child').digest('hex')
    const s3 = await session('ses_child', { createHash: forkHash })
    await events(s3, [...own, [jun1, 'session/end-seed', {}], [jun1, 'assistant/message', { turn: 2, step: 1, message: { source: { kind: 'model', provider: 'p', model: 'm1' } }, stream: [], usage: { inputTokens: 1, outputTokens: 1 } }]])
    const running = await session('mid-turn', { runState: 'running', openTurn: 3, updatedAt: 5 })
    const wanted = await session('woken', { runState: 'wanted', updatedAt: 9 })

    expect(await migrate(db)).toEqual(MIGRATIONS.filter((m) => m.version >= 4).map((m) => m.version))
    const ledger = await db.query(
      "SELECT session_id, to_char(day, 'YYYY-MM-DD') AS day, model, input_tokens, output_tokens, cache_read_tokens, cost_usd, attempts FROM usage_ledger WHERE tenant_id = $1 ORDER BY session_id, day, model",
      [tenantId],
    )
    expect(ledger.rows).toEqual([
      { session_id: 'plain', day: '2030-05-31', model: 'p/m1', input_tokens: 5, output_tokens: 2, cache_read_tokens: 0, cost_usd: 0, attempts: 1 },
      { session_id: 'plain', day: '2030-06-01', model: 'p/m1', input_tokens: 10, output_tokens: 3, cache_read_tokens: 2, cost_usd: 0.25, attempts: 2 },
      { session_id: 'plain', day: '2030-06-01', model: 'p/m2', input_tokens: 7, output_tokens: 1, cache_read_tokens: 0, cost_usd: 0, attempts: 1 },
      { session_id: 'ses_child', day: '2030-06-01', model: 'p/m1', input_tokens: 1, output_tokens: 1, cache_read_tokens: 0, cost_usd: 0, attempts: 1 },
    ])
    const totals = await db.query('SELECT period, tokens, cost_usd FROM usage_totals WHERE tenant_id = $1 ORDER BY period', [tenantId])
    expect(totals.rows).toEqual([
      { period: '2030-05', tokens: 7, cost_usd: 0 },
      { period: '2030-05-31', tokens: 7, cost_usd: 0 },
      { period: '2030-06', tokens: 25, cost_usd: 0.25 },
      { period: '2030-06-01', tokens: 25, cost_usd: 0.25 },
    ])
    expect((await db.query('SELECT session_key FROM running_slots')).rows).toEqual([{ session_key: running }])
    const order = await db.query<{ key: string; wake_seq: number | null }>('SELECT key, wake_seq FROM sessions ORDER BY wake_seq NULLS LAST, key')
    expect(order.rows.slice(0, 2).map((r) => r.key)).toEqual([running, wanted])
    expect(order.rows.slice(2).map((r) => r.wake_seq)).toEqual([null, null])
    // the sequence goes on after the carried-over places
    const next = await db.query<{ n: number }>("SELECT nextval('session_wake_seq') AS n")
    expect(next.rows[0].n).toBeGreaterThan(order.rows[1].wake_seq!)
  })
})
