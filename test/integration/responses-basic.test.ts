// API.md §17.1 with the official `openai` client against a real agentd on one database (docs/testing.md): a streamed
// text answer, a background response polled to completion, continuity by previous_response_id and by
// conversation, a fork from an older response, and the Response object's fields.

import OpenAI from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp } from '../helpers/app.js'

describe.each(APP_DB_KINDS)('OpenAI Responses on %s', (kind) => {
  let t: TestApp
  let client: OpenAI
  beforeAll(async () => {
    t = await startTestApp({ kind })
    client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: t.key, maxRetries: 0 })
  })
  afterAll(async () => {
    await t?.close()
  })

  /** A conversation whose model answers with the given steps. */
  const conversation = async (...steps: Parameters<TestApp['models']['script']>[1][]) => {
    const c = await client.conversations.create({})
    t.models.script(c.id, ...steps)
    return c
  }

  it('a streamed text answer: events numbered from 0, output_text, usage', async () => {
    const c = await conversation({ text: ['Hel', 'lo', '!'], usage: { input: 11, output: 3, cacheRead: 2, reasoning: 0 } })
    const stream = await client.responses.create({ model: t.models.ref(), conversation: c.id, input: 'Say hello', stream: true })
    const events: any[] = []
    for await (const e of stream) events.push(e)
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i))
    expect(events.map((e) => e.type)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ])
    expect(events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta)).toEqual(['Hel', 'lo', '!'])
    const done = events.at(-1).response
    expect(done.status).toBe('completed')
    expect(done.conversation).toEqual({ id: c.id })
    expect(done.output).toHaveLength(1)
    expect(done.output[0]).toMatchObject({ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'Hello!' }] })
    expect(done.usage).toEqual({ input_tokens: 13, input_tokens_details: { cached_tokens: 2 }, output_tokens: 3, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 16 })
    const again = await client.responses.retrieve(done.id)
    expect(again.output_text).toBe('Hello!')
    expect(again.id).toBe(events[0].response.id)
  })

  it('blocking mode answers the ended response; previous_response_id continues the same session', async () => {
    const c = await conversation({ text: ['one'] }, { text: ['two'] })
    const r1 = await client.responses.create({ model: t.models.ref(), conversation: c.id, input: 'first' })
    expect(r1.status).toBe('completed')
    expect(r1.output_text).toBe('one')
    expect(r1.previous_response_id).toBeNull()
    const r2 = await client.responses.create({ model: t.models.ref(), previous_response_id: r1.id, input: 'second' })
    expect(r2.output_text).toBe('two')
    expect(r2.previous_response_id).toBe(r1.id)
    expect(r2.conversation).toEqual({ id: c.id })
    // the model saw the whole history: agentd keeps it
    const req = t.models.requestsOf(c.id)[1]
    expect(req.context.messages.map((m: any) => m.role)).toEqual(['user', 'assistant', 'user'])
  })

  it('a background response answers at once and is polled to completion', async () => {
    const c = await conversation({ text: ['bg done'], delayMs: 150 })
    const r = await client.responses.create({ model: t.models.ref(), conversation: c.id, input: 'go', background: true })
    expect(['queued', 'in_progress']).toContain(r.status)
    expect(r.background).toBe(true)
    let got = r
    for (let i = 0; i < 200 && got.status !== 'completed'; i++) {
      await new Promise((res) => setTimeout(res, 25))
      got = await client.responses.retrieve(r.id)
    }
    expect(got.status).toBe('completed')
    expect(got.output_text).toBe('bg done')
    expect(got.background).toBe(true)
  })

  it('previous_response_id naming an older response forks the session at its end', async () => {
    const c = await conversation({ text: ['A'] }, { text: ['B'] })
    const r1 = await client.responses.create({ model: t.models.ref(), conversation: c.id, input: 'a' })
    await client.responses.create({ model: t.models.ref(), conversation: c.id, input: 'b' })
    // the child session's model call: scripted by fallback (its id is new)
    const forked = client.responses.create({ model: t.models.ref(), previous_response_id: r1.id, input: 'c' })
    const sessions = (await t.api('GET', '/v1/sessions?limit=200')).body.sessions
    void sessions
    const r3 = await forked
    expect(r3.conversation!.id).not.toBe(c.id)
    expect(r3.previous_response_id).toBe(r1.id.replace(Buffer.from(c.id).toString('base64url'), Buffer.from(r3.conversation!.id).toString('base64url')))
    const child = r3.conversation!.id
    const reqs = t.models.requestsOf(child)
    expect(reqs).toHaveLength(1)
    expect(reqs[0].context.messages.map((m: any) => m.role)).toEqual(['user', 'assistant', 'user'])
  })

  it('model agent:<id> creates the session from the agent; settings that differ change it as a PATCH; another agent is 400', async () => {
    expect((await t.api('POST', '/v1/agents', { id: 'echo-bot', name: 'Echo', model: 'faux/echo', system: 'be brief' })).status).toBe(201)
    const stream = await client.responses.create({ model: 'agent:echo-bot', input: 'hi there', stream: true })
    let done: any
    for await (const e of stream) if (e.type === 'response.completed') done = e.response
    expect(done.output_text ?? done.output[0].content[0].text).toBe('echo: hi there')
    expect(done.model).toBe('faux/echo')
    expect(done.instructions).toBe('be brief')
    const sid = done.conversation.id
    const session = (await t.api('GET', `/v1/sessions/${sid}`)).body
    expect(session.agent).toEqual({ id: 'echo-bot', version: 1 })
    // the same settings again change nothing; new instructions change the session's system text
    const same = await client.responses.create({ model: 'agent:echo-bot', previous_response_id: done.id, input: 'again' })
    expect(same.output_text).toBe('echo: again')
    expect((await t.api('GET', `/v1/sessions/${sid}`)).body.settings.system).toBe('be brief')
    const changed = await client.responses.create({ model: 'agent:echo-bot', previous_response_id: same.id, input: 'third', instructions: 'be verbose', max_output_tokens: 77 })
    expect(changed.instructions).toBe('be verbose')
    const after = (await t.api('GET', `/v1/sessions/${sid}`)).body.settings
    expect([after.system, after.maxTokens]).toEqual(['be verbose', 77])
    const other = await client.responses.create({ model: 'agent:someone-else', previous_response_id: changed.id, input: 'x' }).catch((e) => e)
    expect(other).toBeInstanceOf(OpenAI.BadRequestError)
    expect(other.error.param).toBe('model')
  })

  it('conversations: created from an agent, continued by conversation, listed as items, deleted', async () => {
    expect((await t.api('POST', '/v1/agents', { id: 'echo-2', name: 'Echo', model: 'faux/echo' })).status).toBe(201)
    const conv = await client.conversations.create({ metadata: { agent: 'echo-2', topic: 'tests' } })
    expect(conv).toEqual({ id: expect.any(String), object: 'conversation', created_at: expect.any(Number), metadata: { agent: 'echo-2', topic: 'tests' } })
    expect((await t.api('GET', `/v1/sessions/${conv.id}`)).body.agent).toEqual({ id: 'echo-2', version: 1 })
    const r1 = await client.responses.create({ model: 'agent:echo-2', conversation: conv.id, input: 'one' })
    const r2 = await client.responses.create({ model: 'agent:echo-2', conversation: { id: conv.id }, input: 'two' })
    expect(r2.previous_response_id).toBe(r1.id)
    expect([r1.output_text, r2.output_text]).toEqual(['echo: one', 'echo: two'])
    const items = await client.conversations.items.list(conv.id, { order: 'asc' })
    expect(items.data.map((i: any) => [i.type, i.role, i.content[0].text])).toEqual([
      ['message', 'user', 'one'],
      ['message', 'assistant', 'echo: one'],
      ['message', 'user', 'two'],
      ['message', 'assistant', 'echo: two'],
    ])
    expect((await client.conversations.retrieve(conv.id)).id).toBe(conv.id)
    expect(await client.conversations.delete(conv.id)).toEqual({ id: conv.id, object: 'conversation.deleted', deleted: true })
    expect(await client.conversations.retrieve(conv.id).catch((e) => e)).toBeInstanceOf(OpenAI.NotFoundError)
    expect((await t.api('GET', `/v1/sessions/${conv.id}`)).status).toBe(404)
  })

  it('an Idempotency-Key makes a create safe to repeat: the same response, one session, one input', async () => {
    expect((await t.api('POST', '/v1/agents', { id: 'echo-3', name: 'Echo', model: 'faux/echo' })).status).toBe(201)
    const key = `k-${Date.now()}`
    const a = await client.responses.create({ model: 'agent:echo-3', input: 'once' }, { headers: { 'Idempotency-Key': key } })
    const b = await client.responses.create({ model: 'agent:echo-3', input: 'once' }, { headers: { 'Idempotency-Key': key } })
    expect(b.id).toBe(a.id)
    expect(b.output_text).toBe('echo: once')
    const log = await t.events(a.conversation!.id)
    expect(log.filter((e) => e.type === 'user/message')).toHaveLength(1)
    const other = await client.responses.create({ model: 'agent:echo-3', input: 'another body' }, { headers: { 'Idempotency-Key': key } }).catch((e) => e)
    expect(other).toBeInstanceOf(OpenAI.ConflictError)
  })

  it("the client's stream helper accumulates reasoning, text and a function call into the final response", async () => {
    const c = await conversation({ reasoning: ['think', 'ing'], text: ['Let me ', 'check.'], toolCalls: [{ id: 'call_w', name: 'weather', arguments: { city: 'Rome' } }], usage: { input: 20, output: 9, reasoning: 4 } })
    const tools = [{ type: 'function' as const, name: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: false }]
    const stream = client.responses.stream({ model: t.models.ref(), conversation: c.id, input: 'weather?', tools })
    const deltas: string[] = []
    stream.on('response.output_text.delta', (e) => void deltas.push(e.delta))
    const final = await stream.finalResponse()
    expect(deltas).toEqual(['Let me ', 'check.'])
    expect(final.output.map((o: any) => o.type)).toEqual(['reasoning', 'message', 'function_call'])
    expect(final.output[0]).toMatchObject({ summary: [{ type: 'summary_text', text: 'thinking' }] })
    expect(final.output_text).toBe('Let me check.')
    expect(final.output[2]).toMatchObject({ call_id: 'call_w', name: 'weather', arguments: '{"city":"Rome"}' })
    expect(final.usage).toMatchObject({ output_tokens: 9, output_tokens_details: { reasoning_tokens: 4 } })
    // what the helper accumulated from the events is the Response object itself (plus its parsed fields)
    expect(final).toMatchObject(await client.responses.retrieve(final.id))
  })
})
