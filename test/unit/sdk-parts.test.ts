// The client SDK's pure parts: the SSE parser at every chunk boundary, Retry-After and backoff, and the
// transcript fold (partial answers from snapshots and chunks, the inbox from splices, waiting calls).

import { describe, expect, it } from 'vitest'
import { SseParser, backoffDelay, chunkCount, emptyTranscript, parseRetryAfter, reduceTranscript, withPending, type SessionEvent, type StreamFrame, type TranscriptView } from '../../clients/typescript/src/index.js'

const wire = '\ufeffevent: session/event\nid: 0\ndata: {"seq":0}\n\n: ping\n\nevent: agent/status\r\ndata: {"status":"running"}\r\n\r\ndata: line one\rdata: line two\r\rretry: 500\nevent: x\nid: 7\ndata\n\n'
const expected = [
  { event: 'session/event', id: '0', data: '{"seq":0}' },
  { event: 'agent/status', data: '{"status":"running"}' },
  { event: 'message', data: 'line one\nline two' },
  { event: 'x', id: '7', data: '', retry: 500 },
]

describe('SseParser', () => {
  it('reads LF, CRLF and CR line ends, comments, multi-line data, id, retry and a BOM', () => {
    const p = new SseParser()
    expect(p.push(wire)).toEqual(expected)
    expect(p.comments).toBe(1)
  })

  it('gives the same events whatever the chunk boundaries, a CRLF split in two included', () => {
    for (let cut = 1; cut < wire.length; cut++) {
      const p = new SseParser()
      expect([...p.push(wire.slice(0, cut)), ...p.push(wire.slice(cut))], `cut at ${cut}`).toEqual(expected)
    }
    const p = new SseParser()
    expect([...wire].flatMap((ch) => p.push(ch))).toEqual(expected)
  })

  it('holds an event until its blank line', () => {
    const p = new SseParser()
    expect(p.push('event: a\ndata: 1\n')).toEqual([])
    expect(p.push('\n')).toEqual([{ event: 'a', data: '1' }])
  })
})

describe('Retry-After and backoff', () => {
  it('reads seconds and HTTP dates, and nothing else', () => {
    expect(parseRetryAfter('2')).toBe(2000)
    expect(parseRetryAfter('0.5')).toBe(500)
    expect(parseRetryAfter('Wed, 01 Dec 2100 00:00:10 GMT', Date.parse('Wed, 01 Dec 2100 00:00:00 GMT'))).toBe(10000)
    expect(parseRetryAfter('soon')).toBeUndefined()
    expect(parseRetryAfter(null)).toBeUndefined()
  })

  it('doubles from the initial delay up to the ceiling, within ±25 %', () => {
    const o = { initialDelayMs: 100, maxDelayMs: 1000 }
    expect([1, 2, 3, 4, 5, 6].map((n) => backoffDelay(n, o, () => 0.5))).toEqual([100, 200, 400, 800, 1000, 1000])
    expect(backoffDelay(1, o, () => 0)).toBe(75)
    expect(backoffDelay(1, o, () => 1)).toBe(125)
  })
})

const ev = (seq: number, type: string, data: unknown, extra: Partial<SessionEvent> = {}): StreamFrame => ({ event: 'session/event', id: seq, data: { seq, time: 1, type, data, ...extra } as SessionEvent })
const fold = (frames: StreamFrame[], v: TranscriptView = emptyTranscript('s')) => frames.reduce(reduceTranscript, v)
const user = (id: string, text: string) => ({ id, role: 'user', content: [{ type: 'text', text }], source: { kind: 'user' } })

describe('reduceTranscript', () => {
  it('folds the inbox from splices, messages in surface order, turns and waiting calls', () => {
    const v = fold([
      ev(0, 'agent/inbox/spliced', { target: 'next-turn', start: 0, inserted: [user('u1', 'hi')] }),
      ev(1, 'agent/inbox/spliced', { target: 'next-step', start: 0, inserted: [user('c1', 'ctx')] }),
      ev(2, 'turn/start', { turn: 1 }),
      ev(3, 'agent/inbox/spliced', { target: 'next-turn', start: 0, removedCount: 1, inserted: [] }),
      ev(4, 'user/message', user('u1', 'hi'), { surfaceOp: 'append' }),
      ev(5, 'tool/call', { turn: 1, step: 1, callId: 'k1', name: 'lookup', arguments: '{}' }),
    ])
    expect(v.inbox).toEqual({ nextTurn: [], nextStep: [user('c1', 'ctx')] })
    expect(v.turn).toBe(1)
    expect(v.messages).toEqual([{ seq: 4, role: 'user', message: user('u1', 'hi'), turn: 1 }])
    expect(v.toolCalls).toEqual([{ seq: 5, callId: 'k1', name: 'lookup', arguments: '{}', turn: 1, step: 1 }])
    expect(withPending(v, [{ callId: 'k1', name: 'lookup', arguments: {}, rawArguments: '{}', kind: 'approval' }]).toolCalls[0]!.waitingFor).toBe('approval')
    const result = { id: 'r1', role: 'user', content: [{ type: 'tool-result', toolCallId: 'k1', isError: false, content: [] }], source: { kind: 'tool', callId: 'k1' } }
    const after = fold([ev(6, 'tool/result', { turn: 1, step: 1, message: result }, { surfaceOp: 'append', sourceEventSeqs: [5] }), ev(7, 'turn/end', { turn: 1, reason: { kind: 'completed' } })], v)
    expect(after.toolCalls).toEqual([])
    expect(after.messages.map((m) => m.role)).toEqual(['user', 'tool'])
    expect(after).toMatchObject({ turn: null, lastTurn: { turn: 1, reason: { kind: 'completed' } }, headSeq: 7 })
  })

  it('builds the partial answer from a snapshot and the chunks after it, notes a gap, and drops it at the end or a reconnect', () => {
    const records = [
      { type: 'text-chunks' as const, time0: 1, index: 0, dt: [0, 1], texts: ['Hel', 'lo'] },
      { type: 'tool-call-chunks' as const, time0: 3, index: 1, dt: [0, 1], id: 'k', name: 'f', args: ['{"a"', ':1}'] },
    ]
    expect(chunkCount(records)).toBe(4)
    const snap: StreamFrame = { event: 'agent/assistant-stream', data: { kind: 'snapshot', attemptId: 's:3', revision: 5, turn: 1, step: 1, stream: records } }
    const chunk = (index: number, text: string): StreamFrame => ({ event: 'agent/assistant-stream', data: { kind: 'chunk', attemptId: 's:3', revision: 6 + index, index, time: 9, chunk: { type: 'text-delta', index: 2, text } } })
    const v = fold([snap, chunk(4, ' world')])
    expect(v.partial).toMatchObject({ text: 'Hello world', toolCalls: [{ index: 1, id: 'k', name: 'f', arguments: '{"a":1}' }], nextIndex: 5, gap: false })
    expect(fold([chunk(6, '!')], v).partial).toMatchObject({ text: 'Hello world!', gap: true })
    expect(fold([{ event: 'agent/assistant-stream', data: { kind: 'end', attemptId: 's:3', revision: 9, index: 5, outcome: { kind: 'abandoned' } } }], v).partial).toBeNull()
    expect(fold([{ event: 'client/reconnecting', data: { after: 3, attempt: 1, delayMs: 100, reason: 'x' } }], v)).toMatchObject({ partial: null, live: false, reconnects: 1 })
  })

  it('puts a replacing event where the range it shadows begins and marks the shadowed ones', () => {
    const v = fold([ev(0, 'user/message', user('a', '1'), { surfaceOp: 'append' }), ev(1, 'user/message', user('b', '2'), { surfaceOp: 'append' }), ev(2, 'user/message', user('c', '3'), { surfaceOp: 'append' })])
    const r = fold([ev(3, 'user/message', user('sum', 'summary'), { surfaceOp: { op: 'replace', start: 0, end: 1 }, sourceEventSeqs: [0, 1] })], v)
    expect(r.messages.map((m) => [m.seq, m.shadowedBy])).toEqual([
      [3, undefined],
      [0, 3],
      [1, 3],
      [2, undefined],
    ])
  })
})

describe('stream over a scripted fetch', () => {
  /** each call answers the next scripted connection: an SSE text, or an HTTP status */
  function scripted(connections: Array<string | number>) {
    const seen: Array<Record<string, string>> = []
    const f: typeof fetch = async (_url, init) => {
      seen.push({ ...((init?.headers ?? {}) as Record<string, string>) })
      const next = connections.shift()
      if (next === undefined) return new Promise<Response>(() => {}) // no more: hangs until closed
      if (typeof next === 'number') return new Response(JSON.stringify({ error: { code: next === 404 ? 'session-not-found' : 'unavailable', message: 'x' } }), { status: next })
      return new Response(new ReadableStream({ start: (c) => (c.enqueue(new TextEncoder().encode(next)), c.close()) }), { status: 200 })
    }
    return { fetch: f, seen }
  }
  const sse = (event: string, data: unknown, id?: number) => `event: ${event}\n${id === undefined ? '' : `id: ${id}\n`}data: ${JSON.stringify(data)}\n\n`
  const durable = (seq: number) => sse('session/event', { seq, time: 1, type: 'x', data: {} }, seq)
  const live = (kind: string, extra: object) => sse('agent/assistant-stream', { kind, attemptId: 's:2', revision: 1, ...extra })
  const chunk = (index: number) => live('chunk', { index, time: 1, chunk: { type: 'text-delta', index: 0, text: `t${index}` } })
  const ready = (head: number) => sse('stream/ready', { headSeq: head }) + sse('agent/status', { status: 'running' })

  it('resumes with Last-Event-ID, yields each durable seq once, drops chunks a snapshot covered or that came before, and reports each reconnect', async () => {
    const { AgentdClient } = await import('../../clients/typescript/src/index.js')
    const s = scripted([
      durable(0) + durable(1) + ready(1) + live('start', { turn: 1, step: 1 }) + chunk(0) + chunk(1),
      503,
      // a server that repeats seq 1 and a chunk the snapshot already covers
      durable(1) + durable(2) + ready(2) + live('snapshot', { turn: 1, step: 1, stream: [{ type: 'text-chunks', time0: 1, index: 0, dt: [0, 0, 0], texts: ['t0', 't1', 't2'] }] }) + chunk(1) + chunk(2) + chunk(3) + sse('stream/error', { code: 'slow-consumer' }),
      ready(2) + chunk(3) + chunk(4),
    ])
    const client = new AgentdClient({ baseUrl: 'http://agentd.invalid', apiKey: 'k', fetch: s.fetch })
    const st = client.stream('s', { reconnect: { initialDelayMs: 1, maxDelayMs: 2 } })
    const got: string[] = []
    for await (const f of st) {
      if (f.event === 'session/event') got.push(`seq ${f.id}`)
      else if (f.event === 'agent/assistant-stream') got.push(f.data.kind === 'chunk' ? `chunk ${f.data.index}` : f.data.kind)
      else if (f.event === 'client/reconnecting') got.push(`reconnect after ${f.data.after}: ${f.data.reason}`)
      else got.push(f.event)
      if (got.at(-1) === 'chunk 4') break
    }
    expect(got).toEqual([
      'seq 0', 'seq 1', 'stream/ready', 'agent/status', 'start', 'chunk 0', 'chunk 1',
      'reconnect after 1: the server ended the stream',
      'reconnect after 1: HTTP 503 unavailable',
      'seq 2', 'stream/ready', 'agent/status', 'snapshot', 'chunk 3', 'stream/error',
      'reconnect after 2: stream/error slow-consumer',
      'stream/ready', 'agent/status', 'chunk 4',
    ])
    expect(s.seen.map((h) => h['last-event-id'])).toEqual([undefined, '1', '1', '2'])
    expect(s.seen.every((h) => h.authorization === 'Bearer k' && h.accept === 'text/event-stream')).toBe(true)
    expect(st.lastSeq).toBe(2)
  })

  it('ends with the AgentdError when the session is gone', async () => {
    const { AgentdClient, AgentdError } = await import('../../clients/typescript/src/index.js')
    const client = new AgentdClient({ baseUrl: 'http://agentd.invalid', apiKey: 'k', fetch: scripted([404]).fetch })
    const e = await client.stream('s').next().catch((x) => x)
    expect(e).toBeInstanceOf(AgentdError)
    expect([e.status, e.code]).toEqual([404, 'session-not-found'])
  })
})

describe('request over a scripted fetch', () => {
  /** answers each call with the next status (200 with `{n}` once they run out); records what was sent */
  function scripted(statuses: number[]) {
    const seen: Array<{ method: string; url: string; headers: Record<string, string>; body?: string }> = []
    const f: typeof fetch = async (url, init) => {
      seen.push({ method: init?.method ?? 'GET', url: String(url), headers: { ...((init?.headers ?? {}) as Record<string, string>) }, body: init?.body as string | undefined })
      const status = statuses.shift() ?? 200
      return new Response(status === 200 ? JSON.stringify({ n: seen.length }) : JSON.stringify({ error: { code: 'unavailable', message: 'down' } }), { status })
    }
    return { fetch: f, seen }
  }
  const make = async (s: ReturnType<typeof scripted>) => {
    const { AgentdClient } = await import('../../clients/typescript/src/index.js')
    return new AgentdClient({ baseUrl: 'http://agentd.invalid/', apiKey: 'k', adminToken: 'adm', fetch: s.fetch, retry: { initialDelayMs: 1, maxDelayMs: 2 } })
  }

  it('repeats GET and PUT through a 503, a keyed POST too with its key each time, and an unkeyed POST or a DELETE never', async () => {
    for (const [method, o, attempts] of [
      ['GET', {}, 2],
      ['put', { body: { v: 1 } }, 2],
      ['POST', { body: { v: 1 }, idempotencyKey: 'k1' }, 2],
      ['POST', { body: { v: 1 } }, 1],
      ['DELETE', {}, 1],
      ['POST', { body: { v: 1 }, repeat: 'idempotent' }, 2],
    ] as const) {
      const s = scripted([503])
      const c = await make(s)
      const r = await c.request(method, '/v1/things/a%2Fb', { ...o, query: { limit: 5, cursor: undefined } }).then((v) => v, (e) => e)
      expect(s.seen.length, `${method} ${JSON.stringify(o)}`).toBe(attempts)
      if (attempts === 2) expect(r).toEqual({ n: 2 })
      else expect([r.status, r.code]).toEqual([503, 'unavailable'])
      for (const x of s.seen) {
        expect(x.method).toBe(method.toUpperCase())
        expect(x.url).toBe('http://agentd.invalid/v1/things/a%2Fb?limit=5')
        expect(x.headers.authorization).toBe('Bearer k')
        expect(x.headers['idempotency-key']).toBe('idempotencyKey' in o ? 'k1' : undefined)
        expect(x.body).toBe('body' in o ? '{"v":1}' : undefined)
        if (x.body) expect(x.headers['content-type']).toBe('application/json')
      }
    }
  })

  it('sends the admin token or no credential when asked, and refuses a path that is not absolute', async () => {
    const s = scripted([])
    const c = await make(s)
    await c.request('GET', '/v1/admin/x', { auth: 'admin' })
    await c.request('GET', '/healthz', { auth: 'none' })
    expect(s.seen.map((x) => x.headers.authorization)).toEqual(['Bearer adm', undefined])
    expect(() => c.request('GET', 'http://elsewhere.invalid/v1/x')).toThrow(/must start with "\/"/)
    expect(s.seen).toHaveLength(2)
  })
})
