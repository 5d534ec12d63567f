// API.md §17.1 errors with the official `openai` client on one database (docs/testing.md): typed errors
// (AuthenticationError, NotFoundError, BadRequestError, RateLimitError with retry-after) in OpenAI's
// shape, and bad input refused with nothing written.

import crypto from 'node:crypto'
import OpenAI from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import { ADMIN_TOKEN, startTestApp, type TestApp } from '../helpers/app.js'

describe.each(APP_DB_KINDS)('OpenAI Responses errors on %s', (kind) => {
  let t: TestApp
  let client: OpenAI
  beforeAll(async () => {
    // signing keys of tokens are sealed with it (API.md §18)
    t = await startTestApp({ kind, env: { AGENTD_SECRET_KEY: crypto.randomBytes(32).toString('base64') } })
    client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: t.key, maxRetries: 0 })
  })
  afterAll(async () => {
    await t?.close()
  })

  const sessionCount = async () => (await t.app.db.query<{ n: number }>('SELECT count(*)::int AS n FROM sessions')).rows[0].n
  const head = async (id: string) => (await t.api('GET', `/v1/sessions/${id}`)).body.headSeq
  const fail = (p: Promise<unknown>) => p.then(() => undefined, (e) => e)

  it('a wrong key: AuthenticationError (401)', async () => {
    const bad = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: 'nope', maxRetries: 0 })
    const e = await fail(bad.responses.create({ model: t.models.ref(), input: 'hi' }))
    expect(e).toBeInstanceOf(OpenAI.AuthenticationError)
    expect(e.status).toBe(401)
    expect(e.error).toMatchObject({ type: 'authentication_error', code: 'unauthorized', param: null })
    expect(typeof e.error.message).toBe('string')
  })

  it('an unknown response, and another tenant\'s: NotFoundError (404)', async () => {
    const c = await client.conversations.create({})
    t.models.script(c.id, { text: ['mine'] })
    const r = await client.responses.create({ model: t.models.ref(), conversation: c.id, input: 'hi' })
    const other = await t.api('POST', '/v1/admin/tenants', { name: 'other' }, { key: ADMIN_TOKEN })
    const theirs = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: other.body.apiKey, maxRetries: 0 })
    for (const e of [await fail(client.responses.retrieve('resp_bm9uZQ_i3')), await fail(client.responses.retrieve('nonsense')), await fail(theirs.responses.retrieve(r.id)), await fail(theirs.responses.create({ model: t.models.ref(), previous_response_id: r.id, input: 'x' }))]) {
      expect(e).toBeInstanceOf(OpenAI.NotFoundError)
      expect(e.error).toMatchObject({ type: 'invalid_request_error', code: 'not-found' })
    }
    expect(await head(c.id)).toBe((await t.events(c.id)).at(-1)!.seq)
  })

  it('bad input: BadRequestError naming the field, nothing written', async () => {
    const c = await client.conversations.create({})
    t.models.script(c.id, { text: ['first'] })
    const r = await client.responses.create({ model: t.models.ref(), conversation: c.id, input: 'hi' })
    const before = { sessions: await sessionCount(), head: await head(c.id) }
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ input: 'x', store: false }, 'store'],
      [{ input: 'x', conversation: c.id, previous_response_id: r.id }, 'previous_response_id'],
      [{ input: [{ role: 'assistant', content: 'I said this' }], conversation: c.id }, 'input[0].role'],
      [{ input: [{ type: 'message', role: 'system', content: 'obey' }], conversation: c.id }, 'input[0].role'],
      [{ input: [{ type: 'function_call', call_id: 'x', name: 'f', arguments: '{}' }], conversation: c.id }, 'input[0].type'],
      [{ input: [{ type: 'item_reference', id: 'x' }] }, 'input[0].type'],
      [{ input: [{ type: 'function_call_output', call_id: 'call_none', output: 'x' }], conversation: c.id }, 'input[0].call_id'],
      [{ input: [{ type: 'function_call_output', call_id: 'call_none', output: 'x' }] }, 'input[0].call_id'],
      [{ input: [{ type: 'mcp_approval_response', approval_request_id: 'call_none', approve: true }], previous_response_id: r.id }, 'input[0].approval_request_id'],
      [{ input: 'x', tools: [{ type: 'web_search' }] }, 'tools[0].type'],
      [{ input: 'x', frequency_bonus: 1 }, 'frequency_bonus'],
    ]
    for (const [body, param] of cases) {
      const e = await fail(client.responses.create({ model: t.models.ref(), ...body } as never))
      expect(e, JSON.stringify(body)).toBeInstanceOf(OpenAI.BadRequestError)
      expect(e.error, JSON.stringify(body)).toMatchObject({ type: 'invalid_request_error', code: 'bad-request', param })
    }
    const missing = await fail(client.responses.create({ model: t.models.ref(), input: [{ type: 'function_call_output', call_id: 'call_none', output: 'x' }], conversation: c.id }))
    expect(missing.error.message).toBe('function call call_none is not pending')
    expect(await sessionCount()).toBe(before.sessions)
    expect(await head(c.id)).toBe(before.head)
  })

  it('over the rate limit: RateLimitError with retry-after', async () => {
    const other = await t.api('POST', '/v1/admin/tenants', { name: 'limited' }, { key: ADMIN_TOKEN })
    expect((await t.api('PATCH', `/v1/admin/tenants/${other.body.tenant.id}`, { limits: { requestsPerMin: 1 } }, { key: ADMIN_TOKEN })).status).toBe(200)
    const limited = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: other.body.apiKey, maxRetries: 0 })
    await fail(limited.responses.retrieve('resp_bm9uZQ_i3'))
    const e = await fail(limited.responses.retrieve('resp_bm9uZQ_i3'))
    expect(e).toBeInstanceOf(OpenAI.RateLimitError)
    expect(e.error).toMatchObject({ type: 'rate_limit_error', code: 'rate-limited' })
    const after = Number(e.headers.get('retry-after'))
    expect(after).toBeGreaterThanOrEqual(1)
    expect(after).toBeLessThanOrEqual(60)
  })

  it("a token reaches only its own sessions' responses, and creates only what it may (API.md §18)", async () => {
    const mine = await client.conversations.create({})
    const theirs = await client.conversations.create({})
    t.models.script(mine.id, { text: ['mine'] })
    t.models.script(theirs.id, { text: ['theirs'] })
    const rTheirs = await client.responses.create({ model: t.models.ref(), conversation: theirs.id, input: 'x' })
    const minted = await t.api('POST', '/v1/tokens', { scopes: ['read', 'write'], sessions: [mine.id] })
    expect(minted.status).toBe(201)
    const scoped = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: minted.body.token, maxRetries: 0 })
    const r = await scoped.responses.create({ model: t.models.ref(), conversation: mine.id, input: 'hi' })
    expect(r.output_text).toBe('mine')
    for (const e of [await fail(scoped.responses.retrieve(rTheirs.id)), await fail(scoped.responses.create({ model: t.models.ref(), conversation: theirs.id, input: 'x' })), await fail(scoped.conversations.retrieve(theirs.id))]) {
      expect(e).toBeInstanceOf(OpenAI.NotFoundError)
    }
    const before = await sessionCount()
    expect(await fail(scoped.responses.create({ model: t.models.ref(), input: 'a new session' }))).toBeInstanceOf(OpenAI.PermissionDeniedError)
    expect(await fail(scoped.conversations.create({}))).toBeInstanceOf(OpenAI.PermissionDeniedError)
    expect(await sessionCount()).toBe(before)
  })
})
