// A strict reader of the Prometheus text exposition format (version 0.0.4), written for the tests from
// the format's description: prom-client only writes it, and the one parser on npm
// (parse-prometheus-text-format) folds every labelled histogram into one, dropping its labels, _sum and
// _count. This one throws on anything a Prometheus server would refuse or that breaks the format's
// rules: bad names, label syntax or escapes, values, HELP/TYPE placement, a family split in two,
// duplicate series, counters below zero, and histograms whose buckets do not add up.

export type MetricType = 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped'

export interface Sample {
  /** the sample's own name (`x_bucket`, `x_sum`, … for a histogram) */
  name: string
  labels: Record<string, string>
  value: number
}

export interface Family {
  name: string
  type: MetricType
  help?: string
  samples: Sample[]
}

export interface HistogramSeries {
  labels: Record<string, string>
  /** cumulative counts by upper bound, in increasing order, +Inf last */
  buckets: Array<{ le: number; count: number }>
  sum: number
  count: number
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/
const TYPES = new Set<MetricType>(['counter', 'gauge', 'histogram', 'summary', 'untyped'])

export class PromTextError extends Error {
  constructor(line: number, message: string, text: string) {
    super(`line ${line}: ${message}: ${JSON.stringify(text)}`)
    this.name = 'PromTextError'
  }
}

/** A float as Go's ParseFloat reads it (the format's definition): NaN and Inf in any case. */
function parseValue(s: string): number | undefined {
  if (/^[+]?(inf|infinity)$/i.test(s)) return Infinity
  if (/^-(inf|infinity)$/i.test(s)) return -Infinity
  if (/^nan$/i.test(s)) return NaN
  if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(s)) return undefined
  return Number(s)
}

/** The sample line `name{labels} value [timestamp]`. */
function parseSample(text: string, fail: (msg: string) => never): Sample {
  let i = 0
  while (i < text.length && /[a-zA-Z0-9_:]/.test(text[i])) i++
  const name = text.slice(0, i)
  if (!METRIC_NAME.test(name)) fail('bad metric name')
  const labels: Record<string, string> = {}
  if (text[i] === '{') {
    i++
    for (;;) {
      if (text[i] === '}') {
        i++
        break
      }
      const start = i
      while (i < text.length && /[a-zA-Z0-9_]/.test(text[i])) i++
      const label = text.slice(start, i)
      if (!LABEL_NAME.test(label)) fail('bad label name')
      if (label in labels) fail(`label ${label} twice`)
      if (text[i] !== '=' || text[i + 1] !== '"') fail('a label needs ="value"')
      i += 2
      let value = ''
      for (;;) {
        const c = text[i++]
        if (c === undefined) fail('unterminated label value')
        if (c === '"') break
        if (c === '\n') fail('newline in a label value')
        if (c === '\\') {
          const e = text[i++]
          if (e === '\\') value += '\\'
          else if (e === '"') value += '"'
          else if (e === 'n') value += '\n'
          else fail('bad escape in a label value')
        } else value += c
      }
      labels[label] = value
      if (text[i] === ',') i++
      else if (text[i] !== '}') fail('labels are separated by commas')
    }
  }
  if (text[i] !== ' ' && text[i] !== '\t') fail('a sample needs a value after its name')
  const rest = text.slice(i).trim().split(/[ \t]+/)
  if (rest.length < 1 || rest.length > 2) fail('a sample is name, value and an optional timestamp')
  const value = parseValue(rest[0])
  if (value === undefined) fail('bad value')
  if (rest.length === 2 && !/^-?\d+$/.test(rest[1])) fail('bad timestamp')
  return { name, labels, value }
}

/** The family a sample name belongs to, given the families declared so far. */
function familyOf(sample: string, typed: Map<string, MetricType>): string {
  for (const suffix of ['_bucket', '_sum', '_count']) {
    if (!sample.endsWith(suffix)) continue
    const base = sample.slice(0, -suffix.length)
    const t = typed.get(base)
    if (t === 'histogram' || (t === 'summary' && suffix !== '_bucket')) return base
  }
  return sample
}

const seriesKey = (s: Sample) => `${s.name}{${Object.keys(s.labels).sort().map((k) => `${k}=${JSON.stringify(s.labels[k])}`).join(',')}}`

/** Parses a whole exposition; throws PromTextError on the first violation. */
export function parsePromText(text: string): Map<string, Family> {
  if (text.length && !text.endsWith('\n')) throw new PromTextError(0, 'the exposition must end with a newline', text.slice(-40))
  const families = new Map<string, Family>()
  const typed = new Map<string, MetricType>()
  const closed = new Set<string>()
  const seen = new Set<string>()
  let current: string | undefined
  const lines = text.split('\n')
  lines.pop()
  const enter = (name: string, n: number, line: string) => {
    if (current === name) return families.get(name)!
    if (closed.has(name) || families.has(name)) throw new PromTextError(n, `family ${name} is split in two`, line)
    if (current) closed.add(current)
    current = name
    const f: Family = { name, type: typed.get(name) ?? 'untyped', samples: [] }
    families.set(name, f)
    return f
  }
  lines.forEach((line, idx) => {
    const n = idx + 1
    const fail = (msg: string): never => {
      throw new PromTextError(n, msg, line)
    }
    if (line.trim() === '') return
    if (line.startsWith('#')) {
      const m = /^#[ \t]+(HELP|TYPE)[ \t]+(\S+)(?:[ \t]+(.*))?$/.exec(line)
      if (!m) return // a plain comment
      const [, kind, name, rest = ''] = m
      if (!METRIC_NAME.test(name)) fail('bad metric name')
      if (kind === 'TYPE') {
        if (!TYPES.has(rest as MetricType)) fail('unknown type')
        if (typed.has(name)) fail(`a second TYPE for ${name}`)
        if (families.get(name)?.samples.length) fail(`TYPE of ${name} after its samples`)
        typed.set(name, rest as MetricType)
        enter(name, n, line).type = rest as MetricType
      } else {
        const f = enter(name, n, line)
        if (f.help !== undefined) fail(`a second HELP for ${name}`)
        if (/\\[^\\n]/.test(rest.replace(/\\\\/g, ''))) fail('bad escape in HELP')
        f.help = rest.replace(/\\(\\|n)/g, (_x, c: string) => (c === 'n' ? '\n' : '\\'))
      }
      return
    }
    const sample = parseSample(line, fail)
    const family = enter(familyOf(sample.name, typed), n, line)
    const key = seriesKey(sample)
    if (seen.has(key)) fail(`series ${key} twice`)
    seen.add(key)
    if (family.type === 'counter' && !(sample.value >= 0)) fail('a counter below zero')
    if (family.type === 'histogram' && sample.name === `${family.name}_bucket` && !('le' in sample.labels)) fail('a bucket without le')
    family.samples.push(sample)
  })
  for (const f of families.values()) if (f.type === 'histogram') histogramSeries(f)
  return families
}

const without = (labels: Record<string, string>, drop: string) => Object.fromEntries(Object.entries(labels).filter(([k]) => k !== drop))

/** A histogram family's series, checked: increasing bounds, cumulative counts, +Inf equal to _count, a _sum. */
export function histogramSeries(f: Family): HistogramSeries[] {
  if (f.type !== 'histogram') throw new Error(`${f.name} is a ${f.type}, not a histogram`)
  const byKey = new Map<string, HistogramSeries>()
  const of = (labels: Record<string, string>) => {
    const k = JSON.stringify(Object.entries(labels).sort())
    let s = byKey.get(k)
    if (!s) byKey.set(k, (s = { labels, buckets: [], sum: NaN, count: NaN }))
    return s
  }
  for (const x of f.samples) {
    if (x.name === `${f.name}_bucket`) {
      const le = parseValue(x.labels.le)
      if (le === undefined || Number.isNaN(le)) throw new Error(`${f.name}: bad le ${x.labels.le}`)
      of(without(x.labels, 'le')).buckets.push({ le, count: x.value })
    } else if (x.name === `${f.name}_sum`) of(x.labels).sum = x.value
    else if (x.name === `${f.name}_count`) of(x.labels).count = x.value
    else throw new Error(`${f.name}: sample ${x.name} does not belong to a histogram`)
  }
  const out = [...byKey.values()]
  for (const s of out) {
    const where = `${f.name}${JSON.stringify(s.labels)}`
    if (Number.isNaN(s.sum) || Number.isNaN(s.count)) throw new Error(`${where}: needs _sum and _count`)
    if (!s.buckets.length || s.buckets.at(-1)!.le !== Infinity) throw new Error(`${where}: the last bucket must be le="+Inf"`)
    for (let i = 1; i < s.buckets.length; i++) {
      if (!(s.buckets[i].le > s.buckets[i - 1].le)) throw new Error(`${where}: bucket bounds must increase`)
      if (s.buckets[i].count < s.buckets[i - 1].count) throw new Error(`${where}: bucket counts must be cumulative`)
    }
    if (s.buckets.at(-1)!.count !== s.count) throw new Error(`${where}: the +Inf bucket (${s.buckets.at(-1)!.count}) differs from _count (${s.count})`)
  }
  return out
}

/** Whether every label of `want` is in `labels` with the same value. */
export const labelsMatch = (labels: Record<string, string>, want: Record<string, string>) => Object.entries(want).every(([k, v]) => labels[k] === v)
