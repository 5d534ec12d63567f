// Result rows and the tables run.ts prints: measurement, db, figure, floor, ratio, target, met?

export interface Row {
  measurement: string
  db: string
  figure: string
  floor: string
  /** agentd / floor */
  ratio: string
  target: string
  /** 'yes' | 'NO' | '' (no target on this row) */
  met: string
}

export const ms = (x: number) => (Number.isFinite(x) ? `${x < 10 ? x.toFixed(2) : x < 100 ? x.toFixed(1) : x.toFixed(0)} ms` : 'n/a')
export const num = (x: number, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : 'n/a')
export const times = (x: number) => (Number.isFinite(x) ? `${x.toFixed(2)}×` : 'n/a')
export const mb = (x: number) => (Number.isFinite(x) ? `${x.toFixed(1)} MB` : 'n/a')
export const yes = (ok: boolean) => (ok ? 'yes' : 'NO')

export function table(title: string, rows: Row[]): string {
  const cols: Array<[keyof Row, string]> = [
    ['measurement', 'measurement'],
    ['db', 'db'],
    ['figure', 'figure'],
    ['floor', 'floor'],
    ['ratio', 'ratio'],
    ['target', 'target'],
    ['met', 'met?'],
  ]
  const width = cols.map(([k, h]) => Math.max(h.length, ...rows.map((r) => String(r[k]).length)))
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(width[i])).join(' | ')} |`
  const out = [`\n## ${title}\n`, line(cols.map(([, h]) => h)), `|${width.map((w) => '-'.repeat(w + 2)).join('|')}|`]
  for (const r of rows) out.push(line(cols.map(([k]) => String(r[k]))))
  return out.join('\n')
}
