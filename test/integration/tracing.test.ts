// API.md §19 in one process, on one database (docs/testing.md): the `http/json` protocol, message contents only
// with OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true (and still no secret), the span of an SSE
// stream ending with the stream, and tracing off: no provider, no span, no traceparent anywhere.

import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { trace } from '@opentelemetry/api'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SUMMARY_INSTRUCTION } from '../../src/plugins/compaction.js'
import { tracingOn } from '../../src/tracing/index.js'
import { APP_DB_KINDS } from '../helpers/db.js'
import { openSse, startTestApp, type TestApp } from '../helpers/app.js'
import { startOtlpReceiver, type OtlpReceiver } from '../helpers/otlp-receiver.js'

const TOOL_SECRET = 'tool-secret-kestrel-4711'
const TRACEPARENT = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'

/** A tool server that records each call's headers and answers with a fixed text. */
async function toolServer() {
  const calls: http.IncomingHttpHeaders[] = []
  const server = http.createServer((req, res) => {
    calls.push(req.headers)
    req.resume()
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ content: 'the tool says ocelot' })))
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/t`, calls, close: () => new Promise((r) => server.close(r)) }
}

describe.each(APP_DB_KINDS)('tracing in one process on %s', (kind) => {
  let tools: Awaited<ReturnType<typeof toolServer>>
  beforeAll(async () => {
    tools = await toolServer()
  })
  afterAll(async () => {
    await tools.close()
  })

  describe('on, http/json, contents captured', () => {
    let t: TestApp
    let otlp: OtlpReceiver
    beforeAll(async () => {
      otlp = await startOtlpReceiver()
      t = await startTestApp({ kind, models: [{ id: 'scripted', contextWindow: 8192, maxTokens: 1024 }, { id: 'small', contextWindow: 2048, maxTokens: 256 }], env: { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'true', OTEL_BSP_SCHEDULE_DELAY: '50', AGENTD_SECRET_KEY: Buffer.alloc(32, 7).toString('base64') } })
      expect((await t.api('PUT', '/v1/secrets/TOOL_KEY', { value: TOOL_SECRET })).status).toBe(204)
    })
    afterAll(async () => {
      await t?.close()
      await otlp?.close()
    })

    it('chat and execute_tool spans carry the messages, the arguments and the result; the tool header secret is nowhere', async () => {
      expect(tracingOn()).toBe(true)
      const s = await t.createSession({ system: 'be brief', tools: [{ name: 'probe', description: 'probe', parameters: { type: 'object', properties: {} }, execution: { type: 'http', url: tools.url, headers: { 'x-key': 'secret:TOOL_KEY' } } }] })
      t.models.script(s.id, { toolCalls: [{ id: 'call_p', name: 'probe', arguments: { animal: 'lynx' } }] }, { text: ['final ', 'heron'] })
      const r = await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'say marmot' }, { headers: { traceparent: TRACEPARENT } })
      expect(r.status).toBe(202)
      await t.waitForTurnEnd(s.id, 1)
      const turn = await otlp.waitFor((x) => x.attributes['gen_ai.conversation.id'] === s.id && x.name.startsWith('invoke_agent'), 'the turn')
      expect(new Set(otlp.contentTypes)).toEqual(new Set(['application/json']))
      const chats = await (async () => {
        await otlp.waitFor((_, all) => all.filter((x) => x.parentSpanId === turn.spanId && x.name.startsWith('chat')).length === 2, 'two chat spans')
        return otlp.spans.filter((x) => x.parentSpanId === turn.spanId && x.name.startsWith('chat')).sort((a, b) => Number(a.startNs - b.startNs))
      })()
      expect(chats[0].attributes['gen_ai.input.messages']).toContain('say marmot')
      expect(chats[0].attributes['gen_ai.output.messages']).toContain('lynx')
      expect(chats[1].attributes['gen_ai.output.messages']).toContain('heron')
      const tool = await otlp.waitFor((x) => x.name === 'execute_tool probe', 'the tool span')
      expect(tool.parentSpanId).toBe(turn.spanId)
      expect(tool.attributes['gen_ai.tool.call.arguments']).toBe('{"animal":"lynx"}')
      expect(tool.attributes['gen_ai.tool.call.result']).toContain('ocelot')
      // the user message's durable source names the request that queued it; the turn links to it
      const user = (await t.events(s.id)).find((e) => e.type === 'user/message')!
      const request = await otlp.waitFor((x) => x.name === 'POST /v1/sessions/:id/followup' && x.traceId === '0af7651916cd43dd8448eb211c80319c', 'the request')
      expect((user.data as any).source).toEqual({ kind: 'user', traceparent: `00-${request.traceId}-${request.spanId}-01` })
      expect(turn.links.map((l) => l.spanId)).toEqual([request.spanId])
      expect(tools.calls[0]['x-key']).toBe(TOOL_SECRET)
      for (const raw of otlp.raw) for (const secret of [TOOL_SECRET, t.key, t.adminToken]) expect(raw).not.toContain(secret)
    })

    it('a compaction under pressure is a span inside the turn that compacts, before its chat span', async () => {
      const s = await t.createSession({ model: 'test/small', system: 'You are terse.' })
      const big = (c: string) => c.repeat(1600)
      t.models.script(s.id, { text: [big('a')], usage: { input: 500, output: 400 } }, { text: [big('b')], usage: { input: 1300, output: 400 } })
      for (const [turn, content] of [[1, big('q')], [2, big('r')]] as const) {
        await t.api('POST', `/v1/sessions/${s.id}/followup`, { content })
        await t.waitForTurnEnd(s.id, turn)
      }
      t.models.fallback(s.id, (r) => (JSON.stringify(r.context.messages.at(-1)).includes(SUMMARY_INSTRUCTION) ? { text: ['a short summary'] } : { text: ['after compaction'] }))
      await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'third' })
      const evs = await t.waitForTurnEnd(s.id, 3)
      const compactionId = (evs.find((e) => e.type === 'compaction/start')!.data as any).compactionId
      const turn = await otlp.waitFor((x) => x.name.startsWith('invoke_agent') && x.attributes['gen_ai.conversation.id'] === s.id && x.attributes['agentd.turn'] === 3, 'turn 3')
      const span = await otlp.waitFor((x) => x.name === 'compaction' && x.attributes['agentd.compaction.id'] === compactionId, 'the compaction span')
      expect(span.parentSpanId).toBe(turn.spanId)
      expect(span.attributes).toMatchObject({ 'gen_ai.conversation.id': s.id, 'agentd.turn': 3, 'agentd.compaction.shadowed_tokens': expect.any(Number) })
      expect(span.status.code).toBe(0)
      const chat = await otlp.waitFor((x) => x.parentSpanId === turn.spanId && x.name === 'chat small', 'the chat span of turn 3')
      expect(span.endNs <= chat.startNs).toBe(true)
    })

    it('a session made from an agent: every turn span is named by the agent, with its id and version', async () => {
      const a = await t.api('POST', '/v1/agents', { id: `support-${kind}`, name: 'Support desk', model: t.models.ref() })
      expect(a.status, a.text).toBe(201)
      const s = await t.createSession({ agent: `support-${kind}` })
      t.models.script(s.id, { text: ['hi'] }, { text: ['again'] })
      // the second turn comes after the driver read the session's settings again (its first step does)
      for (const [n, content] of [[1, 'hello'], [2, 'and again']] as const) {
        await t.api('POST', `/v1/sessions/${s.id}/followup`, { content })
        await t.waitForTurnEnd(s.id, n)
        const turn = await otlp.waitFor((x) => x.name.startsWith('invoke_agent') && x.attributes['gen_ai.conversation.id'] === s.id && x.attributes['agentd.turn'] === n, `turn ${n}`)
        expect(turn.name).toBe('invoke_agent Support desk')
        expect(turn.attributes).toMatchObject({ 'gen_ai.agent.id': `support-${kind}`, 'gen_ai.agent.name': 'Support desk', 'agentd.agent.version': 1 })
      }
    })

    it('an SSE stream is one SERVER span, ended when the stream closes, without its access_token', async () => {
      const s = await t.createSession()
      const sse = await openSse(`${t.url}/v1/sessions/${s.id}/stream?access_token=${t.key}`)
      expect(sse.status).toBe(200)
      await sse.waitFor((f) => f.event !== undefined || f.comment !== undefined).catch(() => undefined)
      sse.close()
      const span = await otlp.waitFor((x) => x.name === 'GET /v1/sessions/:id/stream' && x.attributes['url.path'] === `/v1/sessions/${s.id}/stream`, 'the stream span')
      expect(span.attributes['http.response.status_code']).toBe(200)
      for (const raw of otlp.raw) expect(raw).not.toContain(t.key)
    })
  })

  describe('off (no OTLP endpoint)', () => {
    let t: TestApp
    beforeAll(async () => {
      t = await startTestApp({ kind })
    })
    afterAll(async () => {
      await t?.close()
    })

    it('registers nothing: the no-op tracer, no traceparent stored or sent', async () => {
      expect(tracingOn()).toBe(false)
      expect(trace.getTracer('x').startSpan('y').isRecording()).toBe(false)
      const s = await t.createSession({ tools: [{ name: 'probe', description: 'probe', parameters: { type: 'object', properties: {} }, execution: { type: 'http', url: tools.url } }] })
      const before = tools.calls.length
      t.models.script(s.id, { toolCalls: [{ id: 'call_p', name: 'probe', arguments: {} }] }, { text: ['ok'] })
      expect((await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' }, { headers: { traceparent: TRACEPARENT } })).status).toBe(202)
      await t.waitForTurnEnd(s.id, 1)
      const user = (await t.events(s.id)).find((e) => e.type === 'user/message')!
      expect((user.data as any).source).toEqual({ kind: 'user' })
      expect(tools.calls.length).toBe(before + 1)
      expect(tools.calls.at(-1)!.traceparent).toBeUndefined()
    })
  })
})
