// API.md §12 MCP tool servers and §13 secrets in their headers, through the real loop (tool servers on one database, the secrets routes on both: docs/testing.md),
// against real MCP servers started here with the SDK's own server side: listing into the request
// header, results (text, image, other blocks, isError, structuredContent), the allow-list, approvals,
// cancellation, timeouts, tools/list_changed, a server down at step start, a restarted server, PATCH,
// secret headers that reach the server and nowhere else, and bad input that writes nothing.

import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS, DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { TestMcpServer, type TestMcpTool } from '../helpers/mcp-server.js'
import { expectValidLog } from '../helpers/invariants.js'
import { d, ofType, turnEnd } from '../helpers/events.js'
import { sleep, until } from '../helpers/wait.js'
import type { SessionEvent } from '../../src/session/index.js'

const SECRET_VALUE = 'sk-live-5f1d2c3b4a-never-shown'
const SECRET_KEY = Buffer.alloc(32, 7).toString('base64')

const callOf = (e: SessionEvent) => (e.type === 'tool/call' ? d(e).callId : d(e).message?.source?.callId)
const resultOf = (evs: SessionEvent[], callId: string) => evs.find((e) => e.type === 'tool/result' && callOf(e) === callId)
const resultBlocks = (e: SessionEvent | undefined) => d(e).message.content[0].content
const resultText = (e: SessionEvent | undefined) => resultBlocks(e)[0].text
const headers = (evs: SessionEvent[]) => ofType(evs, 'request/header')
const toolNames = (h: SessionEvent | undefined) => (d(h)?.header.tools ?? []).map((t: any) => t.name)

const addSchema = { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] }
const baseTools = (): TestMcpTool[] => [
  {
    name: 'add',
    description: 'adds two numbers',
    inputSchema: addSchema,
    annotations: { readOnlyHint: true },
    call: ({ a, b }) => ({
      content: [
        { type: 'text', text: String(Number(a) + Number(b)) },
        { type: 'image', mimeType: 'image/png', data: 'iVBORw0KGgo=' },
        { type: 'resource_link', uri: 'file:///sum.txt', name: 'sum' },
      ],
      structuredContent: { sum: Number(a) + Number(b) },
    }),
  },
  { name: 'fails', description: 'always fails', call: () => ({ content: [{ type: 'text', text: 'no such order' }], isError: true }) },
  {
    name: 'hang',
    description: 'waits until cancelled',
    call: (_args, { signal }) => new Promise((resolve) => signal.addEventListener('abort', () => resolve({ content: [{ type: 'text', text: 'late' }] }), { once: true })),
  },
  { name: 'whoami', description: 'echoes nothing', call: () => ({ content: [{ type: 'text', text: 'ok' }] }) },
]

/** A free port with nothing listening on it. */
async function deadPort(): Promise<number> {
  const s = http.createServer()
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r))
  const port = (s.address() as AddressInfo).port
  await new Promise((r) => s.close(r))
  return port
}

describe.each(APP_DB_KINDS)('API.md §12 MCP tool servers on %s', (kind) => {
  let t: TestApp
  const logs: string[] = []
  const agentErrors: any[] = []
  // a plain http tool server recording the headers it gets (API.md §13 execution.headers)
  let toolServer: http.Server
  let toolUrl = ''
  const toolSeen: http.IncomingHttpHeaders[] = []

  beforeAll(async () => {
    toolServer = http.createServer((req, res) => {
      toolSeen.push(req.headers)
      req.resume()
      req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ content: 'tool ok' })))
    })
    await new Promise<void>((r) => toolServer.listen(0, '127.0.0.1', r))
    toolUrl = `http://127.0.0.1:${(toolServer.address() as AddressInfo).port}/tool`
    t = await startTestApp({
      kind,
      env: { AGENTD_SECRET_KEY: SECRET_KEY },
      logLevel: 'debug',
      logStream: { write: (line: string) => void logs.push(line) },
      mcpCallTimeoutMs: 1500,
      plugins: [(root: any) => root.on('agent/error', (p: any) => agentErrors.push(p))],
    })
  })

  afterAll(async () => {
    await t?.close()
    toolServer.closeAllConnections()
    await new Promise((r) => toolServer.close(r))
  })

  async function withServer<T>(tools: TestMcpTool[], fn: (m: TestMcpServer) => Promise<T>): Promise<T> {
    const m = await new TestMcpServer(tools).start()
    try {
      return await fn(m)
    } finally {
      await m.stop()
    }
  }

  it('lists the tools into the request header and calls them: text, image, other blocks as JSON, isError, structuredContent into meta', async () => {
    await withServer(baseTools(), async (m) => {
      const s = await t.createSession({ mcpServers: [{ name: 'calc', url: m.url }] })
      t.models.script(s.id, { toolCalls: [{ id: 'k1', name: 'calc__add', arguments: { a: 2, b: 3 } }, { id: 'k2', name: 'calc__fails', arguments: {} }] }, { text: ['it is 5'] })
      await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'what is 2+3?' })
      const evs = await t.waitForTurnEnd(s.id, 1)
      expectValidLog(evs)
      expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'completed' })
      const header = headers(evs)[0]
      expect(toolNames(header)).toEqual(expect.arrayContaining(['calc__add', 'calc__fails', 'calc__hang', 'calc__whoami']))
      expect(d(header).header.tools.find((x: any) => x.name === 'calc__add')).toEqual({ name: 'calc__add', description: 'adds two numbers', parameters: addSchema })
      // the model was offered exactly the logged tools
      expect(t.models.requestsOf(s.id)[0].context.tools?.map((x: any) => x.name)).toEqual(toolNames(header))
      const r1 = resultOf(evs, 'k1')!
      const [text, image, other] = resultBlocks(r1)
      expect([text, image]).toEqual([{ type: 'text', text: '5' }, { type: 'image', mimeType: 'image/png', data: 'iVBORw0KGgo=' }])
      expect(other.type).toBe('text')
      expect(JSON.parse(other.text)).toEqual({ type: 'resource_link', uri: 'file:///sum.txt', name: 'sum' })
      expect(d(r1).message.content[0].isError).toBe(false)
      expect(d(r1).meta).toEqual({ sum: 5 })
      const r2 = resultOf(evs, 'k2')!
      expect(d(r2).message.content[0].isError).toBe(true)
      expect(resultText(r2)).toBe('no such order')
      expect(m.calls('add')[0].params.arguments).toEqual({ a: 2, b: 3 })
      // one MCP session for the whole turn: initialized once
      expect(m.methods().filter((x) => x === 'initialize')).toHaveLength(1)
    })
  })

  it('an allow-list offers only the listed tools; a call to another is UNKNOWN_TOOL and never reaches the server', async () => {
    await withServer(baseTools(), async (m) => {
      const s = await t.createSession({ mcpServers: [{ name: 'calc', url: m.url, tools: ['add'] }] })
      t.models.script(s.id, { toolCalls: [{ id: 'u1', name: 'calc__fails', arguments: {} }] }, { text: ['ok'] })
      await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'go' })
      const evs = await t.waitForTurnEnd(s.id, 1)
      expect(toolNames(headers(evs)[0])).toEqual(['calc__add'])
      expect(d(resultOf(evs, 'u1')).error).toEqual({ name: 'ToolError', code: 'UNKNOWN_TOOL' })
      expect(m.calls()).toHaveLength(0)
    })
  })

  it('approval "always": the MCP call waits as a pending approval (not a client call); deny never calls the server, allow does', async () => {
    await withServer(baseTools(), async (m) => {
      const s = await t.createSession({ mcpServers: [{ name: 'calc', url: m.url, approval: 'always' }] })
      t.models.script(s.id, { toolCalls: [{ id: 'a1', name: 'calc__add', arguments: { a: 1, b: 1 } }] }, { toolCalls: [{ id: 'a2', name: 'calc__add', arguments: { a: 4, b: 4 } }] }, { text: ['done'] })
      await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'add' })
      const first = await until('a1 pending', async () => {
        const r = await t.api('GET', `/v1/sessions/${s.id}/pending`)
        return r.body.toolCalls.length ? r.body : undefined
      })
      expect(first.toolCalls).toEqual([{ callId: 'a1', name: 'calc__add', arguments: { a: 1, b: 1 }, rawArguments: '{"a":1,"b":1}', kind: 'approval' }])
      // an approval is not answered as a client result
      expect((await t.api('POST', `/v1/sessions/${s.id}/tool-results`, { callId: 'a1', content: 'forged' })).status).toBe(409)
      expect((await t.api('POST', `/v1/sessions/${s.id}/approvals/a1`, { decision: 'deny', reason: 'no' })).status).toBe(202)
      await until('a2 pending', async () => (await t.api('GET', `/v1/sessions/${s.id}/pending`)).body.toolCalls.some((c: any) => c.callId === 'a2'))
      expect(m.calls()).toHaveLength(0)
      expect((await t.api('POST', `/v1/sessions/${s.id}/approvals/a2`, { decision: 'allow' })).status).toBe(202)
      const evs = await t.waitForTurnEnd(s.id, 1)
      expectValidLog(evs)
      expect(d(resultOf(evs, 'a1')).error).toEqual({ name: 'ToolError', code: 'TOOL_DENIED' })
      expect(resultText(resultOf(evs, 'a2'))).toBe('8')
      expect(m.calls('add')).toHaveLength(1)
    })
  })

  it('a cancel mid-call sends notifications/cancelled (the server sees it) and the result is TOOL_ABORTED', async () => {
    await withServer(baseTools(), async (m) => {
      const s = await t.createSession({ mcpServers: [{ name: 'calc', url: m.url }] })
      t.models.script(s.id, { toolCalls: [{ id: 'h1', name: 'calc__hang', arguments: {} }] })
      await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hang' })
      await until('the server to run the call', async () => m.calls('hang').length === 1)
      expect((await t.api('POST', `/v1/sessions/${s.id}/cancel`, {})).body).toEqual({ cancelled: true })
      const evs = await t.waitForTurnEnd(s.id, 1)
      expectValidLog(evs)
      expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'aborted', reason: { kind: 'user' } })
      expect(d(resultOf(evs, 'h1')).error).toEqual({ name: 'AbortError', code: 'TOOL_ABORTED' })
      await until('the server to see the cancellation', async () => m.cancelled.includes('hang'))
      expect(m.records.some((r) => r.method === 'notifications/cancelled')).toBe(true)
    })
  })

  it('a call that does not answer in time is TOOL_TIMEOUT and the turn goes on', async () => {
    await withServer(baseTools(), async (m) => {
      const s = await t.createSession({ mcpServers: [{ name: 'calc', url: m.url }] })
      t.models.script(s.id, { toolCalls: [{ id: 't1', name: 'calc__hang', arguments: {} }] }, { text: ['gave up'] })
      await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hang' })
      const evs = await t.waitForTurnEnd(s.id, 1, 15000)
      expect(d(resultOf(evs, 't1')).error).toEqual({ name: 'ToolError', code: 'TOOL_TIMEOUT' })
      expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'completed' })
      // the server is told the request is abandoned
      await until('the server to see the cancellation', async () => m.cancelled.includes('hang'))
    })
  })

  it('notifications/tools/list_changed: the next step lists again and its header is a change', async () => {
    await withServer(baseTools().slice(0, 1), async (m) => {
      const s = await t.createSession({ mcpServers: [{ name: 'calc', url: m.url }] })
      t.models.script(s.id, { text: ['one'] }, { text: ['two'] })
      await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'first' })
      let evs = await t.waitForTurnEnd(s.id, 1)
      expect(toolNames(headers(evs).at(-1))).toEqual(['calc__add'])
      // the client keeps the standalone stream open, where the server's notification arrives
      await until('the client to open its notification stream', async () => m.records.some((r) => r.method === 'GET'))
      await m.setTools(baseTools().slice(0, 2))
      await sleep(300)
      await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'second' })
      evs = await t.waitForTurnEnd(s.id, 2)
      expectValidLog(evs)
      const h = headers(evs)
      expect(h).toHaveLength(2)
      expect(d(h[1]).reason).toBe('change')
      expect(toolNames(h[1])).toEqual(['calc__add', 'calc__fails'])
      expect(m.methods().filter((x) => x === 'tools/list')).toHaveLength(2)
    })
  })

  it('a server down at step start contributes no tools, is one agent/error MCP_UNAVAILABLE per outage, and the turn goes on; once it is back its tools return', async () => {
    const port = await deadPort()
    const url = `http://127.0.0.1:${port}/mcp`
    const s = await t.createSession({ mcpServers: [{ name: 'gone', url }] })
    t.models.script(s.id, { text: ['no tools'] }, { text: ['still none'] }, { text: ['back'] })
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'one' })
    let evs = await t.waitForTurnEnd(s.id, 1)
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'completed' })
    expect(toolNames(headers(evs)[0])).toEqual([])
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'two' })
    evs = await t.waitForTurnEnd(s.id, 2)
    const mine = agentErrors.filter((e) => e.server === 'gone')
    expect(mine).toHaveLength(1)
    expect(mine[0]).toMatchObject({ turn: 1, step: 1, code: 'MCP_UNAVAILABLE', error: { code: 'MCP_UNAVAILABLE', server: 'gone' } })
    const m = await new TestMcpServer(baseTools().slice(0, 1)).start(port)
    try {
      await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'three' })
      evs = await t.waitForTurnEnd(s.id, 3)
      expectValidLog(evs)
      const h = headers(evs)
      expect(d(h.at(-1)).reason).toBe('change')
      expect(toolNames(h.at(-1))).toEqual(['gone__add'])
    } finally {
      await m.stop()
    }
  })

  it('a restarted server (its MCP session gone: 404) is re-initialized and the next call works', async () => {
    const m = await new TestMcpServer(baseTools()).start()
    try {
      const s = await t.createSession({ mcpServers: [{ name: 'calc', url: m.url }] })
      t.models.script(s.id, { toolCalls: [{ id: 'r1', name: 'calc__add', arguments: { a: 1, b: 2 } }] }, { text: ['3'] }, { toolCalls: [{ id: 'r2', name: 'calc__add', arguments: { a: 2, b: 2 } }] }, { text: ['4'] })
      await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'one' })
      await t.waitForTurnEnd(s.id, 1)
      const port = m.port
      await m.stop()
      await m.start(port)
      await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'two' })
      const evs = await t.waitForTurnEnd(s.id, 2)
      expectValidLog(evs)
      expect(resultText(resultOf(evs, 'r1'))).toBe('3')
      expect(resultText(resultOf(evs, 'r2'))).toBe('4')
      expect(m.methods().filter((x) => x === 'initialize')).toHaveLength(2)
    } finally {
      await m.stop()
    }
  })

  it('PATCH replaces the server list; the next step offers what it lists now', async () => {
    await withServer(baseTools().slice(0, 1), async (m) => {
      const s = await t.createSession({ mcpServers: [{ name: 'calc', url: m.url }] })
      t.models.script(s.id, { text: ['one'] }, { text: ['two'] })
      await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'one' })
      await t.waitForTurnEnd(s.id, 1)
      const p = await t.api('PATCH', `/v1/sessions/${s.id}`, { mcpServers: [{ name: 'math', url: m.url }] })
      expect(p.status).toBe(200)
      await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'two' })
      const evs = await t.waitForTurnEnd(s.id, 2)
      expect(toolNames(headers(evs).at(-1))).toEqual(['math__add'])
      expect(d(headers(evs).at(-1)).reason).toBe('change')
      // a fork takes the source's servers as they are now
      const f = await t.api('POST', `/v1/sessions/${s.id}/fork`, {})
      expect(f.status).toBe(201)
      const row = await t.testDb.db.query<{ mcp_servers: string }>('SELECT mcp_servers FROM sessions WHERE id = $1', [f.body.id])
      expect(JSON.parse(row.rows[0].mcp_servers)).toEqual([{ name: 'math', url: m.url }])
    })
  })

  it('a secret: header reaches the MCP server and an http tool with its value, which appears in no event, response or log line', async () => {
    expect((await t.api('PUT', '/v1/secrets/MCP_TOKEN', { value: SECRET_VALUE })).status).toBe(204)
    const responses: string[] = []
    await withServer(baseTools(), async (m) => {
      const s = await t.createSession({
        mcpServers: [{ name: 'calc', url: m.url, headers: { authorization: 'secret:MCP_TOKEN', 'x-plain': 'literal' } }],
        tools: [{ name: 'lookup', execution: { type: 'http', url: toolUrl, headers: { 'x-api-key': 'secret:MCP_TOKEN' } } }],
      })
      responses.push(JSON.stringify(s))
      t.models.script(s.id, { toolCalls: [{ id: 's1', name: 'calc__whoami', arguments: {} }, { id: 's2', name: 'lookup', arguments: {} }] }, { text: ['done'] })
      await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'go' })
      const evs = await t.waitForTurnEnd(s.id, 1)
      expect(resultText(resultOf(evs, 's1'))).toBe('ok')
      expect(resultText(resultOf(evs, 's2'))).toBe('tool ok')
      const mcpHeaders = m.records.filter((r) => r.method === 'tools/call').map((r) => r.headers)
      expect(mcpHeaders[0]?.authorization).toBe(SECRET_VALUE)
      expect(mcpHeaders[0]?.['x-plain']).toBe('literal')
      expect(toolSeen.at(-1)?.['x-api-key']).toBe(SECRET_VALUE)
      // a replaced secret: the next step connects again with the new value
      expect((await t.api('PUT', '/v1/secrets/MCP_TOKEN', { value: `${SECRET_VALUE}-rotated` })).status).toBe(204)
      t.models.script(s.id, { toolCalls: [{ id: 's3', name: 'calc__whoami', arguments: {} }] }, { text: ['done'] })
      await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'again' })
      const evs2 = await t.waitForTurnEnd(s.id, 2)
      expect(resultText(resultOf(evs2, 's3'))).toBe('ok')
      expect(m.records.filter((r) => r.method === 'tools/call').at(-1)?.headers.authorization).toBe(`${SECRET_VALUE}-rotated`)
      for (const p of [`/v1/sessions/${s.id}`, `/v1/sessions/${s.id}/events`, `/v1/sessions/${s.id}/messages`, '/v1/secrets', '/v1/sessions']) responses.push((await t.api('GET', p)).text)
      responses.push(JSON.stringify(evs2))
    })
    for (const r of responses) expect(r).not.toContain(SECRET_VALUE)
    expect(logs.length).toBeGreaterThan(0)
    expect(logs.join('\n')).not.toContain(SECRET_VALUE)
  })

  it('a missing secret: an http call is a TOOL_ERROR naming it; an MCP server is MCP_UNAVAILABLE naming it; a second tenant cannot see or use the first one\'s secrets', async () => {
    expect((await t.api('PUT', '/v1/secrets/SHARED_NAME', { value: 'tenant-one-value' })).status).toBe(204)
    const other = await t.api('POST', '/v1/admin/tenants', { name: 'other' }, { key: t.adminToken })
    const key2 = other.body.apiKey as string
    const list2 = await t.api('GET', '/v1/secrets', undefined, { key: key2 })
    expect(list2.body).toEqual({ secrets: [] })
    expect((await t.api('DELETE', '/v1/secrets/SHARED_NAME', undefined, { key: key2 })).status).toBe(404)
    await withServer(baseTools(), async (m) => {
      const body = {
        model: t.models.ref(),
        tools: [{ name: 'lookup', execution: { type: 'http', url: toolUrl, headers: { authorization: 'secret:SHARED_NAME' } } }],
        mcpServers: [{ name: 'locked', url: m.url, headers: { authorization: 'secret:NOT_SET' } }],
      }
      const c = await t.api('POST', '/v1/sessions', body, { key: key2 })
      expect(c.status).toBe(201)
      const id = c.body.id
      t.models.script(id, { toolCalls: [{ id: 'm1', name: 'lookup', arguments: {} }] }, { text: ['ok'] })
      const before = toolSeen.length
      await t.api('POST', `/v1/sessions/${id}/followup`, { content: 'go' }, { key: key2 })
      let evs: SessionEvent[] = []
      await until('turn 1 to end', async () => {
        evs = (await t.api('GET', `/v1/sessions/${id}/events?limit=5000`, undefined, { key: key2 })).body.events
        return evs.some((e) => e.type === 'turn/end')
      })
      const r = resultOf(evs, 'm1')!
      expect(d(r).error).toEqual({ name: 'ToolError', code: 'TOOL_ERROR' })
      expect(resultText(r)).toBe('Error: secret SHARED_NAME is not set for this tenant')
      expect(toolSeen.length).toBe(before)
      expect(toolNames(headers(evs)[0])).toEqual(['lookup'])
      const e = agentErrors.find((x) => x.server === 'locked')
      expect(e.error.message).toContain('NOT_SET')
      // never connected without its header
      expect(m.records).toHaveLength(0)
      expect(JSON.stringify(evs)).not.toContain('tenant-one-value')
    })
  })

  it('bad MCP server lists are 400 naming the field, and nothing is written', async () => {
    const count = async () => (await t.api('GET', '/v1/sessions?limit=200')).body.sessions.length
    const before = await count()
    const url = 'http://127.0.0.1:9/mcp'
    const cases: Array<[unknown, string]> = [
      [Array.from({ length: 17 }, (_, i) => ({ name: `s${i}`, url })), 'mcpServers'],
      [[{ name: 'a', url }, { name: 'a', url }], 'mcpServers[1].name'],
      [[{ name: 'bad name!', url }], 'mcpServers'],
      [[{ name: 'lan', url: 'http://10.1.2.3/mcp' }], 'mcpServers[0].url'],
      [[{ name: 'meta', url: 'http://169.254.169.254/mcp' }], 'mcpServers[0].url'],
      [[{ name: 'ftp', url: 'ftp://127.0.0.1/mcp' }], 'mcpServers[0].url'],
      [[{ name: 'h', url, headers: { authorization: 5 } }], 'mcpServers'],
      [[{ name: 'h', url, headers: { authorization: 'secret:lower' } }], 'mcpServers[0].headers.authorization'],
      [[{ name: 'h', url, extra: true }], 'mcpServers'],
    ]
    for (const [mcpServers, field] of cases) {
      const r = await t.api('POST', '/v1/sessions', { model: t.models.ref(), mcpServers })
      expect(r.status, JSON.stringify(mcpServers).slice(0, 80)).toBe(400)
      expect(r.body.error.code).toBe('bad-request')
      expect(r.body.error.details.some((x: any) => x.path.includes(field)), `${field} in ${JSON.stringify(r.body.error.details)}`).toBe(true)
    }
    expect(await count()).toBe(before)
    // PATCH validates the same way and leaves the list as it was
    const s = await t.createSession({ mcpServers: [{ name: 'keep', url }] })
    const p = await t.api('PATCH', `/v1/sessions/${s.id}`, { title: 'x', mcpServers: [{ name: 'lan', url: 'http://10.1.2.3/mcp' }] })
    expect(p.status).toBe(400)
    expect(p.body.error.details[0].path).toBe('body.mcpServers[0].url')
    expect((await t.api('GET', `/v1/sessions/${s.id}`)).body.title).toBeNull()
    const row = await t.testDb.db.query<{ mcp_servers: string }>('SELECT mcp_servers FROM sessions WHERE id = $1', [s.id])
    expect(JSON.parse(row.rows[0].mcp_servers)).toEqual([{ name: 'keep', url }])
  })
})

describe.each(DB_KINDS)('API.md §13 secrets routes on %s', (kind) => {
  it('PUT, GET, DELETE: names only, values validated; the key comes from the environment, the embedded key file, or the routes are 409', async () => {
    // no AGENTD_SECRET_KEY: PGlite generates a key file, PostgreSQL refuses
    const t = await startTestApp({ kind })
    try {
      const put = await t.api('PUT', '/v1/secrets/TOKEN', { value: 'v1' })
      if (kind === 'pg') {
        expect(put.status).toBe(409)
        expect(put.body.error.code).toBe('secrets-unavailable')
        expect((await t.api('GET', '/v1/secrets')).status).toBe(409)
        expect((await t.api('DELETE', '/v1/secrets/TOKEN')).status).toBe(409)
        return
      }
      expect(put.status).toBe(204)
      const fs = await import('node:fs')
      const file = `${t.app.config.dataDir}/secret-key`
      expect(fs.statSync(file).mode & 0o777).toBe(0o600)
      expect(Buffer.from(fs.readFileSync(file, 'utf8').trim(), 'base64')).toHaveLength(32)
      const list = await t.api('GET', '/v1/secrets')
      expect(list.body).toEqual({ secrets: [{ name: 'TOKEN', createdAt: expect.any(String), updatedAt: expect.any(String) }] })
      expect(list.text).not.toContain('v1')
      const stored = await t.testDb.db.query<{ ciphertext: Uint8Array }>('SELECT ciphertext FROM secrets')
      expect(Buffer.from(stored.rows[0].ciphertext).includes(Buffer.from('v1'))).toBe(false)
      for (const [path, body] of [
        ['/v1/secrets/lower', { value: 'x' }],
        ['/v1/secrets/TOKEN', { value: 7 }],
        ['/v1/secrets/TOKEN', { value: 'x', more: 1 }],
        ['/v1/secrets/TOKEN', { value: 'é'.repeat(8193) }],
        [`/v1/secrets/${'A'.repeat(65)}`, { value: 'x' }],
      ] as const) {
        const r = await t.api('PUT', path, body)
        expect(r.status, path).toBe(400)
        expect(r.body.error.code).toBe('bad-request')
      }
      expect((await t.api('DELETE', '/v1/secrets/NOPE')).status).toBe(404)
      expect((await t.api('DELETE', '/v1/secrets/TOKEN')).status).toBe(204)
      expect((await t.api('GET', '/v1/secrets')).body).toEqual({ secrets: [] })
    } finally {
      await t.close()
    }
  })
})
