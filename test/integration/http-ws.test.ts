// API.md §6 WebSocket on one database (docs/testing.md): the stream frames as JSON {event, id?, data}, input ops with
// their acks, cancel, bad messages, authentication before the upgrade, ?after= resume, and a client
// that stops reading: cut with a final stream/error slow-consumer message, its buffer bounded.

import WebSocket from 'ws'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { expectValidLog } from '../helpers/invariants.js'
import { gate } from '../helpers/scripted.js'
import { upgradeStatus } from '../helpers/ws.js'
import { until } from '../helpers/wait.js'
import { MAX_BUFFERED } from '../../src/http/feed.js'

interface WsFrame {
  event: string
  id?: number
  data: any
}

interface Client {
  ws: WebSocket
  frames: WsFrame[]
  raw: string[]
  send(o: unknown): void
  waitFor(pred: (f: WsFrame) => boolean, timeoutMs?: number): Promise<WsFrame>
  /** the next frame matching pred that arrives after the call */
  next(pred: (f: WsFrame) => boolean, timeoutMs?: number): Promise<WsFrame>
  close(): Promise<void>
}

function connect(url: string, headers: Record<string, string> = {}): Promise<Client> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers })
    const frames: WsFrame[] = []
    const raw: string[] = []
    const listeners = new Set<() => void>()
    ws.on('message', (data) => {
      const text = String(data)
      raw.push(text)
      frames.push(JSON.parse(text))
      for (const l of [...listeners]) l()
    })
    const waitFrom = (from: number, pred: (f: WsFrame) => boolean, timeoutMs = 10000) =>
      new Promise<WsFrame>((res, rej) => {
        const check = () => {
          const f = frames.slice(from).find(pred)
          if (f) {
            listeners.delete(check)
            clearTimeout(timer)
            res(f)
          }
        }
        const timer = setTimeout(() => {
          listeners.delete(check)
          rej(new Error(`ws: timed out; frames: ${frames.map((f) => f.event).join(' ')}`))
        }, timeoutMs)
        listeners.add(check)
        check()
      })
    ws.on('open', () =>
      resolve({
        ws,
        frames,
        raw,
        send: (o) => ws.send(typeof o === 'string' ? o : JSON.stringify(o)),
        waitFor: (pred, timeoutMs) => waitFrom(0, pred, timeoutMs),
        next: (pred, timeoutMs) => waitFrom(frames.length, pred, timeoutMs),
        close: () =>
          new Promise<void>((res) => {
            if (ws.readyState === WebSocket.CLOSED) return res()
            ws.once('close', () => res())
            ws.close()
          }),
      }),
    )
    ws.on('unexpected-response', (_req, res) => reject(Object.assign(new Error(`refused: ${res.statusCode}`), { status: res.statusCode })))
    ws.on('error', (e) => reject(e))
  })
}

describe.each(APP_DB_KINDS)('WebSocket on %s', (kind) => {
  let t: TestApp
  let auth: Record<string, string>
  const clients: Client[] = []
  const wsUrl = (id: string, query = '') => `${t.url.replace(/^http/, 'ws')}/v1/sessions/${id}/ws${query}`
  const open = async (id: string, query = '', headers: Record<string, string> = auth) => {
    const c = await connect(wsUrl(id, query), headers)
    clients.push(c)
    return c
  }
  beforeAll(async () => {
    t = await startTestApp({ kind })
    auth = { authorization: `Bearer ${t.key}` }
  })
  afterAll(async () => {
    for (const c of clients) await c.close()
    await t?.close()
  })

  it('frames are JSON {event, id?, data}: the backlog with numeric ids, stream/ready, agent/status', async () => {
    const s = await t.createSession()
    t.models.script(s.id, { text: ['ok'] })
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })
    await t.waitForTurnEnd(s.id, 1)
    const log = await t.waitIdle(s.id)
    const c = await open(s.id)
    await c.waitFor((f) => f.event === 'agent/status')
    const n = log.length
    for (const f of c.frames) {
      expect(Object.keys(f).every((k) => ['event', 'id', 'data'].includes(k))).toBe(true)
      if (f.event === 'session/event') expect(f.id).toBe(f.data.seq)
      else expect('id' in f).toBe(false)
    }
    expect(c.frames.slice(0, n).map((f) => f.data)).toEqual(log)
    expect(c.frames.slice(0, n).every((f) => f.event === 'session/event' && typeof f.id === 'number')).toBe(true)
    expect(c.frames[n]).toEqual({ event: 'stream/ready', data: { headSeq: n - 1 } })
    expect(c.frames[n + 1]).toEqual({ event: 'agent/status', data: { status: 'idle' } })
    await c.close()
  })

  it('followup over the socket: ack {op, messageId, seq}; the turn streams on the same socket', async () => {
    const s = await t.createSession()
    const c = await open(s.id)
    await c.waitFor((f) => f.event === 'stream/ready')
    t.models.script(s.id, { text: ['one', ' two'] })
    c.send({ op: 'followup', content: 'over ws', id: 'ws-f1' })
    const ack = await c.waitFor((f) => f.event === 'ack')
    expect(ack.data).toEqual({ op: 'followup', messageId: 'ws-f1', seq: 0 })
    await c.waitFor((f) => f.event === 'session/event' && f.data.type === 'turn/end')
    const log = await t.waitIdle(s.id)
    await c.waitFor((f) => f.event === 'session/event' && f.data.seq === log.at(-1)!.seq)
    expect(log[0].data).toEqual({ target: 'next-turn', start: 0, inserted: [{ id: 'ws-f1', role: 'user', content: [{ type: 'text', text: 'over ws' }], source: { kind: 'user' } }] })
    const durable = c.frames.filter((f) => f.event === 'session/event')
    expect(durable.map((f) => f.data)).toEqual(log)
    expect(durable.map((f) => f.id)).toEqual(log.map((e) => e.seq))
    // the live frames arrive too
    await c.waitFor((f) => f.event === 'agent/status' && f.data.status === 'idle' && c.frames.indexOf(f) > c.frames.findIndex((x) => x.event === 'ack'))
    const kinds = c.frames.filter((f) => f.event === 'agent/assistant-stream').map((f) => f.data.kind)
    expect(kinds[0]).toBe('start')
    expect(kinds.at(-1)).toBe('end')
    const end = c.frames.find((f) => f.event === 'agent/assistant-stream' && f.data.kind === 'end')!
    const msgAt = c.frames.findIndex((f) => f.event === 'session/event' && f.data.seq === end.data.outcome.seq)
    expect(msgAt).toBeGreaterThanOrEqual(0)
    expect(c.frames.indexOf(end)).toBeGreaterThan(msgAt)
    expect(c.frames.filter((f) => f.event === 'agent/status').map((f) => f.data.status)).toEqual(['idle', 'running', 'idle'])
    // the same op again: the original answer, nothing new
    c.send({ op: 'followup', content: 'over ws', id: 'ws-f1' })
    const ack2 = await c.next((f) => f.event === 'ack')
    expect(ack2.data).toEqual({ op: 'followup', messageId: 'ws-f1', seq: 0 })
    // another body with that id: an error frame, not a new message
    c.send({ op: 'inject', content: 'other', id: 'ws-f1' })
    const err = await c.next((f) => f.event === 'error')
    expect(err.data.code).toBe('idempotency-conflict')
    expect(await t.events(s.id)).toEqual(log)
    expectValidLog(log)
  })

  it('inject and steer ops: ack with the splice seq; inject parks, steer wakes', async () => {
    const s = await t.createSession()
    const c = await open(s.id)
    await c.waitFor((f) => f.event === 'stream/ready')
    c.send({ op: 'inject', content: [{ type: 'text', text: 'ctx' }] })
    const a1 = await c.next((f) => f.event === 'ack')
    expect(a1.data.op).toBe('inject')
    expect(typeof a1.data.messageId).toBe('string')
    expect(a1.data.seq).toBe(0)
    const inbox = (await t.api('GET', `/v1/sessions/${s.id}/inbox`)).body
    expect(inbox.nextStep.map((m: any) => m.id)).toEqual([a1.data.messageId])
    expect((await t.api('GET', `/v1/sessions/${s.id}`)).body.status).toBe('idle')
    t.models.script(s.id, { text: ['steered'] })
    c.send({ op: 'steer', content: 'steer now', id: 'ws-s1' })
    const a2 = await c.next((f) => f.event === 'ack')
    expect(a2.data).toEqual({ op: 'steer', messageId: 'ws-s1', seq: 1 })
    await c.waitFor((f) => f.event === 'session/event' && f.data.type === 'turn/end')
    const log = await t.waitIdle(s.id)
    expect(log[1].data).toMatchObject({ target: 'next-step', inserted: [{ id: 'ws-s1' }] })
    expect(log.filter((e) => e.type === 'user/message').map((e) => (e.data as any).id)).toEqual([a1.data.messageId, 'ws-s1'])
    expectValidLog(log)
  })

  it('cancel op: acked; on a running turn it cancels and clears the inbox; keepInbox is honoured', async () => {
    const s = await t.createSession()
    const c = await open(s.id)
    await c.waitFor((f) => f.event === 'stream/ready')
    // idle: nothing runs; keepInbox keeps the parked context
    c.send({ op: 'inject', content: 'parked', id: 'p1' })
    await c.next((f) => f.event === 'ack')
    c.send({ op: 'cancel', keepInbox: true })
    const k = await c.next((f) => f.event === 'ack')
    // API.md §6: an ack is {op, messageId?, seq?}; a cancel has neither
    expect(k).toEqual({ event: 'ack', data: { op: 'cancel' } })
    expect((await t.api('GET', `/v1/sessions/${s.id}/inbox`)).body.nextStep.map((m: any) => m.id)).toEqual(['p1'])
    // a running turn: cancel ends it aborted and clears the inbox
    const g = gate()
    t.models.script(s.id, { text: ['held'], gate: g.promise })
    c.send({ op: 'followup', content: 'run' })
    await c.next((f) => f.event === 'ack')
    await t.models.waitForRequest(s.id, 1)
    c.send({ op: 'followup', content: 'queued', id: 'q1' })
    await c.next((f) => f.event === 'ack')
    c.send({ op: 'cancel' })
    const a = await c.next((f) => f.event === 'ack')
    expect(a).toEqual({ event: 'ack', data: { op: 'cancel' } })
    const end = await c.waitFor((f) => f.event === 'session/event' && f.data.type === 'turn/end')
    g.open()
    expect(end.data.data).toEqual({ turn: 1, reason: { kind: 'aborted', reason: { kind: 'user' } } })
    await t.waitIdle(s.id)
    expect((await t.api('GET', `/v1/sessions/${s.id}/inbox`)).body).toEqual({ nextTurn: [], nextStep: [] })
    const log = await t.events(s.id)
    expect(log.filter((e) => e.type === 'agent/inbox/spliced' && (e.data as any).outcome === 'canceled').map((e) => (e.data as any).target)).toEqual(['next-turn'])
    expectValidLog(log)
  })

  it('a message that is not JSON, not an object, or not a known op gets an error frame bad-request; the socket stays usable', async () => {
    const s = await t.createSession()
    const c = await open(s.id)
    await c.waitFor((f) => f.event === 'stream/ready')
    const bad: unknown[] = ['not json', '{"op":', '[1,2]', '"followup"', 'null', { op: 'dance' }, { content: 'no op' }, { op: 'followup' }, { op: 'followup', content: '' }, { op: 'inject', content: 5 }, { op: 'steer', content: 'x', bogus: 1 }, { op: 'cancel', keepInbox: 'yes' }, { op: 'inject', content: 'x', id: 7 }]
    for (const m of bad) {
      c.send(m)
      const e = await c.next((f) => f.event === 'error' || f.event === 'ack')
      expect(e.event, JSON.stringify(m)).toBe('error')
      expect(e.data.code, JSON.stringify(m)).toBe('bad-request')
      expect(typeof e.data.message).toBe('string')
    }
    expect(await t.events(s.id)).toEqual([])
    expect(c.ws.readyState).toBe(WebSocket.OPEN)
    c.send({ op: 'inject', content: 'fine' })
    const ok = await c.next((f) => f.event === 'ack')
    expect(ok.data.seq).toBe(0)
  })

  it('a bad key, no key, or another tenant is an HTTP error before the upgrade; access_token works', async () => {
    const s = await t.createSession()
    for (const [headers, q] of [
      [{}, ''],
      [{ authorization: 'Bearer agd_nope' }, ''],
      [{ authorization: `Basic ${t.key}` }, ''],
      [{}, '?access_token=agd_nope'],
    ] as Array<[Record<string, string>, string]>) {
      const r = await upgradeStatus(wsUrl(s.id, q), headers)
      expect(r.status, JSON.stringify(headers) + q).toBe(401)
      expect(r.body?.error?.code).toBe('unauthorized')
    }
    const missing = await upgradeStatus(wsUrl('no-such-session'), auth)
    expect(missing.status).toBe(404)
    expect(missing.body?.error?.code).toBe('session-not-found')
    const other = await t.api('POST', '/v1/admin/tenants', { name: 'other' }, { key: t.adminToken })
    const foreign = await upgradeStatus(wsUrl(s.id), { authorization: `Bearer ${other.body.apiKey}` })
    expect(foreign.status).toBe(404)
    // the query token opens it
    const c = await open(s.id, `?access_token=${encodeURIComponent(t.key)}`, {})
    const ready = await c.waitFor((f) => f.event === 'stream/ready')
    expect(ready.data).toEqual({ headSeq: -1 })
  })

  it('a client that stops reading is cut with a final stream/error slow-consumer message; the buffer it left stays bounded; it resumes from its last id', async () => {
    const slow = await startTestApp({ kind, env: { AGENTD_SLOW_CONSUMER_MS: '2000' } })
    try {
      const headers = { authorization: `Bearer ${slow.key}` }
      const s = await slow.createSession()
      const url = `${slow.url.replace(/^http/, 'ws')}/v1/sessions/${s.id}/ws`
      const stalled = await connect(url, headers)
      const reader = await connect(url, headers)
      await stalled.waitFor((f) => f.event === 'stream/ready')
      await reader.waitFor((f) => f.event === 'stream/ready')
      stalled.ws.pause()
      // the server's side of each socket: what ws holds for it that the client has not read
      const wss = (slow.app.http as unknown as { websocketServer: { clients: Set<WebSocket> } }).websocketServer
      const open = () => [...wss.clients].filter((c) => c.readyState === WebSocket.OPEN).length
      let peak = 0
      const sample = setInterval(() => {
        for (const c of wss.clients) peak = Math.max(peak, c.bufferedAmount)
      }, 2)
      // 400 KB injects: each a durable event and a live agent/inbox/inserted frame of that size
      const big = 'x'.repeat(400_000)
      let injected = 0
      try {
        while (open() === 2) {
          expect(injected, 'the stalled client was never cut').toBeLessThan(100)
          const r = await slow.api('POST', `/v1/sessions/${s.id}/inject`, { content: `${injected} ${big}` })
          expect(r.status).toBe(202)
          injected++
        }
      } finally {
        clearInterval(sample)
      }
      // the reader is the one left; the stalled one was cut though it never closed its side
      expect(stalled.ws.readyState).toBe(WebSocket.OPEN)
      expect(peak, `peak buffered ${peak}`).toBeLessThanOrEqual(MAX_BUFFERED + 1024)
      expect(peak, 'the client did stall the server side').toBeGreaterThan(MAX_BUFFERED / 4)
      // read what was left for it: the last message is the slow-consumer frame, then the close
      const closed = new Promise<number>((r) => stalled.ws.once('close', (code) => r(code)))
      stalled.ws.resume()
      expect(await closed).toBe(1001)
      expect(stalled.frames.at(-1)).toEqual({ event: 'stream/error', data: { code: 'slow-consumer' } })
      const seen = stalled.frames.filter((f) => f.event === 'session/event').map((f) => f.id!)
      expect(seen).toEqual(seen.map((_, i) => i))
      // the honest reader has every event; the stalled one resumes from its last id and gets the rest
      const log = await slow.events(s.id)
      expect(log).toHaveLength(injected)
      await reader.waitFor((f) => f.event === 'session/event' && f.id === log.length - 1, 30000)
      expect(reader.frames.filter((f) => f.event === 'session/event').map((f) => f.id)).toEqual(log.map((e) => e.seq))
      const again = await connect(`${url}?after=${seen.at(-1) ?? -1}`, headers)
      await again.waitFor((f) => f.event === 'stream/ready', 30000)
      expect([...seen, ...again.frames.filter((f) => f.event === 'session/event').map((f) => f.id!)]).toEqual(log.map((e) => e.seq))
      await until('the slow socket is let go', () => open() === 2)
      await again.close()
      await reader.close()
    } finally {
      await slow.close()
    }
  }, 120000)

  it('?after= resumes after a seq', async () => {
    const s = await t.createSession()
    t.models.script(s.id, { text: ['ok'] })
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })
    await t.waitForTurnEnd(s.id, 1)
    const log = await t.waitIdle(s.id)
    const c = await open(s.id, '?after=4')
    const ready = await c.waitFor((f) => f.event === 'stream/ready')
    const durable = c.frames.filter((f) => f.event === 'session/event')
    expect(durable.map((f) => f.data)).toEqual(log.filter((e) => e.seq > 4))
    expect(durable.map((f) => f.id)).toEqual(log.filter((e) => e.seq > 4).map((e) => e.seq))
    expect(ready.data).toEqual({ headSeq: log.length - 1 })
    // resuming from the last id: nothing old, then live events as they come
    const d = await open(s.id, `?after=${log.at(-1)!.seq}`)
    await d.waitFor((f) => f.event === 'agent/status')
    expect(d.frames.filter((f) => f.event === 'session/event')).toEqual([])
    d.send({ op: 'inject', content: 'new' })
    const ev = await d.waitFor((f) => f.event === 'session/event')
    expect(ev.id).toBe(log.length)
    expect(ev.data.type).toBe('agent/inbox/spliced')
  })
})
