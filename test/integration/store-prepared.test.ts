// Named prepared statements on PostgreSQL (store/db.ts statement, issues 16 and 35): a statement the
// code names is parsed once per connection and then only bound and executed; a plain text runs
// unnamed; a statement PostgreSQL lost is prepared again under a new name; AGENTD_PG_PREPARE=off
// names nothing. Real PostgreSQL (PGlite runs in-process and takes no names); appends still land exactly once.

import { afterEach, describe, expect, it } from 'vitest'
import { openPg, statement, statementName, StatementNames, type Db } from '../../src/store/index.js'
import { loadConfig, ConfigError } from '../../src/config.js'
import { freshPgDatabase } from '../helpers/db.js'

let cleanup: Array<() => Promise<void>> = []
afterEach(async () => {
  for (const c of cleanup.reverse()) await c()
  cleanup = []
})

/** One connection, so pg_prepared_statements shows what the pool's only session holds. */
async function oneConnection(prepare: boolean): Promise<Db> {
  const fresh = await freshPgDatabase()
  const db = openPg(fresh.url, 1, prepare)
  cleanup.push(async () => {
    await db.close()
    await fresh.drop()
  })
  await db.exec('CREATE TABLE t (k int PRIMARY KEY, v text NOT NULL)')
  return db
}

const prepared = async (db: Db) =>
  (await db.query<{ name: string; statement: string }>("SELECT name, statement FROM pg_prepared_statements WHERE name LIKE 'agentd%' AND statement NOT LIKE '%pg_prepared_statements%' ORDER BY name")).rows

const UPSERT = statement('test_upsert', 'INSERT INTO t (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = t.v || excluded.v RETURNING v')

describe('named prepared statements (pg)', () => {
  it('a repeated text is prepared once on the connection and gives the same answers as unnamed', async () => {
    const db = await oneConnection(true)
    for (let i = 0; i < 5; i++) expect((await db.query<{ v: string }>(UPSERT, [1, String(i)])).rows[0].v).toBe('01234'.slice(0, i + 1))
    const p = await prepared(db)
    expect(p.filter((x) => x.statement === UPSERT)).toHaveLength(1)
    // a transaction's statements take the same names
    await db.transaction(async (tx) => {
      await tx.query(UPSERT, [2, 'a'])
      await tx.query(UPSERT, [2, 'b'])
    })
    expect((await db.query<{ v: string }>('SELECT v FROM t WHERE k = $1', [2])).rows[0].v).toBe('ab')
    expect((await prepared(db)).filter((x) => x.statement === UPSERT)).toHaveLength(1)
  })

  it('plain texts stay unnamed, however often they repeat', async () => {
    const db = await oneConnection(true)
    await db.query(UPSERT, [1, 'x'])
    for (let i = 0; i < 3; i++) await db.query('SELECT v FROM t WHERE k = $1', [1])
    await db.query('SELECT count(*)::int AS n FROM t')
    const p = await prepared(db)
    expect(p.map((x) => x.statement)).toEqual([UPSERT])
    expect(p[0].name).toBe('agentd_test_upsert')
  })

  it('AGENTD_PG_PREPARE=off names nothing; the setting is validated', async () => {
    const db = await oneConnection(false)
    for (let i = 0; i < 3; i++) await db.query(UPSERT, [1, 'x'])
    expect(await prepared(db)).toEqual([])
    expect(loadConfig({}).pgPrepare).toBe(true)
    expect(loadConfig({ AGENTD_PG_PREPARE: 'off' }).pgPrepare).toBe(false)
    expect(() => loadConfig({ AGENTD_PG_PREPARE: 'yes' })).toThrow(ConfigError)
  })

  it('a statement the server lost fails once, then its text is prepared again under a new name', async () => {
    const db = await oneConnection(true)
    await db.query(UPSERT, [1, 'a'])
    const [first] = (await prepared(db)).filter((x) => x.statement === UPSERT)
    // what a pooler in transaction mode, or a DEALLOCATE ALL, does behind the client's back
    await db.exec(`DEALLOCATE ${first.name}`)
    await expect(db.query(UPSERT, [1, 'b'])).rejects.toMatchObject({ code: '26000' })
    expect((await db.query<{ v: string }>(UPSERT, [1, 'c'])).rows[0].v).toBe('ac') // the failed call wrote nothing
    const again = (await prepared(db)).filter((x) => x.statement === UPSERT)
    expect(again).toHaveLength(1)
    expect(again[0].name).not.toBe(first.name)
  })

  it('a name is declared with its text; a plain text has none', () => {
    expect(statementName(UPSERT)).toBe('test_upsert')
    expect(statementName('SELECT 1 WHERE $1::int > 0')).toBeUndefined()
    expect(new StatementNames(true).config(UPSERT, [1, 'a']).name).toBe('agentd_test_upsert')
    expect(new StatementNames(true).config('SELECT 1 WHERE $1::int > 0', [1]).name).toBeUndefined()
    expect(new StatementNames(false).config(UPSERT, [1, 'a']).name).toBeUndefined()
    expect(() => statement('Bad Name', 'SELECT 1')).toThrow()
  })
})
