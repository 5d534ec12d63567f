// API.md §19 across real agentd processes on one PostgreSQL, exporting with the real OTLP exporter
// (its default protocol, http/protobuf) to a receiver in this test that decodes what it is sent: the
// span tree of a followup with a retried model attempt and two tool calls (http and MCP), the
// traceparent seen by the model server, the tool server, the MCP server and a webhook receiver, the
// link from a turn to the request that queued its input — from another process, and into a crash
// continuation after kill -9 — and no message text, secret, key or token in anything exported.

import crypto from 'node:crypto'
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { TestMcpServer } from '../helpers/mcp-server.js'
import { startOtlpReceiver, type OtlpReceiver, type OtlpSpan } from '../helpers/otlp-receiver.js'
import { startReceiver, type Receiver } from '../helpers/receiver.js'
import { httpTool, startCluster, type Cluster } from './helpers-processes.js'

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
const SECRET_KEY = crypto.randomBytes(32).toString('base64')
const TOOL_TOKEN = `tooltok-${crypto.randomBytes(8).toString('hex')}`
const MCP_TOKEN = `mcptok-${crypto.randomBytes(8).toString('hex')}`
/** OTLP span kinds (the proto's numbering) */
const KIND = { INTERNAL: 1, SERVER: 2, CLIENT: 3 }

const newTraceparent = () => ({ traceId: crypto.randomBytes(16).toString('hex'), spanId: crypto.randomBytes(8).toString('hex') })
const header = (t: { traceId: string; spanId: string }) => `00-${t.traceId}-${t.spanId}-01`
const parse = (tp: unknown) => {
  const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(String(tp))
  if (!m) throw new Error(`not a sampled traceparent: ${String(tp)}`)
  return { traceId: m[1], spanId: m[2] }
}

describe('OpenTelemetry traces across agentd processes (API.md §19)', () => {
  let c: Cluster
  let otlp: OtlpReceiver
  let hooks: Receiver
  let mcp: TestMcpServer
  beforeAll(async () => {
    otlp = await startOtlpReceiver()
    hooks = await startReceiver()
    mcp = await new TestMcpServer([{ name: 'lookup', inputSchema: { type: 'object', properties: { q: { type: 'string' } } }, call: () => ({ content: [{ type: 'text', text: 'found it' }] }) }]).start()
    c = await startCluster({
      processes: 2,
      providerKey: 'env:MOCK_PROVIDER_KEY',
      env: {
        MOCK_PROVIDER_KEY: 'prov-key-very-private',
        AGENTD_SECRET_KEY: SECRET_KEY,
        AGENTD_LEASE_TTL_MS: '1500',
        OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
        OTEL_BSP_SCHEDULE_DELAY: '100',
        OTEL_SERVICE_NAME: 'agentd-under-test',
      },
    })
    for (const [name, value] of [['TOOL_TOKEN', TOOL_TOKEN], ['MCP_TOKEN', MCP_TOKEN]]) expect((await c.api(0, 'PUT', `/v1/secrets/${name}`, { value })).status).toBe(204)
    expect((await c.api(0, 'POST', '/v1/webhooks', { url: `${hooks.url}/hook`, events: ['turn.completed'] })).status).toBe(201)
  }, 120000)
  beforeEach(async () => {
    await c.ensureUp()
  }, 60000)
  afterAll(async () => {
    await c?.close()
    await mcp?.stop()
    await hooks?.close()
    await otlp?.close()
  }, 60000)

  const followup = async (i: number, id: string, content: string, traceparent: string) => {
    const res = await fetch(`${c.procs[i].url}/v1/sessions/${id}/followup`, { method: 'POST', headers: { authorization: `Bearer ${c.key}`, 'content-type': 'application/json', traceparent }, body: JSON.stringify({ content }) })
    expect(res.status, await res.text()).toBe(202)
  }
  const turnSpan = (id: string, turn: number) => otlp.waitFor((s) => s.name.startsWith('invoke_agent ') && s.attributes['gen_ai.conversation.id'] === id && s.attributes['agentd.turn'] === turn, `invoke_agent of ${id} turn ${turn}`)
  const childrenOf = (parent: OtlpSpan, prefix: string) => otlp.spans.filter((s) => s.parentSpanId === parent.spanId && s.traceId === parent.traceId && s.name.startsWith(prefix))

  it('a followup: its request span, then invoke_agent with chat spans (one retried after a 429) and execute_tool spans; traceparent on every outgoing call', async () => {
    const { id, marker } = await c.createSession(0, {
      tools: [{ ...httpTool(c.tools, 'echo', 'echo'), execution: { type: 'http', url: `${c.tools.url}/echo`, headers: { 'x-tool-key': 'secret:TOOL_TOKEN' } } }],
      mcpServers: [{ name: 'docs', url: mcp.url, headers: { authorization: 'secret:MCP_TOKEN' } }],
    })
    c.llm.script(
      marker,
      { status: 429, headers: { 'retry-after-ms': '50' } },
      { toolCalls: [{ id: 'call_echo', name: 'echo', arguments: { q: 'x' } }, { id: 'call_mcp', name: 'docs__lookup', arguments: { q: 'y' } }] },
      { chunks: ['the zebra ', 'answer'] },
    )
    const client = newTraceparent()
    await followup(0, id, 'hello giraffe', header(client))
    await c.waitForTurnEnd(0, id, 1, 20000)

    const turn = await turnSpan(id, 1)
    const request = await otlp.waitFor((s) => s.kind === KIND.SERVER && s.traceId === client.traceId, 'the followup request span')
    // the HTTP server span: a child of the client's traceparent, named by its route, without the query
    expect(request).toMatchObject({ parentSpanId: client.spanId, name: 'POST /v1/sessions/:id/followup' })
    expect(request.attributes).toMatchObject({ 'http.request.method': 'POST', 'http.route': '/v1/sessions/:id/followup', 'http.response.status_code': 202, 'url.path': `/v1/sessions/${id}/followup` })
    expect(request.resource['service.name']).toBe('agentd-under-test')

    // the turn: a root of its own trace, linked to the request that queued its input
    expect(turn.parentSpanId).toBeUndefined()
    expect(turn.traceId).not.toBe(client.traceId)
    expect(turn.name).toBe('invoke_agent agentd')
    expect(turn.attributes).toMatchObject({ 'gen_ai.operation.name': 'invoke_agent', 'gen_ai.conversation.id': id, 'gen_ai.agent.id': id, 'gen_ai.agent.name': 'agentd', 'agentd.turn': 1, 'agentd.turn.end_reason': 'completed' })
    expect(turn.links).toEqual([{ traceId: client.traceId, spanId: request.spanId, attributes: { 'agentd.link': 'input', 'agentd.message.id': expect.any(String) } }])

    // three model attempts: the 429, its retry (with the tool calls), the answer
    await otlp.waitFor(() => childrenOf(turn, 'chat ').length >= 3 && childrenOf(turn, 'execute_tool ').length >= 2, 'the turn children')
    const chats = childrenOf(turn, 'chat ').sort((a, b) => Number(a.startNs - b.startNs))
    expect(chats.map((s) => s.name)).toEqual(['chat scripted', 'chat scripted', 'chat scripted'])
    for (const s of chats) expect(s.attributes).toMatchObject({ 'gen_ai.operation.name': 'chat', 'gen_ai.provider.name': 'mock', 'gen_ai.request.model': 'scripted', 'gen_ai.conversation.id': id, 'agentd.turn': 1 })
    expect(chats[0].attributes).toMatchObject({ 'agentd.step': 1, 'agentd.attempt': 1, 'error.type': 'RATE_LIMIT', 'gen_ai.response.finish_reasons': ['error'] })
    expect(chats[0].status.code).toBe(2)
    expect(chats[0].kind).toBe(KIND.CLIENT)
    expect(chats[1].attributes).toMatchObject({ 'agentd.step': 1, 'agentd.attempt': 2, 'gen_ai.response.finish_reasons': ['tool-calls'], 'gen_ai.usage.input_tokens': 10, 'gen_ai.usage.output_tokens': 5 })
    expect(chats[1].events).toEqual([{ name: 'gen_ai.request.retry', attributes: { 'agentd.attempt': 1, 'error.type': 'RATE_LIMIT' } }])
    expect(chats[1].attributes['error.type']).toBeUndefined()
    expect(chats[2].attributes).toMatchObject({ 'agentd.step': 2, 'agentd.attempt': 1, 'gen_ai.response.finish_reasons': ['stop'] })

    const tools = childrenOf(turn, 'execute_tool ')
    const echo = tools.find((s) => s.name === 'execute_tool echo')!
    const lookup = tools.find((s) => s.name === 'execute_tool docs__lookup')!
    expect(echo.attributes).toMatchObject({ 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': 'echo', 'gen_ai.tool.call.id': 'call_echo', 'gen_ai.tool.type': 'http' })
    expect(lookup.attributes).toMatchObject({ 'gen_ai.tool.name': 'docs__lookup', 'gen_ai.tool.call.id': 'call_mcp', 'gen_ai.tool.type': 'mcp' })
    for (const s of tools) expect(s.attributes['error.type']).toBeUndefined()

    // outgoing calls carry the span they are made in
    const modelCalls = c.llm.requests(marker).map((r) => parse(r.headers.traceparent))
    expect(modelCalls).toEqual(chats.map((s) => ({ traceId: turn.traceId, spanId: s.spanId })))
    const toolCall = c.tools.calls('echo').find((r) => r.body?.sessionId === id)!
    expect(parse(toolCall.headers.traceparent)).toEqual({ traceId: turn.traceId, spanId: echo.spanId })
    const mcpCall = mcp.calls('lookup').at(-1)!
    expect(parse(mcpCall.headers.traceparent)).toEqual({ traceId: turn.traceId, spanId: lookup.spanId })
    // the tool server got its secret, the span did not (below)
    expect(toolCall.headers['x-tool-key']).toBe(TOOL_TOKEN)

    // the webhook of the turn's end: a CLIENT span of its own, whose traceparent the receiver saw
    const [delivery] = await hooks.waitFor(1, 15000, (r) => r.body?.data?.sessionId === id)
    const posted = parse(delivery.headers.traceparent)
    const webhook = await otlp.waitFor((s) => s.spanId === posted.spanId, 'the webhook span')
    expect(webhook).toMatchObject({ name: 'webhook turn.completed', traceId: posted.traceId, kind: KIND.CLIENT, attributes: { 'agentd.webhook.event': 'turn.completed' } })

    // API.md §19: no message text without OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, never a secret
    await sleep(300)
    const exported = otlp.raw.join('\n')
    expect(exported).toContain(id)
    for (const text of ['giraffe', 'zebra', 'found it', 'You are a test agent']) expect(exported).not.toContain(text)
    for (const secret of [TOOL_TOKEN, MCP_TOKEN, c.key, c.adminToken, 'prov-key-very-private', SECRET_KEY]) expect(exported).not.toContain(secret)
    for (const s of otlp.spans) for (const k of Object.keys(s.attributes)) expect(k).not.toMatch(/input\.messages|output\.messages|call\.arguments|call\.result/)
  })

  it('a request to one process, the turn on another: the turn links to the request span of the process that accepted it', async () => {
    const { id, marker } = await c.createSession(0)
    c.llm.fallback(marker, { chunks: ['ok'] })
    await followup(0, id, 'warm up', header(newTraceparent()))
    await c.waitForTurnEnd(0, id, 1, 20000)
    const holder = await c.waitForHolder(id)
    const other = 1 - holder
    const client = newTraceparent()
    await followup(other, id, 'from the other process', header(client))
    await c.waitForTurnEnd(0, id, 2, 20000)
    expect(await c.holder(id)).toBe(holder)
    const turn = await turnSpan(id, 2)
    const request = await otlp.waitFor((s) => s.kind === KIND.SERVER && s.traceId === client.traceId, 'the followup request span')
    expect(turn.links).toEqual([expect.objectContaining({ traceId: client.traceId, spanId: request.spanId })])
  })

  it('kill -9 of the driving process in a tool call: the continuation on the other process links to the original request', async () => {
    const { id, marker } = await c.createSession(0, { tools: [httpTool(c.tools, 'slow', 'hold', `k-${Date.now()}`)] })
    c.llm.script(marker, { chunks: ['ok'] }, { toolCalls: [{ id: 'call_slow', name: 'slow', arguments: {} }] })
    c.llm.fallback(marker, { chunks: ['continued'] })
    await followup(0, id, 'warm up', header(newTraceparent()))
    await c.waitForTurnEnd(0, id, 1, 20000)
    const holder = await c.waitForHolder(id)
    const other = 1 - holder
    const client = newTraceparent()
    const before = c.tools.calls('hold').length
    await followup(other, id, 'call the slow tool', header(client))
    await c.tools.waitForCalls('hold', before + 1)
    c.procs[holder].child.kill('SIGKILL')
    await c.procs[holder].exited
    // the other process takes the lease over, repairs turn 2 and continues it as turn 3
    const log = await c.waitFor(other, id, (e) => e.type === 'turn/end' && e.data.turn === 3, 30000)
    expect(log.find((e) => e.type === 'turn/start' && e.data.turn === 3)?.data).toEqual({ turn: 3, continues: 2 })
    const turn = await turnSpan(id, 3)
    expect(turn.attributes['agentd.turn.continues']).toBe(2)
    const request = await otlp.waitFor((s) => s.kind === KIND.SERVER && s.traceId === client.traceId, 'the followup request span')
    expect(turn.links).toEqual([expect.objectContaining({ traceId: client.traceId, spanId: request.spanId })])
  }, 60000)
})
