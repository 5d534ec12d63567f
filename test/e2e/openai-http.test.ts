// End to end over HTTP + SSE: the session's model is served by a local OpenAI-compatible server through
// pi-ai's real openai-completions client, configured by a models file (AGENTD_MODELS). A simple turn, a
// tool round trip, retries and a cancel mid-stream, on one database (docs/testing.md).
//
// The app is started here with startApp (not test/helpers/app.ts): startTestApp passes
// llm.models = {providers:{}}, which wins over the models file, so AGENTD_MODELS would be ignored.

import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import type { AddressInfo } from 'node:net'
import pino from 'pino'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS, openTestDb, type TestDb } from '../helpers/db.js'
import { ADMIN_TOKEN, openSse, type SseFrame } from '../helpers/app.js'
import { startOpenAiServer, type OpenAiServer } from '../helpers/openai-server.js'
import { expectValidLog, reconstructionCheck } from '../helpers/invariants.js'
import { loadConfig } from '../../src/config.js'
import { startApp, type App } from '../../src/app.js'
import type { SessionEvent } from '../../src/session/index.js'

const types = (evs: Array<{ type: string }>) => evs.map((e) => e.type)
const ofType = (evs: SessionEvent[], type: string) => evs.filter((e) => e.type === type)
const d = (e: SessionEvent | undefined) => e?.data as any
const turnEnd = (evs: SessionEvent[], turn: number) => evs.find((e) => e.type === 'turn/end' && d(e).turn === turn)

describe.each(APP_DB_KINDS)('HTTP + SSE through pi-ai openai-completions on %s', (kind) => {
  let srv: OpenAiServer
  let testDb: TestDb
  let app: App
  let key = ''
  let dir = ''
  let echo: http.Server
  let echoUrl = ''
  const problems: string[] = []

  const api = async (method: string, p: string, body?: unknown, auth = key) => {
    const headers: Record<string, string> = { authorization: `Bearer ${auth}` }
    if (body !== undefined) headers['content-type'] = 'application/json'
    const res = await fetch(app.url + p, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
    const text = await res.text()
    return { status: res.status, body: text ? JSON.parse(text) : undefined }
  }
  const events = async (id: string): Promise<SessionEvent[]> => (await api('GET', `/v1/sessions/${id}/events?limit=5000`)).body.events
  const stream = (id: string) => openSse(`${app.url}/v1/sessions/${id}/stream`, { authorization: `Bearer ${key}` })
  const durable = (frames: SseFrame[]) => frames.filter((f) => f.event === 'session/event').map((f) => f.json as SessionEvent)
  const turnEndFrame = (turn: number) => (f: SseFrame) => f.event === 'session/event' && f.json?.type === 'turn/end' && f.json.data.turn === turn

  beforeAll(async () => {
    srv = await startOpenAiServer()
    echo = http.createServer((req, res) => {
      let raw = ''
      req.on('data', (c) => (raw += c))
      req.on('end', () => {
        const b = JSON.parse(raw)
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end(JSON.stringify({ content: `echo ${b.arguments.text}` }))
      })
    })
    await new Promise<void>((r) => echo.listen(0, '127.0.0.1', r))
    echoUrl = `http://127.0.0.1:${(echo.address() as AddressInfo).port}/`
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agentd-e2e-'))
    const modelsFile = path.join(dir, 'models.json')
    fs.writeFileSync(
      modelsFile,
      JSON.stringify({
        providers: {
          local: {
            api: 'openai-completions',
            baseUrl: srv.baseUrl,
            apiKey: 'literal-key',
            retry: { initialDelayMs: 20, maxDelayMs: 2000, jitterRatio: 0 },
            models: [{ id: 'm', contextWindow: 8192, maxTokens: 1024 }],
          },
        },
      }),
    )
    testDb = await openTestDb(kind)
    const config = loadConfig({
      PORT: '0',
      HOST: '127.0.0.1',
      AGENTD_ADMIN_TOKEN: ADMIN_TOKEN,
      AGENTD_DATA_DIR: testDb.dataDir ?? dir,
      AGENTD_MODELS: modelsFile,
      AGENTD_TOOL_HOSTS: '127.0.0.1,localhost',
      AGENTD_RATE_LIMIT_PER_MIN: '1000000',
      LOG_LEVEL: 'silent',
      ...(testDb.url ? { DATABASE_URL: testDb.url } : {}),
    })
    app = await startApp(config, { db: testDb.db, log: pino({ level: 'silent' }), plugins: [(root) => reconstructionCheck(testDb.db, problems)(root)] })
    const admin = await api('POST', '/v1/admin/tenants', { name: 'e2e' }, ADMIN_TOKEN)
    expect(admin.status).toBe(201)
    key = admin.body.apiKey
  })
  afterAll(async () => {
    await app?.close()
    await testDb?.drop()
    await srv?.close()
    echo?.closeAllConnections()
    await new Promise((r) => echo?.close(r))
    fs.rmSync(dir, { recursive: true, force: true })
  })

  const createSession = async (body: Record<string, unknown> = {}) => {
    const r = await api('POST', '/v1/sessions', { system: 'P', ...body })
    expect(r.status).toBe(201)
    // the models file's first model is the default (API.md §1)
    expect(r.body.model).toBe('local/m')
    return r.body as { id: string }
  }

  it('a simple turn: the request reaches the server with the literal key, SSE carries every event, status and stream frames', async () => {
    const s = await createSession()
    const sse = await stream(s.id)
    try {
      expect(sse.status).toBe(200)
      await sse.waitFor((f) => f.event === 'stream/ready')
      const n = srv.requests.length
      srv.script({ chunks: ['Hel', 'lo'], usage: { prompt_tokens: 12, completion_tokens: 2 } })
      expect((await api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })).status).toBe(202)
      await sse.waitFor(turnEndFrame(1))
      await sse.waitFor((f) => f.event === 'agent/status' && f.json.status === 'idle' && sse.frames.indexOf(f) > sse.frames.findIndex(turnEndFrame(1)))
      const evs = await events(s.id)
      expect(types(evs)).toEqual([
        'agent/inbox/spliced', 'turn/start', 'agent/inbox/spliced', 'step/start', 'system/message', 'user/message',
        'request/header', 'request/context', 'assistant/message', 'step/end', 'turn/end',
      ])
      // SSE: every durable event once, in order, its id the seq
      const sseEvents = durable(sse.frames)
      expect(sseEvents).toEqual(evs)
      expect(sse.frames.filter((f) => f.event === 'session/event').map((f) => Number(f.id))).toEqual(evs.map((e) => e.seq))
      // status: the connect frame, then running and idle
      expect(sse.frames.filter((f) => f.event === 'agent/status').map((f) => f.json.status)).toEqual(['idle', 'running', 'idle'])
      // stream frames: start, dense chunks, end naming the committed message (sent after it)
      const fr = sse.frames.filter((f) => f.event === 'agent/assistant-stream').map((f) => f.json)
      expect(fr[0]).toMatchObject({ kind: 'start', turn: 1, step: 1 })
      const chunks = fr.filter((f) => f.kind === 'chunk')
      expect(chunks.map((c) => c.index)).toEqual(chunks.map((_, i) => i))
      expect(chunks.filter((c) => c.chunk.type === 'text-delta').map((c) => c.chunk.text)).toEqual(['Hel', 'lo'])
      const am = ofType(evs, 'assistant/message')[0]
      const end = fr.at(-1)
      expect(end).toMatchObject({ kind: 'end', index: chunks.length, outcome: { kind: 'committed', eventType: 'assistant/message', seq: am.seq } })
      const endAt = sse.frames.findIndex((f) => f.event === 'agent/assistant-stream' && f.json.kind === 'end')
      const amAt = sse.frames.findIndex((f) => f.event === 'session/event' && f.json.seq === am.seq)
      expect(amAt).toBeLessThan(endAt)
      expect(d(am).message.content).toEqual([{ type: 'text', text: 'Hello' }])
      expect(d(am).usage).toEqual({ inputTokens: 12, outputTokens: 2 })
      expect(d(am).message.source).toMatchObject({ kind: 'model', provider: 'local', model: 'm' })
      // the wire request
      expect(srv.requests.length).toBe(n + 1)
      const req = srv.requests[n]
      expect(req.path).toBe('/v1/chat/completions')
      expect(req.headers.authorization).toBe('Bearer literal-key')
      expect(req.body).toMatchObject({ model: 'm', stream: true })
      expect(req.body.messages).toEqual([
        { role: 'system', content: 'P' },
        { role: 'user', content: [{ type: 'text', text: 'hi' }] },
      ])
      expect(d(ofType(evs, 'request/header')[0]).header).toEqual({ config: { provider: 'local', model: 'm', maxTokens: 1024 }, adapterDefaults: { maxTokens: true } })
      expect((await api('GET', `/v1/sessions/${s.id}/messages`)).body.messages.map((m: any) => m.role)).toEqual(['system', 'user', 'assistant'])
      expectValidLog(evs)
      expect(problems).toEqual([])
    } finally {
      sse.close()
    }
  })

  it('a tool round trip: the tool call streams from the server, the http tool answers, request 2 carries the result', async () => {
    const s = await createSession({ tools: [{ name: 'echo', description: 'echoes', parameters: { type: 'object', properties: { text: { type: 'string' } } }, execution: { type: 'http', url: echoUrl } }] })
    const sse = await stream(s.id)
    try {
      const n = srv.requests.length
      srv.script({ toolCalls: [{ id: 'call_1', name: 'echo', arguments: { text: 'ping' }, argumentChunks: 3 }] }, { chunks: ['done'] })
      await api('POST', `/v1/sessions/${s.id}/followup`, { content: 'call it' })
      await sse.waitFor(turnEndFrame(1))
      const evs = await events(s.id)
      expect(types(evs).slice(3)).toEqual([
        'step/start', 'system/message', 'user/message', 'request/header', 'request/context', 'assistant/message', 'tool/call', 'tool/result', 'step/end',
        'step/start', 'assistant/message', 'step/end', 'turn/end',
      ])
      const tc = ofType(evs, 'tool/call')[0]
      expect(d(tc)).toMatchObject({ callId: 'call_1', name: 'echo', arguments: '{"text":"ping"}' })
      const tr = ofType(evs, 'tool/result')[0]
      expect(tr.sourceEventSeqs).toEqual([tc.seq])
      expect(d(tr).message.content[0].content).toEqual([{ type: 'text', text: 'echo ping' }])
      expect(durable(sse.frames)).toEqual(evs)
      // the second wire request holds the assistant tool call and the tool message
      expect(srv.requests.length).toBe(n + 2)
      const second = srv.requests[n + 1].body
      expect(second.tools.map((x: any) => x.function.name)).toEqual(['echo'])
      const assistant = second.messages.find((m: any) => m.role === 'assistant')
      expect(assistant.tool_calls.map((c: any) => [c.id, c.function.name, JSON.parse(c.function.arguments)])).toEqual([['call_1', 'echo', { text: 'ping' }]])
      const tool = second.messages.find((m: any) => m.role === 'tool')
      expect(tool.tool_call_id).toBe('call_1')
      expect(JSON.stringify(tool.content)).toContain('echo ping')
      expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'completed' })
      expectValidLog(evs)
      expect(problems).toEqual([])
    } finally {
      sse.close()
    }
  })

  it('retries: a 429 with retry-after-ms waits exactly that long, a 500 backs off, then the answer streams', async () => {
    const s = await createSession()
    const sse = await stream(s.id)
    try {
      const n = srv.requests.length
      srv.script({ error: { status: 429, headers: { 'retry-after-ms': '150' } } }, { error: { status: 500 } }, { chunks: ['third time'] })
      await api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })
      await sse.waitFor(turnEndFrame(1))
      const evs = await events(s.id)
      expect(types(evs).slice(8)).toEqual(['assistant/attempt', 'llm/retry', 'llm/retry-started', 'assistant/attempt', 'llm/retry', 'llm/retry-started', 'assistant/message', 'step/end', 'turn/end'])
      const [r1, r2] = ofType(evs, 'llm/retry')
      expect(d(r1)).toMatchObject({ provider: 'local', mode: 'normal', retry: 1, delayMs: 150, failure: { code: 'RATE_LIMIT', status: 429, providerRetryAfterMs: 150 } })
      expect(d(r2)).toMatchObject({ provider: 'local', retry: 2, delayMs: 40, failure: { code: 'SERVER', status: 500 } })
      expect(d(r2).retryId).toBe(d(r1).retryId)
      expect(srv.requests.length).toBe(n + 3)
      // the live frames: three attempts, settled as [attempt, attempt, message]
      const ends = sse.frames.filter((f) => f.event === 'agent/assistant-stream' && f.json.kind === 'end').map((f) => f.json.outcome.eventType)
      expect(ends).toEqual(['assistant/attempt', 'assistant/attempt', 'assistant/message'])
      expect(d(ofType(evs, 'assistant/message')[0]).message.content).toEqual([{ type: 'text', text: 'third time' }])
      expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'completed' })
      expectValidLog(evs)
      expect(problems).toEqual([])
    } finally {
      sse.close()
    }
  })

  it('a cancel mid-stream closes the provider request and keeps the visible prefix, dropping the partial tool call', async () => {
    const s = await createSession({ tools: [{ name: 'echo', description: 'echoes', parameters: { type: 'object', properties: { text: { type: 'string' } } }, execution: { type: 'http', url: echoUrl } }] })
    const sse = await stream(s.id)
    try {
      const n = srv.requests.length
      srv.script({ chunks: ['Hel', 'lo'], toolCalls: [{ id: 'call_x', name: 'echo', arguments: '{"text":"pi', argumentChunks: 1 }], hang: true })
      await api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })
      // the partial tool call has streamed: as a live chunk, or inside the snapshot a subscriber that
      // connected mid-attempt receives first (API.md §6)
      await sse.waitFor(
        (f) =>
          f.event === 'agent/assistant-stream' &&
          ((f.json.kind === 'chunk' && f.json.chunk.type === 'tool-call-delta') || (f.json.kind === 'snapshot' && f.json.stream.some((r: { type: string }) => r.type === 'tool-call-chunks'))),
      )
      const rec = await srv.waitForRequest(n)
      expect((await api('POST', `/v1/sessions/${s.id}/cancel`, {})).body).toEqual({ cancelled: true })
      await sse.waitFor(turnEndFrame(1))
      await rec.settled
      expect(rec.closedEarly).toBe(true)
      const evs = await events(s.id)
      const am = ofType(evs, 'assistant/message')
      expect(am).toHaveLength(1)
      expect(d(am[0]).interrupted).toBe(true)
      expect(d(am[0]).message.content).toEqual([{ type: 'text', text: 'Hello' }])
      expect(ofType(evs, 'tool/call')).toEqual([])
      expect(types(evs).slice(-3)).toEqual(['assistant/message', 'step/end', 'turn/end'])
      expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'aborted', reason: { kind: 'user' } })
      const end = await sse.waitFor((f) => f.event === 'agent/assistant-stream' && f.json.kind === 'end')
      expect(end.json.outcome).toEqual({ kind: 'committed', eventType: 'assistant/message', seq: am[0].seq })
      expect(srv.requests.length).toBe(n + 1)
      expect(durable(sse.frames)).toEqual(evs)
      expectValidLog(evs)
    } finally {
      sse.close()
    }
  })
})
