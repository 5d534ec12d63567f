// GET /metrics (API.md §8) on one database (docs/testing.md), read with the strict text-format reader of
// test/helpers/prom-text.ts: the histograms (turns, model attempts and their first token, tool calls by
// kind, HTTP) and the counters move by exactly what a turn did; failed, cancelled and retried attempts,
// compactions and a crash-repair takeover are counted; the gauges follow running sessions, held leases
// and SSE and WebSocket subscribers; and no label ever carries a session id.

import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import { openSse, startTestApp, type TestApp } from '../helpers/app.js'
import { d } from '../helpers/events.js'
import { gate, type Recorded } from '../helpers/scripted.js'
import { until } from '../helpers/wait.js'
import { wsAttempt } from '../helpers/ws.js'
import { histogramSeries, labelsMatch, parsePromText, type Family } from '../helpers/prom-text.js'
import { SUMMARY_INSTRUCTION } from '../../src/plugins/compaction.js'
import { leaveCrashedTurn } from '../helpers/crashed.js'

type Scrape = Map<string, Family>

const isSummaryCall = (r: Recorded) => JSON.stringify(r.context.messages.at(-1)).includes(SUMMARY_INSTRUCTION)

describe.each(APP_DB_KINDS)('GET /metrics on %s', (kind) => {
  let t: TestApp
  let toolServer: http.Server
  let toolUrl: string
  /** every session id this file created: none may appear in a label */
  const ids: string[] = []

  beforeAll(async () => {
    toolServer = http.createServer((req, res) => {
      let body = ''
      req.on('data', (c) => (body += c))
      req.on('end', () => {
        res.setHeader('content-type', 'application/json')
        res.end(JSON.stringify({ content: `echo ${JSON.parse(body).arguments.text}` }))
      })
    })
    await new Promise<void>((r) => toolServer.listen(0, '127.0.0.1', r))
    toolUrl = `http://127.0.0.1:${(toolServer.address() as AddressInfo).port}/`
    t = await startTestApp({
      kind,
      env: { AGENTD_RATE_LIMIT_PER_MIN: '1000000' },
      plugins: [
        (root: any) =>
          root.plugin({
            name: 'metrics-test-tools',
            apply(ctx: any) {
              ctx.tools.register({ name: 'add', description: 'Adds', parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } } }, execute: async (a: { a: number; b: number }) => ({ content: String(a.a + a.b) }) })
            },
          }),
      ],
    })
  })
  afterAll(async () => {
    await t?.close()
    toolServer?.close()
  })

  const create = async (body: Record<string, unknown> = {}) => {
    const s = await t.createSession(body)
    ids.push(s.id)
    return s
  }
  const followup = (id: string, content: string) => t.api('POST', `/v1/sessions/${id}/followup`, { content })

  /** Scrapes, parses strictly, and checks that no label names a session. */
  const scrape = async (): Promise<Scrape> => {
    const res = await fetch(`${t.url}/metrics`)
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/)
    const m = parsePromText(await res.text())
    for (const f of m.values()) {
      for (const s of f.samples) {
        for (const v of Object.values(s.labels)) {
          expect(ids.some((id) => v.includes(id)), `${s.name} label ${v} names a session`).toBe(false)
          expect(v, `${s.name} label looks like an id`).not.toMatch(/ses_[A-Za-z0-9_-]{8,}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/)
        }
      }
    }
    return m
  }
  const family = (m: Scrape, name: string, type: Family['type']) => {
    const f = m.get(name)
    expect(f, `${name} is served`).toBeDefined()
    expect(f!.type).toBe(type)
    return f!
  }
  /** the sum of a counter's or gauge's samples whose labels include `labels` */
  const value = (m: Scrape, name: string, labels: Record<string, string> = {}) => {
    const f = m.get(name)
    if (!f) return 0
    return f.samples.filter((s) => s.name === name && labelsMatch(s.labels, labels)).reduce((a, s) => a + s.value, 0)
  }
  /** a histogram's count and sum over its series whose labels include `labels` */
  const hist = (m: Scrape, name: string, labels: Record<string, string> = {}) => {
    const series = histogramSeries(family(m, name, 'histogram')).filter((s) => labelsMatch(s.labels, labels))
    return { count: series.reduce((a, s) => a + s.count, 0), sum: series.reduce((a, s) => a + s.sum, 0) }
  }
  const moved = (a: Scrape, b: Scrape, name: string, labels: Record<string, string> = {}) => value(b, name, labels) - value(a, name, labels)
  const histMoved = (a: Scrape, b: Scrape, name: string, labels: Record<string, string> = {}) => {
    const x = hist(a, name, labels)
    const y = hist(b, name, labels)
    return { count: y.count - x.count, sum: y.sum - x.sum }
  }

  it('serves the default process metrics and every agentd family with its type, histograms complete', async () => {
    const m = await scrape()
    for (const name of ['process_cpu_seconds_total', 'process_resident_memory_bytes', 'nodejs_eventloop_lag_seconds', 'nodejs_heap_size_used_bytes']) expect(m.has(name), name).toBe(true)
    for (const [name, type] of [
      ['agentd_http_request_duration_seconds', 'histogram'],
      ['agentd_turn_duration_seconds', 'histogram'],
      ['agentd_model_attempt_duration_seconds', 'histogram'],
      ['agentd_model_time_to_first_token_seconds', 'histogram'],
      ['agentd_tool_call_duration_seconds', 'histogram'],
      ['agentd_turns_total', 'counter'],
      ['agentd_llm_retries_total', 'counter'],
      ['agentd_compactions_total', 'counter'],
      ['agentd_lease_takeovers_total', 'counter'],
      ['agentd_sessions_running', 'gauge'],
      ['agentd_leases_held', 'gauge'],
      ['agentd_stream_subscribers', 'gauge'],
    ] as const)
      family(m, name, type)
    // the scrape itself is not counted until it is answered; the one before it is
    await scrape()
    expect(hist(await scrape(), 'agentd_http_request_duration_seconds', { method: 'GET', route: '/metrics', status: '200' }).count).toBeGreaterThanOrEqual(2)
  })

  it('a turn with a builtin, an http and a client tool call moves the histograms and counters by exactly what it did', async () => {
    const s = await create({
      tools: [
        { name: 'add', execution: { type: 'builtin' } },
        { name: 'echo', description: 'echo', parameters: { type: 'object', properties: { text: { type: 'string' } } }, execution: { type: 'http', url: toolUrl } },
        { name: 'ask', description: 'asks the user', parameters: { type: 'object', properties: {} }, execution: { type: 'client' } },
      ],
    })
    t.models.script(
      s.id,
      { text: ['Let me work.'], toolCalls: [{ id: 'c_add', name: 'add', arguments: { a: 2, b: 3 } }, { id: 'c_echo', name: 'echo', arguments: { text: 'hi' } }, { id: 'c_ask', name: 'ask', arguments: {} }] },
      { text: ['All done.'] },
    )
    const before = await scrape()
    expect((await followup(s.id, 'work')).status).toBe(202)
    const pending = await until('the client call', async () => (await t.api('GET', `/v1/sessions/${s.id}/pending`)).body.toolCalls.find((c: any) => c.callId === 'c_ask'))
    expect(pending.kind).toBe('client')
    expect((await t.api('POST', `/v1/sessions/${s.id}/tool-results`, { callId: 'c_ask', content: 'blue' })).status).toBe(202)
    const log = await t.waitIdle(s.id)
    expect(log.filter((e) => e.type === 'turn/end').map((e) => d(e).reason)).toEqual([{ kind: 'completed' }])
    const after = await scrape()

    const turn = histMoved(before, after, 'agentd_turn_duration_seconds', { reason: 'completed' })
    expect(turn.count).toBe(1)
    expect(turn.sum).toBeGreaterThan(0)
    expect(moved(before, after, 'agentd_turns_total', { reason: 'completed' })).toBe(1)
    expect(moved(before, after, 'agentd_turns_total')).toBe(1)
    expect(moved(before, after, 'agentd_steps_total')).toBe(2)
    const attempts = histMoved(before, after, 'agentd_model_attempt_duration_seconds', { provider: 'test', outcome: 'ok' })
    expect(attempts.count).toBe(2)
    expect(attempts.sum).toBeGreaterThan(0)
    expect(histMoved(before, after, 'agentd_model_attempt_duration_seconds').count).toBe(2)
    // both answers streamed text: each has a first token, no later than its attempt's end
    const first = histMoved(before, after, 'agentd_model_time_to_first_token_seconds', { provider: 'test', outcome: 'ok' })
    expect(first.count).toBe(2)
    expect(first.sum).toBeLessThanOrEqual(attempts.sum)
    expect(moved(before, after, 'agentd_attempts_total', { outcome: 'message' })).toBe(2)
    for (const k of ['builtin', 'http', 'client']) expect(histMoved(before, after, 'agentd_tool_call_duration_seconds', { kind: k }).count, k).toBe(1)
    expect(histMoved(before, after, 'agentd_tool_call_duration_seconds').count).toBe(3)
    expect(moved(before, after, 'agentd_tool_calls_total', { code: 'ok' })).toBe(3)
    expect(histMoved(before, after, 'agentd_http_request_duration_seconds', { method: 'POST', route: '/v1/sessions/:id/followup', status: '202' }).count).toBe(1)
    expect(histMoved(before, after, 'agentd_http_request_duration_seconds', { method: 'POST', route: '/v1/sessions/:id/tool-results', status: '202' }).count).toBe(1)
    // the driver wrote every event of the log but the followup's splice, which intake wrote
    expect(moved(before, after, 'agentd_event_appends_total')).toBe(log.length - 1)
    expect(moved(before, after, 'agentd_llm_retries_total')).toBe(0)
  })

  it('counts failed, cancelled and retried attempts by outcome, and failed and cancelled turns by reason', async () => {
    const before = await scrape()
    // SERVER is retried by llm-retry inside the step, then the turn completes
    const retried = await create()
    t.models.script(retried.id, { error: '500 upstream exploded' }, { text: ['second time lucky'] })
    await followup(retried.id, 'try')
    const log1 = await t.waitIdle(retried.id, 20000)
    expect(log1.filter((e) => e.type === 'llm/retry-started')).toHaveLength(1)
    // AUTH is not retried: the turn fails
    const failed = await create()
    t.models.script(failed.id, { error: '401 Incorrect API key provided' })
    await followup(failed.id, 'fail')
    await t.waitIdle(failed.id)
    // a hung answer, cancelled after its first delta
    const cancelled = await create()
    t.models.script(cancelled.id, { text: ['thinking'], hang: true })
    const sse = await openSse(`${t.url}/v1/sessions/${cancelled.id}/stream`, { authorization: `Bearer ${t.key}` })
    try {
      await sse.waitFor((f) => f.event === 'stream/ready')
      await followup(cancelled.id, 'hang')
      await sse.waitFor((f) => f.event === 'agent/assistant-stream' && f.json?.kind === 'chunk' && f.json.chunk.type === 'text-delta')
    } finally {
      sse.close()
    }
    expect((await t.api('POST', `/v1/sessions/${cancelled.id}/cancel`, {})).status).toBe(202)
    const log3 = await t.waitIdle(cancelled.id)
    expect(log3.filter((e) => e.type === 'assistant/message' && d(e).interrupted)).toHaveLength(1)
    const after = await scrape()

    expect(moved(before, after, 'agentd_llm_retries_total', { provider: 'test' })).toBe(1)
    expect(moved(before, after, 'agentd_llm_retries_total')).toBe(1)
    expect(moved(before, after, 'agentd_turns_total', { reason: 'completed' })).toBe(1)
    expect(moved(before, after, 'agentd_turns_total', { reason: 'error' })).toBe(1)
    expect(moved(before, after, 'agentd_turns_total', { reason: 'aborted' })).toBe(1)
    for (const reason of ['completed', 'error', 'aborted']) expect(histMoved(before, after, 'agentd_turn_duration_seconds', { reason }).count, reason).toBe(1)
    expect(histMoved(before, after, 'agentd_model_attempt_duration_seconds', { provider: 'test', outcome: 'ok' }).count).toBe(1)
    expect(histMoved(before, after, 'agentd_model_attempt_duration_seconds', { provider: 'test', outcome: 'error' }).count).toBe(2)
    expect(histMoved(before, after, 'agentd_model_attempt_duration_seconds', { provider: 'test', outcome: 'aborted' }).count).toBe(1)
    // the failures streamed no token; the cancelled answer had shown 'thinking' when it was cancelled
    expect(histMoved(before, after, 'agentd_model_time_to_first_token_seconds', { outcome: 'error' }).count).toBe(0)
    expect(histMoved(before, after, 'agentd_model_time_to_first_token_seconds', { outcome: 'aborted' }).count).toBe(1)
    expect(histMoved(before, after, 'agentd_model_time_to_first_token_seconds', { outcome: 'ok' }).count).toBe(1)
    // settlements: the two failures as assistant/attempt, the retried and the interrupted answers as messages
    expect(moved(before, after, 'agentd_attempts_total', { outcome: 'attempt' })).toBe(2)
    expect(moved(before, after, 'agentd_attempts_total', { outcome: 'message' })).toBe(2)
  })

  it('counts compactions by outcome', async () => {
    const s = await create()
    const long = (c: string) => c.repeat(3000)
    t.models.script(s.id, { text: [long('a')] }, { text: [long('b')] }, { text: [long('c')] })
    for (let i = 1; i <= 3; i++) {
      await followup(s.id, `turn ${i} ${long('q')}`)
      await t.waitForTurnEnd(s.id, i)
    }
    await t.waitIdle(s.id)
    const before = await scrape()
    // a summary call that fails: compaction/end {error}, nothing compacted
    t.models.script(s.id, { error: '400 the summary was refused' })
    expect((await t.api('POST', `/v1/sessions/${s.id}/compact`)).body).toEqual({ compacted: false })
    const mid = await scrape()
    expect(moved(before, mid, 'agentd_compactions_total', { outcome: 'failed' })).toBe(1)
    expect(moved(before, mid, 'agentd_compactions_total', { outcome: 'compacted' })).toBe(0)
    t.models.fallback(s.id, (r) => (isSummaryCall(r) ? { text: ['summary of three long turns'] } : { text: ['x'] }))
    expect((await t.api('POST', `/v1/sessions/${s.id}/compact`)).body).toEqual({ compacted: true })
    const after = await scrape()
    expect(moved(mid, after, 'agentd_compactions_total', { outcome: 'compacted' })).toBe(1)
    expect(moved(mid, after, 'agentd_compactions_total', { outcome: 'failed' })).toBe(0)
    expect((await t.events(s.id)).filter((e) => e.type === 'compaction/end').map((e) => 'error' in d(e))).toEqual([true, false])
  })

  it('a crash-repair takeover counts a claim, a takeover and an interrupted turn', async () => {
    const s = await create()
    const before = await scrape()
    await leaveCrashedTurn(t.app.db, s.id)
    await t.waitFor(s.id, (e) => e.type === 'session/end-seed', 8000)
    await t.waitIdle(s.id)
    const after = await scrape()
    expect(moved(before, after, 'agentd_lease_takeovers_total')).toBe(1)
    expect(moved(before, after, 'agentd_lease_claims_total')).toBe(1)
    expect(moved(before, after, 'agentd_turns_total', { reason: 'interrupted' })).toBe(1)
    // the process did not run the turn, so there is no duration to observe
    expect(histMoved(before, after, 'agentd_turn_duration_seconds').count).toBe(0)
    // SPEC §19.5: the cancel pending at the crash declined the continuation
    expect(moved(before, after, 'agentd_continuations_total', { decision: 'cancelled' })).toBe(1)
    expect(moved(before, after, 'agentd_continuations_total', { decision: 'continue' })).toBe(0)
  })

  it('a continuation after crash repair counts as decision continue, and its turn by its end reason', async () => {
    const s = await create()
    t.models.script(s.id, { text: ['back'] })
    const before = await scrape()
    await leaveCrashedTurn(t.app.db, s.id, { cancel: false })
    await t.waitForTurnEnd(s.id, 2, 10000)
    await t.waitIdle(s.id)
    const after = await scrape()
    expect(moved(before, after, 'agentd_continuations_total', { decision: 'continue' })).toBe(1)
    expect(moved(before, after, 'agentd_turns_total', { reason: 'interrupted' })).toBe(1)
    expect(moved(before, after, 'agentd_turns_total', { reason: 'completed' })).toBe(1)
  })

  it('gauges: running sessions, held leases (as the database has them), SSE and WebSocket subscribers', async () => {
    const held = async () => (await t.app.db.query<{ n: number }>('SELECT count(*)::int AS n FROM sessions WHERE lease_owner = $1', [t.app.host!.owner])).rows[0].n
    const s = await create()
    const g = gate()
    t.models.script(s.id, { text: ['slow'], gate: g.promise })
    const idle = await scrape()
    expect(value(idle, 'agentd_sessions_running')).toBe(0)
    await followup(s.id, 'wait')
    await t.waitFor(s.id, (e) => e.type === 'step/start')
    const running = await scrape()
    expect(value(running, 'agentd_sessions_running')).toBe(1)
    expect(value(running, 'agentd_leases_held')).toBe(await held())
    expect(value(running, 'agentd_leases_held')).toBeGreaterThanOrEqual(1)
    g.open()
    await t.waitIdle(s.id)
    await until('no running session', async () => value(await scrape(), 'agentd_sessions_running') === 0)

    // the streams earlier tests opened are closed by now (their server side ends asynchronously)
    await until('no subscribers', async () => value(await scrape(), 'agentd_stream_subscribers') === 0)
    const base = 0
    const sse = await openSse(`${t.url}/v1/sessions/${s.id}/stream`, { authorization: `Bearer ${t.key}` })
    await sse.waitFor((f) => f.event === 'stream/ready')
    const ws = await wsAttempt(`${t.url.replace(/^http/, 'ws')}/v1/sessions/${s.id}/ws`, { authorization: `Bearer ${t.key}` })
    expect(ws.open).toBe(true)
    await until('both subscribers counted', async () => value(await scrape(), 'agentd_stream_subscribers') === base + 2)
    sse.close()
    if (ws.open) ws.ws.close()
    await until('both subscribers gone', async () => value(await scrape(), 'agentd_stream_subscribers') === base)
  })
})
