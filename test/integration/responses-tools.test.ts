// API.md §17.1 with the official `openai` client on one database (docs/testing.md): a client function tool round trip
// (function_call → function_call_output), an approval round trip (mcp_approval_request →
// mcp_approval_response), a cancel of an in-progress background response, and a retried attempt
// (a scripted 429) showing an incomplete message item, then the retry's.

import http from 'node:http'
import type { AddressInfo } from 'node:net'
import OpenAI from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { gate } from '../helpers/scripted.js'

const weatherTool = { type: 'function' as const, name: 'weather', description: 'the weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: false }

describe.each(APP_DB_KINDS)('OpenAI Responses tools, cancel and retries on %s', (kind) => {
  let t: TestApp
  let client: OpenAI
  let toolServer: http.Server
  let toolUrl = ''
  beforeAll(async () => {
    t = await startTestApp({ kind })
    client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: t.key, maxRetries: 0 })
    toolServer = http.createServer((req, res) => {
      let body = ''
      req.on('data', (c) => (body += c))
      req.on('end', () => {
        const args = JSON.parse(body).arguments
        res.setHeader('content-type', 'application/json')
        res.end(JSON.stringify({ content: `deleted ${args.path}` }))
      })
    })
    await new Promise<void>((r) => toolServer.listen(0, '127.0.0.1', r))
    toolUrl = `http://127.0.0.1:${(toolServer.address() as AddressInfo).port}/`
  })
  afterAll(async () => {
    await t?.close()
    toolServer?.close()
  })

  it('a client function tool: function_call ends the response; function_call_output continues the turn', async () => {
    const c = await client.conversations.create({})
    t.models.script(c.id, { toolCalls: [{ id: 'call_1', name: 'weather', arguments: { city: 'Oslo' } }] }, { text: ['Oslo: 3 degrees'] })
    const r1 = await client.responses.create({ model: t.models.ref(), conversation: c.id, input: 'weather in Oslo?', tools: [weatherTool] })
    expect(r1.status).toBe('completed')
    expect(r1.output).toEqual([{ type: 'function_call', id: expect.stringMatching(/^fc_/), call_id: 'call_1', name: 'weather', arguments: '{"city":"Oslo"}', status: 'completed' }])
    // the session's tools are the request's, as client tools; sending them again changes nothing
    const s = (await t.api('GET', `/v1/sessions/${c.id}`)).body
    expect(s.settings.tools).toEqual([expect.objectContaining({ name: 'weather', execution: { type: 'client' } })])
    const stream = await client.responses.create({ model: t.models.ref(), previous_response_id: r1.id, tools: [weatherTool], input: [{ type: 'function_call_output', call_id: 'call_1', output: '3 degrees' }], stream: true })
    const events: any[] = []
    for await (const e of stream) events.push(e)
    const done = events.at(-1).response
    expect(done.status).toBe('completed')
    expect(done.previous_response_id).toBe(r1.id)
    expect(done.output.map((o: any) => o.type)).toEqual(['message'])
    expect(done.output[0].content[0].text).toBe('Oslo: 3 degrees')
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i))
    // the model saw the client's result
    const req = t.models.requestsOf(c.id)[1]
    expect(JSON.stringify(req.context.messages.at(-1))).toContain('3 degrees')
    const items = await client.responses.inputItems.list(done.id)
    expect(items.data).toEqual([{ type: 'function_call_output', id: expect.any(String), call_id: 'call_1', output: '3 degrees', status: 'completed' }])
  })

  it('an approval: mcp_approval_request ends the response; mcp_approval_response runs the call', async () => {
    const s = await t.createSession({ tools: [{ name: 'rm', description: 'delete a file', parameters: { type: 'object', properties: { path: { type: 'string' } } }, execution: { type: 'http', url: toolUrl }, approval: 'always' }] })
    t.models.script(s.id, { toolCalls: [{ id: 'call_rm', name: 'rm', arguments: { path: '/tmp/x' } }] }, { text: ['removed'] })
    const r1 = await client.responses.create({ model: t.models.ref(), conversation: s.id, input: 'remove /tmp/x' })
    expect(r1.status).toBe('completed')
    expect(r1.output).toEqual([{ type: 'mcp_approval_request', id: 'call_rm', name: 'rm', arguments: '{"path":"/tmp/x"}', server_label: 'agentd' }])
    const r2 = await client.responses.create({ model: t.models.ref(), conversation: s.id, input: [{ type: 'mcp_approval_response', approval_request_id: 'call_rm', approve: true }] })
    expect(r2.status).toBe('completed')
    expect(r2.output.map((o: any) => o.type)).toEqual(['mcp_call', 'message'])
    expect(r2.output[0]).toMatchObject({ type: 'mcp_call', name: 'rm', arguments: '{"path":"/tmp/x"}', output: 'deleted /tmp/x', error: null, status: 'completed' })
    expect(r2.output_text).toBe('removed')
    // answering it again: not pending, nothing written
    const head = (await t.api('GET', `/v1/sessions/${s.id}`)).body.headSeq
    const again = await client.responses.create({ model: t.models.ref(), conversation: s.id, input: [{ type: 'mcp_approval_response', approval_request_id: 'call_rm', approve: true }] }).catch((e) => e)
    expect(again).toBeInstanceOf(OpenAI.BadRequestError)
    expect(again.error).toEqual({ message: 'approval request call_rm is not pending', type: 'invalid_request_error', param: 'input[0].approval_request_id', code: 'bad-request' })
    expect((await t.api('GET', `/v1/sessions/${s.id}`)).body.headSeq).toBe(head)
  })

  it('cancel of an in-progress background response: status cancelled once the turn closed', async () => {
    const c = await client.conversations.create({})
    t.models.script(c.id, { text: ['never finished'], hang: true })
    const r = await client.responses.create({ model: t.models.ref(), conversation: c.id, input: 'long job', background: true })
    await t.models.waitForRequest(c.id, 1)
    const cancelled = await client.responses.cancel(r.id)
    expect(cancelled.status).toBe('cancelled')
    expect(cancelled.id).toBe(r.id)
    expect((await client.responses.retrieve(r.id)).status).toBe('cancelled')
  })

  it('cancel of a queued response withdraws its input; the running one goes on', async () => {
    const c = await client.conversations.create({})
    const g = gate()
    t.models.script(c.id, { text: ['first done'], gate: g.promise }, { text: ['third done'] })
    const r1 = await client.responses.create({ model: t.models.ref(), conversation: c.id, input: 'first', background: true })
    await t.models.waitForRequest(c.id, 1)
    const r2 = await client.responses.create({ model: t.models.ref(), conversation: c.id, input: 'second', background: true })
    expect(r2.status).toBe('queued')
    const cancelled = await client.responses.cancel(r2.id)
    expect(cancelled.status).toBe('cancelled')
    expect(cancelled.output).toEqual([])
    g.open()
    const r3 = await client.responses.create({ model: t.models.ref(), conversation: c.id, input: 'third' })
    expect(r3.output_text).toBe('third done')
    const first = await client.responses.retrieve(r1.id)
    expect([first.status, first.output_text]).toEqual(['completed', 'first done'])
    // the model never saw the withdrawn input
    expect(JSON.stringify(t.models.requestsOf(c.id)[1].context.messages)).not.toContain('second')
  })

  it('a retried attempt: an incomplete message item, then the retry', async () => {
    const c = await client.conversations.create({})
    const g = gate()
    t.models.script(c.id, { text: ['par'], error: '429 rate limited, try again in 0.05s' }, { text: ['full answer'], gate: g.promise })
    const stream = await client.responses.create({ model: t.models.ref(), conversation: c.id, input: 'hi', stream: true })
    const events: any[] = []
    let opened = false
    for await (const e of stream) {
      events.push(e)
      if (!opened && e.type === 'response.output_item.done') {
        opened = true
        g.open()
      }
    }
    const done = events.at(-1).response
    expect(done.status).toBe('completed')
    expect(done.output.map((o: any) => [o.type, o.status, o.content[0]?.text])).toEqual([
      ['message', 'incomplete', 'par'],
      ['message', 'completed', 'full answer'],
    ])
    expect(events.filter((e) => e.type === 'response.output_item.done').map((e) => e.item.status)).toEqual(['incomplete', 'completed'])
  })
})
