// A PostgreSQL connection lost while a transaction (or a held connection) is between two queries: the
// pool no longer listens for that client's errors, so without a listener of ours the lost connection
// is an unhandled 'error' that ends the process. It must reject the transaction instead, and the pool
// must go on serving.

import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openTestDb, type TestDb } from '../helpers/db.js'

describe('a connection lost between two queries (pg)', () => {
  let t: TestDb
  beforeAll(async () => {
    t = await openTestDb('pg')
  })
  afterAll(async () => {
    await t?.drop()
  })

  const killer = async (pid: number) => {
    const c = new pg.Client({ connectionString: t.url })
    await c.connect()
    await c.query('SELECT pg_terminate_backend($1)', [pid])
    await c.end()
  }

  it('rejects the transaction and leaves the process and the pool working', async () => {
    const crashes: unknown[] = []
    const onUncaught = (e: unknown) => crashes.push(e)
    process.on('uncaughtException', onUncaught)
    try {
      const out = t.db.transaction(async (tx) => {
        const { rows } = await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')
        await killer(rows[0].pid)
        // the connection dies while no query of ours runs on it
        await new Promise((r) => setTimeout(r, 300))
        await tx.query('SELECT 1')
      })
      await expect(out).rejects.toThrow()
      const conn = t.db.withConnection(async (c) => {
        const { rows } = await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')
        await killer(rows[0].pid)
        await new Promise((r) => setTimeout(r, 300))
      })
      await conn
      expect(crashes).toEqual([])
      expect((await t.db.query<{ one: number }>('SELECT 1 AS one')).rows).toEqual([{ one: 1 }])
    } finally {
      process.off('uncaughtException', onUncaught)
    }
  })
})
