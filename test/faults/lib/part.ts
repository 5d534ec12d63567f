// What a part of the fault suite is: a name, and a run that attacks a server and reports a table
// and its violations. The runner (test/faults/run.ts) and the vitest file run every part listed in
// test/faults/parts.ts; adding a part is one file plus one line there.

export type DbKind = 'pglite' | 'pg'
export type Size = 'short' | 'long'

export interface PartContext {
  size: Size
  /** every random choice of the run derives from it; the same seed replays the same requests */
  seed: number
  db: DbKind
  /** inside `npm test`: a part whose short size takes minutes may do less of it (and says so in its table) */
  inTest?: boolean
  /** progress lines (the runner prints them; the vitest file keeps quiet) */
  log(line: string): void
}

export interface PartResult {
  /** the summary table: one row per measure */
  rows: Array<[string, string | number]>
  /** everything that broke a promise of the contract; the run fails when there is any */
  violations: string[]
}

export interface FaultPart {
  name: string
  description: string
  run(ctx: PartContext): Promise<PartResult>
}

/** The summary of one part's run as a two-column table. */
export function formatTable(title: string, rows: Array<[string, string | number]>): string {
  const w = Math.max(...rows.map(([k]) => k.length), 8)
  const v = Math.max(...rows.map(([, x]) => String(x).length), 5)
  const line = `+${'-'.repeat(w + 2)}+${'-'.repeat(v + 2)}+`
  return [title, line, ...rows.map(([k, x]) => `| ${k.padEnd(w)} | ${String(x).padStart(v)} |`), line].join('\n')
}
