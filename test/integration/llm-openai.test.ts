// The pi-ai adapter over pi-ai's real openai-completions client, against a local scripted server.

import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { createLlmService, type LlmRequest, type LlmService } from '../../src/llm/index.js'
import type { Message, StreamChunk } from '../../src/session/index.js'
import { startOpenAiServer, type OpenAiServer } from '../helpers/openai-server.js'
import { observeHttp, openHttpWindows } from '../../src/llm/http-observer.js'
import { getEventListeners } from 'node:events'

let srv: OpenAiServer
let llm: LlmService
const env: NodeJS.ProcessEnv = { MOCK_KEY: 'sk-test-abcdef' }

beforeAll(async () => {
  srv = await startOpenAiServer()
  llm = createLlmService({
    env,
    models: {
      providers: {
        mock: {
          api: 'openai-completions',
          baseUrl: srv.baseUrl,
          apiKey: 'env:MOCK_KEY',
          models: [
            { id: 'scripted', contextWindow: 8192, maxTokens: 1024 },
            { id: 'thinker', contextWindow: 8192, maxTokens: 1024, reasoning: true },
            { id: 'priced', cost: { input: 3, output: 15 } },
          ],
        },
      },
    },
  })
})
afterAll(() => srv.close())
beforeEach(() => {
  srv.requests.length = 0
  env.MOCK_KEY = 'sk-test-abcdef'
})

const user = (text: string, id = 'u1'): Message => ({ id, role: 'user', content: [{ type: 'text', text }], source: { kind: 'user' } })
const system = (text: string, id = 's1'): Message => ({ id, role: 'system', content: [{ type: 'text', text }], source: { kind: 'plugin', plugin: 'system-prompt' } })

async function stream(messages: Message[], opts: { config?: Record<string, unknown>; signal?: AbortSignal; tools?: LlmRequest['tools']; onChunk?: (c: StreamChunk) => void } = {}) {
  const call = await llm.prepareCall({ provider: 'mock', model: 'scripted', ...opts.config } as never, new AbortController().signal)
  const req: LlmRequest = Object.freeze({ ...call.config, messages, sessionId: 'sess-1', signal: opts.signal ?? new AbortController().signal, ...(opts.tools ? { tools: opts.tools } : {}) })
  const chunks: StreamChunk[] = []
  for await (const c of call.stream(req)) {
    chunks.push(c)
    opts.onChunk?.(c)
  }
  return chunks
}

const kinds = (chunks: StreamChunk[]) => chunks.map((c) => c.type)
const finish = (chunks: StreamChunk[]) => {
  const last = chunks.at(-1)!
  expect(last.type).toBe('finish')
  expect(chunks.filter((c) => c.type === 'finish')).toHaveLength(1)
  return last as Extract<StreamChunk, { type: 'finish' }>
}

describe('chunk translation (SPEC §8.11, §16.3)', () => {
  it('three text pieces expand to exactly block-start, 3 × text-delta, block-end, usage, finish', async () => {
    srv.script({ chunks: ['Hel', 'lo the', 're!'], usage: { prompt_tokens: 21, completion_tokens: 3 } })
    const chunks = await stream([system('be nice'), user('hi')])
    expect(chunks).toEqual([
      { type: 'block-start', index: 0, blockType: 'text' },
      { type: 'text-delta', index: 0, text: 'Hel' },
      { type: 'text-delta', index: 0, text: 'lo the' },
      { type: 'text-delta', index: 0, text: 're!' },
      { type: 'block-end', index: 0, block: { type: 'text', text: 'Hello there!' } },
      { type: 'usage', usage: { inputTokens: 21, outputTokens: 3 } },
      { type: 'finish', reason: { kind: 'stop' }, replayState: { v: 1, api: 'openai-completions', responseId: 'chatcmpl-test-1', blocks: [{ type: 'text' }] } },
    ])
    // one request, with the key of the models file, the system prompt first and no retries
    expect(srv.requests).toHaveLength(1)
    const r = srv.requests[0]!
    expect(r.headers.authorization).toBe('Bearer sk-test-abcdef')
    expect(r.body).toMatchObject({ model: 'scripted', stream: true, max_completion_tokens: 1024 })
    expect(r.body.messages).toEqual([
      { role: 'system', content: 'be nice' },
      { role: 'user', content: [{ type: 'text', text: 'hi' }] },
    ])
  })

  it('maps cached tokens and reports them separately (input excludes cache)', async () => {
    srv.script({ chunks: ['ok'], usage: { prompt_tokens: 100, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 60 } } })
    const chunks = await stream([user('hi')])
    expect(chunks.find((c) => c.type === 'usage')).toEqual({ type: 'usage', usage: { inputTokens: 40, outputTokens: 5, cacheReadTokens: 60 } })
  })

  it('reports the reasoning part of the output as reasoningTokens (API.md §4)', async () => {
    srv.script({ reasoning: ['hmm'], chunks: ['ok'], usage: { prompt_tokens: 50, completion_tokens: 30, completion_tokens_details: { reasoning_tokens: 22 } } })
    const chunks = await stream([user('hi')])
    expect(chunks.find((c) => c.type === 'usage')).toEqual({ type: 'usage', usage: { inputTokens: 50, outputTokens: 30, reasoningTokens: 22 } })
  })

  it('reports the cost of a priced model (USD per million tokens) as costUsd', async () => {
    srv.script({ chunks: ['ok'], usage: { prompt_tokens: 1000, completion_tokens: 100 } })
    const chunks = await stream([user('hi')], { config: { model: 'priced' } })
    const usage = chunks.find((c) => c.type === 'usage')
    expect(usage?.type === 'usage' && usage.usage).toMatchObject({ inputTokens: 1000, outputTokens: 100 })
    expect(usage?.type === 'usage' && usage.usage.costUsd).toBeCloseTo(0.0045, 10)
  })

  it('streams reasoning before text, with dense indexes', async () => {
    srv.script({ reasoning: ['think', 'ing'], chunks: ['answer'] })
    const chunks = await stream([user('why?')])
    expect(chunks.slice(0, -2)).toEqual([
      { type: 'block-start', index: 0, blockType: 'reasoning' },
      { type: 'reasoning-delta', index: 0, text: 'think' },
      { type: 'reasoning-delta', index: 0, text: 'ing' },
      { type: 'block-start', index: 1, blockType: 'text' },
      { type: 'text-delta', index: 1, text: 'answer' },
      { type: 'block-end', index: 0, block: { type: 'reasoning', text: 'thinking' } },
      { type: 'block-end', index: 1, block: { type: 'text', text: 'answer' } },
    ])
    // the field the reasoning came in travels as replay state, so it can be sent back the same way
    expect(finish(chunks).replayState).toMatchObject({ blocks: [{ type: 'reasoning', signature: 'reasoning_content' }, { type: 'text' }] })
  })

  it('streams tool calls with the name on the first delta and arguments as JSON text', async () => {
    srv.script({
      chunks: ['let me check'],
      toolCalls: [
        { id: 'call_1', name: 'lookup', arguments: { q: 'weather', n: 2 } },
        { id: 'call_2', name: 'noargs', arguments: '' },
      ],
    })
    const chunks = await stream([user('weather?')])
    const calls = chunks.filter((c) => c.type === 'tool-call-delta')
    expect(calls).toEqual([
      { type: 'tool-call-delta', index: 1, id: 'call_1', name: 'lookup', argumentsDelta: '{"q":"weath' },
      { type: 'tool-call-delta', index: 1, id: 'call_1', argumentsDelta: 'er","n":2}' },
    ])
    expect(chunks.filter((c) => c.type === 'block-start')).toEqual([
      { type: 'block-start', index: 0, blockType: 'text' },
      { type: 'block-start', index: 1, blockType: 'tool-call' },
      { type: 'block-start', index: 2, blockType: 'tool-call' },
    ])
    expect(chunks.filter((c) => c.type === 'block-end').map((c) => c.type === 'block-end' && c.block)).toEqual([
      { type: 'text', text: 'let me check' },
      { type: 'tool-call', id: 'call_1', name: 'lookup', arguments: '{"q":"weather","n":2}' },
      { type: 'tool-call', id: 'call_2', name: 'noargs', arguments: '{}' },
    ])
    expect(finish(chunks).reason).toEqual({ kind: 'tool-calls' })
  })

  it('length → max-tokens, with the tool calls still in the chunks', async () => {
    srv.script({ chunks: ['partial'], toolCalls: [{ id: 'c1', name: 'f', arguments: { a: 1 } }], finish: 'length' })
    const chunks = await stream([user('go')])
    expect(finish(chunks).reason).toEqual({ kind: 'max-tokens' })
    expect(chunks.some((c) => c.type === 'block-end' && c.block.type === 'tool-call')).toBe(true)
    expect(kinds(chunks).slice(-2)).toEqual(['usage', 'finish'])
  })

  it('a stop without content is EMPTY_RESPONSE, after the usage', async () => {
    srv.script({ usage: { prompt_tokens: 7, completion_tokens: 0 } })
    const chunks = await stream([user('hi')])
    expect(chunks).toEqual([
      { type: 'usage', usage: { inputTokens: 7, outputTokens: 0 } },
      { type: 'finish', reason: { kind: 'error', failure: { code: 'EMPTY_RESPONSE', message: 'the model returned no content' } } },
    ])
  })

  it('sends tools, temperature, stop and a converted history on the wire', async () => {
    srv.script({ chunks: ['done'] })
    const history: Message[] = [
      system('P1'),
      user('call it'),
      { id: 'a1', role: 'assistant', content: [{ type: 'text', text: 'sure' }, { type: 'tool-call', id: 'c1', name: 'echo', arguments: '{"text":"x"}' }], source: { kind: 'model', provider: 'mock', model: 'scripted' } },
      { id: 'r1', role: 'user', content: [{ type: 'tool-result', toolCallId: 'c1', isError: false, content: [{ type: 'text', text: 'x' }] }], source: { kind: 'tool', callId: 'c1' } },
      system('P2', 's2'),
    ]
    const tools = [{ name: 'echo', description: 'echoes', parameters: { type: 'object', properties: { text: { type: 'string' } } } }]
    await stream(history, { tools, config: { temperature: 0.3, stop: ['STOP'], maxTokens: 77 } })
    const body = srv.requests[0]!.body
    expect(body).toMatchObject({ temperature: 0.3, stop: ['STOP'], max_completion_tokens: 77 })
    expect(body.tools.map((t: any) => ({ name: t.function.name, description: t.function.description, parameters: t.function.parameters }))).toEqual(tools)
    expect(body.messages).toEqual([
      { role: 'system', content: 'P1' },
      { role: 'user', content: [{ type: 'text', text: 'call it' }] },
      { role: 'assistant', content: 'sure', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'echo', arguments: '{"text":"x"}' } }] },
      { role: 'tool', content: 'x', tool_call_id: 'c1' },
      { role: 'user', content: [{ type: 'text', text: 'P2' }] },
    ])
  })

  it('passes reasoningEffort to a reasoning model', async () => {
    srv.script({ chunks: ['ok'] })
    const call = await llm.prepareCall({ provider: 'mock', model: 'thinker', reasoningEffort: 'high' }, new AbortController().signal)
    for await (const _ of call.stream(Object.freeze({ ...call.config, messages: [user('hi')], sessionId: 's', signal: new AbortController().signal }))) void _
    expect(srv.requests[0]!.body.reasoning_effort).toBe('high')
  })

  it('replays reasoning through the replay state on the next request', async () => {
    srv.script({ reasoning: ['deep'], chunks: ['42'] }, { chunks: ['ok'] })
    const first = await stream([user('q')])
    const replayState = finish(first).replayState!
    const assistant: Message = { id: 'a', role: 'assistant', content: [{ type: 'reasoning', text: 'deep' }, { type: 'text', text: '42' }], source: { kind: 'model', provider: 'mock', model: 'scripted', replayState } }
    await stream([user('q'), assistant, user('more', 'u2')])
    expect(srv.requests[1]!.body.messages[1]).toEqual({ role: 'assistant', content: '42', reasoning_content: 'deep' })
  })
})

describe('failures (SPEC §8.11)', () => {
  it('500 → SERVER with status, after exactly one request', async () => {
    srv.script({ error: { status: 500, body: { error: { message: 'upstream exploded', type: 'server_error' } } } })
    const chunks = await stream([user('hi')])
    expect(chunks).toEqual([{ type: 'finish', reason: { kind: 'error', failure: { code: 'SERVER', status: 500, message: '500: {"message":"upstream exploded","type":"server_error"}' } } }])
    expect(srv.requests).toHaveLength(1)
  })

  it('429 with retry-after-ms → RATE_LIMIT with providerRetryAfterMs and the request id, one request only', async () => {
    srv.script({ error: { status: 429, headers: { 'retry-after-ms': '1500', 'x-request-id': 'req_42' }, body: { error: { message: 'Rate limit reached', type: 'rate_limit' } } } })
    const f = finish(await stream([user('hi')]))
    expect(f.reason).toEqual({ kind: 'error', failure: { code: 'RATE_LIMIT', status: 429, message: '429: {"message":"Rate limit reached","type":"rate_limit"}', providerRetryAfterMs: 1500, requestId: 'req_42' } })
    expect(srv.requests).toHaveLength(1)
  })

  it('429 with Retry-After seconds', async () => {
    srv.script({ error: { status: 429, headers: { 'retry-after': '3' } } })
    const f = finish(await stream([user('hi')]))
    expect(f.reason).toMatchObject({ kind: 'error', failure: { code: 'RATE_LIMIT', providerRetryAfterMs: 3000 } })
  })

  it('402 → QUOTA; a 429 saying the quota is exhausted → QUOTA', async () => {
    srv.script({ error: { status: 402, body: { error: { message: 'pay up' } } } })
    expect(finish(await stream([user('hi')])).reason).toMatchObject({ failure: { code: 'QUOTA', status: 402 } })
    srv.script({ error: { status: 429, body: { error: { message: 'You exceeded your current quota, please check your plan and billing details.', type: 'insufficient_quota' } } } })
    expect(finish(await stream([user('hi')])).reason).toMatchObject({ failure: { code: 'QUOTA', status: 429 } })
  })

  it('401 → AUTH, and the key never appears in the failure', async () => {
    srv.script({ error: { status: 401, body: { error: { message: 'Incorrect API key provided: sk-test-abcdef' } } } })
    const f = finish(await stream([user('hi')]))
    expect(f.reason).toMatchObject({ kind: 'error', failure: { code: 'AUTH', status: 401 } })
    expect(JSON.stringify(f)).not.toContain('sk-test-abcdef')
  })

  it('400 with a context-length message → CONTEXT_WINDOW_EXCEEDED', async () => {
    srv.script({ error: { status: 400, body: { error: { message: "This model's maximum context length is 8192 tokens. However, your messages resulted in 9001 tokens.", code: 'context_length_exceeded' } } } })
    expect(finish(await stream([user('hi')])).reason).toMatchObject({ kind: 'error', failure: { code: 'CONTEXT_WINDOW_EXCEEDED', status: 400 } })
  })

  it('a connection cut mid-stream → TRANSPORT, after the deltas already sent', async () => {
    srv.script({ chunks: ['par', 'tial'], disconnect: true })
    const chunks = await stream([user('hi')])
    expect(kinds(chunks)).toEqual(['block-start', 'text-delta', 'text-delta', 'finish'])
    expect(finish(chunks).reason).toMatchObject({ kind: 'error', failure: { code: 'TRANSPORT' } })
  })

  it('an unreachable server → TRANSPORT', async () => {
    const other = createLlmService({ env: {}, models: { providers: { gone: { api: 'openai-completions', baseUrl: 'http://127.0.0.1:1/v1', apiKey: 'k', models: [{ id: 'm' }] } } } })
    const call = await other.prepareCall({ provider: 'gone', model: 'm' }, new AbortController().signal)
    const chunks: StreamChunk[] = []
    for await (const c of call.stream(Object.freeze({ ...call.config, messages: [user('hi')], sessionId: 's', signal: new AbortController().signal }))) chunks.push(c)
    expect(chunks).toEqual([{ type: 'finish', reason: { kind: 'error', failure: { code: 'TRANSPORT', message: 'Connection error.: bad port' } } }])
  })

  it('an in-band error inside a started stream → SERVER', async () => {
    srv.script({ chunks: ['a'], streamError: { message: 'model overloaded mid-answer' } })
    expect(finish(await stream([user('hi')])).reason).toEqual({ kind: 'error', failure: { code: 'SERVER', message: 'model overloaded mid-answer' } })
  })

  it('abort → finish aborted/ABORTED, and the server sees the connection close', async () => {
    srv.script({ chunks: ['waiting'], hang: true })
    const ac = new AbortController()
    const chunks = await stream([user('hi')], { signal: ac.signal, onChunk: (c) => c.type === 'text-delta' && ac.abort() })
    expect(finish(chunks).reason).toEqual({ kind: 'aborted', failure: { code: 'ABORTED', message: 'Request was aborted' } })
    await srv.requests[0]!.settled
    expect(srv.requests[0]!.closedEarly).toBe(true)
  })

  it('a consumer that stops iterating closes the provider request', async () => {
    srv.script({ chunks: ['one'], hang: true })
    const call = await llm.prepareCall({ provider: 'mock', model: 'scripted' }, new AbortController().signal)
    for await (const c of call.stream(Object.freeze({ ...call.config, messages: [user('hi')], sessionId: 's', signal: new AbortController().signal }))) {
      if (c.type === 'text-delta') break
    }
    await srv.requests[0]!.settled
    expect(srv.requests[0]!.closedEarly).toBe(true)
  })

  it('a catalogue route without its key in the environment → AUTH, without a request', async () => {
    // the service reads pi-ai's usual variables from its own environment (here `env`, which has no GROQ_API_KEY)
    const call = await llm.prepareCall({ provider: 'groq', model: 'openai/gpt-oss-20b' }, new AbortController().signal)
    const chunks: StreamChunk[] = []
    for await (const c of call.stream(Object.freeze({ ...call.config, messages: [user('hi')], sessionId: 's', signal: new AbortController().signal }))) chunks.push(c)
    expect(chunks).toEqual([{ type: 'finish', reason: { kind: 'error', failure: { code: 'AUTH', message: 'no API key for provider groq: set the variable pi-ai reads for it (docs/configuration.md#provider-keys)' } } }])
  })

  it('reads env:NAME at every call: a changed key is used, a missing one is AUTH without a request', async () => {
    srv.script({ chunks: ['a'] })
    env.MOCK_KEY = 'sk-rotated-999'
    await stream([user('hi')])
    expect(srv.requests[0]!.headers.authorization).toBe('Bearer sk-rotated-999')
    delete env.MOCK_KEY
    const chunks = await stream([user('hi')])
    expect(chunks).toEqual([{ type: 'finish', reason: { kind: 'error', failure: { code: 'AUTH', message: 'API key variable MOCK_KEY is not set (provider mock)' } } }])
    expect(srv.requests).toHaveLength(1)
  })
})

describe("a call's hold on the turn's signal", () => {
  it('ends with its finish chunk, though the consumer stops pulling there (as the loop does): many attempts of one turn leave no listener behind', async () => {
    const turn = new AbortController()
    for (let i = 0; i < 12; i++) {
      srv.script({ chunks: [`attempt ${i}`] })
      const call = await llm.prepareCall({ provider: 'mock', model: 'scripted' } as never, new AbortController().signal)
      const it = call.stream(Object.freeze({ ...call.config, messages: [user('hi')], sessionId: 'sess-1', signal: turn.signal }))[Symbol.asyncIterator]()
      for (;;) {
        const r = await it.next()
        if (r.done || r.value.type === 'finish') break
      }
      expect(getEventListeners(turn.signal, 'abort')).toHaveLength(0)
    }
  })
})

describe('the HTTP observation window (src/llm/http-observer.ts)', () => {
  it('closes when the request to the model origin is created, before any answer, and no window outlives its call', async () => {
    srv.script({ chunks: ['slow'], hang: true })
    const ac = new AbortController()
    const running = stream([user('hi')], { signal: ac.signal })
    await srv.waitForRequest(0)
    // the server holds the request and has sent nothing the client has read: only the request closed it
    expect(openHttpWindows()).toBe(0)
    ac.abort()
    expect(finish(await running).reason).toMatchObject({ kind: 'aborted' })
    expect(openHttpWindows()).toBe(0)
  })

  it('a model without an HTTP origin opens no window: the promise hook stays off for the whole call', () => {
    const inside: number[] = []
    for (const baseUrl of [undefined, '', 'not a url']) observeHttp({}, baseUrl, () => inside.push(openHttpWindows()))
    expect(inside).toEqual([0, 0, 0])
    const w = observeHttp({}, 'http://127.0.0.1:1/v1', () => openHttpWindows())
    expect(w.value).toBe(1)
    w.close()
    expect(openHttpWindows()).toBe(0)
  })

  it('concurrent failing calls each get their own response head', async () => {
    srv.script(
      { error: { status: 429, headers: { 'retry-after-ms': '1100', 'x-request-id': 'req_a' } } },
      { error: { status: 429, headers: { 'retry-after-ms': '2200', 'x-request-id': 'req_b' } } },
      { error: { status: 503, headers: { 'x-request-id': 'req_c' } } },
    )
    const all = await Promise.all([stream([user('a')]), stream([user('b')]), stream([user('c')])])
    const failures = all.map((c) => (finish(c).reason as { failure: { status: number; requestId?: string; providerRetryAfterMs?: number } }).failure)
    const seen = failures.map((f) => `${f.requestId}:${f.status}:${f.providerRetryAfterMs ?? '-'}`).sort()
    expect(seen).toEqual(['req_a:429:1100', 'req_b:429:2200', 'req_c:503:-'])
    expect(openHttpWindows()).toBe(0)
  })
})
