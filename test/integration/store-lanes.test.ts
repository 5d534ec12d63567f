// The PostgreSQL adapter's lanes (store/db.ts): statements outside transactions go over connections the
// adapter keeps checked out, skipping the pool's checkout and release; what finds no idle lane goes
// through the pool; a lane whose connection dies is let go and replaced, its statement failing as
// the database being unavailable; a pool too small to spare connections keeps none. Real PostgreSQL.

import pg from 'pg'
import { afterEach, describe, expect, it } from 'vitest'
import { DbUnavailableError, openPg, type Db } from '../../src/store/index.js'
import { freshPgDatabase } from '../helpers/db.js'
import { until } from '../helpers/wait.js'

let cleanup: Array<() => Promise<void>> = []
afterEach(async () => {
  for (const c of cleanup.reverse()) await c()
  cleanup = []
})

async function open(poolSize: number): Promise<{ db: Db; pool: pg.Pool; url: string; viaPool: () => number }> {
  const fresh = await freshPgDatabase()
  const db = openPg(fresh.url, poolSize)
  cleanup.push(async () => {
    await db.close()
    await fresh.drop()
  })
  const pool = (db as unknown as { pool: pg.Pool }).pool
  let n = 0
  const query = pool.query.bind(pool)
  pool.query = ((...a: unknown[]) => {
    n++
    return (query as (...x: unknown[]) => unknown)(...a)
  }) as typeof pool.query
  return { db, pool, url: fresh.url, viaPool: () => n }
}

describe('statement lanes (pg)', () => {
  it('statements one after another go over a lane, not through the pool', async () => {
    const { db, viaPool } = await open(20)
    await until('a lane is there', async () => {
      await db.query('SELECT 1')
      return (db as unknown as { lanes: unknown[] }).lanes.length > 0
    })
    const before = viaPool()
    for (let i = 0; i < 50; i++) expect((await db.query<{ n: number }>('SELECT $1::int AS n', [i])).rows[0].n).toBe(i)
    expect(viaPool() - before).toBe(0)
    // many at once: the lanes take what they can, the pool the rest, every answer is its own
    const all = await Promise.all(Array.from({ length: 40 }, (_, i) => db.query<{ n: number }>('SELECT $1::int AS n, pg_sleep(0.01)', [i])))
    expect(all.map((r) => r.rows[0].n)).toEqual(Array.from({ length: 40 }, (_, i) => i))
    expect(viaPool() - before).toBeGreaterThan(0)
  })

  it("a lane whose connection dies is let go: its statement fails as unavailable, the next ones succeed on a new lane", async () => {
    const { db, url } = await open(20)
    await until('two lanes are there', async () => {
      await Promise.all([db.query('SELECT 1'), db.query('SELECT 1')])
      return (db as unknown as { lanes: unknown[] }).lanes.length === 2
    })
    const admin = new pg.Client({ connectionString: url })
    await admin.connect()
    try {
      const killed = await admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
      expect(killed.rowCount).toBeGreaterThanOrEqual(2)
      const outcomes: string[] = []
      for (let i = 0; i < 20; i++) {
        try {
          await db.query('SELECT 1')
          outcomes.push('ok')
        } catch (e) {
          expect(e).toBeInstanceOf(DbUnavailableError)
          outcomes.push('unavailable')
        }
      }
      // the dead connections fail at most their own statement each; then everything goes through
      expect(outcomes.filter((o) => o === 'unavailable').length).toBeLessThanOrEqual(2)
      expect(outcomes.slice(-10)).toEqual(Array(10).fill('ok'))
      await until('lanes again', () => (db as unknown as { lanes: unknown[] }).lanes.length > 0)
    } finally {
      await admin.end()
    }
  })

  it('a pool too small to spare connections keeps no lane: a transaction never waits for one', async () => {
    const { db } = await open(1)
    for (let i = 0; i < 5; i++) await db.query('SELECT 1')
    expect((db as unknown as { lanes: unknown[] }).lanes.length).toBe(0)
    expect(await db.transaction(async (tx) => (await tx.query<{ n: number }>('SELECT 2 AS n')).rows[0].n)).toBe(2)
  })
})
