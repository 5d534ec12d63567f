// The tests' Prometheus text reader (test/helpers/prom-text.ts): it reads what prom-client writes,
// labelled histograms included, and refuses expositions that break the format, so the /metrics tests
// built on it can fail.

import client from 'prom-client'
import { describe, expect, it } from 'vitest'
import { histogramSeries, parsePromText } from '../helpers/prom-text.js'

describe('parsePromText', () => {
  it('reads prom-client output: counters, gauges and labelled histograms with their _sum and _count', async () => {
    const r = new client.Registry()
    const c = new client.Counter({ name: 'x_total', help: 'a "counter" \\ with\nnewline', labelNames: ['code'], registers: [r] })
    c.inc({ code: 'ok' }, 3)
    c.inc({ code: 'a "quoted" \\ value\nwith a newline' })
    new client.Gauge({ name: 'x_gauge', help: 'g', registers: [r] }).set(-2.5)
    const h = new client.Histogram({ name: 'x_seconds', help: 'h', labelNames: ['route'], buckets: [0.1, 1], registers: [r] })
    h.observe({ route: '/a' }, 0.05)
    h.observe({ route: '/a' }, 0.5)
    h.observe({ route: '/b' }, 2)
    const m = parsePromText(await r.metrics())
    expect([...m.keys()]).toEqual(['x_total', 'x_gauge', 'x_seconds'])
    const counter = m.get('x_total')!
    expect(counter.type).toBe('counter')
    expect(counter.help).toBe('a "counter" \\ with\nnewline')
    expect(counter.samples).toEqual([
      { name: 'x_total', labels: { code: 'ok' }, value: 3 },
      { name: 'x_total', labels: { code: 'a "quoted" \\ value\nwith a newline' }, value: 1 },
    ])
    expect(m.get('x_gauge')!.samples).toEqual([{ name: 'x_gauge', labels: {}, value: -2.5 }])
    const series = histogramSeries(m.get('x_seconds')!)
    expect(series).toEqual([
      { labels: { route: '/a' }, buckets: [{ le: 0.1, count: 1 }, { le: 1, count: 2 }, { le: Infinity, count: 2 }], sum: 0.55, count: 2 },
      { labels: { route: '/b' }, buckets: [{ le: 0.1, count: 0 }, { le: 1, count: 0 }, { le: Infinity, count: 1 }], sum: 2, count: 1 },
    ])
  })

  const valid = '# HELP a_seconds h\n# TYPE a_seconds histogram\na_seconds_bucket{le="1",k="v"} 1\na_seconds_bucket{le="+Inf",k="v"} 2\na_seconds_sum{k="v"} 3.5\na_seconds_count{k="v"} 2\n'
  it('accepts a well-formed exposition, comments, NaN and timestamps', () => {
    expect(() => parsePromText(valid)).not.toThrow()
    expect(parsePromText('# a comment\n# TYPE g gauge\ng Nan 1700000000000\ng2{a="b",} +Inf\n').get('g2')!.samples[0]).toEqual({ name: 'g2', labels: { a: 'b' }, value: Infinity })
  })

  it.each([
    ['no final newline', valid.slice(0, -1)],
    ['a bad metric name', '1abc 1\n'],
    ['a bad label name', 'a{1x="v"} 1\n'],
    ['an unquoted label value', 'a{k=v} 1\n'],
    ['an unterminated label value', 'a{k="v} 1\n'],
    ['a bad escape', 'a{k="\\t"} 1\n'],
    ['a label twice', 'a{k="1",k="2"} 1\n'],
    ['no value', 'a{k="v"}\n'],
    ['a bad value', 'a 1,5\n'],
    ['a bad timestamp', 'a 1 soon\n'],
    ['an unknown type', '# TYPE a countr\na 1\n'],
    ['TYPE twice', '# TYPE a gauge\n# TYPE a gauge\na 1\n'],
    ['TYPE after samples', 'a 1\n# TYPE a gauge\n'],
    ['a family split in two', '# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\na{x="y"} 2\n'],
    ['a series twice', 'a{k="v"} 1\na{k="v"} 2\n'],
    ['a counter below zero', '# TYPE a_total counter\na_total -1\n'],
    ['a histogram without +Inf', valid.replace('a_seconds_bucket{le="+Inf",k="v"} 2\n', '')],
    ['a histogram whose +Inf is not its _count', valid.replace('a_seconds_count{k="v"} 2', 'a_seconds_count{k="v"} 3')],
    ['a histogram without _sum', valid.replace('a_seconds_sum{k="v"} 3.5\n', '')],
    ['buckets that are not cumulative', valid.replace('le="1",k="v"} 1', 'le="1",k="v"} 5')],
    ['a bucket without le', valid.replace('le="1",', '')],
  ])('refuses %s', (_what, text) => {
    expect(() => parsePromText(text)).toThrow()
  })
})
