import { fauxAssistantMessage, fauxProvider, fauxToolCall } from '@earendil-works/pi-ai'
import { getBuiltinModel } from '@earendil-works/pi-ai/providers/all'
import { describe, expect, it } from 'vitest'
import { createLlmService, DEFAULT_RETRY_POLICY, FAUX_ECHO, LlmError, type LlmRequest, type PreparedCall } from '../../src/llm/index.js'
import type { Message, StreamChunk } from '../../src/session/index.js'

const models = (extra: Record<string, unknown> = {}) => ({
  providers: {
    local: {
      api: 'openai-completions',
      baseUrl: 'http://127.0.0.1:9/v1',
      apiKey: 'literal',
      models: [
        { id: 'first', contextWindow: 8192, maxTokens: 1024 },
        { id: 'org/nested', contextWindow: 4096 },
      ],
      ...extra,
    },
    // shadows the catalogue's openai/gpt-4o
    openai: { api: 'openai-completions', baseUrl: 'http://127.0.0.1:9/v1', apiKey: 'literal', models: [{ id: 'gpt-4o', contextWindow: 1000, maxTokens: 100 }] },
  },
})

const signal = () => new AbortController().signal
const user = (text: string, id = 'u'): Message => ({ id, role: 'user', content: [{ type: 'text', text }], source: { kind: 'user' } })
const request = (call: PreparedCall, messages: Message[], over: Partial<LlmRequest> = {}): LlmRequest =>
  Object.freeze({ ...call.config, messages, sessionId: 's1', signal: signal(), ...over })

async function collect(it: AsyncIterable<StreamChunk>): Promise<StreamChunk[]> {
  const out: StreamChunk[] = []
  for await (const c of it) out.push(c)
  return out
}

describe('model resolution (API.md §2)', () => {
  const llm = createLlmService({ models: models(), env: {} })

  it('takes the models file first, then the catalogue, then faux/echo', () => {
    expect(llm.resolveModel('local/first')).toEqual({ provider: 'local', model: 'first', api: 'openai-completions', contextWindow: 8192, maxTokens: 1024, reasoning: false })
    // the file's openai/gpt-4o wins over the catalogue's (which is openai-responses)
    expect(llm.resolveModel('openai/gpt-4o')).toMatchObject({ api: 'openai-completions', contextWindow: 1000 })
    expect(getBuiltinModel('openai', 'gpt-4o').api).toBe('openai-responses')
    // a model the file's provider does not list falls through to the catalogue
    const cat = getBuiltinModel('openai', 'gpt-4o-mini')
    expect(llm.resolveModel('openai/gpt-4o-mini')).toEqual({ provider: 'openai', model: 'gpt-4o-mini', api: cat.api, contextWindow: cat.contextWindow, maxTokens: cat.maxTokens, reasoning: cat.reasoning })
    expect(llm.resolveModel('anthropic/claude-sonnet-4-5')).toMatchObject({ provider: 'anthropic', api: 'anthropic-messages' })
    expect(llm.resolveModel(FAUX_ECHO)).toEqual({ provider: 'faux', model: 'echo', api: 'agentd-faux', contextWindow: 128000, maxTokens: 4096, reasoning: false })
  })

  it('splits provider/modelId at the first slash', () => {
    expect(llm.resolveModel('local/org/nested')).toEqual({ provider: 'local', model: 'org/nested', api: 'openai-completions', contextWindow: 4096, reasoning: false })
    expect(llm.resolveModel('openrouter/anthropic/claude-fable-5')).toMatchObject({ provider: 'openrouter', model: 'anthropic/claude-fable-5' })
  })

  it('resolves nothing for unknown routes', () => {
    for (const ref of ['nope/x', 'local/missing', 'faux/other', 'noslash', '/x', 'x/']) expect(llm.resolveModel(ref)).toBeUndefined()
    expect(llm.contextWindow('nope', 'x')).toBeUndefined()
    expect(llm.contextWindow('local', 'first')).toBe(8192)
  })

  it('default model: option/AGENTD_DEFAULT_MODEL, else the first model of the file, else faux/echo', () => {
    expect(createLlmService({ models: models(), env: {} }).defaultModel).toBe('local/first')
    expect(createLlmService({ env: {} }).defaultModel).toBe(FAUX_ECHO)
    expect(createLlmService({ models: models(), env: { AGENTD_DEFAULT_MODEL: 'openai/gpt-4o-mini' } }).defaultModel).toBe('openai/gpt-4o-mini')
    expect(createLlmService({ models: models(), defaultModel: 'faux/echo', env: {} }).defaultModel).toBe(FAUX_ECHO)
    expect(() => createLlmService({ env: { AGENTD_DEFAULT_MODEL: 'nope/x' } })).toThrow(/default model "nope\/x" does not resolve/)
  })

  it('a bad models file stops the service from being created', () => {
    const bad = models() as any
    bad.providers.local.models[0].contxtWindow = 1
    expect(() => createLlmService({ models: bad, env: {} })).toThrow('providers.local.models[0].contxtWindow: unknown field')
  })
})

describe('extra pi-ai providers (e.g. pi-ai\'s own faux provider)', () => {
  it('routes them after the models file, through the same adapter', async () => {
    const faux = fauxProvider({ provider: 'scripted', models: [{ id: 'bot', contextWindow: 5000, maxTokens: 300 }] })
    faux.setResponses([fauxAssistantMessage([fauxToolCall('lookup', { q: 1 }, { id: 'call-9' })], { stopReason: 'toolUse' })])
    const llm = createLlmService({ env: {}, extraProviders: [faux.provider] })
    expect(llm.resolveModel('scripted/bot')).toEqual({ provider: 'scripted', model: 'bot', api: faux.api, contextWindow: 5000, maxTokens: 300, reasoning: false })
    const call = await llm.prepareCall({ provider: 'scripted', model: 'bot' }, signal())
    const chunks = await collect(call.stream(request(call, [user('go')])))
    expect(chunks.find((c) => c.type === 'block-end')).toEqual({ type: 'block-end', index: 0, block: { type: 'tool-call', id: 'call-9', name: 'lookup', arguments: '{"q":1}' } })
    expect(chunks.at(-1)).toMatchObject({ type: 'finish', reason: { kind: 'tool-calls' } })
  })
})

describe('prepareCall (SPEC §8.3)', () => {
  const llm = createLlmService({ models: models({ retry: { maxRetries: 2 } }), env: {} })

  it('fills maxTokens from the model and marks it as an adapter default', async () => {
    const call = await llm.prepareCall({ provider: 'local', model: 'first' }, signal())
    expect(call.config).toEqual({ provider: 'local', model: 'first', maxTokens: 1024 })
    expect(call.adapterDefaults).toEqual({ maxTokens: true })
    expect(Object.isFrozen(call.config)).toBe(true)
    expect(call.context).toEqual({ contextWindow: 8192 })
    expect(call.retryPolicy).toEqual({ ...DEFAULT_RETRY_POLICY, maxRetries: 2 })
    expect('systemPromptUpdate' in call).toBe(false)
  })

  it('keeps a given maxTokens without a marker, and extra config fields', async () => {
    const call = await llm.prepareCall({ provider: 'local', model: 'first', maxTokens: 50, temperature: 0.2, stop: ['END'], custom: 'x' }, signal())
    expect(call.config).toEqual({ provider: 'local', model: 'first', maxTokens: 50, temperature: 0.2, stop: ['END'], custom: 'x' })
    expect(call.adapterDefaults).toBeUndefined()
  })

  it('fills nothing when the model has no maxTokens, and has no contextWindow when unknown', async () => {
    const call = await llm.prepareCall({ provider: 'local', model: 'org/nested' }, signal())
    expect(call.config).toEqual({ provider: 'local', model: 'org/nested' })
    expect(call.adapterDefaults).toBeUndefined()
    expect(call.context).toEqual({ contextWindow: 4096 })
  })

  it('gives the default retry policy to catalogue routes and faux/echo (SPEC §18.2)', async () => {
    expect((await llm.prepareCall({ provider: 'faux', model: 'echo' }, signal())).retryPolicy).toEqual(DEFAULT_RETRY_POLICY)
    expect((await llm.prepareCall({ provider: 'anthropic', model: 'claude-sonnet-4-5' }, signal())).retryPolicy).toEqual(DEFAULT_RETRY_POLICY)
  })

  it('throws LlmError NO_ADAPTER for an unknown route', async () => {
    const err = await llm.prepareCall({ provider: 'nope', model: 'x' }, signal()).catch((e) => e)
    expect(err).toBeInstanceOf(LlmError)
    expect(err.failure.code).toBe('NO_ADAPTER')
  })

  const invalid: Array<[string, Record<string, unknown>]> = [
    ['maxTokens 0', { maxTokens: 0 }],
    ['fractional maxTokens', { maxTokens: 1.5 }],
    ['string maxTokens', { maxTokens: '10' }],
    ['unknown reasoningEffort', { reasoningEffort: 'extreme' }],
    ['NaN temperature', { temperature: Number.NaN }],
    ['infinite temperature', { temperature: Number.POSITIVE_INFINITY }],
    ['stop of numbers', { stop: [1] }],
  ]
  it.each(invalid)('rejects %s with a turn error (not NO_ADAPTER)', async (_name, extra) => {
    const err = await llm.prepareCall({ provider: 'local', model: 'first', ...(extra as object) }, signal()).catch((e) => e)
    expect(err).toBeInstanceOf(Error)
    expect(err).not.toBeInstanceOf(LlmError)
    expect(err.message).toMatch(/invalid model call config/)
  })

  it('accepts every pi-ai thinking level', async () => {
    for (const reasoningEffort of ['minimal', 'low', 'medium', 'high', 'xhigh']) {
      await expect(llm.prepareCall({ provider: 'local', model: 'first', reasoningEffort }, signal())).resolves.toBeTruthy()
    }
  })

  it('rejects stop sequences on an API that cannot send them', async () => {
    await expect(llm.prepareCall({ provider: 'openai', model: 'gpt-4o-mini', stop: ['x'] }, signal())).rejects.toThrow(/stop sequences are not supported on api openai-responses/)
  })

  it('throws when the signal is already aborted', async () => {
    const ac = new AbortController()
    ac.abort()
    await expect(llm.prepareCall({ provider: 'local', model: 'first' }, ac.signal)).rejects.toThrow()
  })

  it('stream is one-shot and refuses a request whose config differs', async () => {
    const call = await llm.prepareCall({ provider: 'faux', model: 'echo' }, signal())
    expect(() => call.stream(request(call, [user('hi')], { maxTokens: 5 }))).toThrow(/maxTokens/)
    const call2 = await llm.prepareCall({ provider: 'faux', model: 'echo', temperature: 1 }, signal())
    expect(() => call2.stream(request(call2, [user('hi')], { temperature: 0.5 }))).toThrow(/temperature/)
    const call3 = await llm.prepareCall({ provider: 'faux', model: 'echo' }, signal())
    await collect(call3.stream(request(call3, [user('hi')])))
    expect(() => call3.stream(request(call3, [user('hi')]))).toThrow(/already streamed/)
  })
})

describe('faux/echo', () => {
  const llm = createLlmService({ env: {} })
  const run = async (messages: Message[], over: Partial<LlmRequest> = {}) => {
    const call = await llm.prepareCall({ provider: 'faux', model: 'echo' }, signal())
    return collect(call.stream(request(call, messages, over)))
  }

  it('streams "echo: <last user text>" as a few deltas with constant usage', async () => {
    const chunks = await run([user('hello there, model')])
    expect(chunks.map((c) => c.type)).toEqual(['block-start', 'text-delta', 'text-delta', 'text-delta', 'block-end', 'usage', 'finish'])
    const text = chunks.flatMap((c) => (c.type === 'text-delta' ? [c.text] : [])).join('')
    expect(text).toBe('echo: hello there, model')
    expect(chunks[4]).toEqual({ type: 'block-end', index: 0, block: { type: 'text', text: 'echo: hello there, model' } })
    expect(chunks[5]).toEqual({ type: 'usage', usage: { inputTokens: 12, outputTokens: 6 } })
    expect(chunks[6]).toEqual({ type: 'finish', reason: { kind: 'stop' } })
    expect(await run([user('hello there, model')])).toEqual(chunks)
  })

  it('usage does not grow with the history, and the echo is truncated', async () => {
    const long: Message[] = []
    for (let i = 0; i < 200; i++) long.push(user('x'.repeat(1000), `u${i}`))
    long.push(user('y'.repeat(500), 'last'))
    const chunks = await run(long)
    expect(chunks.find((c) => c.type === 'usage')).toEqual({ type: 'usage', usage: { inputTokens: 12, outputTokens: 6 } })
    const end = chunks.find((c) => c.type === 'block-end')
    expect(end).toEqual({ type: 'block-end', index: 0, block: { type: 'text', text: `echo: ${'y'.repeat(200)}…` } })
  })

  it('echoes the last user message, not a later tool result', async () => {
    const chunks = await run([
      user('first', 'u1'),
      { id: 'a', role: 'assistant', content: [{ type: 'tool-call', id: 'c', name: 'f', arguments: '{}' }], source: { kind: 'model', provider: 'faux', model: 'echo' } },
      { id: 'r', role: 'user', content: [{ type: 'tool-result', toolCallId: 'c', isError: false, content: [{ type: 'text', text: 'tool says' }] }], source: { kind: 'tool', callId: 'c' } },
    ])
    expect(chunks.find((c) => c.type === 'block-end')).toMatchObject({ block: { text: 'echo: first' } })
  })

  it('ends aborted when the signal fires', async () => {
    const ac = new AbortController()
    const call = await llm.prepareCall({ provider: 'faux', model: 'echo' }, signal())
    const chunks: StreamChunk[] = []
    for await (const c of call.stream(request(call, [user('hello there')], { signal: ac.signal }))) {
      chunks.push(c)
      if (c.type === 'text-delta') ac.abort()
    }
    expect(chunks.at(-1)).toEqual({ type: 'finish', reason: { kind: 'aborted', failure: { code: 'ABORTED', message: 'Request was aborted' } } })
    expect(chunks.filter((c) => c.type === 'finish')).toHaveLength(1)
  })
})

describe('faux/tools', () => {
  const llm = createLlmService({ env: {} })
  const tools = [{ name: 'lookup_order', description: 'Looks an order up.', parameters: { type: 'object', properties: { id: { type: 'integer' } } } }]
  const run = async (messages: Message[]) => {
    const call = await llm.prepareCall({ provider: 'faux', model: 'tools' }, signal())
    return collect(call.stream(request(call, messages, { tools })))
  }
  const asstCall = (id: string, args: string): Message => ({ id: `a-${id}`, role: 'assistant', content: [{ type: 'tool-call', id, name: 'lookup_order', arguments: args }], source: { kind: 'model', provider: 'faux', model: 'tools' } })
  const result = (id: string, text: string): Message => ({ id: `r-${id}`, role: 'user', content: [{ type: 'tool-result', toolCallId: id, isError: false, content: [{ type: 'text', text }] }], source: { kind: 'tool', callId: id } })

  it('resolves as agentd\'s own model, beside faux/echo', () => {
    expect(llm.resolveModel('faux/tools')).toEqual({ provider: 'faux', model: 'tools', api: 'agentd-faux', contextWindow: 128000, maxTokens: 4096, reasoning: false })
  })

  it('a /call line is a tool call with its JSON arguments, finishing tool-calls with constant usage', async () => {
    const chunks = await run([user('/call lookup_order {"id": 7}')])
    const end = chunks.find((c) => c.type === 'block-end')
    expect(end).toMatchObject({ type: 'block-end', index: 0, block: { type: 'tool-call', name: 'lookup_order', arguments: '{"id":7}' } })
    expect(chunks.slice(-2)).toEqual([
      { type: 'usage', usage: { inputTokens: 12, outputTokens: 6 } },
      { type: 'finish', reason: { kind: 'tool-calls' } },
    ])
  })

  it('after the results it answers with them; the cost does not grow with the history', async () => {
    const long: Message[] = []
    for (let i = 0; i < 200; i++) long.push(user('x'.repeat(1000), `u${i}`), asstCall(`c${i}`, '{"id":1}'), result(`c${i}`, 'old'))
    long.push(user('/call lookup_order {"id": 7}', 'last'), asstCall('c-last', '{"id":7}'), result('c-last', 'Order 7: shipped.'))
    const chunks = await run(long)
    expect(chunks.find((c) => c.type === 'block-end')).toEqual({ type: 'block-end', index: 0, block: { type: 'text', text: 'lookup_order: Order 7: shipped.' } })
    expect(chunks.find((c) => c.type === 'usage')).toEqual({ type: 'usage', usage: { inputTokens: 12, outputTokens: 6 } })
  })
})
