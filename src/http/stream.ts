// Reading a session (API.md §6): event pages, derived messages, the SSE stream and the WebSocket.

import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { WebSocket } from 'ws'
import { ApiError, badRequest } from '../errors.js'
import { deriveFromSurfaceEvents } from '../session/index.js'
import { getSessionByKey, readEventTexts, readSurfaceEvents, type SessionRow } from '../store/index.js'
import type { FeedEvent, FeedSink, LiveFrame, Subscriber } from '../bus/index.js'
import { bodyHash, InputError, toUserMessage, type DeliveryRoute } from '../agent/index.js'
import type { HttpDeps } from './app.js'
import { toApiError } from './app.js'
import * as S from './schemas.js'

type Load = (req: FastifyRequest) => Promise<void>

const PING_MS = 15000
/** a subscriber whose socket buffers this much is paused; past SLOW_MS paused, it is dropped */
const HIGH_WATER = 1 << 20
const SLOW_MS = 30000

function parseAfter(raw: string | undefined, what: string): number | undefined {
  if (raw === undefined) return undefined
  if (!/^-?\d{1,10}$/.test(raw)) throw badRequest(`${what} must be an integer seq`, [{ path: what, message: 'must be an integer seq' }])
  return Math.max(-1, Number(raw))
}

export const statusOf = (row: SessionRow) => (row.runState === 'wanted' || row.runState === 'running' ? 'running' : 'idle')

export function registerStreamRoutes(app: FastifyInstance, deps: HttpDeps, loadSession: Load): void {
  const withSession = { preValidation: loadSession }
  const streams = new Set<{ end(reason?: string): void }>()
  app.addHook('preClose', async () => {
    for (const s of [...streams]) s.end()
  })
  deps.metrics.gauge('agentd_stream_subscribers', 'Open SSE and WebSocket subscriptions in this process', () => streams.size)

  app.get('/v1/sessions/:id/events', { ...withSession, schema: { summary: 'Durable events after a seq', params: S.SessionParams, querystring: S.EventsQuery, response: { 200: S.EventsPage, 400: S.ErrorBody, 404: S.ErrorBody } } }, async (req, reply) => {
    const q = req.query as { after?: string; limit?: string }
    const after = parseAfter(q.after, 'querystring.after') ?? -1
    const limit = q.limit === undefined ? 500 : Number(q.limit)
    if (limit < 1 || limit > 5000) throw badRequest('limit must be between 1 and 5000', [{ path: 'querystring.limit', message: 'must be between 1 and 5000' }])
    const row = req.session!
    const rows = await readEventTexts(deps.db, row.key, after, limit)
    // the head after reading, so that a page is never newer than the head it reports
    const head = (await getSessionByKey(deps.db, row.key))?.nextSeq ?? row.nextSeq
    return reply.type('application/json').send(`{"events":[${rows.map((r) => r.body).join(',')}],"headSeq":${Math.max(head - 1, rows.at(-1)?.seq ?? -1)}}`)
  })

  app.get('/v1/sessions/:id/messages', { ...withSession, schema: { summary: 'The derived model history (SPEC §14)', params: S.SessionParams, response: { 200: S.MessagesAnswer, 404: S.ErrorBody } } }, async (req, reply) => {
    const events = await readSurfaceEvents(deps.db, req.session!.key)
    return reply.type('application/json').send(JSON.stringify({ messages: deriveFromSurfaceEvents(events) }))
  })

  /** Sends frames in the order of API.md §6 through a transport; shared by SSE and WebSocket. */
  const subscribe = (req: FastifyRequest, after: number, t: Transport): Subscriber => {
    const row = req.session!
    let status = statusOf(row)
    const sink: FeedSink = {
      durable: (e: FeedEvent) => t.durable(e),
      live: (f: LiveFrame) => t.live(f),
      ready: async (headSeq: number) => {
        // the status as of now, then the in-flight snapshot (everything streamed so far)
        const fresh = await getSessionByKey(deps.db, row.key)
        if (fresh) status = statusOf(fresh)
      },
      writable: () => t.writable(),
      fail: (e: Error) => {
        req.log.warn({ err: e.message, sessionId: row.id }, 'stream subscriber failed')
        t.end('error')
      },
    }
    const sub = deps.feeds.open(row.key, after, sink)
    // ready() is split: the async part (status) above; the frames below go out synchronously with
    // the switch to live, so no live frame can slip between the snapshot and the live stream
    sub.onReady = (headSeq: number) => {
      t.live({ event: 'stream/ready', data: { headSeq } })
      t.live({ event: 'agent/status', data: { status } })
      const snap = deps.snapshot(row.key)
      if (snap) t.live(snap)
    }
    return sub
  }

  app.get('/v1/sessions/:id/stream', { ...withSession, schema: { summary: 'Server-Sent Events: durable events from a seq, then live frames', params: S.SessionParams, querystring: S.StreamQuery } }, async (req, reply) => {
    const lastEventId = req.headers['last-event-id']
    const after = parseAfter(typeof lastEventId === 'string' ? lastEventId.trim() : undefined, 'Last-Event-ID') ?? parseAfter((req.query as { after?: string }).after, 'querystring.after') ?? -1
    reply.hijack()
    const res = reply.raw
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    })
    res.flushHeaders()
    let closed = false
    let pausedSince = 0
    // frames of one event-loop turn leave together: one syscall per connection, however many frames
    let pending: string[] = []
    const flush = () => {
      if (closed || !pending.length) return
      const text = pending.length === 1 ? pending[0] : pending.join('')
      pending = []
      if (!res.write(text) && !pausedSince) pausedSince = Date.now()
    }
    const write = (s: string) => {
      if (closed) return
      if (!pending.length) batch.add(flush)
      pending.push(s)
    }
    const handle = {
      end(reason?: string) {
        if (closed) return
        flush()
        if (reason === 'slow-consumer') res.write(`event: stream/error\ndata: {"code":"slow-consumer"}\n\n`)
        closed = true
        clearInterval(ping)
        streams.delete(handle)
        sub.close()
        res.end()
      },
    }
    const t: Transport = {
      durable: (e) => write(sseDurable(e)),
      live: (f) => write(sseLive(f)),
      writable: () => {
        if (closed) return false
        if (res.writableLength + pending.length * 1024 < HIGH_WATER) return true
        if (pausedSince && Date.now() - pausedSince > SLOW_MS) handle.end('slow-consumer')
        return false
      },
      end: (reason) => handle.end(reason),
    }
    const sub = subscribe(req, after, t)
    streams.add(handle)
    res.on('drain', () => {
      pausedSince = 0
      sub.drained()
    })
    res.on('close', () => handle.end())
    const ping = setInterval(() => {
      write(': ping\n\n')
      t.writable()
    }, PING_MS)
    await sub.start()
  })

  app.get('/v1/sessions/:id/ws', { ...withSession, websocket: true, schema: { summary: 'WebSocket: the stream frames as JSON, plus input ops', params: S.SessionParams } }, (socket: WebSocket, req: FastifyRequest) => {
    const q = req.query as { after?: string }
    let after = -1
    try {
      after = parseAfter(q.after, 'querystring.after') ?? -1
    } catch {
      socket.close(1008, 'after must be an integer seq')
      return
    }
    let closed = false
    const send = (o: unknown) => {
      if (!closed && socket.readyState === socket.OPEN) socket.send(typeof o === 'string' ? o : JSON.stringify(o))
    }
    const handle = {
      end(reason?: string) {
        if (closed) return
        if (reason === 'slow-consumer') send({ event: 'stream/error', data: { code: 'slow-consumer' } })
        closed = true
        streams.delete(handle)
        sub.close()
        socket.close(1001)
      },
    }
    const t: Transport = {
      durable: (e) => send(wsDurable(e)),
      live: (f) => send(wsLive(f)),
      writable: () => !closed && socket.bufferedAmount < HIGH_WATER,
      end: (reason) => handle.end(reason),
    }
    const sub = subscribe(req, after, t)
    streams.add(handle)
    const ping = setInterval(() => socket.ping(), PING_MS)
    socket.on('close', () => {
      clearInterval(ping)
      handle.end()
    })
    socket.on('message', (raw) => {
      void handleOp(String(raw)).catch((e) => {
        const ae = toApiError(e)
        send({ event: 'error', data: { code: ae.code, message: ae.message } })
      })
    })
    const handleOp = async (text: string) => {
      let msg: { op?: unknown; content?: unknown; id?: unknown; keepInbox?: unknown }
      try {
        msg = JSON.parse(text)
      } catch {
        throw badRequest('a message must be JSON')
      }
      if (!msg || typeof msg !== 'object' || Array.isArray(msg)) throw badRequest('a message must be a JSON object')
      const row = await getSessionByKey(deps.db, req.session!.key)
      if (!row) throw new ApiError('session-not-found', `session ${req.session!.id} not found`)
      if (msg.op === 'cancel') {
        for (const k of Object.keys(msg)) if (k !== 'op' && k !== 'keepInbox') throw badRequest(`unknown field ${k}`)
        if (msg.keepInbox !== undefined && typeof msg.keepInbox !== 'boolean') throw badRequest('keepInbox must be a boolean')
        const r = await deps.intake.cancel(row, msg.keepInbox === true)
        send({ event: 'ack', data: { op: 'cancel', cancelled: r.cancelled } })
        return
      }
      if (msg.op !== 'followup' && msg.op !== 'steer' && msg.op !== 'inject') throw badRequest('op must be followup, steer, inject or cancel')
      for (const k of Object.keys(msg)) if (!['op', 'content', 'id'].includes(k)) throw badRequest(`unknown field ${k}`)
      if (msg.id !== undefined && (typeof msg.id !== 'string' || !msg.id)) throw badRequest('id must be a non-empty string')
      let message
      try {
        message = toUserMessage({ content: msg.content }, { kind: 'user' }, msg.id as string | undefined)
      } catch (e) {
        if (e instanceof InputError) throw badRequest(e.message, [{ path: e.path, message: e.message }])
        throw e
      }
      const route = msg.op as DeliveryRoute
      const r = await deps.intake.deliver(row, route, message, msg.id !== undefined ? { bodyHash: bodyHash(route, { content: msg.content }) } : undefined)
      send({ event: 'ack', data: { op: route, messageId: r.messageId, seq: r.seq } })
    }
    void sub.start()
  })
}

interface Transport {
  durable(e: FeedEvent): void
  live(frame: LiveFrame): void
  writable(): boolean
  end(reason?: string): void
}

/**
 * Wire text of a frame, made once per event or frame object and shared by every subscriber of the
 * process (a thousand subscribers must not serialize the same chunk a thousand times).
 */
function memo<K extends object>(fn: (k: K) => string): (k: K) => string {
  const cache = new WeakMap<K, string>()
  return (k) => {
    let v = cache.get(k)
    if (v === undefined) cache.set(k, (v = fn(k)))
    return v
  }
}
const sseDurable = memo((e: FeedEvent) => `event: session/event\nid: ${e.seq}\ndata: ${e.json}\n\n`)
const sseLive = memo((f: LiveFrame) => `event: ${f.event}\ndata: ${JSON.stringify(f.data)}\n\n`)
const wsDurable = memo((e: FeedEvent) => `{"event":"session/event","id":${e.seq},"data":${e.json}}`)
const wsLive = memo((f: LiveFrame) => JSON.stringify({ event: f.event, data: f.data }))

/** Flushes of every connection that was written to in this event-loop turn, run once at its end. */
const batch = (() => {
  let queue: Array<() => void> = []
  const run = () => {
    const q = queue
    queue = []
    for (const f of q) f()
  }
  return {
    add(f: () => void) {
      if (!queue.length) setImmediate(run)
      queue.push(f)
    },
  }
})()
