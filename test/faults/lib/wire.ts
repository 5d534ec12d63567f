// Requests at the wire, for tests that must see exactly what a client sees: node:http with a
// keep-alive agent (does an error answer leave the connection usable?), and raw TCP exchanges
// (malformed HTTP, pipelining, resets). fetch hides both.

import http from 'node:http'
import net from 'node:net'
import { observeAnswer } from './leaks.js'

export interface WireAnswer {
  /** 0 when no answer arrived */
  status: number
  headers: http.IncomingHttpHeaders
  text: string
  body: any
  /** the request failed before a whole answer arrived (ECONNRESET, EPIPE, …) */
  error?: string
  /** the connection was reset or broke after the answer arrived */
  lateError?: string
  /** the agent reused a kept-alive connection for this request */
  reusedSocket: boolean
}

export interface WireRequest {
  method: string
  path: string
  headers?: Record<string, string>
  body?: string | Buffer
  /** write the body in this many pieces, one per event-loop turn (a client still sending when answered) */
  pieces?: number
  agent?: http.Agent
  timeoutMs?: number
}

/** One request over node:http; never rejects: failures are reported in the answer. */
export function wireRequest(base: string, r: WireRequest): Promise<WireAnswer> {
  const u = new URL(base)
  return new Promise((resolve) => {
    let settled = false
    const answer: WireAnswer = { status: 0, headers: {}, text: '', body: undefined, reusedSocket: false }
    const done = () => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      try {
        answer.body = answer.text ? JSON.parse(answer.text) : undefined
      } catch {
        answer.body = undefined
      }
      observeAnswer(answer.body)
      resolve(answer)
    }
    const body = r.body === undefined ? undefined : Buffer.isBuffer(r.body) ? r.body : Buffer.from(r.body)
    // a body is framed by its length unless the caller asked for chunks (node:http would send a GET body unframed)
    const headers = { ...(r.headers ?? {}) }
    if (body && headers['transfer-encoding'] === undefined && headers['content-length'] === undefined) headers['content-length'] = String(body.length)
    const req = http.request({ host: u.hostname, port: u.port, method: r.method, path: r.path, headers, agent: r.agent ?? false })
    const timer = setTimeout(() => {
      answer.error ??= 'TIMEOUT'
      req.destroy()
      done()
    }, r.timeoutMs ?? 15000)
    req.on('response', (res) => {
      answer.status = res.statusCode ?? 0
      answer.headers = res.headers
      answer.reusedSocket = req.reusedSocket
      res.setEncoding('utf8')
      res.on('data', (c: string) => (answer.text += c))
      res.on('end', done)
      res.on('error', (e: NodeJS.ErrnoException) => {
        answer.error = e.code ?? e.message
        done()
      })
    })
    req.on('error', (e: NodeJS.ErrnoException) => {
      if (answer.status && settled) answer.lateError = e.code ?? e.message
      else if (answer.status) answer.lateError = e.code ?? e.message
      else {
        answer.error = e.code ?? e.message
        done()
      }
    })
    if (!body) {
      req.end()
      return
    }
    const n = Math.max(1, r.pieces ?? 1)
    const size = Math.ceil(body.length / n)
    let at = 0
    const next = () => {
      if (req.destroyed) return
      if (at >= body.length) return void req.end()
      req.write(body.subarray(at, at + size))
      at += size
      setImmediate(next)
    }
    next()
  })
}

export interface RawExchange {
  /** everything the server sent */
  data: string
  /** the connection was reset (ECONNRESET) instead of closed */
  reset: boolean
  /** the server closed the connection (FIN or reset) before the timeout */
  closed: boolean
}

/** Writes bytes on a fresh TCP connection and collects the answer until the server closes it (or timeoutMs). */
export function rawExchange(base: string, bytes: string | Buffer, timeoutMs = 3000): Promise<RawExchange> {
  const u = new URL(base)
  return new Promise((resolve) => {
    const out: RawExchange = { data: '', reset: false, closed: false }
    const s = net.connect(Number(u.port), u.hostname, () => s.write(bytes))
    s.setEncoding('utf8')
    s.on('data', (c: string) => (out.data += c))
    s.on('error', (e: NodeJS.ErrnoException) => {
      if (e.code === 'ECONNRESET' || e.code === 'EPIPE') out.reset = true
    })
    s.on('close', () => {
      out.closed = true
      clearTimeout(timer)
      resolve(out)
    })
    const timer = setTimeout(() => {
      s.destroy()
      resolve(out)
    }, timeoutMs)
  })
}

export interface RawUpload {
  /** the answers, parsed */
  answers: ReturnType<typeof parseAnswers>
  /** the server ended the connection with a FIN (before any reset) */
  fin: boolean
  /** the connection was reset (ECONNRESET, or EPIPE on a write after the server's reset) */
  reset?: string
  /** the whole body was written */
  bodySent: boolean
  /** nothing closed the connection within timeoutMs: the client cut it */
  timedOut: boolean
}

/**
 * One request in raw bytes as an uploading client sends it: the head, then, once the answer began (or
 * after `answerWaitMs`), the body in 16 KiB pieces, on a connection kept half-open so the client goes
 * on sending after the server's FIN. Reads until the server closes, or `settleMs` after the body when
 * it keeps the connection (then the client closes it): whether the close was a FIN or a reset.
 */
export function rawUpload(base: string, head: string, body: string | Buffer, { answerWaitMs = 1000, settleMs = 300, timeoutMs = 10000 } = {}): Promise<RawUpload> {
  const u = new URL(base)
  const bytes = Buffer.isBuffer(body) ? body : Buffer.from(body, 'latin1')
  return new Promise((resolve) => {
    let data = ''
    const out: RawUpload = { answers: [], fin: false, bodySent: false, timedOut: false }
    const s = net.connect({ port: Number(u.port), host: u.hostname, allowHalfOpen: true })
    s.setEncoding('latin1')
    s.on('data', (c: string) => (data += c))
    s.on('end', () => {
      if (!out.reset) out.fin = true
    })
    s.on('error', (e: NodeJS.ErrnoException) => {
      out.reset ??= e.code ?? e.message
    })
    const timer = setTimeout(() => {
      out.timedOut = true
      s.destroy()
    }, timeoutMs)
    s.on('close', () => {
      clearTimeout(timer)
      out.answers = parseAnswers(data)
      resolve(out)
    })
    s.on('connect', async () => {
      s.write(head)
      const deadline = Date.now() + answerWaitMs
      while (!data.includes('\r\n\r\n') && Date.now() < deadline && !s.destroyed) await new Promise((r) => setTimeout(r, 5))
      for (let i = 0; i < bytes.length && !s.destroyed; i += 16384) {
        await new Promise<void>((r) => s.write(bytes.subarray(i, i + 16384), () => r()))
        await new Promise((r) => setTimeout(r, 2))
      }
      out.bodySent = !s.destroyed
      // a server that keeps the connection leaves the close to the client, once the answer is whole
      // (Node takes a client's FIN before its answer for an abort)
      while (!s.destroyed && !out.fin && !wholeAnswer(data)) await new Promise((r) => setTimeout(r, 5))
      setTimeout(() => {
        if (!s.destroyed) s.end()
      }, settleMs)
    })
  })
}

/** Whether the bytes hold a whole first answer (its head, and a body of its content-length). */
function wholeAnswer(data: string): boolean {
  const end = data.indexOf('\r\n\r\n')
  if (end < 0) return false
  const len = /\r\ncontent-length: *(\d+)/i.exec(data.slice(0, end))
  return data.length >= end + 4 + Number(len?.[1] ?? 0)
}

/** The HTTP answers in a raw byte stream: status, headers and body of each, in order. */
export function parseAnswers(data: string): Array<{ status: number; headers: Record<string, string>; body: string; json: any }> {
  const out = []
  let rest = data
  while (rest.startsWith('HTTP/1.1 ')) {
    const end = rest.indexOf('\r\n\r\n')
    if (end < 0) break
    const lines = rest.slice(0, end).split('\r\n')
    const status = Number(lines[0].split(' ')[1])
    const headers: Record<string, string> = {}
    for (const l of lines.slice(1)) {
      const i = l.indexOf(':')
      headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim()
    }
    const len = Number(headers['content-length'] ?? 0)
    const body = rest.slice(end + 4, end + 4 + len)
    let json: any
    try {
      json = JSON.parse(body)
    } catch {
      json = undefined
    }
    out.push({ status, headers, body, json })
    rest = rest.slice(end + 4 + len)
  }
  return out
}

/**
 * Writes parts on one TCP connection: the first, then (once an answer arrived, or after 1 s) the
 * others; collects every answer for a moment after the last part.
 */
export function rawSequence(base: string, parts: Array<string | Buffer>, settleMs = 500): Promise<{ answers: ReturnType<typeof parseAnswers>; answeredBeforeBody: boolean; reset: boolean }> {
  const u = new URL(base)
  return new Promise((resolve) => {
    let data = ''
    let reset = false
    let answeredBeforeBody = false
    const s = net.connect(Number(u.port), u.hostname)
    s.setEncoding('utf8')
    s.on('data', (c: string) => (data += c))
    s.on('error', (e: NodeJS.ErrnoException) => {
      if (e.code === 'ECONNRESET' || e.code === 'EPIPE') reset = true
    })
    const finish = () => {
      s.destroy()
      resolve({ answers: parseAnswers(data), answeredBeforeBody, reset })
    }
    s.on('connect', async () => {
      s.write(parts[0])
      const deadline = Date.now() + 1000
      while (!data.includes('\r\n\r\n') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10))
      answeredBeforeBody = data.startsWith('HTTP/1.1 ')
      for (const p of parts.slice(1)) await new Promise<void>((r) => s.write(p, () => r()))
      setTimeout(finish, settleMs)
    })
  })
}

/** Reads an SSE body to its end, calling onId with the seq of each frame that has an `id:` line
 *  (and onChunk after each network chunk). The parts that watch streams share it. */
export async function readSseIds(body: ReadableStream<Uint8Array>, onId: (seq: number) => void, onChunk: () => void = () => {}): Promise<void> {
  const dec = new TextDecoder()
  let buf = ''
  for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
    buf += dec.decode(chunk, { stream: true })
    let i: number
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const m = /^id: (\d+)$/m.exec(buf.slice(0, i))
      if (m) onId(Number(m[1]))
      buf = buf.slice(i + 2)
    }
    onChunk()
  }
}
