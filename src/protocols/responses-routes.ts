// The OpenAI Responses and Conversations routes (API.md §17.1): a thin plugin over the request's
// parsing (responses-input.ts), the projection (responses.ts) and the core (span.ts, source.ts). Input
// goes through the native inbox entry (http deliverInput, as POST …/followup) and the native answers (Intake.answer, as …/tool-results and
// …/approvals); differing settings through the PATCH's own code (changeSession); a response is read
// by folding the session's log. Errors leave in OpenAI's shape {error: {message, type, param, code}}.

import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { ApiError } from '../errors.js'
import { bad, differing, FIELDS, IGNORED, notFound, openaiErrorBody, parseInput, parseSettings } from './responses-input.js'
import { bodyHash, idempotencyMessageId } from '../agent/index.js'
import { toUserMessage, type JsonObject, type UserMessage } from '../session/index.js'
import { deleteSession, getSession, listPending, type SessionRow } from '../store/index.js'
import { inputItems, parseResponseId, ResponseProjector, responseId, sseText, toResponse } from './responses.js'
import { kindsOf, SpanFold } from './span.js'
import { followSession, SpanFolds } from './source.js'
import type { Span } from './items.js'
import { batch, changeSession, confirmKey, deliverInput, reaches, sessionNamed, OpenBody, type HttpDeps, type Subscription } from '../http/index.js'

/** The session and span a response id names, of the caller's tenant (another tenant's: not found). */
async function findResponse(deps: HttpDeps, req: FastifyRequest, id: string, inbox = false): Promise<{ row: SessionRow; spanId: string }> {
  const p = parseResponseId(id)
  if (!p) throw notFound(`response ${id}`)
  const row = await getSession(deps.db, req.principal!.tenantId, p.sessionId, { inbox })
  if (!row || !reachable(req, row)) throw notFound(`response ${id}`)
  return { row, spanId: p.spanId }
}

/** A token reaches only its own sessions (API.md §18); a key reaches the tenant's. */
const reachable = (req: FastifyRequest, row: SessionRow) => !req.principal?.grant || reaches(req.principal.grant, row)

/** A token limited to sessions or agents creates only those (API.md §18): here, only sessions of an agent it lists. */
function mayCreate(req: FastifyRequest, agent: string | undefined): void {
  const g = req.principal?.grant
  if (!g) return
  if (g.sessions) throw new ApiError('forbidden', 'this token reaches only the sessions it lists: name one as conversation')
  if (g.agents && !(agent !== undefined && g.agents.includes(agent.split('@')[0]))) throw new ApiError('forbidden', 'this token creates only sessions of the agents it lists: give one of them as model agent:<id>')
}

const json = (reply: FastifyReply, code: number, o: unknown) => reply.code(code).type('application/json').send(JSON.stringify(o))

export async function responsesRoutes(app: FastifyInstance, deps: HttpDeps): Promise<void> {
  const streams = new Set<Subscription>()
  // the folds of recently used sessions, caught up on use (source.ts)
  const folds = new SpanFolds(deps)
  const foldOf = (_deps: HttpDeps, row: SessionRow) => folds.current(row)
  app.addHook('preClose', async () => {
    for (const s of [...streams]) s.close()
  })
  // every error of these routes, the auth hook's included, in OpenAI's shape
  app.addHook('onSend', async (_req, reply, payload) => {
    if (reply.statusCode < 400 || typeof payload !== 'string') return payload
    return openaiErrorBody(reply.statusCode, payload)
  })

  /** Streams span `spanId` of `row` as Responses SSE: its events after `after`, then live, then [DONE]. */
  const stream = (req: FastifyRequest, reply: FastifyReply, row: SessionRow, spanId: string, after: number) => {
    const hooked = reply.getHeaders() as Record<string, string | number | string[]>
    reply.hijack()
    const res = reply.raw
    res.writeHead(200, { ...hooked, 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache, no-transform', connection: 'keep-alive', 'x-accel-buffering': 'no' })
    res.flushHeaders()
    req.session = row
    const proj = new ResponseProjector(row.id, spanId)
    let finished = false
    // frames of one event-loop turn leave together, as the native stream's do (http/feed.ts batch)
    let pending = ''
    const flush = () => {
      if (!pending || res.writableEnded) return
      const text = pending
      pending = ''
      res.write(text)
    }
    const write = (text: string) => {
      if (!pending) batch.add(flush)
      pending += text
    }
    const fold = new SpanFold({
      toolKind: kindsOf(row.tools as never),
      onOp: (op) => {
        if (finished) return
        for (const e of proj.op(op)) if (e.sequence > after) write(sseText(e))
        if (proj.done) {
          finished = true
          write('data: [DONE]\n\n')
          sub.close()
        }
      },
    })
    const sub = followSession(deps, req, -1, { event: (e) => fold.event(e), frame: (f) => fold.frame(f.event, f.data) }, {
      buffered: () => res.writableLength + pending.length,
      ping: () => {
        if (!res.writableEnded) res.write(': ping\n\n')
      },
      end: (reason) => {
        flush()
        if (reason === 'slow-consumer' && !res.writableEnded) res.write(`event: error\ndata: ${JSON.stringify({ type: 'error', code: 'slow-consumer', message: 'the client did not read fast enough; resume with starting_after', param: null })}\n\n`)
        res.end()
      },
    }, streams)
    res.on('drain', () => sub.drained())
    res.on('close', () => sub.close())
    if (res.destroyed || req.raw.socket?.destroyed) return sub.close()
    return sub.start()
  }

  /** The Response object of a span as it stands now. */
  const current = async (row: SessionRow, spanId: string): Promise<Record<string, unknown>> => {
    const span = (await foldOf(deps, row)).peek(spanId)
    if (!span) throw notFound(`response ${responseId(row.id, spanId)}`)
    return toResponse(row.id, span)
  }

  const until = (row: SessionRow, spanId: string, signal?: AbortSignal) => folds.until(row, spanId, signal)

  app.post('/responses', { config: { inbox: true, bodySession: true }, schema: { operationId: 'createResponse', summary: 'OpenAI Responses: create a response (API.md §17.1)', body: OpenBody } }, async (req, reply) => {
    const b = (req.body ?? {}) as Record<string, unknown>
    if (typeof b !== 'object' || Array.isArray(b)) throw bad('the body must be an object', '')
    for (const k of Object.keys(b)) if (!FIELDS.has(k) && !IGNORED.has(k)) throw bad(`unknown field ${k}`, k)
    if (b.store === false) throw bad('store: false is not supported: agentd stores every response', 'store')
    if (b.conversation !== undefined && b.previous_response_id !== undefined && b.previous_response_id !== null) throw bad('previous_response_id and conversation cannot both be given', 'previous_response_id')
    if (b.stream !== undefined && typeof b.stream !== 'boolean') throw bad('stream must be a boolean', 'stream')
    if (b.background !== undefined && typeof b.background !== 'boolean') throw bad('background must be a boolean', 'background')
    if (b.metadata !== undefined && (typeof b.metadata !== 'object' || b.metadata === null || Array.isArray(b.metadata))) throw bad('metadata must be an object', 'metadata')
    if (b.input === undefined) throw bad('input is required', 'input')
    const input = parseInput(b.input)
    if (!input.content && !input.answers.length) throw bad('input has nothing to send', 'input')
    const { settings, agent } = parseSettings(b)

    // which session (nothing is written before every check passed)
    let row: SessionRow | undefined
    let forkAt: number | undefined
    const conv = b.conversation as string | { id?: unknown } | undefined
    if (conv !== undefined) {
      const id = typeof conv === 'string' ? conv : typeof conv?.id === 'string' ? conv.id : undefined
      if (!id) throw bad('conversation must be an id or {id}', 'conversation')
      // with its pending input, for the delivery to plan on, and with the key when that was not read
      // yet: one statement, as a native input route's authentication reads both
      row = (await sessionNamed(req, deps, id)) ?? undefined
      if (!row || !reachable(req, row)) throw notFound(`conversation ${id}`)
    } else {
      await confirmKey(req)
      if (typeof b.previous_response_id === 'string') {
        const found = await findResponse(deps, req, b.previous_response_id, true)
        row = found.row
        const fold = await foldOf(deps, row)
        const span = fold.get(found.spanId)
        if (!span) throw notFound(`response ${b.previous_response_id}`)
        if (fold.latest?.id !== span.id) {
          if (!span.ended) throw bad(`response ${b.previous_response_id} is still in progress`, 'previous_response_id')
          forkAt = span.lastSeq
        }
      } else if (b.previous_response_id !== undefined && b.previous_response_id !== null) throw bad('previous_response_id must be a string', 'previous_response_id')
    }
    const tenantId = req.principal!.tenantId
    if (row && agent !== undefined && row.agent?.id !== agent.split('@')[0]) throw bad(`model agent:${agent} names another agent than the conversation's`, 'model')
    if (input.answers.length) {
      if (!row || forkAt !== undefined) throw bad(`call ${input.answers[0].callId} is not pending`, input.answers[0].param)
      const pending = await listPending(deps.db, row.key)
      for (const a of input.answers) if (!pending.some((p) => p.callId === a.callId && p.kind === a.kind)) throw bad(`${a.kind === 'client' ? 'function call' : 'approval request'} ${a.callId} is not pending`, a.param)
    }
    // the request's own facts ride with the input, so the Response object is a function of the log
    const facts: JsonObject = {}
    if (b.background === true) facts.background = true
    if (b.metadata && Object.keys(b.metadata).length) facts.metadata = b.metadata as JsonObject
    let message: UserMessage | undefined
    const header = req.headers['idempotency-key']
    if (input.content) message = toUserMessage({ content: input.content, source: { kind: 'user', responses: facts } }, { kind: 'user' }, header !== undefined ? idempotencyMessageId(String(header)) : undefined)

    // the session: created, forked, or changed as a PATCH would
    if (!row) mayCreate(req, agent)
    if (!row) {
      // an Idempotency-Key names the new session too (`conv-` + the message id it derives), so a repeated
      // create finds the session it made and the delivery there answers the original response
      const id = header !== undefined ? { id: `conv-${idempotencyMessageId(String(header))}` } : {}
      const created = await deps.sessions.create(tenantId, { ...id, ...(agent !== undefined ? { agent } : {}), ...settings } as never, req.principal!.grant?.subject ?? null)
      row = created.row
    } else {
      if (forkAt !== undefined) row = await deps.sessions.fork(row, forkAt)
      const diff = await differing(deps, row, settings)
      if (Object.keys(diff).length) row = await changeSession(deps, tenantId, row, diff)
    }

    // a blocking create follows the session from before its input goes in (SpanFolds.follow): the
    // span's events reach it with their commits, without reading the log back
    const follower = b.stream !== true && b.background !== true ? await folds.follow(row) : undefined
    try {
      // the input, through the native inbox and answers
      const idempotent = (m: UserMessage) => (header !== undefined ? { idempotency: { bodyHash: bodyHash('followup', { content: m.content }) } } : {})
      let spanId: string
      if (input.answers.length) {
        const fold = await foldOf(deps, row)
        const w = fold.waiting
        spanId = w ? SpanFold.answerId(w.seq) : (fold.open?.id ?? '')
        for (const a of input.answers) await deps.intake.answer(row, a.callId, a.kind, a.answer)
        if (message) await deliverInput(deps, req, { row, route: 'followup', message, ...idempotent(message) })
        if (!spanId) throw new ApiError('internal', 'the answered calls belong to no span')
      } else {
        const accepted = await deliverInput(deps, req, { row, route: 'followup', message: message!, ...idempotent(message!) })
        spanId = SpanFold.inputId(accepted.seq)
      }

      if (b.stream === true) return stream(req, reply, row, spanId, -1)
      if (b.background === true) return json(reply, 200, await current(row, spanId))
      // a client that leaves cancels nothing (API.md §17.1): only this wait ends
      const left = new AbortController()
      reply.raw.on('close', () => left.abort())
      const fold = await follower!.until(spanId, left.signal)
      return json(reply, 200, toResponse(row.id, fold.peek(spanId)!))
    } finally {
      follower?.close()
    }
  })

  app.get('/responses/:id', { schema: { operationId: 'getResponse', summary: 'OpenAI Responses: a response, or its events from starting_after (stream=true)' } }, async (req, reply) => {
    const { id } = req.params as { id: string }
    const q = req.query as { stream?: string; starting_after?: string }
    const { row, spanId } = await findResponse(deps, req, id)
    if (q.stream === 'true') {
      let after = -1
      if (q.starting_after !== undefined) {
        if (!/^-?\d{1,9}$/.test(q.starting_after)) throw bad('starting_after must be an integer', 'starting_after')
        after = Number(q.starting_after)
      }
      if (!(await foldOf(deps, row)).peek(spanId)) throw notFound(`response ${id}`)
      return stream(req, reply, row, spanId, after)
    }
    return json(reply, 200, await current(row, spanId))
  })

  app.post('/responses/:id/cancel', { config: { optionalBody: true }, schema: { operationId: 'cancelResponse', summary: 'OpenAI Responses: cancel the turn of an in-progress response', body: OpenBody } }, async (req, reply) => {
    const { id } = req.params as { id: string }
    const { row, spanId } = await findResponse(deps, req, id)
    const span = (await foldOf(deps, row)).peek(spanId)
    if (!span) throw notFound(`response ${id}`)
    if (span.ended) return json(reply, 200, toResponse(row.id, span))
    // a response still queued is its input alone: withdrawing it (a cancelling removal) cancels it and
    // leaves the turn that runs meanwhile alone; once claimed, its turn is cancelled
    let withdrawn = false
    if (span.status === 'queued' && span.opener.kind === 'input') {
      withdrawn = await deps.intake.removeFromInbox(row, span.opener.messageId).then(
        () => true,
        (e) => {
          if (e instanceof ApiError && e.code === 'queue-item-not-found') return false
          throw e
        },
      )
    }
    if (!withdrawn) await deps.intake.cancel(row, false)
    const fold = await until(row, spanId)
    return json(reply, 200, toResponse(row.id, fold.peek(spanId)!))
  })

  app.get('/responses/:id/input_items', { schema: { operationId: 'listResponseInputItems', summary: 'OpenAI Responses: the input a response admitted' } }, async (req, reply) => {
    const { id } = req.params as { id: string }
    const { row, spanId } = await findResponse(deps, req, id)
    const span = (await foldOf(deps, row)).peek(spanId)
    if (!span) throw notFound(`response ${id}`)
    const data = inputItems(row.id, span)
    return json(reply, 200, { object: 'list', data, first_id: (data[0]?.id as string) ?? null, last_id: (data.at(-1)?.id as string) ?? null, has_more: false })
  })

  // ---- conversations: sessions ----

  const conversation = (row: SessionRow) => ({ id: row.id, object: 'conversation', created_at: Math.floor(row.createdAt / 1000), metadata: row.metadata ?? {} })

  app.post('/conversations', { config: { optionalBody: true }, schema: { operationId: 'createConversation', summary: 'OpenAI Conversations: create a session', body: OpenBody } }, async (req, reply) => {
    const b = (req.body ?? {}) as { metadata?: Record<string, unknown>; items?: unknown }
    for (const k of Object.keys(b)) if (k !== 'metadata' && k !== 'items') throw bad(`unknown field ${k}`, k)
    if (b.items !== undefined && (!Array.isArray(b.items) || b.items.length)) throw bad('items are not accepted: agentd keeps the history itself', 'items')
    const metadata = (b.metadata ?? {}) as JsonObject
    if (typeof metadata !== 'object' || Array.isArray(metadata)) throw bad('metadata must be an object', 'metadata')
    const agent = typeof metadata.agent === 'string' ? (metadata.agent as string).replace(/^agent:/, '') : undefined
    mayCreate(req, agent)
    const { row } = await deps.sessions.create(req.principal!.tenantId, { ...(agent ? { agent } : {}), metadata } as never, req.principal!.grant?.subject ?? null)
    return json(reply, 200, conversation(row))
  })

  app.get('/conversations/:id', { config: { session: true }, schema: { operationId: 'getConversation', summary: 'OpenAI Conversations: a session' } }, async (req, reply) => json(reply, 200, conversation(req.session!)))

  app.delete('/conversations/:id', { config: { session: true }, schema: { operationId: 'deleteConversation', summary: 'OpenAI Conversations: delete a session' } }, async (req, reply) => {
    const row = req.session!
    await deleteSession(deps.db, row.key)
    await deps.driver.deleted(row)
    return json(reply, 200, { id: row.id, object: 'conversation.deleted', deleted: true })
  })

  app.get('/conversations/:id/items', { config: { session: true }, schema: { operationId: 'listConversationItems', summary: 'OpenAI Conversations: the history as items' } }, async (req, reply) => {
    const row = req.session!
    const q = req.query as { after?: string; limit?: string; order?: string }
    const fold = await foldOf(deps, row)
    const items: Array<Record<string, unknown>> = []
    for (const span of fold.spans as Span[]) {
      if (span.status === 'queued') continue
      items.push(...inputItems(row.id, span), ...toResponseOutput(row.id, span))
    }
    if (q.order !== undefined && q.order !== 'asc' && q.order !== 'desc') throw bad('order must be asc or desc', 'order')
    let list = q.order === 'asc' ? items : items.reverse()
    if (q.after !== undefined) {
      const at = list.findIndex((i) => i.id === q.after)
      list = at >= 0 ? list.slice(at + 1) : []
    }
    const limit = q.limit === undefined ? 20 : Number(q.limit)
    if (!Number.isInteger(limit) || limit < 1 || limit > 100) throw bad('limit must be 1..100', 'limit')
    const data = list.slice(0, limit)
    return json(reply, 200, { object: 'list', data, first_id: (data[0]?.id as string) ?? null, last_id: (data.at(-1)?.id as string) ?? null, has_more: list.length > limit })
  })
}

const toResponseOutput = (sessionId: string, span: Span) => toResponse(sessionId, span).output as Array<Record<string, unknown>>
