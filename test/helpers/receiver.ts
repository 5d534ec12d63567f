// A webhook receiver on 127.0.0.1 for tests: records every POST (headers, raw body, parsed body,
// arrival time) and answers through a replaceable responder — a status, or `hang` (no answer until
// the client goes away). It also counts requests in flight per webhook-id.

import http from 'node:http'
import type net from 'node:net'

export interface Received {
  headers: http.IncomingHttpHeaders
  raw: string
  body: any
  at: number
  path: string
}

export type Answer = number | 'hang'

export interface Receiver {
  readonly url: string
  readonly received: Received[]
  /** what the next requests get (default 200); called with the request and how many came before it for its webhook-id */
  respond: (r: Received, priorForId: number) => Answer
  /** the most requests with one webhook-id that were in flight at once */
  readonly maxConcurrentPerId: number
  waitFor(n: number, timeoutMs?: number, pred?: (r: Received) => boolean): Promise<Received[]>
  close(): Promise<void>
}

export async function startReceiver(): Promise<Receiver> {
  const sockets = new Set<net.Socket>()
  const inFlight = new Map<string, number>()
  let maxConcurrent = 0
  const r: Receiver = {
    url: '',
    received: [],
    respond: () => 200,
    get maxConcurrentPerId() {
      return maxConcurrent
    },
    async waitFor(n, timeoutMs = 10000, pred = () => true) {
      const deadline = Date.now() + timeoutMs
      for (;;) {
        const got = r.received.filter(pred)
        if (got.length >= n) return got
        if (Date.now() > deadline) throw new Error(`receiver: timed out waiting for ${n} requests (got ${got.length})`)
        await new Promise((x) => setTimeout(x, 10))
      }
    },
    async close() {
      for (const s of sockets) s.destroy()
      await new Promise<void>((x) => server.close(() => x()))
    },
  }
  const server = http.createServer(async (req, res) => {
    let raw = ''
    req.setEncoding('utf8')
    for await (const c of req) raw += c
    let body: unknown
    try {
      body = JSON.parse(raw)
    } catch {
      body = undefined
    }
    const id = String(req.headers['webhook-id'] ?? '')
    const prior = r.received.filter((x) => x.headers['webhook-id'] === id).length
    const rec: Received = { headers: req.headers, raw, body, at: Date.now(), path: req.url ?? '' }
    r.received.push(rec)
    inFlight.set(id, (inFlight.get(id) ?? 0) + 1)
    maxConcurrent = Math.max(maxConcurrent, inFlight.get(id)!)
    const done = () => inFlight.set(id, (inFlight.get(id) ?? 1) - 1)
    const answer = r.respond(rec, prior)
    if (answer === 'hang') {
      res.on('close', done)
      return
    }
    // the answer is counted out before it is sent, so a retry never overlaps it here
    done()
    res.writeHead(answer, { 'content-type': 'text/plain' }).end('ok')
  })
  server.on('connection', (s) => {
    sockets.add(s)
    s.on('close', () => sockets.delete(s))
  })
  await new Promise<void>((x) => server.listen(0, '127.0.0.1', () => x()))
  ;(r as { url: string }).url = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`
  return r
}
