// agentd as an MCP server (API.md §17.5) on one database (docs/testing.md), through @modelcontextprotocol/sdk's own
// Client over StreamableHTTPClientTransport: the tool list, send_message answering the scripted text
// (a new session from an agent, then the same session again, a repeat by idempotency key that sends
// nothing), in_progress when the wait runs out, read_session, an approval and a client call answered
// with answer_pending; a read-only token reads but cannot send, and writes nothing; another tenant's
// session is not there; malformed JSON-RPC and unknown methods are JSON-RPC errors.

import crypto from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp } from '../helpers/app.js'

const CLIENT_TOOL = { name: 'lookup', description: 'looks up', parameters: { type: 'object', properties: { q: { type: 'string' } } }, execution: { type: 'client' }, approval: 'always' }

describe.each(APP_DB_KINDS)('MCP server on %s', (kind) => {
  let t: TestApp
  const clients: Client[] = []
  beforeAll(async () => {
    t = await startTestApp({ kind, env: { AGENTD_SECRET_KEY: crypto.randomBytes(32).toString('base64') } })
    const r = await t.api('POST', '/v1/agents', { id: 'helper', name: 'Helper', description: 'helps', model: t.models.ref(), tools: [CLIENT_TOOL] })
    expect(r.status, r.text).toBe(201)
  })
  afterAll(async () => {
    for (const c of clients) await c.close().catch(() => {})
    await t?.close()
  })

  const connect = async (key = t.key) => {
    const c = new Client({ name: 'test-host', version: '1.0.0' })
    await c.connect(new StreamableHTTPClientTransport(new URL(`${t.url}/v1/mcp`), { requestInit: { headers: { authorization: `Bearer ${key}` } } }))
    clients.push(c)
    return c
  }
  const countRows = async (table: string) => (await t.app.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`)).rows[0].n

  it('lists the five tools with their input schemas', async () => {
    const c = await connect()
    const { tools } = await c.listTools()
    expect(tools.map((x) => x.name)).toEqual(['list_agents', 'list_sessions', 'send_message', 'read_session', 'answer_pending'])
    const send = tools.find((x) => x.name === 'send_message')!
    expect(send.inputSchema.required).toEqual(['text'])
    expect(Object.keys(send.inputSchema.properties!).sort()).toEqual(['agent', 'idempotencyKey', 'session', 'text', 'waitSeconds'])
    expect(c.getServerVersion()?.name).toBe('agentd')
  })

  it('send_message creates a session from the agent, answers the scripted text; the same session continues; a repeated key sends nothing', async () => {
    const c = await connect()
    t.models.script('mcp-a', { text: ['Hel', 'lo'] }, { text: ['again'] })
    const first = await c.callTool({ name: 'send_message', arguments: { agent: 'helper', session: 'mcp-a', text: 'hi', idempotencyKey: 'k1' } })
    expect(first.isError).toBeUndefined()
    expect(first.structuredContent).toEqual({ status: 'completed', session: 'mcp-a', turn: 1, text: 'Hello' })
    expect(first.content).toEqual([{ type: 'text', text: 'Hello' }])
    const s = await t.api('GET', '/v1/sessions/mcp-a')
    expect(s.body.agent).toEqual({ id: 'helper', version: 1 })

    const second = await c.callTool({ name: 'send_message', arguments: { session: 'mcp-a', text: 'more' } })
    expect(second.structuredContent).toEqual({ status: 'completed', session: 'mcp-a', turn: 2, text: 'again' })

    const repeat = await c.callTool({ name: 'send_message', arguments: { agent: 'helper', session: 'mcp-a', text: 'hi', idempotencyKey: 'k1' } })
    expect(repeat.structuredContent).toEqual({ status: 'completed', session: 'mcp-a', turn: 1, text: 'Hello' })
    const evs = await t.events('mcp-a')
    expect(evs.filter((e) => e.type === 'user/message').map((e: any) => e.data.content[0].text)).toEqual(['hi', 'more'])
    expect(t.models.requestsOf('mcp-a')).toHaveLength(2)

    const listed = await c.callTool({ name: 'list_sessions', arguments: {} })
    expect((listed.structuredContent as any).sessions.map((x: any) => x.id)).toContain('mcp-a')
    const agents = await c.callTool({ name: 'list_agents', arguments: {} })
    expect(agents.structuredContent).toEqual({ agents: [{ id: 'helper', version: 1, name: 'Helper', description: 'helps' }], nextCursor: null })

    const read = await c.callTool({ name: 'read_session', arguments: { session: 'mcp-a', after: 0 } })
    const sc = read.structuredContent as any
    expect(sc.session.id).toBe('mcp-a')
    expect(sc.headSeq).toBe(evs.at(-1)!.seq)
    expect(sc.events.map((e: any) => e.seq)).toEqual(evs.filter((e) => e.seq > 0).map((e) => e.seq))
    expect((read.content as any)[0].text).toContain('assistant: Hello')
    expect((read.content as any)[0].text).toContain('user: more')
  })

  it('in_progress when waitSeconds runs out, with the session and turn to read later', async () => {
    const c = await connect()
    let open!: () => void
    const gate = new Promise<void>((r) => (open = r))
    await t.createSession({ id: 'mcp-slow' })
    t.models.script('mcp-slow', { text: ['slow'], gate })
    const r = await c.callTool({ name: 'send_message', arguments: { session: 'mcp-slow', text: 'wait', waitSeconds: 0.3 } })
    expect(r.structuredContent).toMatchObject({ status: 'in_progress', session: 'mcp-slow' })
    expect([null, 1]).toContain((r.structuredContent as any).turn)
    open()
    await t.waitForTurnEnd('mcp-slow', 1)
  })

  it('an approval and a client call wait as requires_action; answer_pending answers both and the turn completes', async () => {
    const c = await connect()
    t.models.script('mcp-tools', { toolCalls: [{ id: 'call-1', name: 'lookup', arguments: { q: 'x' } }] }, { text: ['found'] })
    const r = await c.callTool({ name: 'send_message', arguments: { agent: 'helper', session: 'mcp-tools', text: 'look' } })
    expect(r.structuredContent).toEqual({ status: 'requires_action', session: 'mcp-tools', turn: 1, pending: [{ callId: 'call-1', name: 'lookup', kind: 'approval', arguments: '{"q":"x"}' }] })
    const wrong = await c.callTool({ name: 'answer_pending', arguments: { session: 'mcp-tools', callId: 'call-1', result: 'too early' } })
    expect(wrong.isError).toBe(true)
    const allow = await c.callTool({ name: 'answer_pending', arguments: { session: 'mcp-tools', callId: 'call-1', decision: 'allow' } })
    expect(allow.structuredContent).toEqual({ status: 'accepted', session: 'mcp-tools', callId: 'call-1', kind: 'approval' })
    const deadline = Date.now() + 10000
    while (!(await t.api('GET', '/v1/sessions/mcp-tools/pending')).body.toolCalls.some((x: any) => x.kind === 'client')) {
      if (Date.now() > deadline) throw new Error('the client call never became pending')
      await new Promise((res) => setTimeout(res, 25))
    }
    const result = await c.callTool({ name: 'answer_pending', arguments: { session: 'mcp-tools', callId: 'call-1', result: 'the answer' } })
    expect(result.structuredContent).toMatchObject({ status: 'accepted', kind: 'client' })
    const evs = await t.waitForTurnEnd('mcp-tools', 1)
    expect((evs.find((e) => e.type === 'turn/end')!.data as any).reason).toEqual({ kind: 'completed' })
    expect((evs.find((e) => e.type === 'tool/result')!.data as any).message.content[0].content).toEqual([{ type: 'text', text: 'the answer' }])
  })

  it('a read-only token lists and reads but cannot send or answer, and writes nothing', async () => {
    const tok = await t.api('POST', '/v1/tokens', { scopes: ['read'] })
    expect(tok.status, tok.text).toBe(201)
    const c = await connect(tok.body.token)
    const before = { sessions: await countRows('sessions'), events: await countRows('session_events') }
    const send = await c.callTool({ name: 'send_message', arguments: { agent: 'helper', session: 'mcp-ro', text: 'hi' } })
    expect(send.isError).toBe(true)
    expect((send.content as any)[0].text).toMatch(/^forbidden: /)
    const again = await c.callTool({ name: 'send_message', arguments: { session: 'mcp-a', text: 'hi' } })
    expect(again.isError).toBe(true)
    const answer = await c.callTool({ name: 'answer_pending', arguments: { session: 'mcp-a', callId: 'x', decision: 'allow' } })
    expect((answer.content as any)[0].text).toMatch(/^forbidden: /)
    expect({ sessions: await countRows('sessions'), events: await countRows('session_events') }).toEqual(before)
    const read = await c.callTool({ name: 'read_session', arguments: { session: 'mcp-a' } })
    expect(read.isError).toBeUndefined()
  })

  it("another tenant's session is not there; bad arguments are tool errors", async () => {
    const other = await t.api('POST', '/v1/admin/tenants', { name: 'other' }, { key: t.adminToken })
    const c = await connect(other.body.apiKey)
    const before = await countRows('session_events')
    for (const [name, args] of [['read_session', { session: 'mcp-a' }], ['send_message', { session: 'mcp-a', text: 'hi' }], ['answer_pending', { session: 'mcp-tools', callId: 'call-1', decision: 'deny' }]] as const) {
      const r = await c.callTool({ name, arguments: args })
      expect(r.isError, name).toBe(true)
      expect((r.content as any)[0].text).toBe('session-not-found: session ' + args.session + ' not found')
    }
    const bad = await c.callTool({ name: 'send_message', arguments: { text: '' } })
    expect(bad.isError).toBe(true)
    expect((bad.content as any)[0].text).toMatch(/^invalid arguments for send_message/)
    // text PostgreSQL cannot hold is refused before the MCP server sees the request (API.md §10)
    await expect(c.callTool({ name: 'send_message', arguments: { text: 'a\u0000b' } })).rejects.toThrow(/"code":-32600,"message":"body.params.arguments.text: contains a NUL character/)
    expect(await countRows('session_events')).toBe(before)
    await expect(c.callTool({ name: 'no_such_tool', arguments: {} })).rejects.toThrow(/no tool no_such_tool/)
  })

  it('malformed JSON, a JSON-RPC body of the wrong shape, an unknown method and no credential are JSON-RPC errors', async () => {
    const headers = { accept: 'application/json, text/event-stream' }
    const parse = await t.api('POST', '/v1/mcp', undefined, { raw: '{"jsonrpc": "2.0", "id": 1,', headers })
    expect(parse.status).toBe(400)
    expect(parse.body).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32700 } })
    // JSON that is no JSON-RPC request object: Invalid Request
    const shape = await t.api('POST', '/v1/mcp', { hello: 'world' }, { headers })
    expect(shape.status).toBe(400)
    expect(shape.body).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32600, data: { code: 'bad-request' } } })
    const unknown = await t.api('POST', '/v1/mcp', { jsonrpc: '2.0', id: 7, method: 'no/such', params: {} }, { headers })
    expect(unknown.body).toMatchObject({ jsonrpc: '2.0', id: 7, error: { code: -32601 } })
    const noKey = await t.api('POST', '/v1/mcp', { jsonrpc: '2.0', id: 1, method: 'tools/list' }, { headers, key: null })
    expect(noKey.status).toBe(401)
    expect(noKey.body).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32000, data: { code: 'unauthorized' } } })
    const get = await t.api('GET', '/v1/mcp', undefined, { headers: { accept: 'text/event-stream' } })
    expect(get.status).toBe(405)
  })
})
