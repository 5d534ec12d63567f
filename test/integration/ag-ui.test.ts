// API.md §17.3 on one database (docs/testing.md), with AG-UI's own packages: HttpAgent.runAgent gives a stream that
// @ag-ui/core's event schemas and @ag-ui/client's verifier accept; an approval ends the run as an
// interrupt and a `resume` entry runs the call; connectAgent gets the history snapshot; the same POST
// with Last-Event-ID resumes exactly after it and still verifies; bad input writes nothing.

import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { HttpAgent, parseSSEStream, runHttpRequest, transformHttpEventStream, verifyEvents, type RunAgentResult } from '@ag-ui/client'
import type { BaseEvent, RunAgentInput } from '@ag-ui/core'
import { EventSchemas } from '@ag-ui/core/schemas'
import { firstValueFrom, from, lastValueFrom, toArray, type Observable } from 'rxjs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { gate } from '../helpers/scripted.js'

void firstValueFrom
void parseSSEStream

/** An HttpAgent that also reattaches (`connectAgent`) through agentd's `…/connect`. */
class ConnectingAgent extends HttpAgent {
  protected override connect(input: RunAgentInput): Observable<BaseEvent> {
    return transformHttpEventStream(runHttpRequest(() => this.fetch(`${this.url}/connect`, this.requestInit(input))))
  }
}

/** Runs and collects every event, each checked against @ag-ui/core's schema. */
async function run(agent: HttpAgent, params: Parameters<HttpAgent['runAgent']>[0] = {}): Promise<{ events: BaseEvent[]; result: RunAgentResult }> {
  const events: BaseEvent[] = []
  const result = await agent.runAgent(params, { onEvent: ({ event }) => void events.push(EventSchemas.parse(event) as BaseEvent) })
  return { events, result }
}

/** SSE frames of a raw answer: id and parsed event. */
async function frames(res: Response): Promise<Array<{ id: number; event: any }>> {
  const text = await res.text()
  return text
    .split('\n\n')
    .filter((b) => b.includes('data: '))
    .map((b) => ({ id: Number(/^id: (\d+)$/m.exec(b)?.[1]), event: JSON.parse(/^data: (.*)$/m.exec(b)![1]) }))
}

describe.each(APP_DB_KINDS)('AG-UI on %s', (kind) => {
  let t: TestApp
  let tools: http.Server
  let cleaned = 0
  const agentId = 'copilot'

  beforeAll(async () => {
    tools = http.createServer((req, res) => {
      cleaned++
      req.resume()
      req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ content: 'deleted 3 files' })))
    })
    await new Promise<void>((r) => tools.listen(0, '127.0.0.1', r))
    t = await startTestApp({ kind })
    const r = await t.api('POST', '/v1/agents', {
      id: agentId,
      name: 'Copilot',
      model: t.models.ref(),
      tools: [{ name: 'clean', description: 'deletes files', parameters: { type: 'object' }, execution: { type: 'http', url: `http://127.0.0.1:${(tools.address() as AddressInfo).port}/clean` }, approval: 'always' }],
    })
    expect(r.status).toBe(201)
  })
  afterAll(async () => {
    await t?.close()
    tools?.close()
  })

  const url = () => `${t.url}/v1/ag-ui/${agentId}`
  const agent = (threadId: string) => new ConnectingAgent({ url: url(), threadId, headers: { authorization: `Bearer ${t.key}` } })
  let n = 0
  const newId = () => `thread-${kind}-${++n}`

  it('runAgent streams a verified run; the thread is a session of the agent', async () => {
    const id = newId()
    t.models.script(id, { reasoning: ['thinking'], text: ['Hi ', 'there'] })
    const a = agent(id)
    a.addMessage({ id: 'u-1', role: 'user', content: 'hello' })
    const { events, result } = await run(a, { runId: 'run-1' })
    expect(events.map((e) => e.type)).toEqual([
      'RUN_STARTED',
      'REASONING_START',
      'REASONING_MESSAGE_START',
      'REASONING_MESSAGE_CONTENT',
      'TEXT_MESSAGE_START',
      'TEXT_MESSAGE_CONTENT',
      'TEXT_MESSAGE_CONTENT',
      // the span fold ends an attempt's items together, when the attempt finishes
      'REASONING_MESSAGE_END',
      'REASONING_END',
      'TEXT_MESSAGE_END',
      'RUN_FINISHED',
    ])
    expect(events.at(-1)).toMatchObject({ threadId: id, runId: 'run-1', outcome: { type: 'success' } })
    expect(result.newMessages.filter((m) => m.role === 'assistant').map((m) => m.content)).toEqual(['Hi there'])
    expect((await t.api('GET', `/v1/sessions/${id}`)).body.agent).toEqual({ id: agentId, version: 1 })
    // the same runId again inserts nothing and answers the same run
    const again = await frames(await fetch(url(), { method: 'POST', headers: { authorization: `Bearer ${t.key}`, 'content-type': 'application/json' }, body: JSON.stringify({ threadId: id, runId: 'run-1', messages: [{ id: 'u-1', role: 'user', content: 'hello' }] }) }))
    expect(again.map((f) => f.event)).toEqual(events)
    expect(t.models.requestsOf(id)).toHaveLength(1)
  })

  it('an approval ends the run as an interrupt; a resume entry runs the call; connectAgent gets the history', async () => {
    const id = newId()
    t.models.script(id, { toolCalls: [{ id: 'call-clean', name: 'clean', arguments: { folder: 'tmp' } }] }, { text: ['cleaned'] })
    const a = agent(id)
    a.addMessage({ id: 'u-1', role: 'user', content: 'clean tmp' })
    const first = await run(a, { runId: 'run-a' })
    expect(first.events.map((e) => e.type)).toEqual(['RUN_STARTED', 'TOOL_CALL_START', 'TOOL_CALL_ARGS', 'TOOL_CALL_END', 'RUN_FINISHED'])
    expect(first.events.at(-1)).toMatchObject({ outcome: { type: 'interrupt', interrupts: [{ id: 'call-clean', toolCallId: 'call-clean', reason: 'tool-approval' }] } })
    const before = cleaned
    const second = await run(a, { runId: 'run-b', resume: [{ interruptId: 'call-clean', status: 'resolved', payload: { decision: 'allow' } }] })
    expect(cleaned).toBe(before + 1)
    expect(second.events.map((e) => e.type)).toEqual(['RUN_STARTED', 'TOOL_CALL_START', 'TOOL_CALL_ARGS', 'TOOL_CALL_END', 'TOOL_CALL_RESULT', 'TEXT_MESSAGE_START', 'TEXT_MESSAGE_CONTENT', 'TEXT_MESSAGE_END', 'RUN_FINISHED'])
    expect(second.events.find((e) => e.type === 'TOOL_CALL_RESULT')).toMatchObject({ toolCallId: 'call-clean', content: 'deleted 3 files' })
    await t.waitIdle(id)
    // a new page: connect, and the history arrives as one snapshot
    const b = agent(id)
    const events: BaseEvent[] = []
    await b.connectAgent({ runId: 'connect-1' }, { onEvent: ({ event }) => void events.push(EventSchemas.parse(event) as BaseEvent) })
    expect(events.map((e) => e.type)).toEqual(['RUN_STARTED', 'MESSAGES_SNAPSHOT', 'RUN_FINISHED'])
    expect(b.messages.map((m: any) => [m.role, m.content ?? null, m.toolCalls?.map((c: any) => c.function.name) ?? null])).toEqual([
      ['user', 'clean tmp', null],
      ['assistant', null, ['clean']],
      ['tool', 'deleted 3 files', null],
      ['assistant', 'cleaned', null],
    ])
    expect(b.messages[0].id).toBe('u-1')
  })

  it('Last-Event-ID resumes after it, re-opening the message the client was inside, and verifies', async () => {
    const id = newId()
    const g = gate()
    t.models.script(id, { text: ['one ', 'two ', 'three'], holdAfter: 2, gate: g.promise })
    const body = JSON.stringify({ threadId: id, runId: 'run-r', messages: [{ id: 'u-1', role: 'user', content: 'count' }] })
    const post = (headers: Record<string, string> = {}) => fetch(url(), { method: 'POST', headers: { authorization: `Bearer ${t.key}`, 'content-type': 'application/json', ...headers }, body })
    // a client that saw RUN_STARTED, TEXT_MESSAGE_START and the first delta, then lost the connection
    const cut = new AbortController()
    const res = await fetch(url(), { method: 'POST', headers: { authorization: `Bearer ${t.key}`, 'content-type': 'application/json' }, body, signal: cut.signal })
    const reader = res.body!.getReader()
    let seen = ''
    while ((seen.match(/^id: /gm) ?? []).length < 3) seen += new TextDecoder().decode((await reader.read()).value)
    cut.abort()
    const resumedP = post({ 'last-event-id': '2' })
    g.open()
    const resumed = await frames(await resumedP)
    const full = await frames(await post())
    expect(full.map((f) => f.id)).toEqual(full.map((_, i) => i))
    // the re-opened starts first (under the id resumed from), then exactly the frames after 2
    expect(resumed.slice(0, 2).map((f) => [f.id, f.event.type])).toEqual([
      [2, 'RUN_STARTED'],
      [2, 'TEXT_MESSAGE_START'],
    ])
    expect(resumed.slice(2)).toEqual(full.slice(3))
    // AG-UI's own verifier accepts the resumed stream as a stream of its own
    const verified = await lastValueFrom(from(resumed.map((f) => EventSchemas.parse(f.event) as BaseEvent)).pipe(verifyEvents(), toArray()))
    expect(verified.map((e) => e.type)).toEqual(['RUN_STARTED', 'TEXT_MESSAGE_START', 'TEXT_MESSAGE_CONTENT', 'TEXT_MESSAGE_CONTENT', 'TEXT_MESSAGE_END', 'RUN_FINISHED'])
    expect(verified.filter((e: any) => e.type === 'TEXT_MESSAGE_CONTENT').map((e: any) => e.delta)).toEqual(['two ', 'three'])
  })

  it('front-end tools become client tools: the run finishes with the call open, the tool message answers it', async () => {
    const id = newId()
    t.models.script(id, { toolCalls: [{ id: 'call-pick', name: 'pick_color', arguments: { of: 'sky' } }] }, { text: ['blue it is'] })
    const a = agent(id)
    a.addMessage({ id: 'u-1', role: 'user', content: 'pick a color' })
    const tools = [{ name: 'pick_color', description: 'asks the user for a color', parameters: { type: 'object', properties: { of: { type: 'string' } } } }]
    const first = await run(a, { runId: 'run-t1', tools })
    expect(first.events.map((e) => e.type)).toEqual(['RUN_STARTED', 'TOOL_CALL_START', 'TOOL_CALL_ARGS', 'TOOL_CALL_END', 'RUN_FINISHED'])
    expect(first.events.at(-1)).toMatchObject({ outcome: { type: 'success', pendingToolCallIds: ['call-pick'] } })
    const s = await t.api('GET', `/v1/sessions/${id}`)
    expect(s.body.settings.tools.map((x: any) => [x.name, x.execution.type])).toEqual([
      ['clean', 'http'],
      ['pick_color', 'client'],
    ])
    expect((await t.api('GET', `/v1/sessions/${id}/pending`)).body.toolCalls.map((c: any) => [c.callId, c.kind])).toEqual([['call-pick', 'client']])
    a.addMessage({ id: 'tool-1', role: 'tool', toolCallId: 'call-pick', content: 'blue' })
    const second = await run(a, { runId: 'run-t2', tools })
    expect(second.events.map((e) => e.type)).toEqual(['RUN_STARTED', 'TEXT_MESSAGE_START', 'TEXT_MESSAGE_CONTENT', 'TEXT_MESSAGE_END', 'RUN_FINISHED'])
    expect(t.models.requestsOf(id)[1].context.messages.at(-1)).toMatchObject({ role: 'toolResult', toolCallId: 'call-pick' })
  })

  it('connect while a run is open: the history without it, then the run live', async () => {
    const id = newId()
    const g = gate()
    t.models.script(id, { text: ['first'] }, { text: ['second ', 'answer'], holdAfter: 1, gate: g.promise })
    const a = agent(id)
    a.addMessage({ id: 'u-1', role: 'user', content: 'one' })
    await run(a, { runId: 'run-c1' })
    a.addMessage({ id: 'u-2', role: 'user', content: 'two' })
    const running = run(a, { runId: 'run-c2' })
    await t.models.waitForRequest(id, 2)
    const b = agent(id)
    const events: BaseEvent[] = []
    const connected = b.connectAgent({ runId: 'connect-2' }, { onEvent: ({ event }) => void events.push(EventSchemas.parse(event) as BaseEvent) })
    await new Promise((r) => setTimeout(r, 200))
    g.open()
    await connected
    await running
    expect(events.map((e) => e.type)).toEqual(['RUN_STARTED', 'MESSAGES_SNAPSHOT', 'TEXT_MESSAGE_START', 'TEXT_MESSAGE_CONTENT', 'TEXT_MESSAGE_CONTENT', 'TEXT_MESSAGE_END', 'RUN_FINISHED'])
    expect((events[1] as any).messages.map((m: any) => [m.role, m.content])).toEqual([
      ['user', 'one'],
      ['assistant', 'first'],
      ['user', 'two'],
    ])
    expect(b.messages.map((m: any) => [m.id, m.role, m.content])).toEqual([
      ['u-1', 'user', 'one'],
      [expect.any(String), 'assistant', 'first'],
      ['u-2', 'user', 'two'],
      [expect.any(String), 'assistant', 'second answer'],
    ])
  })

  it('bad input is 400 and writes nothing; another tenant and another agent are refused', async () => {
    const id = newId()
    const post = (body: unknown, key = t.key, agent = agentId) => t.api('POST', `/v1/ag-ui/${agent}`, body, { key })
    for (const b of [
      { threadId: id, messages: [] },
      { runId: 'r', messages: [] },
      { threadId: id, runId: 'r', messages: 'hi' },
      { threadId: id, runId: 'r', messages: [{ role: 'user', content: 'no id' }] },
      { threadId: id, runId: 'r', messages: [{ id: 'x', role: 'user', content: 'hi' }], resume: [{ interruptId: 'nope', status: 'resolved', payload: { decision: 'allow' } }] },
      { threadId: id, runId: 'r', messages: [] },
    ]) {
      const r = await post(b)
      expect(r.status, JSON.stringify(b)).toBe(400)
      expect(r.body.error.code).toBe('bad-request')
    }
    expect((await t.api('GET', `/v1/sessions/${id}`)).status).toBe(404)
    const other = await t.api('POST', '/v1/admin/tenants', { name: `other-${kind}` }, { key: t.adminToken })
    const ok = { threadId: id, runId: 'r', messages: [{ id: 'x', role: 'user', content: 'hi' }] }
    expect((await post(ok, other.body.apiKey)).status).toBe(404)
    const plain = await t.createSession()
    const r = await post({ ...ok, threadId: plain.id })
    expect(r.status).toBe(409)
    expect((await t.events(plain.id)).length).toBe(0)
    const caps = await t.api('GET', `/v1/ag-ui/${agentId}/capabilities`)
    expect(caps.status).toBe(200)
    expect(caps.body.humanInTheLoop).toEqual({ interrupts: true, reasons: ['tool-approval'] })
  })
})
