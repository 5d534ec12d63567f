// The hostile-clients part: clients that try to tie the server up rather than break its parsing.
// - oversized headers and bodies, and a header line that never ends: §10 answers, nothing written;
// - slow-loris: request headers, and a request body, dribbled a byte at a time: cut by
//   AGENTD_REQUEST_TIMEOUT_MS with a §10 answer, nothing written;
// - connections opened and dropped by the thousand, in every state a request can be in: the server
//   forgets them all (its open connection count falls back) and stays up;
// - an SSE subscriber that stops reading while events pour in: cut with `stream/error slow-consumer`
//   after AGENTD_SLOW_CONSUMER_MS, server memory bounded, an honest reader of the same session gets
//   every seq once, and the slow one resumes from its last id with nothing lost;
// - a WebSocket flooding ops without waiting for acks: every op answered (ack or error), every acked
//   input in the log once, /healthz answering meanwhile.
// The short size uses short timeouts (the variables are set for the target); the long one uses the
// defaults and more of everything.

import net from 'node:net'
import WebSocket from 'ws'
import type { FaultPart, PartContext, PartResult } from './lib/part.js'
import { heapAfterGc } from '../helpers/heap.js'
import { Outcomes } from './lib/outcomes.js'
import { putSecret, startTarget, type Target } from './lib/target.js'
import { parseAnswers, rawExchange, readSseIds, wireRequest } from './lib/wire.js'

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
// What the heap holds after a full collection: garbage not yet collected (400 KB bodies parsed and
// dropped) must not count as growth, only what the server keeps.
const heapMb = () => Math.round(heapAfterGc() / 1024 / 1024)

interface Sizes {
  requestTimeoutMs: number
  slowConsumerMs: number
  /** between two bytes of a slow-loris client */
  dribbleMs: number
  slowClients: number
  connections: number
  wsOps: number
}

const SIZES: Record<'short' | 'long', Sizes> = {
  short: { requestTimeoutMs: 1500, slowConsumerMs: 1500, dribbleMs: 250, slowClients: 4, connections: 2000, wsOps: 200 },
  long: { requestTimeoutMs: 30000, slowConsumerMs: 30000, dribbleMs: 1000, slowClients: 40, connections: 20000, wsOps: 5000 },
}

/** Writes `head` then `tail` a byte every `everyMs`; resolves with what came back and how long it took. */
function dribble(url: string, head: string, tail: string, everyMs: number, giveUpMs: number): Promise<{ data: string; closedAfterMs: number; closed: boolean; sentBytes: number }> {
  const u = new URL(url)
  return new Promise((resolve) => {
    const started = Date.now()
    let data = ''
    let sent = 0
    let done = false
    const s = net.connect(Number(u.port), u.hostname, () => {
      s.write(head)
      const tick = () => {
        if (done || s.destroyed) return
        if (sent < tail.length) {
          s.write(tail[sent++])
          setTimeout(tick, everyMs)
        }
      }
      setTimeout(tick, everyMs)
    })
    s.setEncoding('utf8')
    s.on('data', (c: string) => (data += c))
    s.on('error', () => {})
    const finish = (closed: boolean) => {
      if (done) return
      done = true
      clearTimeout(timer)
      s.destroy()
      resolve({ data, closedAfterMs: Date.now() - started, closed, sentBytes: sent })
    }
    s.on('close', () => finish(true))
    const timer = setTimeout(() => finish(false), giveUpMs)
  })
}

export async function runHostile(ctx: PartContext): Promise<PartResult> {
  const started = Date.now()
  const z = SIZES[ctx.size]
  const env: Record<string, string> = ctx.size === 'short' ? { AGENTD_REQUEST_TIMEOUT_MS: String(z.requestTimeoutMs), AGENTD_SLOW_CONSUMER_MS: String(z.slowConsumerMs) } : {}
  const target: Target = await startTarget(ctx.db, env)
  ctx.log(`hostile: target up (${Math.round((Date.now() - started) / 1000)} s)`)
  const o = new Outcomes(target.url)
  const rows: Array<[string, string | number]> = [['seed', ctx.seed], ['size', ctx.size], ['database', ctx.db]]
  try {
    const admin = { authorization: `Bearer ${target.adminToken}`, 'content-type': 'application/json' }
    const t = await wireRequest(target.url, { method: 'POST', path: '/v1/admin/tenants', headers: admin, body: '{"name":"hostile"}' })
    const auth = `Bearer ${t.body.apiKey as string}`
    const json = { authorization: auth, 'content-type': 'application/json' }
    if ((await putSecret(target, t.body.apiKey, 'HOSTILE_TOKEN')) !== 204) o.problem('PUT /v1/secrets/HOSTILE_TOKEN was not accepted')
    const newSession = async () => {
      const s = o.answer('create a session', await wireRequest(target.url, { method: 'POST', path: '/v1/sessions', headers: json, body: JSON.stringify({ model: target.models.ref() }) }), { expect: [201] })
      const id = s.body.id as string
      target.models.fallback(id, { text: ['ok'] })
      return id
    }
    const quiet = await newSession()
    const heads = await o.heads(auth, [quiet])
    const baseHeap = heapMb()

    // ---- oversized and never-ending requests ----
    ctx.log(`hostile: oversized (${Math.round((Date.now() - started) / 1000)} s)`)
    const oversized: Array<[string, string, number]> = [
      ['a 64 KiB header', `GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nx-big: ${'a'.repeat(64 * 1024)}\r\n\r\n`, 400],
      ['2,000 header lines', `GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n${Array.from({ length: 2000 }, (_, i) => `x-h${i}: v`).join('\r\n')}\r\n\r\n`, 0],
      ['a declared body of 2 MiB', `POST /v1/sessions/${quiet}/inject HTTP/1.1\r\nHost: x\r\nAuthorization: ${auth}\r\nContent-Type: application/json\r\nContent-Length: ${2 * 1024 * 1024}\r\n\r\n{"content":"`, 413],
      ['a 1.5 MiB body', `POST /v1/sessions/${quiet}/inject HTTP/1.1\r\nHost: x\r\nAuthorization: ${auth}\r\nContent-Type: application/json\r\nContent-Length: ${1536 * 1024 + 15}\r\n\r\n{"content":"${'b'.repeat(1536 * 1024)}"}`, 413],
      ['a chunked body over 1 MiB', `POST /v1/sessions/${quiet}/inject HTTP/1.1\r\nHost: x\r\nAuthorization: ${auth}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n${`10000\r\n${'c'.repeat(0x10000)}\r\n`.repeat(20)}0\r\n\r\n`, 413],
    ]
    for (const [what, bytes, status] of oversized) {
      const t0 = Date.now()
      const r = await rawExchange(target.url, bytes, 5000)
      ctx.log(`  ${what}: ${Date.now() - t0} ms, ${r.data.slice(0, 60).replace(/\r\n/g, ' ')}`)
      const a = parseAnswers(r.data)[0]
      if (!a) o.problem(`${what}: no answer (${r.reset ? 'reset' : r.closed ? 'closed' : 'timeout'})`)
      else o.answer(what, { status: a.status, headers: a.headers, text: a.body, body: a.json, reusedSocket: false }, status ? { expect: [status] } : {})
    }
    rows.push(['oversized requests', oversized.length])

    // ---- slow-loris: headers, then bodies, a byte at a time ----
    ctx.log(`hostile: slow-loris (${Math.round((Date.now() - started) / 1000)} s)`)
    // the timeout, Node's check interval, and room for a loaded machine
    const cutWithin = z.requestTimeoutMs + Math.max(6000, z.requestTimeoutMs / 2)
    const body = JSON.stringify({ content: 'slow loris' })
    const slow = await Promise.all(
      Array.from({ length: z.slowClients }, (_, i) =>
        i % 2 === 0
          ? dribble(target.url, 'GET /heal', `thz HTTP/1.1\r\nHost: x\r\nx-pad: ${'p'.repeat(400)}\r\n\r\n`, z.dribbleMs, cutWithin + 5000)
          : dribble(target.url, `POST /v1/sessions/${quiet}/inject HTTP/1.1\r\nHost: x\r\nAuthorization: ${auth}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`, body, Math.max(z.dribbleMs, (z.requestTimeoutMs * 2) / body.length), cutWithin + 5000),
      ),
    )
    let cut = 0
    const cutMs: number[] = []
    slow.forEach((r, i) => {
      const what = `slow-loris ${i % 2 === 0 ? 'headers' : 'body'} #${i}`
      if (!r.closed) return o.problem(`${what}: still open after ${r.closedAfterMs} ms (${r.sentBytes} bytes sent)`)
      cut++
      cutMs.push(r.closedAfterMs)
      if (r.closedAfterMs > cutWithin) o.problem(`${what}: cut only after ${r.closedAfterMs} ms (timeout ${z.requestTimeoutMs})`)
      const a = parseAnswers(r.data)[0]
      if (!a) o.problem(`${what}: closed without an answer`)
      else o.answer(what, { status: a.status, headers: a.headers, text: a.body, body: a.json, reusedSocket: false }, { expect: [400] })
    })
    rows.push(['slow-loris clients', z.slowClients], ['  cut by the request timeout', cut], ['  slowest cut (ms)', Math.max(0, ...cutMs)])
    await o.unchanged('after the oversized and slow requests', auth, heads)
    await o.alive('after the slow-loris clients')

    // ---- connections opened and dropped ----
    ctx.log(`hostile: connections (${Math.round((Date.now() - started) / 1000)} s)`)
    const server = target.app.http!.server
    const openConns = () => new Promise<number>((r) => server.getConnections((_e, n) => r(n)))
    const before = await openConns()
    const u = new URL(target.url)
    const batchSize = 250
    let opened = 0
    for (let b = 0; b < z.connections; b += batchSize) {
      const socks = await Promise.all(
        Array.from({ length: Math.min(batchSize, z.connections - b) }, (_, i) =>
          new Promise<net.Socket>((resolve) => {
            const s = net.connect(Number(u.port), u.hostname, () => {
              opened++
              const kind = (b + i) % 4
              if (kind === 1) s.write('GET /healthz HTT')
              else if (kind === 2) s.write(`POST /v1/sessions/${quiet}/inject HTTP/1.1\r\nHost: x\r\nAuthorization: ${auth}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"content":`)
              else if (kind === 3) s.write(`GET /v1/sessions/${quiet}/stream HTTP/1.1\r\nHost: x\r\nAuthorization: ${auth}\r\n\r\n`)
              resolve(s)
            })
            s.on('error', () => resolve(s))
          }),
        ),
      )
      await sleep(20)
      for (const s of socks) s.destroy()
    }
    let after = await openConns()
    const deadline = Date.now() + 10000
    while (after > before + 2 && Date.now() < deadline) {
      await sleep(100)
      after = await openConns()
    }
    if (after > before + 2) o.problem(`after ${opened} dropped connections the server still holds ${after} (held ${before} before)`)
    // a socket dropped while its stream was still being authorised is let go when that answer comes
    let leftSubs = await subscribers(target.url)
    while (leftSubs !== 0 && Date.now() < deadline) {
      await sleep(100)
      leftSubs = await subscribers(target.url)
    }
    if (leftSubs !== 0) o.problem(`after ${opened} dropped connections the server keeps ${leftSubs} stream subscriptions`)
    rows.push(['connections opened and dropped', opened], ['  still held afterwards', after - before], ['  stream subscriptions left', leftSubs])
    await o.alive('after the dropped connections')
    await o.unchanged('after the dropped connections', auth, heads)

    // ---- an SSE subscriber that stops reading ----
    ctx.log(`hostile: stalled SSE (${Math.round((Date.now() - started) / 1000)} s)`)
    const sid = await newSession()
    const reader = readSse(target.url, sid, auth)
    const stalled = stallSse(target.url, sid, auth)
    await stalled.ready
    const subs = await subscribers(target.url)
    const pourStart = Date.now()
    let cutAfterMs = -1
    const big = 'x'.repeat(400_000)
    let injected = 0
    let peakHeap = heapMb()
    const pourDeadline = Date.now() + Math.max(60000, z.slowConsumerMs * 4)
    while (Date.now() < pourDeadline) {
      if ((await subscribers(target.url)) < subs) {
        cutAfterMs = Date.now() - pourStart
        break
      }
      const r = o.answer('inject while a subscriber stalls', await wireRequest(target.url, { method: 'POST', path: `/v1/sessions/${sid}/inject`, headers: json, body: JSON.stringify({ content: `${injected} ${big}` }) }), { expect: [202] })
      if (r.status === 202) o.accept(sid, r.body.messageId)
      injected++
      if (injected % 10 === 0) peakHeap = Math.max(peakHeap, heapMb())
      if (injected > 40) await sleep(50)
    }
    peakHeap = Math.max(peakHeap, heapMb())
    ctx.log(`  sse: poured (${Math.round((Date.now() - started) / 1000)} s)`)
    const slowText = dechunk(await stalled.drain())
    if (cutAfterMs < 0) o.problem(`the stalled SSE subscriber was not cut after ${injected} injects of 400 KB`)
    else if (!/event: stream\/error\ndata: \{"code":"slow-consumer"\}\n\n$/.test(slowText)) o.problem(`the stalled SSE subscriber was cut without a final stream/error slow-consumer frame (ends ${JSON.stringify(slowText.slice(-120))})`)
    // the slow one resumes from its last id: contiguous seqs up to the head, none repeated
    ctx.log(`  sse: drained (${Math.round((Date.now() - started) / 1000)} s)`)
    const slowSeqs = [...slowText.matchAll(/^id: (\d+)$/gm)].map((m) => Number(m[1]))
    const head = (await o.heads(auth, [sid])).get(sid)!
    const resumed = await readSse(target.url, sid, auth, slowSeqs.at(-1) ?? -1).until(head)
    const all = [...slowSeqs, ...resumed]
    const gaps = all.filter((s, i) => s !== i)
    if (gaps.length) o.problem(`the slow subscriber's seqs with the resume are not 0..${head} once each (first off: ${gaps[0]})`)
    ctx.log(`  sse: resumed (${Math.round((Date.now() - started) / 1000)} s)`)
    const honest = await reader.until(head)
    if (honest.length !== head + 1 || honest.some((s, i) => s !== i)) o.problem(`the reading subscriber got ${honest.length} seqs, not 0..${head} once each`)
    ctx.log(`  sse: honest read (${Math.round((Date.now() - started) / 1000)} s)`)
    reader.close()
    const heapGrowth = peakHeap - baseHeap
    if (heapGrowth > 128) o.problem(`the heap grew by ${heapGrowth} MiB while a subscriber stalled`)
    rows.push(['SSE: injects of 400 KB poured', injected], ['  stalled subscriber cut after (ms)', cutAfterMs], ['  seqs it got before the cut', slowSeqs.length], ['  resumed seqs (from its last id)', resumed.length], ['  reading subscriber seqs', honest.length], ['  heap growth (MiB)', heapGrowth])

    // ---- a WebSocket flooding ops ----
    ctx.log(`hostile: WebSocket flood (${Math.round((Date.now() - started) / 1000)} s)`)
    const wid = await newSession()
    const flood = await wsFlood(target.url, wid, t.body.apiKey, z.wsOps, async () => {
      const t0 = Date.now()
      await o.alive('during the WebSocket flood')
      return Date.now() - t0
    })
    for (const id of flood.acked) o.accept(wid, id)
    // ops of one socket are taken in the order sent: the acks come back in that order
    const order = flood.acked.map((id) => Number(id.slice('flood-'.length)))
    if (order.some((n, i) => i > 0 && n <= order[i - 1])) o.problem('the WebSocket flood: acks came back out of the order the ops were sent in')
    if (flood.answered !== z.wsOps) o.problem(`the WebSocket flood: ${z.wsOps} ops sent, ${flood.answered} answered (${flood.closed ? `closed ${flood.closed}` : 'still open'})`)
    if (flood.unexpected) o.problem(`the WebSocket flood: ${flood.unexpected} answers were neither the ack nor the bad-request an op called for`)
    rows.push(['WebSocket ops flooded', z.wsOps], ['  acked', flood.acked.length], ['  errors (for garbage ops)', flood.errors], ['  healthz during the flood (ms, max)', flood.healthMs], ['  seconds to answer all', Math.round(flood.ms / 100) / 10])

    // accepted input is all there, once, and the logs are sound
    ctx.log(`hostile: logs (${Math.round((Date.now() - started) / 1000)} s)`)
    await wireRequest(target.url, { method: 'POST', path: `/v1/sessions/${wid}/cancel`, headers: json, body: '{}' })
    const loss = await o.noLoss(auth, [sid, wid, quiet])
    await o.alive('at the end')
    const leaked = await target.leakCheck()
    for (const l of leaked) o.problem(l)
    rows.push(['inputs accepted', o.acceptedCount], ['lost', loss.lost], ['duplicated', loss.duplicated], ['invariant violations', loss.violations], ...o.statusRows(), ['secrets looked for', target.leaks.secretCount], ['  leaked', leaked.length], ['violations', o.problems.length], ['seconds', Math.round((Date.now() - started) / 100) / 10])
    return { rows, violations: o.problems }
  } finally {
    const srv = target.app.http!.server
    ctx.log(`hostile: closing (${Math.round((Date.now() - started) / 1000)} s), ${await new Promise<number>((r) => srv.getConnections((_e, n) => r(n)))} connections`)
    await target.close()
    ctx.log(`hostile: closed (${Math.round((Date.now() - started) / 1000)} s)`)
  }
}

/** An SSE reader of seqs; `until(head)` resolves once it has read seq `head`. */
function readSse(url: string, id: string, auth: string, after = -1) {
  const seqs: number[] = []
  const ac = new AbortController()
  let wake = () => {}
  const done = (async () => {
    const res = await fetch(`${url}/v1/sessions/${id}/stream`, { headers: { authorization: auth, ...(after >= 0 ? { 'last-event-id': String(after) } : {}) }, signal: ac.signal })
    await readSseIds(res.body!, (seq) => seqs.push(seq), () => wake())
  })().catch(() => {})
  return {
    async until(head: number, ms = 30000): Promise<number[]> {
      const deadline = Date.now() + ms
      while (!seqs.includes(head) && Date.now() < deadline) await Promise.race([new Promise<void>((r) => (wake = r)), sleep(200), done])
      ac.abort()
      return seqs
    },
    close: () => ac.abort(),
  }
}

/** An SSE subscriber over raw TCP that reads the answer head, then stops reading until drain(). */
function stallSse(url: string, id: string, auth: string) {
  const u = new URL(url)
  let text = ''
  const s = net.connect(Number(u.port), u.hostname, () => s.write(`GET /v1/sessions/${id}/stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: ${auth}\r\n\r\n`))
  s.setEncoding('utf8')
  s.on('error', () => {})
  // the server closing shows as 'end' only once we read; a half-close is seen at the TCP level meanwhile
  const ready = new Promise<void>((resolve) => {
    const onData = (c: string) => {
      text += c
      if (text.includes('event: stream/ready')) {
        s.off('data', onData)
        s.pause()
        resolve()
      }
    }
    s.on('data', onData)
  })
  return {
    ready,
    drain: () =>
      new Promise<string>((resolve) => {
        s.on('data', (c: string) => {
          text += c
          // the answer's last chunk (the server keeps a stream's connection alive after it)
          if (text.endsWith('\r\n0\r\n\r\n')) {
            s.destroy()
            resolve(text)
          }
        })
        s.on('end', () => resolve(text))
        s.on('close', () => resolve(text))
        s.resume()
        setTimeout(() => {
          s.destroy()
          resolve(text)
        }, 30000)
      }),
  }
}

/** The body of a raw HTTP/1.1 answer with chunked framing (what a partial read has of it). */
function dechunk(raw: string): string {
  let rest = raw.slice(raw.indexOf('\r\n\r\n') + 4)
  let out = ''
  for (;;) {
    const eol = rest.indexOf('\r\n')
    if (eol < 0) return out
    const size = parseInt(rest.slice(0, eol), 16)
    if (!(size > 0)) return out
    out += Buffer.from(rest.slice(eol + 2), 'utf8').subarray(0, size).toString('utf8')
    rest = Buffer.from(rest.slice(eol + 2), 'utf8').subarray(size + 2).toString('utf8')
  }
}

/** Open SSE and WebSocket subscriptions of the server (its /metrics gauge). */
async function subscribers(url: string): Promise<number> {
  const r = await wireRequest(url, { method: 'GET', path: '/metrics' })
  const m = /^agentd_stream_subscribers\s+(\d+)/m.exec(r.text)
  return m ? Number(m[1]) : -1
}

/** Sends `n` ops on one WebSocket without waiting (a tenth of them garbage), then waits for every answer. */
async function wsFlood(url: string, id: string, key: string, n: number, probe: () => Promise<number>): Promise<{ acked: string[]; errors: number; unexpected: number; answered: number; closed?: number; healthMs: number; ms: number }> {
  const ws = new WebSocket(`${url.replace(/^http/, 'ws')}/v1/sessions/${id}/ws?after=999999999`, { headers: { authorization: `Bearer ${key}` } })
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve())
    ws.once('error', reject)
  })
  const acked: string[] = []
  let errors = 0
  let unexpected = 0
  let answered = 0
  let closed: number | undefined
  let garbage = 0
  ws.on('message', (raw) => {
    const m = JSON.parse(String(raw))
    if (m.event === 'ack') {
      answered++
      if (m.data.messageId) acked.push(m.data.messageId)
    } else if (m.event === 'error') {
      answered++
      errors++
      if (m.data.code !== 'bad-request') unexpected++
    }
  })
  ws.on('close', (code) => (closed = code))
  const t0 = Date.now()
  for (let i = 0; i < n; i++) {
    if (i % 10 === 9) {
      garbage++
      ws.send(i % 20 === 9 ? '{"op":"followup"' : JSON.stringify({ op: 'explode', content: 'x' }))
    } else ws.send(JSON.stringify({ op: i % 50 === 0 ? 'followup' : 'inject', content: `flood ${i}`, id: `flood-${i}` }))
  }
  let healthMs = 0
  const deadline = Date.now() + Math.max(60000, n * 20)
  while (answered < n && closed === undefined && Date.now() < deadline) {
    healthMs = Math.max(healthMs, await probe())
    await sleep(100)
  }
  const ms = Date.now() - t0
  ws.close()
  return { acked, errors, unexpected: unexpected + Math.max(0, errors - garbage), answered, closed, healthMs, ms }
}

export const hostile: FaultPart = { name: 'hostile', description: 'oversized and slow requests, dropped connections, a stalled SSE reader, a WebSocket flood', run: runHostile }
