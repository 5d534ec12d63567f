// The data layer's narrow interface and its two adapters: a pg Pool for DATABASE_URL, and PGlite
// (real Postgres compiled to WASM) called directly for the embedded default (DESIGN.md §3).

import fs from 'node:fs'
import pg from 'pg'
import { PGlite, types as pgliteTypes } from '@electric-sql/pglite'

export interface QueryResult<T> {
  rows: T[]
  rowCount: number
}

export interface Queryable {
  query<T = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<QueryResult<T>>
}

export interface Db extends Queryable {
  readonly kind: 'pg' | 'pglite'
  /** Runs fn inside BEGIN … COMMIT; any throw rolls back and rethrows. */
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>
  /** Runs a script of several statements without parameters (migrations). */
  exec(sql: string): Promise<void>
  /** Runs fn on one dedicated connection (session-level advisory locks). */
  withConnection<T>(fn: (conn: Queryable & { exec(sql: string): Promise<void> }) => Promise<T>): Promise<T>
  close(): Promise<void>
  /** the unit writer's group committer of this database, made on its first fast-path unit (unit.ts) */
  units?: object
  /** the batcher of key-and-session lookups of this database, made on its first lookup (tenants.ts) */
  lookups?: object
}

/** Thrown for every failure to reach the database, so HTTP can answer 503 (API.md §10). */
export class DbUnavailableError extends Error {
  constructor(cause: unknown) {
    super(`database unavailable: ${(cause as Error)?.message ?? String(cause)}`)
    this.name = 'DbUnavailableError'
    this.cause = cause
  }
}

const CONNECTION_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', '57P01', '57P02', '57P03', '08000', '08003', '08006', '08001', '08004'])

export function isConnectionError(e: unknown): boolean {
  const code = (e as { code?: string })?.code
  if (code && CONNECTION_CODES.has(code)) return true
  const msg = String((e as Error)?.message ?? '')
  return /Connection terminated|connection timeout|Client has encountered a connection error|timeout exceeded when trying to connect/i.test(msg)
}

// int8 and numeric come back as strings by default; every bigint we store is an epoch-ms time,
// a token count or a lease token, all far below 2^53.
pg.types.setTypeParser(20, (v) => Number(v))

/**
 * Many JSON texts as ONE parameter: joined by U+0001, which JSON text never holds raw (JSON.stringify
 * writes it as \u0001), and split in SQL by `splitTexts` (an empty member reads back as NULL). A text[]
 * parameter has the driver escape every quote and backslash of every member, JSON bodies are full of
 * them, and the copies were about a twelfth of what a turn allocates.
 */
export function joinTexts(values: ReadonlyArray<string | null>): string {
  return values.join('\x01')
}

/** The SQL that reads a joinTexts parameter back as text[] (empty members as NULL). */
export const splitTexts = (param: string): string => `string_to_array(${param}, chr(1), '')`

/**
 * A statement the server repeats, named: `db.query(statement('lease_renew', text), params)`. On
 * PostgreSQL it is prepared once per connection under its name and then only bound and executed,
 * which halves the database's CPU per turn; a text passed as a plain string is simply not prepared.
 * The name travels at the head of the text itself, as a comment (`/*@name*\/ …`), so the text stays a
 * string every wrapper of a Db passes on unchanged; PGlite and AGENTD_PG_PREPARE=off ignore it. Names
 * are the code's: one name, one text (pg refuses a second text under a prepared name).
 */
export function statement(name: string, text: string): string {
  if (!/^[a-z0-9_]+$/.test(name)) throw new Error(`statement name ${name}: lowercase letters, digits and _ only`)
  return `/*@${name}*/ ${text}`
}

/** The name a statement() text declares, or undefined for a plain text. */
export function statementName(text: string): string | undefined {
  if (!text.startsWith('/*@')) return undefined
  const end = text.indexOf('*/', 3)
  return end > 3 ? text.slice(3, end) : undefined
}

/**
 * The names a connection pool prepares its statements under: the declared name (statement()), with a
 * generation suffix once PostgreSQL lost the statement behind it or can no longer use its plan
 * (26000, 0A000: a connection pooler in transaction mode, a DEALLOCATE — turn preparing off with
 * AGENTD_PG_PREPARE=off), so the text is prepared afresh under a new name.
 */
export class StatementNames {
  private readonly generations = new Map<string, number>()

  constructor(readonly enabled: boolean) {}

  /** The query config for a text: named when it declares a name and preparing is on. */
  config(text: string, values: unknown[] | undefined): pg.QueryConfig {
    const name = this.enabled && values ? statementName(text) : undefined
    if (name === undefined) return { text, values }
    const g = this.generations.get(name)
    return { text, values, name: g === undefined ? `agentd_${name}` : `agentd_${name}_${g}` }
  }

  /** After a failure: a prepared statement that is gone (26000) or whose plan can no longer serve (0A000) is prepared again under a new name. */
  failed(text: string, e: unknown): void {
    const code = (e as { code?: string })?.code
    if (code !== '26000' && code !== '0A000') return
    const name = this.enabled ? statementName(text) : undefined
    if (name !== undefined) this.generations.set(name, (this.generations.get(name) ?? 0) + 1)
  }
}

/**
 * A connection PgDb keeps checked out for statements outside transactions: a statement sent on an idle
 * lane skips the pool's checkout and release (a pending item, a nextTick, two timers armed and
 * cleared, an error listener added and removed), which at one session came to a few percent of the
 * server's CPU per turn. A lane whose connection fails is let go; another is taken when needed.
 */
interface Lane {
  client: pg.PoolClient
  busy: boolean
  broken: boolean
  released: boolean
}

class PgDb implements Db {
  readonly kind = 'pg' as const
  readonly pool: pg.Pool
  readonly statements: StatementNames
  /** lanes at most (the pool serves what finds no idle lane); none from a pool too small to spare them */
  static readonly LANES = 2
  private readonly maxLanes: number
  private readonly lanes: Lane[] = []
  private taking = false
  private closing = false

  constructor(url: string, max: number, prepare: boolean) {
    this.pool = new pg.Pool({ connectionString: url, max, connectionTimeoutMillis: 10000, idleTimeoutMillis: 30000 })
    this.statements = new StatementNames(prepare)
    this.maxLanes = max >= 4 * PgDb.LANES ? PgDb.LANES : 0
    // an idle client that loses its connection must not crash the process
    this.pool.on('error', () => {})
  }

  /** An idle lane, or none; takes another connection in the background while there are fewer than LANES. */
  private idleLane(): Lane | undefined {
    for (const l of this.lanes) if (!l.busy && !l.broken) return l
    if (this.lanes.length < this.maxLanes && !this.taking && !this.closing) {
      this.taking = true
      this.pool.connect().then(
        (client) => {
          this.taking = false
          if (this.closing) return client.release()
          const lane: Lane = { client, busy: false, broken: false, released: false }
          // a lane that loses its connection between statements is dropped
          client.on('error', () => this.drop(lane))
          this.lanes.push(lane)
        },
        () => {
          this.taking = false
        },
      )
    }
    return undefined
  }

  /** Lets a lane go (its connection failed, or the database closes); a busy one goes when its statement ends. */
  private drop(lane: Lane): void {
    lane.broken = true
    const i = this.lanes.indexOf(lane)
    if (i >= 0) this.lanes.splice(i, 1)
    if (!lane.busy && !lane.released) {
      lane.released = true
      lane.client.release(true)
    }
  }

  /** A query on a checked-out client (a transaction, a dedicated connection), named like the pool's. */
  private async on<R>(client: pg.PoolClient, sql: string, params?: unknown[]): Promise<QueryResult<R>> {
    try {
      const r = await client.query(this.statements.config(sql, params))
      return { rows: r.rows as R[], rowCount: r.rowCount ?? 0 }
    } catch (e) {
      this.statements.failed(sql, e)
      throw e
    }
  }

  async query<T>(sql: string, params?: unknown[]): Promise<QueryResult<T>> {
    const lane = this.idleLane()
    if (lane) return this.onLane<T>(lane, sql, params)
    try {
      const r = await this.pool.query(this.statements.config(sql, params))
      return { rows: r.rows as T[], rowCount: r.rowCount ?? 0 }
    } catch (e) {
      this.statements.failed(sql, e)
      throw isConnectionError(e) ? new DbUnavailableError(e) : e
    }
  }

  private async onLane<T>(lane: Lane, sql: string, params?: unknown[]): Promise<QueryResult<T>> {
    lane.busy = true
    try {
      return await this.on<T>(lane.client, sql, params)
    } catch (e) {
      if (!isConnectionError(e)) throw e
      this.drop(lane)
      throw new DbUnavailableError(e)
    } finally {
      lane.busy = false
      if (lane.broken) this.drop(lane)
    }
  }

  async transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
    let client: pg.PoolClient
    try {
      client = await this.pool.connect()
    } catch (e) {
      throw new DbUnavailableError(e)
    }
    let broken = false
    // pg-pool takes its error listener off a checked-out client: a connection lost between two queries
    // of this transaction (the server went away) would be an unhandled 'error' that ends the process
    const lost = () => {
      broken = true
    }
    client.on('error', lost)
    const tx: Queryable = { query: <R>(sql: string, params?: unknown[]) => this.on<R>(client, sql, params) }
    try {
      await client.query('BEGIN')
      const out = await fn(tx)
      await client.query('COMMIT')
      return out
    } catch (e) {
      try {
        await client.query('ROLLBACK')
      } catch {
        broken = true
      }
      throw isConnectionError(e) ? new DbUnavailableError(e) : e
    } finally {
      client.off('error', lost)
      client.release(broken)
    }
  }

  async exec(sql: string): Promise<void> {
    await this.pool.query(sql)
  }

  async withConnection<T>(fn: (conn: Queryable & { exec(sql: string): Promise<void> }) => Promise<T>): Promise<T> {
    const client = await this.pool.connect()
    let broken = false
    const lost = () => {
      broken = true
    }
    client.on('error', lost)
    try {
      return await fn({
        query: <R>(sql: string, params?: unknown[]) => this.on<R>(client, sql, params),
        async exec(sql: string) {
          await client.query(sql)
        },
      })
    } finally {
      client.off('error', lost)
      client.release(broken)
    }
  }

  async close(): Promise<void> {
    this.closing = true
    for (const l of [...this.lanes]) this.drop(l)
    await this.pool.end()
  }
}

class PgliteDb implements Db {
  readonly kind = 'pglite' as const

  constructor(readonly pglite: PGlite) {}

  async query<T>(sql: string, params?: unknown[]): Promise<QueryResult<T>> {
    const r = await this.pglite.query<T>(sql, params as unknown[])
    return { rows: r.rows, rowCount: r.affectedRows ?? r.rows.length }
  }

  async transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
    return this.pglite.transaction(async (t) =>
      fn({
        async query<R>(sql: string, params?: unknown[]) {
          const r = await t.query<R>(sql, params as unknown[])
          return { rows: r.rows, rowCount: r.affectedRows ?? r.rows.length }
        },
      }),
    )
  }

  async exec(sql: string): Promise<void> {
    await this.pglite.exec(sql)
  }

  async withConnection<T>(fn: (conn: Queryable & { exec(sql: string): Promise<void> }) => Promise<T>): Promise<T> {
    return fn({ query: (s, p) => this.query(s, p), exec: (s) => this.exec(s) })
  }

  async close(): Promise<void> {
    if (!this.pglite.closed) await this.pglite.close()
  }
}

export interface OpenOptions {
  databaseUrl?: string
  dataDir: string
  poolSize?: number
  /** named prepared statements on PostgreSQL (AGENTD_PG_PREPARE, default on) */
  prepare?: boolean
}

/** Opens PostgreSQL when a URL is given, else the embedded PGlite database under dataDir/pgdata. */
export async function openDb(o: OpenOptions): Promise<Db> {
  if (o.databaseUrl) return new PgDb(o.databaseUrl, o.poolSize ?? 20, o.prepare ?? true)
  return openPglite(`${o.dataDir}/pgdata`)
}

export async function openPglite(dir: string | undefined): Promise<Db> {
  if (dir) fs.mkdirSync(dir, { recursive: true })
  const pglite = await PGlite.create(dir ?? 'memory://', { parsers: { [pgliteTypes.INT8]: (v: string) => Number(v) } })
  return new PgliteDb(pglite)
}

export function openPg(url: string, poolSize = 20, prepare = true): Db {
  return new PgDb(url, poolSize, prepare)
}

/** A Db (pool or PGlite), as opposed to a transaction's Queryable. */
export function isDb(q: unknown): q is Db {
  return typeof (q as Db)?.transaction === 'function' && typeof (q as Db)?.query === 'function'
}
