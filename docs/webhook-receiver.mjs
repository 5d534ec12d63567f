// A webhook receiver (API.md §14) with nothing but Node.js: checks each delivery's Standard Webhooks
// signature against the raw body, refuses stale timestamps, drops repeats by webhook-id (delivery is at
// least once) and answers 204 at once; the work happens after the answer.
//
//   WEBHOOK_SECRET=whsec_… WEBHOOK_PORT=9090 node docs/webhook-receiver.mjs
//
// It listens on 127.0.0.1 at WEBHOOK_PORT (default 9090; 0 picks a free port) and prints the address.

import crypto from 'node:crypto'
import http from 'node:http'

/** The parsed body when the signature matches and the timestamp is within 5 minutes; else null. */
export function verify(secret, headers, raw, now = Date.now()) {
  const id = headers['webhook-id']
  const ts = headers['webhook-timestamp']
  const signatures = String(headers['webhook-signature'] ?? '').split(' ')
  if (!id || !/^\d+$/.test(ts ?? '') || Math.abs(now / 1000 - Number(ts)) > 300) return null
  const key = Buffer.from(secret.replace(/^whsec_/, ''), 'base64')
  const want = Buffer.from('v1,' + crypto.createHmac('sha256', key).update(`${id}.${ts}.${raw}`).digest('base64'))
  const ok = signatures.some((s) => s.length === want.length && crypto.timingSafeEqual(Buffer.from(s), want))
  return ok ? JSON.parse(raw) : null
}

/** A server that calls onEvent(payload, id) once per delivery id for every verified delivery. */
export function createReceiver(secret, onEvent) {
  const seen = new Set() // use a table with a unique key in production
  return http.createServer(async (req, res) => {
    let raw = ''
    for await (const chunk of req) raw += chunk
    const payload = verify(secret, req.headers, raw)
    if (!payload) return res.writeHead(401).end()
    res.writeHead(204).end()
    const id = req.headers['webhook-id']
    if (seen.has(id)) return
    seen.add(id)
    onEvent(payload, id)
  })
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const secret = process.env.WEBHOOK_SECRET
  const port = Number(process.env.WEBHOOK_PORT ?? 9090)
  if (!secret) {
    console.error('webhook-receiver: set WEBHOOK_SECRET to the secret that POST /v1/webhooks answered')
    process.exit(2)
  }
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    console.error(`webhook-receiver: WEBHOOK_PORT must be a port number, got ${JSON.stringify(process.env.WEBHOOK_PORT)}`)
    process.exit(2)
  }
  const server = createReceiver(secret, (p) => console.log(p.type, JSON.stringify(p.data)))
  server.listen(port, '127.0.0.1', () => console.log(`webhook-receiver: listening on http://127.0.0.1:${server.address().port}`))
}
