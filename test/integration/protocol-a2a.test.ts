// A2A (API.md §17.4) on one database (docs/testing.md) through @a2a-js/sdk's own client — its default v1.0 JSON-RPC
// transport, and its v0.3 compatibility transport — against a real agentd: the card (with the bearer
// credential), blocking and streamed messages, a context continued, a repeat by messageId that sends
// nothing, tasks read and cancelled, a resubscription mid-task and after the end that yields exactly
// the updates of an uninterrupted stream, an approval as input-required answered by a message, and a
// push notification whose signature verifies. Bad input gets the JSON-RPC error codes and writes nothing.

import crypto from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Webhook } from 'standardwebhooks'
import { Role, TaskState, type Message, type Part, type StreamResponse, type Task } from '@a2a-js/sdk'
import { Client, ClientFactory, ClientFactoryOptions, DefaultAgentCardResolver, JsonRpcTransportFactory } from '@a2a-js/sdk/client'
import { LegacyJsonRpcTransport } from '@a2a-js/sdk/compat/v0_3/client'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { startReceiver, type Receiver } from '../helpers/receiver.js'

const CLIENT_TOOL = { name: 'lookup', description: 'looks up', parameters: { type: 'object', properties: { order: { type: 'string' } } }, execution: { type: 'client' } }
const APPROVED_CLIENT_TOOL = { name: 'confirm', description: 'asks the user', parameters: { type: 'object', properties: {} }, execution: { type: 'client' }, approval: 'always' }
const approvedTool = (url: string) => ({ name: 'refund', description: 'refunds', parameters: { type: 'object', properties: { order: { type: 'string' } } }, execution: { type: 'http', url }, approval: 'always' })
const FAST = { pollMs: 20, schedule: [50], repeatMs: 50, giveUpMs: 60_000, timeoutMs: 2000 }

const text = (t: string): Part => ({ content: { $case: 'text', value: t }, metadata: undefined, filename: '', mediaType: '' })
const msg = (parts: Part[] | string, o: Partial<Message> = {}): Message => ({ messageId: crypto.randomUUID(), contextId: '', taskId: '', role: Role.ROLE_USER, parts: typeof parts === 'string' ? [text(parts)] : parts, metadata: undefined, extensions: [], referenceTaskIds: [], ...o })
const send = (m: Message, configuration?: object) => ({ tenant: '', message: m, configuration: configuration as never, metadata: undefined })
const partText = (p: Part | undefined) => (p?.content?.$case === 'text' ? p.content.value : undefined)
/** An update as a short line: what kind, which state, what text. */
const line = (u: StreamResponse) => {
  const p = u.payload!
  if (p.$case === 'task') return `task ${TaskState[p.value.status!.state]}`
  if (p.$case === 'statusUpdate') return `status ${TaskState[p.value.status!.state]}${p.value.status?.message ? ` "${partText(p.value.status.message.parts[0])}"` : ''}`
  if (p.$case === 'artifactUpdate') return `artifact ${p.value.artifact!.artifactId} "${partText(p.value.artifact!.parts[0])}"${p.value.append ? ' +' : ''}${p.value.lastChunk ? ' last' : ''}`
  return p.$case
}
const collect = async (g: AsyncGenerator<StreamResponse>) => {
  const out: StreamResponse[] = []
  for await (const u of g) out.push(u)
  return out
}

describe.each(APP_DB_KINDS)('A2A on %s', (kind) => {
  let t: TestApp
  let receiver: Receiver
  let tool: http.Server
  beforeAll(async () => {
    t = await startTestApp({ kind, webhooks: FAST, env: { AGENTD_SECRET_KEY: crypto.randomBytes(32).toString('base64') } })
    receiver = await startReceiver()
    // the http tool the approval lets run
    tool = http.createServer((req, res) => {
      req.resume()
      req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ content: 'refund R-9 made' })))
    })
    await new Promise<void>((r) => tool.listen(0, '127.0.0.1', r))
    const toolUrl = `http://127.0.0.1:${(tool.address() as AddressInfo).port}/`
    for (const a of [
      { id: 'helper', name: 'Helper', description: 'helps', model: t.models.ref(), tools: [approvedTool(toolUrl), CLIENT_TOOL, APPROVED_CLIENT_TOOL] },
      { id: 'echo', name: 'Echo', model: 'faux/echo' },
    ]) expect((await t.api('POST', '/v1/agents', a)).status).toBe(201)
  })
  afterAll(async () => {
    await receiver?.close()
    tool?.close()
    await t?.close()
  })

  const authed = (key: string): typeof fetch => (input, init) => {
    const headers = new Headers(init?.headers)
    headers.set('authorization', `Bearer ${key}`)
    return fetch(input, { ...init, headers })
  }
  /** The SDK's client with its defaults (v1.0 over JSON-RPC), from the agent's card. */
  const client = async (agent: string, key = t.key) => {
    const f = new ClientFactory(ClientFactoryOptions.createFrom(ClientFactoryOptions.default, { transports: [new JsonRpcTransportFactory({ fetchImpl: authed(key) })], cardResolver: new DefaultAgentCardResolver({ fetchImpl: authed(key) }) }))
    return f.createFromUrl(`${t.url}/v1/a2a/${agent}/`)
  }
  /** A session of the helper agent made through the native API, for a scripted model. */
  const context = async (id: string) => (await t.api('POST', '/v1/sessions', { id, agent: 'helper' })).body.id as string
  const rows = async (table: string) => (await t.app.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`)).rows[0].n
  const rpc = (agent: string, body: unknown, key: string | null = t.key) => t.api('POST', `/v1/a2a/${agent}`, body, { key })

  it('serves the v1.0 card with the bearer credential, naming the JSON-RPC endpoint for v1.0 and v0.3', async () => {
    const r = await t.api('GET', '/v1/a2a/helper/.well-known/agent-card.json')
    expect(r.status).toBe(200)
    expect(r.body).toMatchObject({ name: 'Helper', description: 'helps', version: '1', capabilities: { streaming: true, pushNotifications: true } })
    expect(r.body.supportedInterfaces).toEqual([
      { url: `${t.url}/v1/a2a/helper`, protocolBinding: 'JSONRPC', protocolVersion: '1.0' },
      { url: `${t.url}/v1/a2a/helper`, protocolBinding: 'JSONRPC', protocolVersion: '0.3' },
    ])
    expect(r.body.securitySchemes.bearer.httpAuthSecurityScheme.scheme).toBe('Bearer')
    expect(r.body.skills.map((s: any) => s.id)).toEqual(['helper'])
    expect((await t.api('GET', '/v1/a2a/helper/.well-known/agent-card.json', undefined, { key: null })).status).toBe(401)
    expect((await t.api('GET', '/v1/a2a/nobody/.well-known/agent-card.json')).status).toBe(404)
    const c = await client('helper')
    expect((await c.getAgentCard()).name).toBe('Helper')
  })

  it('SendMessage blocks until the task completes; the same messageId sends nothing; the context continues with a new task', async () => {
    const c = await client('echo')
    const first = msg('hi')
    const task = (await c.sendMessage(send(first))) as Task
    expect(task.status!.state).toBe(TaskState.TASK_STATE_COMPLETED)
    expect(task.contextId).toMatch(/^a2a-[0-9a-f]{32}$/)
    expect(task.id).toMatch(new RegExp(`^${task.contextId}:i[0-9]+$`))
    expect(task.artifacts.map((a) => partText(a.parts[0]))).toEqual(['echo: hi'])
    expect(partText(task.status!.message!.parts[0])).toBe('echo: hi')
    expect(task.history.map((m) => [m.role, partText(m.parts[0])])).toEqual([[Role.ROLE_USER, 'hi']])
    const session = (await t.api('GET', `/v1/sessions/${task.contextId}`)).body
    expect(session.agent).toEqual({ id: 'echo', version: 1 })

    const again = (await c.sendMessage(send(first))) as Task
    expect(again.id).toBe(task.id)
    expect((await t.events(task.contextId)).filter((e) => e.type === 'user/message')).toHaveLength(1)

    const next = (await c.sendMessage(send(msg('again', { contextId: task.contextId })))) as Task
    expect(next.contextId).toBe(task.contextId)
    expect(next.id).not.toBe(task.id)
    expect(next.artifacts.map((a) => partText(a.parts[0]))).toEqual(['echo: again'])
    expect(next.metadata).toEqual({ turn: 2 })
    expect(await c.getTask({ tenant: '', id: task.id, historyLength: undefined })).toEqual(task)
    expect((await c.getTask({ tenant: '', id: task.id, historyLength: 0 })).history).toEqual([])
    const listed = await c.listTasks({ tenant: '', contextId: task.contextId, status: TaskState.TASK_STATE_UNSPECIFIED, pageSize: 1, pageToken: '', historyLength: undefined, statusTimestampAfter: undefined, includeArtifacts: true })
    expect(listed.tasks.map((x) => x.id)).toEqual([next.id])
    expect([listed.totalSize, listed.nextPageToken]).toEqual([2, '1'])
    const page2 = await c.listTasks({ tenant: '', contextId: task.contextId, status: TaskState.TASK_STATE_UNSPECIFIED, pageSize: 1, pageToken: '1', historyLength: undefined, statusTimestampAfter: undefined, includeArtifacts: true })
    expect(page2.tasks.map((x) => x.id)).toEqual([task.id])
  })

  it('SendStreamingMessage streams the task, its text as artifact chunks and its end; SubscribeToTask after the end replays exactly that', async () => {
    const ctx = await context('a2a-stream')
    t.models.script(ctx, { text: ['Hel', 'lo'] })
    const c = await client('helper')
    const live = await collect(c.sendMessageStream(send(msg('hi', { contextId: ctx }))))
    const id = (live[0].payload as any).value.id as string
    expect(live.map(line)).toEqual([
      'task TASK_STATE_WORKING',
      `artifact ${id.split(':')[1]}.0 "Hel"`,
      `artifact ${id.split(':')[1]}.0 "lo" +`,
      `artifact ${id.split(':')[1]}.0 "" + last`,
      'status TASK_STATE_COMPLETED "Hello"',
    ])
    const replay = await collect(c.resubscribeTask({ tenant: '', id }))
    expect(replay).toEqual(live)
  })

  it('resubscribing mid-task replays the updates so far, then follows live: nothing lost or repeated', async () => {
    const ctx = await context('a2a-mid')
    let open!: () => void
    const gate = new Promise<void>((r) => (open = r))
    t.models.script(ctx, { text: ['one ', 'two ', 'three'], holdAfter: 2, gate })
    const c = await client('helper')
    const first = c.sendMessageStream(send(msg('count', { contextId: ctx })))
    const head: StreamResponse[] = []
    for await (const u of first) {
      head.push(u)
      if (head.length === 3) break
    }
    const id = (head[0].payload as any).value.id as string
    const second = collect(c.resubscribeTask({ tenant: '', id }))
    await new Promise((r) => setTimeout(r, 100))
    open()
    const resumed = await second
    const whole = await collect(c.resubscribeTask({ tenant: '', id }))
    expect(resumed).toEqual(whole)
    expect(whole.slice(0, 3)).toEqual(head)
    expect(whole.map(line).at(-1)).toBe('status TASK_STATE_COMPLETED "one two three"')
  })

  it('CancelTask cancels a working task; a second cancel is TaskNotCancelable', async () => {
    const ctx = await context('a2a-cancel')
    t.models.script(ctx, { text: ['slow'], hang: true })
    const c = await client('helper')
    const task = (await c.sendMessage(send(msg('wait', { contextId: ctx }), { returnImmediately: true, acceptedOutputModes: [], historyLength: undefined, taskPushNotificationConfig: undefined }))) as Task
    expect([TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING]).toContain(task.status!.state)
    await t.models.waitForRequest(ctx)
    const cancelled = await c.cancelTask({ tenant: '', id: task.id, metadata: undefined })
    expect(cancelled.status!.state).toBe(TaskState.TASK_STATE_CANCELED)
    const again = await rpc('helper', { jsonrpc: '2.0', id: 1, method: 'CancelTask', params: { id: task.id } })
    expect(again.body.error.code).toBe(-32002)
  })

  it('an approval is input-required, answered by a message; so is a client call, answered by its result; each answer opens the next task of the turn', async () => {
    const ctx = await context('a2a-approve')
    t.models.script(ctx, { toolCalls: [{ id: 'call-1', name: 'refund', arguments: { order: 'A1' } }] }, { toolCalls: [{ id: 'call-2', name: 'lookup', arguments: { order: 'A1' } }] }, { text: ['refunded'] })
    const c = await client('helper')
    const waiting = (await c.sendMessage(send(msg('refund A1', { contextId: ctx })))) as Task
    expect(waiting.status!.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    const data = (t: Task) => (t.status!.message!.parts.find((p) => p.content?.$case === 'data')!.content as any).value
    expect(data(waiting)).toEqual({ pending: [{ callId: 'call-1', name: 'refund', kind: 'approval', arguments: '{"order":"A1"}' }] })
    expect(partText(waiting.status!.message!.parts[0])).toBe('waiting for approval of refund({"order":"A1"}) [call-1]')
    const client2 = (await c.sendMessage(send(msg('allow', { contextId: ctx, taskId: waiting.id })))) as Task
    expect(client2.id).not.toBe(waiting.id)
    expect(client2.contextId).toBe(ctx)
    expect(client2.status!.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    expect(data(client2)).toEqual({ pending: [{ callId: 'call-2', name: 'lookup', kind: 'client', arguments: '{"order":"A1"}' }] })
    const done = (await c.sendMessage(send(msg('order A1 is paid', { contextId: ctx })))) as Task
    expect(done.status!.state).toBe(TaskState.TASK_STATE_COMPLETED)
    expect(done.artifacts.map((a) => partText(a.parts[0]))).toEqual(['refunded'])
    expect(done.metadata).toEqual({ turn: 1 })
    const evs = await t.events(ctx)
    expect(evs.filter((e) => e.type === 'tool/result').map((e: any) => e.data.message.content[0].content)).toEqual([[{ type: 'text', text: 'refund R-9 made' }], [{ type: 'text', text: 'order A1 is paid' }]])
    expect(evs.filter((e) => e.type === 'user/message' && (e.data as any).source.kind === 'user')).toHaveLength(1)
  })

  it('a client tool that needs approval: allowed with returnImmediately (its task has not opened: working), then its result as a data part completes the turn', async () => {
    const ctx = await context('a2a-confirm')
    t.models.script(ctx, { toolCalls: [{ id: 'call-9', name: 'confirm', arguments: {} }] }, { text: ['confirmed'] })
    const c = await client('helper')
    const waiting = (await c.sendMessage(send(msg('go', { contextId: ctx })))) as Task
    expect(waiting.status!.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    const immediate = { returnImmediately: true, acceptedOutputModes: [], historyLength: undefined, taskPushNotificationConfig: undefined }
    const allowed = (await c.sendMessage(send(msg('allow', { contextId: ctx }), immediate))) as Task
    expect(allowed.status!.state).toBe(TaskState.TASK_STATE_WORKING)
    expect(allowed.id).toMatch(new RegExp(`^${ctx}:w[0-9]+$`))
    const deadline = Date.now() + 10000
    while (!(await t.api('GET', `/v1/sessions/${ctx}/pending`)).body.toolCalls.some((x: any) => x.kind === 'client')) {
      if (Date.now() > deadline) throw new Error('the client call never became pending')
      await new Promise((r) => setTimeout(r, 25))
    }
    const done = (await c.sendMessage(send(msg([{ content: { $case: 'data', value: { callId: 'call-9', result: 'yes' } }, metadata: undefined, filename: '', mediaType: '' }], { contextId: ctx })))) as Task
    expect(done.id).toBe(allowed.id)
    expect(done.status!.state).toBe(TaskState.TASK_STATE_COMPLETED)
    expect(done.artifacts.map((a) => partText(a.parts[0]))).toEqual(['confirmed'])
  })

  it("a push-notification config is a webhook of the task: its end arrives once, signed with the config's token", async () => {
    const ctx = await context('a2a-push')
    let open!: () => void
    const gate = new Promise<void>((r) => (open = r))
    t.models.script(ctx, { text: ['pushed'], gate }, { text: ['later'] }, { text: ['inline'] })
    const c = await client('helper')
    const task = (await c.sendMessage(send(msg('go', { contextId: ctx }), { returnImmediately: true, acceptedOutputModes: [], historyLength: undefined, taskPushNotificationConfig: undefined }))) as Task
    const token = 'a-token-of-more-than-16-bytes'
    const cfg = await c.createTaskPushNotificationConfig({ tenant: '', id: '', taskId: task.id, url: `${receiver.url}/a2a`, token, authentication: undefined })
    expect(cfg).toMatchObject({ taskId: task.id, url: `${receiver.url}/a2a`, token })
    expect(await c.listTaskPushNotificationConfig({ tenant: '', taskId: task.id, pageSize: 0, pageToken: '' })).toEqual({ configs: [{ ...cfg, token: '' }], nextPageToken: '' })
    open()
    const [r] = await receiver.waitFor(1, 10000, (x) => x.path === '/a2a')
    expect(r.headers['x-a2a-task-id']).toBe(task.id)
    expect(new Webhook('whsec_' + Buffer.from(token).toString('base64')).verify(r.raw, r.headers as Record<string, string>)).toEqual(r.body)
    expect(r.body).toMatchObject({ type: 'turn.completed', data: { sessionId: ctx, turn: 1, reason: { kind: 'completed' } } })
    // the next task of the context is not this one's
    await c.sendMessage(send(msg('more', { contextId: ctx })))
    await new Promise((res) => setTimeout(res, 300))
    expect(receiver.received.filter((x) => x.path === '/a2a')).toHaveLength(1)
    await c.deleteTaskPushNotificationConfig({ tenant: '', taskId: task.id, id: cfg.id })
    expect((await c.listTaskPushNotificationConfig({ tenant: '', taskId: task.id, pageSize: 0, pageToken: '' })).configs).toEqual([])
    // a config given with the message itself needs the client's own token (no answer could show a new one)
    const inlineCfg = { tenant: '', id: '', taskId: '', url: `${receiver.url}/inline`, token, authentication: undefined }
    const noToken = await rpc('helper', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: { message: { messageId: 'm-no-token', contextId: ctx, role: 'ROLE_USER', parts: [{ text: 'x' }] }, configuration: { taskPushNotificationConfig: { url: inlineCfg.url } } } })
    expect(noToken.body.error.code).toBe(-32602)
    const inline = (await c.sendMessage(send(msg('inline', { contextId: ctx }), { returnImmediately: false, acceptedOutputModes: [], historyLength: undefined, taskPushNotificationConfig: inlineCfg }))) as Task
    const [r2] = await receiver.waitFor(1, 10000, (x) => x.path === '/inline')
    expect(r2.headers['x-a2a-task-id']).toBe(inline.id)
    expect(r2.body).toMatchObject({ type: 'turn.completed', data: { sessionId: ctx, turn: 3 } })
  })

  it('the v0.3 client (the SDK compatibility transport) sends, reads, resubscribes and streams with the v0.3 method names', async () => {
    const ctx = await context('a2a-legacy')
    t.models.script(ctx, { text: ['old ', 'style'] }, { text: ['streamed'] })
    const card = await (await client('helper')).getAgentCard()
    const legacy = new Client(new LegacyJsonRpcTransport({ endpoint: `${t.url}/v1/a2a/helper`, fetchImpl: authed(t.key) }), card)
    const task = (await legacy.sendMessage(send(msg('hi', { contextId: ctx })))) as Task
    expect(task.status!.state).toBe(TaskState.TASK_STATE_COMPLETED)
    expect(task.artifacts.map((a) => partText(a.parts[0]))).toEqual(['old style'])
    expect((await legacy.getTask({ tenant: '', id: task.id, historyLength: undefined })).id).toBe(task.id)
    const replay = await collect(legacy.resubscribeTask({ tenant: '', id: task.id }))
    expect(replay.map(line).at(-1)).toBe('status TASK_STATE_COMPLETED "old style"')
    const streamed = await collect(legacy.sendMessageStream(send(msg('more', { contextId: ctx }))))
    expect(streamed.map(line).at(-1)).toBe('status TASK_STATE_COMPLETED "streamed"')
    expect(streamed.map(line)[0]).toBe('task TASK_STATE_WORKING')
    const raw = await rpc('helper', { jsonrpc: '2.0', id: 3, method: 'tasks/get', params: { id: task.id } })
    expect(raw.body.result).toMatchObject({ kind: 'task', id: task.id, contextId: ctx, status: { state: 'completed' } })
  })

  it('a token limited to one agent reaches only that agent: its card and tasks; another agent is not there', async () => {
    const tok = (await t.api('POST', '/v1/tokens', { scopes: ['read', 'write'], agents: ['echo'] })).body.token as string
    expect((await t.api('GET', '/v1/a2a/echo/.well-known/agent-card.json', undefined, { key: tok })).status).toBe(200)
    expect((await t.api('GET', '/v1/a2a/helper/.well-known/agent-card.json', undefined, { key: tok })).status).toBe(404)
    const c = await client('echo', tok)
    const task = (await c.sendMessage(send(msg('limited')))) as Task
    expect(task.artifacts.map((a) => partText(a.parts[0]))).toEqual(['echo: limited'])
    const other = await rpc('helper', { jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: task.id } }, tok)
    expect(other.status).toBe(404)
    expect(other.body.error.data.code).toBe('not-found')
  })

  it('bad input gets JSON-RPC errors with their codes and writes nothing', async () => {
    const before = { sessions: await rows('sessions'), events: await rows('session_events'), webhooks: await rows('webhooks') }
    const other = (await t.api('POST', '/v1/admin/tenants', { name: 'other' }, { key: t.adminToken })).body.apiKey as string
    expect((await t.api('POST', '/v1/agents', { id: 'helper', name: 'Theirs', model: t.models.ref() }, { key: other })).status).toBe(201)
    const ctx = await context('a2a-errors')
    const beforeCtx = { sessions: await rows('sessions'), events: await rows('session_events'), webhooks: await rows('webhooks') }
    expect(beforeCtx.sessions).toBe(before.sessions + 1)
    const parse = await t.api('POST', '/v1/a2a/helper', undefined, { raw: '{"jsonrpc":"2.0",' })
    expect([parse.status, parse.body.error.code]).toEqual([400, -32700])
    expect((await rpc('helper', { jsonrpc: '2.0', id: 1, method: 'NoSuchMethod', params: {} })).body.error.code).toBe(-32601)
    expect((await rpc('helper', { jsonrpc: '2.0', id: 1, method: 'tasks/nothing', params: {} })).body.error.code).toBe(-32601)
    expect((await rpc('helper', { jsonrpc: '1.0', id: 1, method: 'GetTask', params: {} })).body.error.code).toBe(-32600)
    expect((await rpc('helper', { jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: 'nope' } })).body.error.code).toBe(-32001)
    // another tenant's task and context: not there
    const theirs = await rpc('helper', { jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: `${ctx}:i0` } }, other)
    expect(theirs.body.error.code).toBe(-32001)
    const sendTo = (key: string, m: object) => rpc('helper', { jsonrpc: '2.0', id: 2, method: 'SendMessage', params: { message: { messageId: crypto.randomUUID(), role: 'ROLE_USER', parts: [{ text: 'hi' }], ...m } } }, key)
    expect((await sendTo(other, { contextId: ctx })).body.error.code).toBe(-32602)
    expect((await sendTo(other, { taskId: `${ctx}:i0` })).body.error.code).toBe(-32001)
    // oversized and unsupported parts, a missing messageId
    expect((await sendTo(t.key, { contextId: ctx, parts: [{ text: 'x'.repeat(300 * 1024) }] })).body.error.code).toBe(-32602)
    expect((await sendTo(t.key, { contextId: ctx, parts: Array.from({ length: 65 }, () => ({ text: 'x' })) })).body.error.code).toBe(-32602)
    expect((await sendTo(t.key, { contextId: ctx, parts: [{ url: 'http://example.com/a.pdf', mediaType: 'application/pdf' }] })).body.error.code).toBe(-32005)
    expect((await sendTo(t.key, { contextId: ctx, messageId: '' })).body.error.code).toBe(-32602)
    // a read-only token reads but cannot send
    const ro = (await t.api('POST', '/v1/tokens', { scopes: ['read'] })).body.token as string
    const refused = await sendTo(ro, { contextId: ctx })
    expect(refused.body.error).toMatchObject({ code: -32000 })
    expect(refused.body.error.message).toMatch(/^forbidden: /)
    expect((await rpc('helper', { jsonrpc: '2.0', id: 1, method: 'ListTasks', params: { contextId: ctx } }, ro)).body.result).toMatchObject({ tasks: [] })
    expect((await rpc('helper', { jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: 'x' } }, null)).status).toBe(401)
    expect({ sessions: await rows('sessions'), events: await rows('session_events'), webhooks: await rows('webhooks') }).toEqual({ ...beforeCtx, sessions: beforeCtx.sessions + 0 })
  })
})
