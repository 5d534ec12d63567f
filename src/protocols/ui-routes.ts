// The AI SDK's chat transports against agentd (API.md §17.2): `DefaultChatTransport` over HTTP and
// `WebSocketChatTransport` over one socket. Input goes through the inbox (intake.ts) like the native
// routes' — a user message by its own id, so a resend inserts nothing — and answers go to pending
// calls; what comes back is a projection of the log (stream.ts). Nothing is stored here.

import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { WebSocket } from 'ws'
import { ApiError, badRequest, sessionNotFound } from '../errors.js'
import { bodyHash, toUserMessage, normalizeContent } from '../agent/index.js'
import { getSession, listPending, readEvents, type Principal, type SessionRow } from '../store/index.js'
import { foldSpans, kindsOf, SpanFold } from './span.js'
import { uiHistory } from './ui-history.js'
import type { UiChunk } from './ui-render.js'
import { openUiStream, type Selection, type UiStreamHandle } from './ui-stream.js'
import { deliverInput, reaches, toApiError, schemas as S, type Subscription, type HttpDeps } from '../http/index.js'

const err = { 400: S.ErrorBody, 401: S.ErrorBody, 403: S.ErrorBody, 404: S.ErrorBody, 409: S.ErrorBody }
const AgentParams = { type: 'object', properties: { agentId: { type: 'string' } }, required: ['agentId'] } as const
const ChatParams = { type: 'object', properties: { agentId: { type: 'string' }, id: { type: 'string' } }, required: ['agentId', 'id'] } as const
const ChatBody = { type: 'object', description: 'what DefaultChatTransport sends: {id, messages, trigger, messageId?} and the body the page adds', additionalProperties: true } as const

const UiMessages = { type: 'object', properties: { messages: { type: 'array', items: { type: 'object', additionalProperties: true, properties: { id: { type: 'string' }, role: { type: 'string' }, parts: { type: 'array', items: { type: 'object', additionalProperties: true } } } } } }, required: ['messages'] } as const
const isObj = (v: unknown): v is Record<string, any> => typeof v === 'object' && v !== null && !Array.isArray(v)

/**
 * The session a chat id names: created from the agent on first use (when `create`); a session of
 * another agent is 409 session-conflict; one the credential does not reach looks missing (API.md §18).
 */
export async function chatSession(deps: HttpDeps, p: Principal, agentId: string, id: string, create: boolean): Promise<SessionRow | null> {
  const row = await getSession(deps.db, p.tenantId, id)
  if (row) {
    if (p.grant && !reaches(p.grant, row)) throw sessionNotFound(id)
    if (row.agent?.id !== agentId) throw new ApiError('session-conflict', `session ${id} is not a session of agent ${agentId}`)
    return row
  }
  if (!create) {
    // no such chat yet: nothing to stream or stop — but only for an agent the tenant has (404 otherwise,
    // as a create would answer)
    await deps.agents.get(p.tenantId, agentId)
    return null
  }
  const g = p.grant
  if (g?.sessions && !g.sessions.includes(id)) throw new ApiError('forbidden', 'this token creates only the sessions it lists')
  const made = await deps.sessions.create(p.tenantId, { id, agent: agentId } as never, g?.subject ?? null)
  return made.row
}

/** The checked shape of a chat request's messages (the rest of a UIMessage is not read). */
interface ChatMessage {
  id: string
  role: string
  parts: Array<Record<string, any>>
}

function readChat(body: unknown, path: string): { id: string; messages: ChatMessage[]; trigger: string } {
  if (!isObj(body)) throw badRequest('the body must be a JSON object', [{ path, message: 'must be an object' }])
  const { id, messages, trigger } = body
  if (typeof id !== 'string' || !id) throw badRequest('id (the chat id, which is the session id) must be a non-empty string', [{ path: `${path}.id`, message: 'must be a non-empty string' }])
  if (trigger !== undefined && trigger !== 'submit-message' && trigger !== 'regenerate-message') throw badRequest('trigger must be submit-message', [{ path: `${path}.trigger`, message: 'must be submit-message' }])
  if (trigger === 'regenerate-message') throw badRequest('trigger regenerate-message is not supported: the log is append-only; fork the session instead', [{ path: `${path}.trigger`, message: 'must be submit-message' }])
  if (!Array.isArray(messages) || !messages.length) throw badRequest('messages must be a non-empty array of UI messages', [{ path: `${path}.messages`, message: 'must be a non-empty array' }])
  messages.forEach((m, i) => {
    const at = `${path}.messages.${i}`
    if (!isObj(m)) throw badRequest(`${at} must be a UI message object`, [{ path: at, message: 'must be an object' }])
    if (typeof m.id !== 'string' || !m.id) throw badRequest(`${at}.id must be a non-empty string`, [{ path: `${at}.id`, message: 'must be a non-empty string' }])
    if (m.role !== 'user' && m.role !== 'assistant' && m.role !== 'system') throw badRequest(`${at}.role must be user, assistant or system`, [{ path: `${at}.role`, message: 'must be user, assistant or system' }])
    if (!Array.isArray(m.parts) || !m.parts.every(isObj)) throw badRequest(`${at}.parts must be an array of parts`, [{ path: `${at}.parts`, message: 'must be an array of objects' }])
  })
  return { id, messages: messages as ChatMessage[], trigger: (trigger as string | undefined) ?? 'submit-message' }
}

/** A user message's parts as agentd content: text, and images given as data URLs. */
function userContent(parts: Array<Record<string, any>>, at: string): unknown[] {
  const out: unknown[] = []
  parts.forEach((p, i) => {
    if (p.type === 'text') {
      if (typeof p.text !== 'string') throw badRequest(`${at}.parts.${i}.text must be a string`, [{ path: `${at}.parts.${i}.text`, message: 'must be a string' }])
      out.push({ type: 'text', text: p.text })
    } else if (p.type === 'file' && typeof p.url === 'string' && typeof p.mediaType === 'string' && p.mediaType.startsWith('image/')) {
      const m = /^data:([^;,]+);base64,(.*)$/s.exec(p.url)
      if (!m) throw badRequest(`${at}.parts.${i}.url must be a data: URL`, [{ path: `${at}.parts.${i}.url`, message: 'must be a base64 data: URL' }])
      out.push({ type: 'image', mimeType: m[1], data: m[2] })
    }
  })
  return out
}

/** A tool part's call id and state, for `tool-<name>` and `dynamic-tool` parts. */
const isToolPart = (p: Record<string, any>) => (p.type === 'dynamic-tool' || (typeof p.type === 'string' && p.type.startsWith('tool-'))) && typeof p.toolCallId === 'string'

/**
 * What a chat request adds (API.md §17.2): the last message when it is a new user message, else the
 * answers in the last assistant message to calls that wait. Everything is checked before anything is
 * written. Returns the stream to answer with.
 */
async function admit(deps: HttpDeps, p: Principal, agentId: string, body: unknown, path: string): Promise<{ row: SessionRow; selection: Selection }> {
  const chat = readChat(body, path)
  const last = chat.messages[chat.messages.length - 1]
  const at = `${path}.messages.${chat.messages.length - 1}`
  if (last.role === 'user') {
    const content = userContent(last.parts, at)
    const message = toUserMessage({ content: content as never }, { kind: 'user' }, last.id)
    const row = (await chatSession(deps, p, agentId, chat.id, true))!
    // the delivery names the span it opens; a resend answers the original delivery, so the same span
    const accepted = await deliverInput(deps, undefined, { row, route: 'followup', message, idempotency: { bodyHash: bodyHash('followup', { content }) } })
    return { row, selection: { kind: 'span', spanId: SpanFold.inputId(accepted.seq) } }
  }
  if (last.role !== 'assistant') throw badRequest(`${at}: the last message must be a user message or the assistant message with tool answers`, [{ path: `${at}.role`, message: 'must be user or assistant' }])
  const row = await chatSession(deps, p, agentId, chat.id, false)
  if (!row) throw sessionNotFound(chat.id)
  const pending = new Map((await listPending(deps.db, row.key)).map((c) => [c.callId, c.kind]))
  const answers: Array<{ callId: string; kind: 'client' | 'approval'; answer: unknown }> = []
  last.parts.forEach((part, i) => {
    if (!isToolPart(part)) return
    const callId = part.toolCallId as string
    const kind = pending.get(callId)
    if (kind === 'approval' && part.state === 'approval-responded' && isObj(part.approval) && typeof part.approval.approved === 'boolean') {
      const reason = typeof part.approval.reason === 'string' ? { reason: part.approval.reason } : {}
      answers.push({ callId, kind, answer: { decision: part.approval.approved ? 'allow' : 'deny', ...reason } })
    } else if (kind === 'client' && (part.state === 'output-available' || part.state === 'output-error')) {
      const text = part.state === 'output-error' ? String(part.errorText ?? 'error') : typeof part.output === 'string' ? part.output : JSON.stringify(part.output ?? null)
      let content
      try {
        content = normalizeContent(text || ' ')
      } catch (e) {
        throw badRequest(`${at}.parts.${i}: ${(e as Error).message}`)
      }
      answers.push({ callId, kind, answer: { content, isError: part.state === 'output-error' } })
    }
  })
  if (!answers.length) throw badRequest(`${at}: nothing new to send: no new user message, and no tool output or approval response for a pending call`, [{ path: at, message: 'has no answer to a pending call' }])
  // the answer opens the next span of the waiting turn, named after the wait
  const waiting = foldSpans(await readEvents(deps.db, row.key), { toolKind: kindsOf(row.tools as never) }).waiting
  if (!waiting) throw badRequest(`${at}: the session waits on nothing`, [{ path: at, message: 'no wait to answer' }])
  for (const a of answers) await deps.intake.answer(row, a.callId, a.kind, a.answer)
  return { row, selection: { kind: 'span', spanId: SpanFold.answerId(waiting.seq) } }
}

/** Writes a UI message stream as Server-Sent Events (API.md §17.2) until it ends or the client leaves. */
function sseStream(live: Set<() => void>, req: FastifyRequest, reply: FastifyReply, open: (conn: { buffered(): number; ping(): void }, emit: (c: UiChunk) => void, end: (e?: string) => void) => UiStreamHandle, open204 = false): Promise<void> {
  return new Promise<void>((resolve) => {
    let res: FastifyReply['raw'] | null = null
    const pending: string[] = []
    const write = (text: string) => {
      if (res) {
        if (!res.writableEnded) res.write(text)
      } else pending.push(text)
    }
    let ended = false
    const finish = () => {
      if (res && !res.writableEnded) res.end()
      resolve()
    }
    const conn = { buffered: () => res?.writableLength ?? 0, ping: () => write(': ping\n\n') }
    const h = open(
      conn,
      (c) => write(`data: ${JSON.stringify(c)}\n\n`),
      (e) => {
        // cut (a slow consumer, a failed feed): no [DONE], the client resumes
        if (!e) write('data: [DONE]\n\n')
        if (res) finish()
        else ended = true
      },
    )
    void h.ready.then((ok) => {
      if (!ok && open204) {
        void reply.code(204).send()
        return resolve()
      }
      const hooked = reply.getHeaders() as Record<string, string | number | string[]>
      reply.hijack()
      res = reply.raw
      res.writeHead(200, { ...hooked, 'content-type': 'text/event-stream', 'cache-control': 'no-cache, no-transform', connection: 'keep-alive', 'x-accel-buffering': 'no', 'x-vercel-ai-ui-message-stream': 'v1' })
      if (pending.length) res.write(pending.splice(0).join(''))
      // the server closing ends the answer; the client resumes it elsewhere
      const stop = () => {
        h.close()
        finish()
      }
      live.add(stop)
      res.on('close', () => {
        live.delete(stop)
        h.close()
        resolve()
      })
      if (ended) finish()
    })
  })
}

export async function uiRoutes(app: FastifyInstance, deps: HttpDeps): Promise<void> {
  const facts = { agent: 'agentId' } as const
  /** the subscriptions of open streams (the native stream's limits and gauge apply to them) */
  const subs = new Set<Subscription>()
  /** the open streams and sockets, ended when the server closes */
  const live = new Set<() => void>()
  app.addHook('preClose', async () => {
    for (const stop of [...live]) stop()
  })

  app.post('/ui/:agentId/chat', { config: { ...facts, eventStream: true }, schema: { operationId: 'uiChat', summary: 'AI SDK chat: send a message or tool answers, get the UI message stream', tags: ['protocols'], params: AgentParams, body: ChatBody, response: { ...err } } }, async (req, reply) => {
    const { agentId } = req.params as { agentId: string }
    const { row, selection } = await admit(deps, req.principal!, agentId, req.body, 'body')
    await sseStream(live, req, reply, (conn, emit, end) => openUiStream(deps, req, subs, row, selection, conn, emit, end))
  })

  app.get('/ui/:agentId/chat/:id/stream', { config: { ...facts, queryToken: true, unlimited: true, eventStream: true }, schema: { operationId: 'uiChatStream', summary: 'AI SDK chat: resume the open turn (204 when none)', tags: ['protocols'], params: ChatParams, response: { 204: { type: 'null', description: 'no turn runs, or the turn waits' }, ...err } } }, async (req, reply) => {
    const { agentId, id } = req.params as { agentId: string; id: string }
    const row = await chatSession(deps, req.principal!, agentId, id, false)
    if (!row) return reply.code(204).send()
    await sseStream(live, req, reply, (conn, emit, end) => openUiStream(deps, req, subs, row, { kind: 'open' }, conn, emit, end), true)
  })

  app.post('/ui/:agentId/chat/:id/stop', { config: { ...facts, optionalBody: true }, schema: { operationId: 'uiChatStop', summary: 'AI SDK chat: cancel the running turn', tags: ['protocols'], params: ChatParams, body: { type: 'object', additionalProperties: true }, response: { 202: S.CancelAnswer, ...err } } }, async (req, reply) => {
    const { agentId, id } = req.params as { agentId: string; id: string }
    const row = await chatSession(deps, req.principal!, agentId, id, false)
    if (!row) throw sessionNotFound(id)
    const r = await deps.intake.cancel(row, false)
    return reply.code(202).type('application/json').send(JSON.stringify(r))
  })

  app.get('/ui/:agentId/chat/:id/messages', { config: facts, schema: { operationId: 'uiChatMessages', summary: "AI SDK chat: the history as UIMessages (useChat's initial messages)", tags: ['protocols'], params: ChatParams, response: { 200: UiMessages, ...err } } }, async (req, reply) => {
    const { agentId, id } = req.params as { agentId: string; id: string }
    const row = await chatSession(deps, req.principal!, agentId, id, false)
    if (!row) throw sessionNotFound(id)
    const events = await readEvents(deps.db, row.key)
    const messages = uiHistory(events as never, row.tools, deps.snapshot(row.key))
    return reply.type('application/json').send(JSON.stringify({ messages }))
  })

  app.route({
    method: 'GET',
    url: '/ui/:agentId/ws',
    config: { ...facts, queryToken: true, unlimited: true },
    schema: { operationId: 'uiChatWebSocket', summary: 'AI SDK chat: the WebSocketChatTransport protocol', tags: ['protocols'], params: AgentParams },
    handler: async () => {
      throw badRequest('this route takes a WebSocket upgrade (Connection: Upgrade, Upgrade: websocket)', [{ path: 'headers.upgrade', message: 'must be websocket' }])
    },
    wsHandler: (socket: WebSocket, req: FastifyRequest) => wsChat(deps, live, subs, socket, req),
  })
}

/**
 * `WebSocketChatTransport` (ai ≥ 7): requests `send`, `resume {lastSequence}` and `abort`, each answered by
 * its own `start`, `chunk {sequence}`…, `end` (or `error`, `no-active`); `sequence` numbers a stream's
 * chunks from 0, and `resume` sends only the chunks after `lastSequence`.
 */
function wsChat(deps: HttpDeps, live: Set<() => void>, subs: Set<Subscription>, socket: WebSocket, req: FastifyRequest): void {
  const { agentId } = req.params as { agentId: string }
  const streams = new Map<string, UiStreamHandle>()
  const stop = () => socket.close(1001)
  live.add(stop)
  const send = (o: unknown) => {
    if (socket.readyState === socket.OPEN) socket.send(JSON.stringify(o))
  }
  socket.on('close', () => {
    live.delete(stop)
    for (const h of streams.values()) h.close()
    streams.clear()
  })
  const run = (requestId: string, row: SessionRow, selection: Selection, after: number) => {
    let sequence = -1
    let started = false
    const h = openUiStream(
      deps,
      req,
      subs,
      row,
      selection,
      { buffered: () => socket.bufferedAmount, ping: () => {} },
      (chunk) => {
        if (!started) {
          started = true
          send({ type: 'start', requestId })
        }
        sequence++
        if (sequence > after) send({ type: 'chunk', requestId, sequence, chunk })
      },
      (e) => {
        streams.delete(requestId)
        send(e ? { type: 'error', requestId, errorText: 'the stream failed; resume it' } : { type: 'end', requestId })
      },
    )
    streams.set(requestId, h)
    void h.ready.then((ok) => {
      if (!ok) {
        streams.delete(requestId)
        send({ type: 'no-active', requestId })
      }
    })
  }
  socket.on('message', (raw) => {
    void (async () => {
      let frame: Record<string, any>
      try {
        frame = JSON.parse(String(raw))
      } catch {
        return send({ type: 'error', requestId: '', errorText: 'a frame must be JSON' })
      }
      const requestId = typeof frame?.requestId === 'string' ? frame.requestId : ''
      try {
        if (!isObj(frame) || !requestId) throw badRequest('a frame must be an object with a requestId')
        if (frame.type === 'abort') {
          streams.get(requestId)?.close()
          streams.delete(requestId)
          return
        }
        const writes = frame.type === 'send'
        if (writes) requireWrite(req)
        if (frame.type === 'send') {
          const { row, selection } = await admit(deps, req.principal!, agentId, { id: frame.id, messages: frame.messages, trigger: frame.trigger }, 'frame')
          return run(requestId, row, selection, -1)
        }
        if (frame.type === 'resume') {
          if (typeof frame.id !== 'string' || !frame.id) throw badRequest('resume needs the chat id')
          const last = frame.lastSequence
          if (last !== undefined && last !== null && !(Number.isInteger(last) && last >= -1)) throw badRequest('lastSequence must be an integer')
          const row = await chatSession(deps, req.principal!, agentId, frame.id, false)
          if (!row) return send({ type: 'no-active', requestId })
          return run(requestId, row, { kind: 'open' }, typeof last === 'number' ? last : -1)
        }
        throw badRequest('type must be send, resume or abort')
      } catch (e) {
        const ae = toApiError(e)
        send({ type: 'error', requestId, errorText: `${ae.code}: ${ae.message}` })
      }
    })()
  })
}

function requireWrite(req: FastifyRequest): void {
  const g = req.principal?.grant
  if (g && !g.scopes.includes('write')) throw new ApiError('forbidden', `this token's scopes (${g.scopes.join(', ')}) do not include write`)
}
