// AG-UI over HTTP (API.md §17.3) for `@ag-ui/client`'s HttpAgent: `POST /v1/ag-ui/:agentId` takes a
// RunAgentInput and answers with the run's events as SSE, `…/connect` reattaches to a thread,
// `…/capabilities` says what this server does. Input goes through the inbox and the pending calls like
// the native routes'; the events are the span fold's ops rendered by ag-ui.ts.

import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { ApiError, badRequest } from '../errors.js'
import { bodyHash, idempotencyMessageId, normalizeContent, toUserMessage } from '../agent/index.js'
import { canonicalJson, type JsonObject } from '../session/index.js'
import { getSession, listPending, patchSession, readEvents, type SessionRow } from '../store/index.js'
import { admittedIds, agUiMessages, AgUiRun, type AgUiEvent } from './ag-ui.js'
import { foldSpans, kindsOf, SpanFold } from './span.js'
import { followSession } from './source.js'
import { chatSession } from './ui-routes.js'
import { deliverInput, parseAfter, schemas as S, type Subscription, type HttpDeps } from '../http/index.js'

const err = { 400: S.ErrorBody, 401: S.ErrorBody, 403: S.ErrorBody, 404: S.ErrorBody, 409: S.ErrorBody }
const AgentParams = { type: 'object', properties: { agentId: { type: 'string' } }, required: ['agentId'] } as const
const RunBody = { type: 'object', description: 'an AG-UI RunAgentInput', additionalProperties: true } as const
const isObj = (v: unknown): v is Record<string, any> => typeof v === 'object' && v !== null && !Array.isArray(v)
const bad = (message: string, path: string) => badRequest(message, [{ path, message }])

interface RunInput {
  threadId: string
  runId: string
  messages: Array<Record<string, any>>
  tools: Array<Record<string, any>>
  resume: Array<Record<string, any>>
}

/** The checked RunAgentInput (its other fields — state, context, forwardedProps — are not used). */
function readInput(body: unknown): RunInput {
  if (!isObj(body)) throw bad('the body must be a RunAgentInput object', 'body')
  const { threadId, runId, messages, tools, resume } = body
  if (typeof threadId !== 'string' || !threadId) throw bad('threadId must be a non-empty string (the session id)', 'body.threadId')
  if (typeof runId !== 'string' || !runId) throw bad('runId must be a non-empty string', 'body.runId')
  if (!Array.isArray(messages)) throw bad('messages must be an array of AG-UI messages', 'body.messages')
  messages.forEach((m, i) => {
    if (!isObj(m) || typeof m.id !== 'string' || typeof m.role !== 'string') throw bad(`messages.${i} must be a message {id, role, …}`, `body.messages.${i}`)
    if (m.role === 'tool' && (typeof m.toolCallId !== 'string' || (typeof m.content !== 'string' && !Array.isArray(m.content)))) throw bad(`messages.${i}: a tool message needs toolCallId and content`, `body.messages.${i}`)
  })
  if (tools !== undefined && (!Array.isArray(tools) || !tools.every((t) => isObj(t) && typeof t.name === 'string'))) throw bad('tools must be an array of {name, description, parameters}', 'body.tools')
  if (resume !== undefined && (!Array.isArray(resume) || !resume.every((r) => isObj(r) && typeof r.interruptId === 'string' && (r.status === 'resolved' || r.status === 'cancelled')))) throw bad('resume must be an array of {interruptId, status: "resolved" | "cancelled", payload?}', 'body.resume')
  return { threadId, runId, messages, tools: tools ?? [], resume: resume ?? [] }
}

/** A user message's text (string content, or its text parts). */
function userText(m: Record<string, any>): string {
  if (typeof m.content === 'string') return m.content
  if (Array.isArray(m.content)) return m.content.map((p: any) => (p?.type === 'text' && typeof p.text === 'string' ? p.text : '')).join('')
  return ''
}

async function foldOf(deps: HttpDeps, row: SessionRow): Promise<SpanFold> {
  return foldSpans(await readEvents(deps.db, row.key), { toolKind: kindsOf(row.tools as never) })
}

/** The session's tools with the run's tools as its `client` tools (API.md §17.3), or null when unchanged. */
async function withClientTools(deps: HttpDeps, row: SessionRow, tools: RunInput['tools']): Promise<JsonObject[] | null> {
  if (!tools.length) return null
  const own = (row.tools as Array<Record<string, any>>).filter((t) => t?.execution?.type !== 'client' && !tools.some((c) => c.name === t.name))
  const next = [...own, ...tools.map((t) => ({ name: t.name, description: typeof t.description === 'string' ? t.description : '', parameters: isObj(t.parameters) ? t.parameters : { type: 'object' }, execution: { type: 'client' } }))]
  const v = await deps.sessions.validateSettings({ tools: next as never })
  return canonicalJson(v.tools as JsonObject[]) === canonicalJson(row.tools) ? null : (v.tools as JsonObject[])
}

export async function agUiRoutes(app: FastifyInstance, deps: HttpDeps): Promise<void> {
  const streams = new Set<Subscription>()
  app.addHook('preClose', async () => {
    for (const s of [...streams]) s.close()
  })
  const facts = { agent: 'agentId' } as const

  /**
   * Writes the events of span `spanId` as SSE with `id:` from 0, after `after` (reopening what the
   * client is inside); `prefix` events (connect's snapshot) go first, under the same numbering.
   */
  const stream = (req: FastifyRequest, reply: FastifyReply, row: SessionRow, threadId: string, runId: string, spanId: string | null, after: number, prefix: AgUiEvent[] = []) => {
    const hooked = reply.getHeaders() as Record<string, string | number | string[]>
    reply.hijack()
    const res = reply.raw
    res.writeHead(200, { ...hooked, 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache, no-transform', connection: 'keep-alive', 'x-accel-buffering': 'no' })
    res.flushHeaders()
    const run = new AgUiRun(threadId, runId, spanId ?? '')
    run.events.push(...prefix)
    let sent = 0
    const frame = (e: AgUiEvent, id: number) => `id: ${id}\ndata: ${JSON.stringify(e)}\n\n`
    let closed = false
    let sub: Subscription | undefined
    // a resume first re-opens what the client is inside, under the id it resumes from, once the
    // fold has come that far
    let reopened = after < 0
    const flush = () => {
      if (closed) return
      let text = ''
      if (!reopened) {
        if (run.events.length <= after && !run.done) return
        reopened = true
        text += run.reopen(after).map((e) => frame(e, after)).join('')
        sent = after + 1
      }
      for (; sent < run.events.length; sent++) text += frame(run.events[sent], sent)
      if (text) res.write(text)
      if (run.done) {
        closed = true
        sub?.close()
        res.end()
      }
    }
    if (spanId === null) {
      // connect without an open run: the snapshot, then the run ends
      run.events.push({ type: 'RUN_FINISHED', threadId, runId, outcome: { type: 'success' } })
      run.done = true
      return flush()
    }
    const fold = new SpanFold({
      toolKind: kindsOf(row.tools as never),
      onOp: (op) => {
        run.op(op)
        flush()
      },
    })
    req.session = row
    sub = followSession(deps, req, -1, { event: (e) => fold.event(e), frame: (f) => fold.frame(f.event, f.data) }, {
      buffered: () => res.writableLength,
      ping: () => {
        if (!res.writableEnded) res.write(': ping\n\n')
      },
      end: () => {
        closed = true
        res.end()
      },
    }, streams)
    const s = sub
    res.on('drain', () => s.drained())
    res.on('close', () => s.close())
    flush()
    if (res.destroyed || req.raw.socket?.destroyed) return s.close()
    return s.start()
  }

  app.post('/ag-ui/:agentId', { config: { ...facts, eventStream: true }, schema: { operationId: 'agUiRun', summary: 'AG-UI: run the agent (RunAgentInput), the run as SSE events', tags: ['protocols'], params: AgentParams, body: RunBody, response: { ...err } } }, async (req, reply) => {
    const { agentId } = req.params as { agentId: string }
    const input = readInput(req.body)
    const lastEventId = req.headers['last-event-id']
    const after = typeof lastEventId === 'string' ? (parseAfter(lastEventId.trim(), 'headers.last-event-id') ?? -1) : -1
    const p = req.principal!
    // everything is checked before anything is written
    const existing = await getSession(deps.db, p.tenantId, input.threadId)
    const fold0 = existing ? await foldOf(deps, existing) : undefined
    const admitted = fold0 ? admittedIds(fold0) : new Set<string>()
    const fresh = input.messages.filter((m) => m.role === 'user' && !admitted.has(m.id))
    const messageId = idempotencyMessageId(input.runId)
    const pending = existing ? new Map((await listPending(deps.db, existing.key)).map((c) => [c.callId, c.kind])) : new Map()
    const answers: Array<{ callId: string; kind: 'client' | 'approval'; answer: unknown }> = []
    for (const m of input.messages) {
      if (m.role !== 'tool' || pending.get(m.toolCallId) !== 'client') continue
      answers.push({ callId: m.toolCallId, kind: 'client', answer: { content: normalizeContent(userText(m) || ' '), isError: typeof m.error === 'string' } })
    }
    for (const r of input.resume) {
      if (pending.get(r.interruptId) !== 'approval') throw bad(`interrupt ${r.interruptId} is not pending`, 'body.resume')
      const decision = r.status === 'cancelled' ? 'deny' : r.payload?.decision === 'allow' ? 'allow' : r.payload?.decision === 'deny' ? 'deny' : undefined
      if (!decision) throw bad('a resolved resume entry needs payload {decision: "allow" | "deny", reason?}', 'body.resume')
      answers.push({ callId: r.interruptId, kind: 'approval', answer: { decision, ...(typeof r.payload?.reason === 'string' ? { reason: r.payload.reason } : {}) } })
    }
    const content = fresh.map(userText).filter((t) => t !== '').join('\n\n')
    const replayed = fold0?.spans.find((s) => s.opener.kind === 'input' && s.opener.messageId === messageId)
    if (!content && !answers.length && !replayed) throw bad('nothing to run: no new user message, no tool result for a pending call, no resume entry', 'body.messages')
    const message = content ? toUserMessage({ content, source: { kind: 'user', agui: { runId: input.runId, messageIds: fresh.map((m) => m.id) } } as never }, { kind: 'user' }, messageId) : undefined

    let row = await chatSession(deps, p, agentId, input.threadId, true)
    if (!row) throw new ApiError('internal', 'no session')
    const tools = await withClientTools(deps, row, input.tools)
    if (tools) {
      await patchSession(deps.db, row.key, { tools } as never)
      await deps.driver.settingsChanged(row.key)
      row = (await getSession(deps.db, p.tenantId, row.id))!
    }
    let spanId: string
    if (replayed && !message && !answers.length) spanId = replayed.id
    else if (answers.length) {
      const w = (await foldOf(deps, row)).waiting
      if (!w) throw bad('the thread waits on nothing', 'body')
      spanId = SpanFold.answerId(w.seq)
      for (const a of answers) await deps.intake.answer(row, a.callId, a.kind, a.answer)
      if (message) await deliverInput(deps, req, { row, route: 'followup', message, idempotency: { bodyHash: bodyHash('followup', { content: message.content }) } })
    } else {
      const accepted = await deliverInput(deps, req, { row, route: 'followup', message: message!, idempotency: { bodyHash: bodyHash('followup', { content: message!.content }) } })
      spanId = SpanFold.inputId(accepted.seq)
    }
    return stream(req, reply, row, input.threadId, input.runId, spanId, after)
  })

  app.post('/ag-ui/:agentId/connect', { config: { ...facts, eventStream: true }, schema: { operationId: 'agUiConnect', summary: 'AG-UI: the thread history, then its open run live', tags: ['protocols'], params: AgentParams, body: RunBody, response: { ...err } } }, async (req, reply) => {
    const { agentId } = req.params as { agentId: string }
    const body = req.body as Record<string, unknown>
    if (typeof body.threadId !== 'string' || !body.threadId) throw bad('threadId must be a non-empty string (the session id)', 'body.threadId')
    const runId = typeof body.runId === 'string' && body.runId ? body.runId : `connect-${Date.now()}`
    const row = await chatSession(deps, req.principal!, agentId, body.threadId, false)
    if (!row) throw new ApiError('session-not-found', `thread ${body.threadId} not found`)
    const fold = await foldOf(deps, row)
    const open = fold.open
    const snapshot: AgUiEvent = { type: 'MESSAGES_SNAPSHOT', messages: agUiMessages(fold, open?.id) }
    return stream(req, reply, row, row.id, runId, open?.id ?? null, -1, [snapshot])
  })

  app.get('/ag-ui/:agentId/capabilities', { config: facts, schema: { operationId: 'agUiCapabilities', summary: 'AG-UI: what this server supports', tags: ['protocols'], params: AgentParams, response: { 200: { type: 'object', additionalProperties: true }, ...err } } }, async (req, reply) => {
    const { agentId } = req.params as { agentId: string }
    const agent = await deps.agents.get(req.principal!.tenantId, agentId).catch(() => undefined)
    if (!agent) throw new ApiError('not-found', `agent ${agentId} not found`)
    return reply.type('application/json').send(
      JSON.stringify({
        agentId,
        transport: { sse: true, resume: { lastEventId: true }, connect: true },
        tools: { frontend: true, serverTools: true },
        reasoning: { streaming: true },
        humanInTheLoop: { interrupts: true, reasons: ['tool-approval'] },
        state: { snapshots: false, deltas: false },
        events: ['RUN_STARTED', 'RUN_FINISHED', 'RUN_ERROR', 'TEXT_MESSAGE_START', 'TEXT_MESSAGE_CONTENT', 'TEXT_MESSAGE_END', 'REASONING_START', 'REASONING_MESSAGE_START', 'REASONING_MESSAGE_CONTENT', 'REASONING_MESSAGE_END', 'REASONING_END', 'TOOL_CALL_START', 'TOOL_CALL_ARGS', 'TOOL_CALL_END', 'TOOL_CALL_RESULT', 'MESSAGES_SNAPSHOT'],
      }),
    )
  })
}
