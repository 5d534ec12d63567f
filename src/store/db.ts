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

/** Long texts the code repeats verbatim (the group commit's statement): named despite their length. */
const REPEATED = new Set<string>()

/** Declares a long text as one the server sends over and over, so it is prepared like a short one. */
export function repeatedText(text: string): string {
  REPEATED.add(text)
  return text
}

/**
 * Named prepared statements for the statements the server repeats (the appends, the key check, the
 * reads of a turn): PostgreSQL parses and plans each text once per connection instead of on every
 * call, which halves the database's CPU per turn. A text gets a name the first time it is seen, up
 * to MAX_NAMES texts per process; longer texts (built per call: they rarely repeat) and texts that
 * select `*` (their result shape would change under a migration) run unnamed unless the code declares
 * them repeated (repeatedText), and so do texts beyond the cap. A
 * name whose statement PostgreSQL no longer has or can no longer use is given up, so the text is
 * prepared afresh under a new name (a connection pooler in transaction mode: turn it off with
 * AGENTD_PG_PREPARE=off).
 */
export class StatementNames {
  static readonly MAX_NAMES = 200
  static readonly MAX_TEXT = 4000
  /** texts decided so far, up to MAX_DECIDED: the text as first seen (later lookups of it hash once, and pg compares it to its parsed text by identity) and its name, if any */
  static readonly MAX_DECIDED = 2000
  private readonly decided = new Map<string, { text: string; name?: string }>()
  private named = 0
  private next = 0

  constructor(readonly enabled: boolean) {}

  /** The query config for a text: named when it is worth preparing. */
  config(text: string, values: unknown[] | undefined): pg.QueryConfig {
    if (!this.enabled || !values) return { text, values }
    let d = this.decided.get(text)
    if (d === undefined) {
      d = { text }
      const worth = REPEATED.has(text) || (text.length <= StatementNames.MAX_TEXT && !/SELECT \*|RETURNING \*|\.\*/.test(text))
      if (worth && this.named < StatementNames.MAX_NAMES) {
        d.name = `agentd_${this.next++}`
        this.named++
      }
      if (d.name || this.decided.size < StatementNames.MAX_DECIDED) this.decided.set(text, d)
    }
    return d.name ? { text: d.text, values, name: d.name } : { text: d.text, values }
  }

  /** After a failure: a prepared statement that is gone (26000) or whose plan can no longer serve (0A000) loses its name. */
  failed(text: string, e: unknown): void {
    const code = (e as { code?: string })?.code
    if (code !== '26000' && code !== '0A000') return
    const d = this.decided.get(text)
    if (!d?.name) return
    this.decided.delete(text)
    this.named--
  }

  get size(): number {
    return this.named
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
