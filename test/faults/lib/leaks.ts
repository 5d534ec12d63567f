// The secrets check of the fault suite (issue 10): everything a server printed during a part and
// everything it stored at the end (every row of every table, as text, and the files of its data
// directory) is searched for every API key, admin token, provider key, secret value and secret key
// the part gave it or got from it. A hit is a violation naming where (source and line, table and row,
// file), never the secret itself. Every part runs it before it closes its server.

import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Writable } from 'node:stream'
import type { Queryable } from '../../../src/store/index.js'

export type SecretKind = 'api key' | 'admin token' | 'provider key' | 'secret value' | 'secret key' | 'token'

/** Watches that wire.ts reports every answer to, so that an API key a part got back is known to the check. */
const active = new Set<LeakWatch>()

/** Called by wireRequest with every JSON answer: any `apiKey` in it is a key the server gave out. */
export function observeAnswer(body: unknown): void {
  for (const w of active) w.learn(body)
}

export class LeakWatch {
  private readonly secrets = new Map<string, SecretKind>()
  /** what each source printed goes to a file of its own, not the heap (hostile measures the heap) */
  private readonly printed = new Map<string, string>()
  private spool: string | undefined
  /** files that hold a key by design (the generated secret-key file): path → the key they may hold */
  private readonly keyFiles = new Map<string, string>()

  /** starts learning API keys from every answer wireRequest receives, until stop() */
  constructor() {
    active.add(this)
  }

  /** stops learning API keys from answers */
  stop(): void {
    active.delete(this)
  }

  /** removes the files holding what was printed */
  discard(): void {
    if (this.spool) fs.rmSync(this.spool, { recursive: true, force: true })
    this.spool = undefined
    this.printed.clear()
  }

  /** a secret to look for; too short a value would match by chance, so the suite only gives long random ones */
  add(kind: SecretKind, value: string | undefined): void {
    if (typeof value === 'string' && value.length >= 8) this.secrets.set(value, kind)
  }

  /** every `apiKey` string anywhere in a JSON value */
  learn(body: unknown, depth = 0): void {
    if (!body || typeof body !== 'object' || depth > 6) return
    for (const [k, v] of Object.entries(body)) {
      if (k === 'apiKey' && typeof v === 'string') this.add('api key', v)
      else if (v && typeof v === 'object') this.learn(v, depth + 1)
    }
  }

  /** a file that may hold `key` and nothing else secret */
  keyFile(file: string, key: string): void {
    this.keyFiles.set(path.resolve(file), key)
  }

  get secretCount(): number {
    return this.secrets.size
  }

  /** appends what a server printed under `source` */
  print(source: string, text: string): void {
    let file = this.printed.get(source)
    if (!file) {
      this.spool ??= fs.mkdtempSync(path.join(os.tmpdir(), 'agentd-faults-printed-'))
      file = path.join(this.spool, `${this.printed.size}.log`)
      this.printed.set(source, file)
    }
    fs.appendFileSync(file, text)
  }

  /** a stream to hand pino (or a child's stdout): everything written to it is kept under `source` */
  stream(source: string, also?: NodeJS.WritableStream): Writable {
    return new Writable({
      write: (chunk: Buffer | string, _enc, cb) => {
        this.print(source, chunk.toString())
        also?.write(chunk)
        cb()
      },
    })
  }

  /** the needles of one secret: itself, and its hex form (a bytea column renders as \x…) */
  private hits(text: string, exempt?: string): Array<{ kind: SecretKind; at: number }> {
    const out: Array<{ kind: SecretKind; at: number }> = []
    for (const [value, kind] of this.secrets) {
      if (value === exempt) continue
      let at = text.indexOf(value)
      if (at < 0) at = text.indexOf(Buffer.from(value, 'utf8').toString('hex'))
      if (at >= 0) out.push({ kind, at })
    }
    return out
  }

  /** Searches what was printed, the database and the data directories; one line per place a secret was found. */
  async check(o: { db?: Queryable; dataDirs?: string[] } = {}): Promise<string[]> {
    const found: string[] = []
    for (const [source, file] of this.printed) {
      const lines = fs.readFileSync(file, 'utf8').split('\n')
      lines.forEach((line, i) => {
        for (const h of this.hits(line)) found.push(`a ${h.kind} in what ${source} printed, line ${i + 1} of ${lines.length}`)
      })
    }
    if (o.db) found.push(...(await this.checkDb(o.db)))
    for (const dir of o.dataDirs ?? []) found.push(...this.checkDir(dir))
    return found.map((f) => `secret leaked: ${f}`)
  }

  private async checkDb(db: Queryable): Promise<string[]> {
    const found: string[] = []
    const tables = await db.query<{ table_name: string }>(`SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY table_name`)
    for (const { table_name: table } of tables.rows) {
      const quoted = `"${table.replace(/"/g, '""')}"`
      const rows = await db.query<{ row: string }>(`SELECT t::text AS row FROM ${quoted} t`)
      const columns = (await db.query<{ column_name: string }>(`SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' AND table_name = $1 ORDER BY ordinal_position`, [table])).rows.map((c) => c.column_name)
      for (let i = 0; i < rows.rows.length; i++) {
        const text = rows.rows[i].row
        for (const h of this.hits(text)) found.push(`a ${h.kind} in table ${table}, row ${i + 1} of ${rows.rows.length}, column ${columnAt(text, h.at, columns)}`)
      }
    }
    return found
  }

  /** every file under dir but the embedded database's own (pgdata: the rows were read through SQL) */
  private checkDir(dir: string): string[] {
    const found: string[] = []
    const walk = (d: string) => {
      let entries: fs.Dirent[]
      try {
        entries = fs.readdirSync(d, { withFileTypes: true })
      } catch {
        return
      }
      for (const e of entries) {
        const p = path.join(d, e.name)
        if (e.isDirectory()) {
          if (!(d === dir && e.name === 'pgdata')) walk(p)
        } else if (e.isFile()) {
          const text = fs.readFileSync(p).toString('latin1')
          for (const h of this.hits(text, this.keyFiles.get(path.resolve(p)))) found.push(`a ${h.kind} in file ${path.relative(dir, p)} of the data directory`)
        }
      }
    }
    walk(dir)
    return found
  }
}

/** Which column of a row's text form `(a,b,"c d",…)` the offset falls in (best effort: names the column by position). */
function columnAt(text: string, at: number, columns: string[]): string {
  let col = 0
  let quoted = false
  for (let i = 1; i < at && i < text.length; i++) {
    const c = text[i]
    if (c === '"') {
      if (quoted && text[i + 1] === '"') i++
      else quoted = !quoted
    } else if (c === '\\' && quoted) i++
    else if (c === ',' && !quoted) col++
  }
  return columns[col] ?? `#${col + 1}`
}
