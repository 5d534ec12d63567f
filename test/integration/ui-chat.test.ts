// API.md §17.2 on one database (docs/testing.md), with the AI SDK's own client (`ai`'s AbstractChat, DefaultChatTransport,
// WebSocketChatTransport): a message answered by the scripted model, a resent message that inserts
// nothing, resumeStream() mid-turn getting the turn from its start, a WebSocket resume with exactly the
// missed chunks, a client tool and an approval round trip through tool parts, the history as UIMessages,
// and bad input refused with nothing written.

import http from 'node:http'
import type { AddressInfo } from 'node:net'
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
  WebSocketChatTransport,
  type ChatInit,
  type ChatState,
  type ChatTransport,
  type UIMessage,
  type UIMessageChunk,
  parseJsonEventStream,
  uiMessageChunkSchema,
} from 'ai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { gate } from '../helpers/scripted.js'
import { until } from '../helpers/wait.js'

const waitUntil = (fn: () => unknown, ms = 10000) => until('the condition', () => Boolean(fn()) || undefined, ms)

class State implements ChatState<UIMessage> {
  status: ChatState<UIMessage>['status'] = 'ready'
  error: Error | undefined = undefined
  constructor(public messages: UIMessage[]) {}
  pushMessage = (m: UIMessage) => void (this.messages = [...this.messages, m])
  popMessage = () => void (this.messages = this.messages.slice(0, -1))
  replaceMessage = (i: number, m: UIMessage) => void (this.messages = this.messages.map((x, j) => (j === i ? m : x)))
  snapshot = <T,>(v: T): T => structuredClone(v)
}

class Chat extends AbstractChat<UIMessage> {
  constructor(init: ChatInit<UIMessage>) {
    super({ ...init, state: new State(init.messages ?? []) })
  }
  get all(): UIMessage[] {
    return (this as unknown as { state: State }).state.messages
  }
}

const textOf = (m: UIMessage | undefined) => (m?.parts ?? []).map((p) => (p.type === 'text' ? p.text : '')).join('')

/** A UI message stream over SSE, as its chunks (parsed with the AI SDK's own schema). */
async function readUiStream(res: Response): Promise<UIMessageChunk[]> {
  const out: UIMessageChunk[] = []
  const reader = parseJsonEventStream({ stream: res.body!, schema: uiMessageChunkSchema }).getReader()
  for (;;) {
    const { value, done } = await reader.read()
    if (done) return out
    if (!value.success) throw value.error
    out.push(value.value as UIMessageChunk)
  }
}

describe.each(APP_DB_KINDS)('AI SDK UI message stream on %s', (kind) => {
  let t: TestApp
  let tools: http.Server
  let toolCalls = 0
  const agentId = 'helper'

  beforeAll(async () => {
    tools = http.createServer((req, res) => {
      toolCalls++
      req.resume()
      req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ content: 'deleted 3 files' })))
    })
    await new Promise<void>((r) => tools.listen(0, '127.0.0.1', r))
    t = await startTestApp({ kind })
    const r = await t.api('POST', '/v1/agents', {
      id: agentId,
      name: 'Helper',
      model: t.models.ref(),
      tools: [
        { name: 'ask', description: 'asks the user', parameters: { type: 'object', properties: { q: { type: 'string' } } }, execution: { type: 'client' } },
        { name: 'clean', description: 'deletes files', parameters: { type: 'object' }, execution: { type: 'http', url: `http://127.0.0.1:${(tools.address() as AddressInfo).port}/clean` }, approval: 'always' },
      ],
    })
    expect(r.status).toBe(201)
  })
  afterAll(async () => {
    await t?.close()
    tools?.close()
  })

  const api = () => `${t.url}/v1/ui/${agentId}/chat`
  const http_ = (init: Partial<ChatInit<UIMessage>> = {}) =>
    new Chat({ transport: new DefaultChatTransport({ api: api(), headers: { authorization: `Bearer ${t.key}` } }), ...init })
  let n = 0
  const newId = () => `chat-${kind}-${++n}`

  it('sends a message and streams the scripted answer; the history says the same', async () => {
    const id = newId()
    t.models.script(id, { reasoning: ['let me think'], text: ['Hello', ', ', 'world'] })
    const chat = http_({ id })
    await chat.sendMessage({ text: 'hi' })
    expect(chat.error).toBeUndefined()
    expect(chat.all.map((m) => m.role)).toEqual(['user', 'assistant'])
    const userId = chat.all[0].id
    // the turn's message is named after the span its input opened (the delivery's seq)
    const turnId = chat.all[1].id
    expect(turnId).toMatch(/^agentd-i\d+$/)
    expect(textOf(chat.all[1])).toBe('Hello, world')
    expect(chat.all[1].parts.map((p) => p.type)).toEqual(['step-start', 'reasoning', 'text'])
    // the session is the chat, made from the agent
    const s = await t.api('GET', `/v1/sessions/${id}`)
    expect(s.body.agent).toEqual({ id: agentId, version: 1 })
    const h = await t.api('GET', `/v1/ui/${agentId}/chat/${id}/messages`)
    expect(h.status).toBe(200)
    expect(h.body.messages.map((m: UIMessage) => [m.id, m.role, textOf(m)])).toEqual([
      [userId, 'user', 'hi'],
      [turnId, 'assistant', 'Hello, world'],
    ])
    expect(h.body.messages[1].parts).toEqual(chat.all[1].parts.map((p) => ({ ...p, ...('providerMetadata' in p ? {} : {}) })))
    // nothing open: resume answers 204
    const resume = await fetch(`${api()}/${id}/stream`, { headers: { authorization: `Bearer ${t.key}` } })
    expect(resume.status).toBe(204)
  })

  it('a resent message id inserts nothing: the answer is the stream of the turn that admitted it', async () => {
    const id = newId()
    t.models.script(id, { text: ['once'] })
    const body = { id, trigger: 'submit-message', messages: [{ id: 'm-1', role: 'user', parts: [{ type: 'text', text: 'only once' }] }] }
    const post = () => fetch(api(), { method: 'POST', headers: { authorization: `Bearer ${t.key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) })
    const first = await post()
    expect(first.headers.get('x-vercel-ai-ui-message-stream')).toBe('v1')
    const a = await readUiStream(first)
    const headBefore = (await t.api('GET', `/v1/sessions/${id}`)).body.headSeq
    const b = await readUiStream(await post())
    expect(b).toEqual(a)
    expect(a.map((c) => c.type)).toEqual(['start', 'start-step', 'text-start', 'text-delta', 'text-end', 'finish'])
    expect((await t.api('GET', `/v1/sessions/${id}`)).body.headSeq).toBe(headBefore)
    expect(t.models.requestsOf(id)).toHaveLength(1)
    expect((await t.events(id)).filter((e) => e.type === 'user/message')).toHaveLength(1)
  })

  it('resumeStream() mid-turn replays the turn from its start, then follows it live', async () => {
    const id = newId()
    const g = gate()
    t.models.script(id, { text: ['part one, ', 'part two'], holdAfter: 1, gate: g.promise })
    const a = http_({ id })
    const sent = a.sendMessage({ text: 'go' })
    await waitUntil(() => textOf(a.all[1]) === 'part one, ', 10000)
    // the tab goes away: its request is cut, the turn goes on
    await a.stop()
    await sent
    // a new page: the history so far, then resume
    const h = await t.api('GET', `/v1/ui/${agentId}/chat/${id}/messages`)
    expect(h.body.messages.map((m: UIMessage) => textOf(m))).toEqual(['go', 'part one, '])
    const b = http_({ id, messages: h.body.messages })
    const resumed = b.resumeStream()
    await waitUntil(() => b.status === 'streaming', 10000)
    g.open()
    await resumed
    expect(b.error).toBeUndefined()
    expect(b.all.map((m) => [m.id, textOf(m)])).toEqual([
      [h.body.messages[0].id, 'go'],
      [h.body.messages[1].id, 'part one, part two'],
    ])
  })

  it('a client tool and an approval round trip through tool parts', async () => {
    const id = newId()
    t.models.script(
      id,
      { toolCalls: [{ id: 'call-ask', name: 'ask', arguments: { q: 'which folder?' } }] },
      { toolCalls: [{ id: 'call-clean', name: 'clean', arguments: { folder: 'tmp' } }] },
      { text: ['cleaned tmp'] },
    )
    const before = toolCalls
    let chat!: Chat
    chat = http_({
      id,
      onToolCall: ({ toolCall }) => {
        if (toolCall.toolName === 'ask') void chat.addToolOutput({ tool: 'ask', toolCallId: toolCall.toolCallId, output: 'tmp' } as never)
      },
      sendAutomaticallyWhen: (o) => lastAssistantMessageIsCompleteWithToolCalls(o) || lastAssistantMessageIsCompleteWithApprovalResponses(o),
    })
    await chat.sendMessage({ text: 'clean up' })
    // the client tool was answered and sent by the chat itself; the turn now waits on the approval
    await waitUntil(() => chat.status === 'ready' && chat.all[1]?.parts.some((p: any) => p.state === 'approval-requested'), 15000)
    const tool = (name: string) => chat.all[1].parts.find((p: any) => p.toolName === name) as any
    expect(tool('ask')).toMatchObject({ type: 'dynamic-tool', state: 'output-available', input: { q: 'which folder?' }, output: 'tmp' })
    expect(tool('clean')).toMatchObject({ type: 'dynamic-tool', state: 'approval-requested', approval: { id: 'call-clean' }, providerExecuted: true })
    expect(toolCalls).toBe(before)
    const pending = await t.api('GET', `/v1/sessions/${id}/pending`)
    expect(pending.body.toolCalls.map((c: any) => [c.callId, c.kind])).toEqual([['call-clean', 'approval']])
    await chat.addToolApprovalResponse({ id: 'call-clean', approved: true })
    await waitUntil(() => chat.status === 'ready' && textOf(chat.all[1]).includes('cleaned tmp'), 15000)
    expect(toolCalls).toBe(before + 1)
    expect(tool('clean')).toMatchObject({ state: 'output-available', output: 'deleted 3 files' })
    expect(chat.all.map((m) => m.role)).toEqual(['user', 'assistant'])
    const evs = await t.waitIdle(id)
    expect(evs.filter((e) => e.type === 'turn/end').map((e: any) => e.data.reason.kind)).toEqual(['completed'])
    // the history shows the same tool parts
    const h = await t.api('GET', `/v1/ui/${agentId}/chat/${id}/messages`)
    expect(h.body.messages[1].parts.filter((p: any) => p.type === 'dynamic-tool').map((p: any) => [p.toolName, p.state, p.output])).toEqual([
      ['ask', 'output-available', 'tmp'],
      ['clean', 'output-available', 'deleted 3 files'],
    ])
  })

  it('WebSocketChatTransport sends; a dropped socket resumes with exactly the missed chunks', async () => {
    const wsUrl = `${t.url.replace('http', 'ws')}/v1/ui/${agentId}/ws`
    // the official transport, end to end
    const id = newId()
    t.models.script(id, { text: ['over ', 'a socket'] })
    const transport = new WebSocketChatTransport<UIMessage>({ url: wsUrl, params: { access_token: t.key } })
    const chat = new Chat({ id, transport: transport as ChatTransport<UIMessage> })
    await chat.sendMessage({ text: 'ws please' })
    expect(chat.error).toBeUndefined()
    expect(textOf(chat.all[1])).toBe('over a socket')
    transport.close()

    // the protocol by hand: a send whose socket drops, then a resume after the last sequence it saw
    const id2 = newId()
    const g = gate()
    t.models.script(id2, { text: ['one ', 'two ', 'three'], holdAfter: 2, gate: g.promise })
    const frames = (ws: WebSocket) => {
      const got: any[] = []
      ws.onmessage = (e) => got.push(JSON.parse(String(e.data)))
      return got
    }
    const open = async () => {
      const ws = new WebSocket(`${wsUrl}?access_token=${t.key}`)
      await new Promise((r, j) => ((ws.onopen = r), (ws.onerror = j)))
      return ws
    }
    const a = await open()
    const gotA = frames(a)
    a.send(JSON.stringify({ type: 'send', requestId: 'r1', id: id2, trigger: 'submit-message', messageId: undefined, messages: [{ id: 'w1', role: 'user', parts: [{ type: 'text', text: 'count' }] }], headers: {}, body: {}, metadata: undefined }))
    await waitUntil(() => gotA.some((f) => f.chunk?.type === 'text-delta' && f.chunk.delta === 'two '), 10000)
    a.close()
    const seen = gotA.filter((f) => f.type === 'chunk')
    expect(gotA[0]).toEqual({ type: 'start', requestId: 'r1' })
    expect(seen.map((f) => f.sequence)).toEqual(seen.map((_, i) => i))
    const last = seen.at(-1).sequence
    // one client resumes after what it saw, another from the start (the transport's own resume)
    const b = await open()
    const gotB = frames(b)
    b.send(JSON.stringify({ type: 'resume', requestId: 'r2', id: id2, lastSequence: last, headers: {}, body: {}, metadata: undefined }))
    const c = await open()
    const gotC = frames(c)
    c.send(JSON.stringify({ type: 'resume', requestId: 'r3', id: id2, headers: {}, body: {}, metadata: undefined }))
    await waitUntil(() => gotB.length > 0 && gotC.length > 0, 10000)
    g.open()
    await waitUntil(() => gotB.at(-1)?.type === 'end' && gotC.at(-1)?.type === 'end', 10000)
    b.close()
    c.close()
    const chunksB = gotB.filter((f) => f.type === 'chunk')
    const chunksC = gotC.filter((f) => f.type === 'chunk')
    expect(chunksB[0].sequence).toBe(last + 1)
    expect(chunksB.map((f) => f.sequence)).toEqual(chunksB.map((_, i) => last + 1 + i))
    expect([...seen, ...chunksB].map((f) => f.chunk)).toEqual(chunksC.map((f) => f.chunk))
    expect(chunksC.map((f) => f.sequence)).toEqual(chunksC.map((_, i) => i))
    expect(chunksC.map((f) => f.chunk.type)).toEqual(['start', 'start-step', 'text-start', 'text-delta', 'text-delta', 'text-delta', 'text-end', 'finish'])
    // a resume with nothing open
    const d = await open()
    const gotD = frames(d)
    d.send(JSON.stringify({ type: 'resume', requestId: 'r4', id: id2, headers: {}, body: {}, metadata: undefined }))
    await waitUntil(() => gotD.length > 0, 10000)
    d.close()
    expect(gotD).toEqual([{ type: 'no-active', requestId: 'r4' }])
  })

  it('bad input is refused with the documented errors and nothing written', async () => {
    const post = (body: unknown, agent = agentId, key = t.key) => t.api('POST', `/v1/ui/${agent}/chat`, body, { key })
    const id = newId()
    const sessionsBefore = (await t.api('GET', '/v1/sessions?limit=200')).body.sessions.length
    const bad = [
      { id, messages: 'hello' },
      { id, messages: [] },
      { id, messages: [{ id: 'x', role: 'user' }] },
      { id, messages: [{ role: 'user', parts: [{ type: 'text', text: 'no id' }] }] },
      { messages: [{ id: 'x', role: 'user', parts: [{ type: 'text', text: 'no chat id' }] }] },
      { id, trigger: 'regenerate-message', messageId: 'x', messages: [{ id: 'x', role: 'user', parts: [{ type: 'text', text: 'again' }] }] },
      { id, messages: [{ id: 'x', role: 'user', parts: [{ type: 'text', text: '' }] }] },
    ]
    for (const b of bad) {
      const r = await post(b)
      expect(r.status, JSON.stringify(b)).toBe(400)
      expect(r.body.error.code).toBe('bad-request')
    }
    expect((await t.api('GET', `/v1/sessions/${id}`)).status).toBe(404)
    // an agent that does not exist, or another tenant's
    const other = await t.api('POST', '/v1/admin/tenants', { name: 'other' }, { key: t.adminToken })
    const ok = { id, messages: [{ id: 'x', role: 'user', parts: [{ type: 'text', text: 'hi' }] }] }
    expect((await post(ok, agentId, other.body.apiKey)).status).toBe(404)
    expect((await post(ok, 'no-such-agent')).status).toBe(404)
    // a session of another agent (here: one made without an agent)
    const plain = await t.createSession()
    const r = await post({ ...ok, id: plain.id })
    expect(r.status).toBe(409)
    expect(r.body.error.code).toBe('session-conflict')
    expect((await t.events(plain.id)).length).toBe(0)
    expect((await t.api('GET', `/v1/ui/${agentId}/chat/${plain.id}/messages`)).status).toBe(409)
    expect((await t.api('GET', '/v1/sessions?limit=200')).body.sessions.length).toBe(sessionsBefore + 1)
  })
})
