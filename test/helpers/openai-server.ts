// A scriptable OpenAI chat-completions server (streaming only) for tests of the pi-ai path.
// Each request takes the next scripted answer from a FIFO; every request is recorded with its body and
// headers, and whether the client went away before the answer ended.

import http from 'node:http'
import type { AddressInfo } from 'node:net'

export interface ScriptedToolCall {
  id: string
  name: string
  /** JSON text, or a value to stringify; streamed after the name in `argumentChunks` pieces (default 2) */
  arguments: string | object
  argumentChunks?: number
}

export interface ScriptedAnswer {
  /** text deltas, sent after reasoning */
  chunks?: string[]
  /** reasoning deltas (`delta.reasoning_content`), sent first */
  reasoning?: string[]
  toolCalls?: ScriptedToolCall[]
  /** finish_reason; default 'tool_calls' with tool calls, else 'stop'; null sends no finish chunk */
  finish?: string | null
  /** the usage chunk; false sends none */
  usage?: { prompt_tokens: number; completion_tokens: number; [k: string]: unknown } | false
  /** answer with this HTTP error instead of a stream */
  error?: { status: number; body?: unknown; headers?: Record<string, string> }
  /** extra headers on the 200 stream response */
  headers?: Record<string, string>
  /** after the deltas: never finish, wait until the client goes away */
  hang?: boolean
  /** after the deltas: destroy the socket */
  disconnect?: boolean
  /** after the deltas: send `data: {"error": …}` and end */
  streamError?: unknown
  /** default true: first send `{delta:{role:'assistant', content:''}}` as OpenAI does */
  roleChunk?: boolean
}

export interface RecordedRequest {
  path: string
  headers: http.IncomingHttpHeaders
  body: any
  /** true once the client closed the connection before the answer ended */
  closedEarly: boolean
  /** resolves when the exchange is over (answered, or the client went away) */
  settled: Promise<void>
}

export interface OpenAiServer {
  readonly baseUrl: string
  readonly requests: RecordedRequest[]
  script(...answers: ScriptedAnswer[]): void
  /** resolves with the n-th request (0-based) once it arrived */
  waitForRequest(n: number, timeoutMs?: number): Promise<RecordedRequest>
  close(): Promise<void>
}

export async function startOpenAiServer(): Promise<OpenAiServer> {
  const queue: ScriptedAnswer[] = []
  const requests: RecordedRequest[] = []
  const waiters = new Set<() => void>()
  const open = new Set<http.ServerResponse>()

  const server = http.createServer(async (req, res) => {
    let raw = ''
    req.setEncoding('utf8')
    for await (const c of req) raw += c
    let settle!: () => void
    const rec: RecordedRequest = { path: req.url ?? '', headers: req.headers, body: safeJson(raw), closedEarly: false, settled: new Promise((r) => (settle = r)) }
    requests.push(rec)
    for (const w of [...waiters]) w()
    let finished = false
    open.add(res)
    res.on('close', () => {
      open.delete(res)
      if (!finished) rec.closedEarly = true
      settle()
    })
    const done = () => {
      finished = true
      settle()
    }

    const answer = queue.shift()
    if (!answer) {
      res.writeHead(500, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ error: { message: 'openai-server: no scripted answer', type: 'server_error' } }))
      return done()
    }
    if (answer.error) {
      const { status, body, headers = {} } = answer.error
      const payload = body === undefined ? { error: { message: `scripted ${status}`, type: 'server_error', code: null } } : body
      res.writeHead(status, { 'content-type': typeof payload === 'string' ? 'text/plain' : 'application/json', ...headers })
      res.end(typeof payload === 'string' ? payload : JSON.stringify(payload))
      return done()
    }

    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', ...answer.headers })
    const id = `chatcmpl-test-${requests.length}`
    const send = (data: unknown) => res.write(`data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`)
    const chunk = (delta: object, finish: string | null = null) => ({ id, object: 'chat.completion.chunk', created: 0, model: rec.body?.model ?? 'x', choices: [{ index: 0, delta, finish_reason: finish }] })

    if (answer.roleChunk !== false) send(chunk({ role: 'assistant', content: '' }))
    for (const r of answer.reasoning ?? []) send(chunk({ reasoning_content: r }))
    for (const t of answer.chunks ?? []) send(chunk({ content: t }))
    ;(answer.toolCalls ?? []).forEach((tc, index) => {
      const args = typeof tc.arguments === 'string' ? tc.arguments : JSON.stringify(tc.arguments)
      send(chunk({ tool_calls: [{ index, id: tc.id, type: 'function', function: { name: tc.name, arguments: '' } }] }))
      for (const piece of split(args, tc.argumentChunks ?? 2)) send(chunk({ tool_calls: [{ index, function: { arguments: piece } }] }))
    })
    if (answer.hang) return // 'close' settles it when the client goes away
    if (answer.disconnect) {
      // let the deltas reach the client first, so the cut happens inside a started stream
      setTimeout(() => res.destroy(), 20)
      return
    }
    if (answer.streamError !== undefined) {
      send({ error: answer.streamError })
      res.end()
      return done()
    }
    const finish = answer.finish === undefined ? (answer.toolCalls?.length ? 'tool_calls' : 'stop') : answer.finish
    if (finish !== null) send(chunk({}, finish))
    if (answer.usage !== false) send({ id, object: 'chat.completion.chunk', created: 0, model: 'x', choices: [], usage: answer.usage ?? { prompt_tokens: 1, completion_tokens: 1 } })
    send('[DONE]')
    res.end()
    done()
  })
  server.keepAliveTimeout = 1000
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  const { port } = server.address() as AddressInfo

  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    requests,
    script: (...answers) => void queue.push(...answers),
    waitForRequest(n, timeoutMs = 5000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          if (requests[n]) {
            waiters.delete(check)
            clearTimeout(timer)
            resolve(requests[n])
          }
        }
        const timer = setTimeout(() => {
          waiters.delete(check)
          reject(new Error(`openai-server: request #${n} did not arrive within ${timeoutMs} ms`))
        }, timeoutMs)
        waiters.add(check)
        check()
      })
    },
    async close() {
      for (const res of open) res.destroy()
      server.closeAllConnections()
      await new Promise<void>((r) => server.close(() => r()))
    },
  }
}

function safeJson(raw: string): unknown {
  try {
    return JSON.parse(raw)
  } catch {
    return undefined
  }
}

function split(s: string, parts: number): string[] {
  if (s === '') return []
  const size = Math.ceil(s.length / Math.max(1, parts))
  const out: string[] = []
  for (let i = 0; i < s.length; i += size) out.push(s.slice(i, i + size))
  return out
}
