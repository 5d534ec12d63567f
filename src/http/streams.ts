// Following a session live (API.md §6): the Server-Sent Events stream and the WebSocket, which also
// takes input ops. Both accept `?access_token=` and are exempt from the rate limit.

import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { WebSocket } from 'ws'
import { badRequest, sessionNotFound } from '../errors.js'
import { getSessionByKey } from '../store/index.js'
import { bodyHash, toUserMessage, type DeliveryRoute } from '../agent/index.js'
import type { HttpDeps } from './deps.js'
import { requireAccess } from './auth.js'
import { toApiError } from './errors.js'
import { batch, parseAfter, SLOW_CONSUMER, sseDurable, sseLive, subscribe, wsDurable, wsLive, type Subscription, type Transport } from './feed.js'
import { sessionOf } from './session.js'
import { deliverInput } from './deliver.js'
import * as S from './schemas.js'

const facts = { session: true, queryToken: true, unlimited: true } as const
/** WebSocket ops waiting on one socket before it is no longer read, and the count it is read again at */
const OPS_QUEUED = 64
const OPS_RESUME = 16

export async function streamRoutes(app: FastifyInstance, deps: HttpDeps): Promise<void> {
  const streams = new Set<Subscription>()
  app.addHook('preClose', async () => {
    for (const s of [...streams]) s.close()
  })
  deps.metrics.gauge('agentd_stream_subscribers', 'Open SSE and WebSocket subscriptions in this process', () => streams.size)

  app.get('/sessions/:id/stream', { config: { ...facts, eventStream: true }, schema: { operationId: 'streamSession', summary: 'Server-Sent Events: durable events from a seq, then live frames', params: S.SessionParams, querystring: S.StreamQuery } }, async (req, reply) => {
    const lastEventId = req.headers['last-event-id']
    const after = parseAfter(typeof lastEventId === 'string' ? lastEventId.trim() : undefined, 'headers.last-event-id') ?? parseAfter((req.query as { after?: string }).after, 'querystring.after') ?? -1
    // the headers hooks set (CORS, API.md §18) go out with the raw answer the stream writes itself
    const hooked = reply.getHeaders() as Record<string, string | number | string[]>
    reply.hijack()
    const res = reply.raw
    res.writeHead(200, {
      ...hooked,
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    })
    res.flushHeaders()
    // frames of one event-loop turn leave together: one syscall per connection, however many frames
    let pending: string[] = []
    let pendingChars = 0
    const flush = () => {
      if (res.writableEnded || !pending.length) return
      const text = pending.length === 1 ? pending[0] : pending.join('')
      pending = []
      pendingChars = 0
      res.write(text)
    }
    const t: Transport = {
      durable: sseDurable,
      live: sseLive,
      write: (text) => {
        if (!pending.length) batch.add(flush)
        pending.push(text)
        pendingChars += text.length
      },
      buffered: () => res.writableLength + pendingChars,
      ping: () => t.write(': ping\n\n'),
      end: (reason) => {
        flush()
        if (reason === 'slow-consumer') res.write(sseLive(SLOW_CONSUMER))
        res.end()
      },
    }
    const stream = subscribe(deps, req, after, t, streams)
    res.on('drain', () => stream.drained())
    res.on('close', () => stream.close())
    // a client gone while auth and the session load ran closed the socket before the listener above
    if (res.destroyed || req.raw.socket?.destroyed) return stream.close()
    await stream.start()
  })

  app.route({
    method: 'GET',
    url: '/sessions/:id/ws',
    config: facts,
    schema: { operationId: 'connectWebSocket', summary: 'WebSocket: the stream frames as JSON, plus input ops', params: S.SessionParams, querystring: S.StreamQuery },
    // a plain GET (no upgrade) is answered like any other bad request
    handler: async () => {
      throw badRequest('this route takes a WebSocket upgrade (Connection: Upgrade, Upgrade: websocket)', [{ path: 'headers.upgrade', message: 'must be websocket' }])
    },
    wsHandler: (socket: WebSocket, req: FastifyRequest) => {
      const q = req.query as { after?: string }
      let after = -1
      try {
        after = parseAfter(q.after, 'querystring.after') ?? -1
      } catch {
        socket.close(1008, 'after must be an integer seq')
        return
      }
      let closed = false
      // each message's callback runs once ws handed it to the socket: the moment to see a buffer drained
      const sent = () => stream.drained()
      const send = (text: string) => {
        if (!closed && socket.readyState === socket.OPEN) socket.send(text, sent)
      }
      const t: Transport = {
        durable: wsDurable,
        live: wsLive,
        write: send,
        buffered: () => socket.bufferedAmount,
        ping: () => {
          if (socket.readyState === socket.OPEN) socket.ping()
        },
        end: (reason) => {
          if (reason === 'slow-consumer') send(wsLive(SLOW_CONSUMER))
          closed = true
          socket.close(1001)
        },
      }
      const stream = subscribe(deps, req, after, t, streams)
      socket.on('close', () => stream.close())
      // an op's answer (API.md §6: ack or error) is a frame like the others, under the same limit
      const answer = (o: unknown) => stream.answer(JSON.stringify(o))
      // ops run one at a time, in the order sent (acks come back in that order); a client flooding ops
      // stops being read while OPS_QUEUED wait, and each op yields to the event loop, so a flood costs
      // bounded memory and does not starve other clients (an in-process database answers without I/O)
      const ops: string[] = []
      let running = false
      const runOps = async () => {
        running = true
        while (ops.length && !closed) {
          const text = ops.shift()!
          if (ops.length < OPS_RESUME && socket.isPaused) socket.resume()
          await handleOp(text).catch((e) => {
            const ae = toApiError(e)
            answer({ event: 'error', data: { code: ae.code, message: ae.message } })
          })
          await new Promise((r) => setImmediate(r))
        }
        running = false
      }
      socket.on('message', (raw) => {
        ops.push(String(raw))
        if (ops.length >= OPS_QUEUED && !socket.isPaused) socket.pause()
        if (!running) void runOps()
      })
      const handleOp = async (text: string) => {
        let msg: { op?: unknown; content?: unknown; id?: unknown; keepInbox?: unknown }
        try {
          msg = JSON.parse(text)
        } catch {
          throw badRequest('a message must be JSON')
        }
        if (!msg || typeof msg !== 'object' || Array.isArray(msg)) throw badRequest('a message must be a JSON object')
        // every op is input or a cancel: a read-only token watches but may not send (API.md §18)
        requireAccess(req, 'write')
        const key = sessionOf(req).key
        const row = await getSessionByKey(deps.db, key)
        if (!row) throw sessionNotFound(sessionOf(req).id)
        if (msg.op === 'cancel') {
          for (const k of Object.keys(msg)) if (k !== 'op' && k !== 'keepInbox') throw badRequest(`unknown field ${k}`)
          if (msg.keepInbox !== undefined && typeof msg.keepInbox !== 'boolean') throw badRequest('keepInbox must be a boolean')
          await deps.intake.cancel(row, msg.keepInbox === true)
          answer({ event: 'ack', data: { op: 'cancel' } })
          return
        }
        if (msg.op !== 'followup' && msg.op !== 'steer' && msg.op !== 'inject') throw badRequest('op must be followup, steer, inject or cancel')
        for (const k of Object.keys(msg)) if (!['op', 'content', 'id'].includes(k)) throw badRequest(`unknown field ${k}`)
        if (msg.id !== undefined && (typeof msg.id !== 'string' || !msg.id)) throw badRequest('id must be a non-empty string')
        // toUserMessage refuses bad content and text PostgreSQL cannot store, as the HTTP routes do
        const message = toUserMessage({ content: msg.content }, { kind: 'user' }, msg.id as string | undefined)
        const route = msg.op as DeliveryRoute
        const r = await deliverInput(deps, req, { row, route, message, ...(msg.id !== undefined ? { idempotency: { bodyHash: bodyHash(route, { content: msg.content }) } } : {}) })
        answer({ event: 'ack', data: { op: route, messageId: r.messageId, seq: r.seq } })
      }
      void stream.start()
    },
  })
}
