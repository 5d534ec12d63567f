// Execution of `http` tools (API §4 ToolSpec): POST the call as JSON, turn the answer into a tool result.
// Every failure becomes an isError result with a §3.5 tool code (SPEC §18.13); nothing here throws.

import http from 'node:http'
import https from 'node:https'
import net from 'node:net'
import type { ContentBlock } from '../session/index.js'
import { scrub } from './headers.js'
import { traceHeaders } from '../tracing/index.js'
import { defaultResolver, guardedLookup, RefusedAddress, type HostPolicy, type Resolver } from './hosts.js'

export const DEFAULT_HTTP_TOOL_TIMEOUT_MS = 30000
export const MAX_TOOL_RESPONSE_BYTES = 10 * 1024 * 1024

export interface HttpToolBody {
  sessionId: string
  callId: string
  name: string
  arguments: unknown
  rawArguments: string
}

export interface HttpToolOutcome {
  content: ContentBlock[]
  isError: boolean
  error?: { name: string; code: string }
}

export interface HttpToolCall {
  url: string
  /** The whole call, answer body included; default 30000. */
  timeoutMs?: number
  body: HttpToolBody
  signal: AbortSignal
  policy: HostPolicy
  /** Name resolution (tests inject one); default `dns.lookup` with `all: true`. */
  resolve?: Resolver
  /** extra request headers (secrets resolved); they never override content-type, content-length or accept */
  headers?: Record<string, string>
  /** secret values among the headers: scrubbed from every error text */
  secrets?: readonly string[]
  /** Answer body cap; default 10 MiB. */
  maxResponseBytes?: number
}

function failure(code: string, reason: string, name = 'ToolError', secrets: readonly string[] = []): HttpToolOutcome {
  // results are one line: collapse whatever a socket error message carried
  const text = scrub(`Error: ${reason}`, secrets).replace(/\s+/g, ' ').trim().slice(0, 500)
  return { content: [{ type: 'text', text }], isError: true, error: { name, code } }
}

const BAD_RESULT = () => failure('TOOL_BAD_RESULT', 'tool answered an invalid result')

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

/** Validates one answered block and copies only its known fields (unknown extras are dropped). */
function block(v: unknown): ContentBlock | null {
  if (!isObject(v)) return null
  if (v.type === 'text') return typeof v.text === 'string' ? { type: 'text', text: v.text } : null
  if (v.type === 'image') {
    const { mimeType, data, url } = v
    for (const f of [mimeType, data, url]) if (f !== undefined && typeof f !== 'string') return null
    const inline = typeof mimeType === 'string' && typeof data === 'string'
    if (!inline && typeof url !== 'string') return null
    return {
      type: 'image',
      ...(inline ? { mimeType: mimeType as string, data: data as string } : {}),
      ...(typeof url === 'string' ? { url } : {}),
    }
  }
  return null
}

/** The answer `{content: string | ContentBlock[], isError?: boolean}` as an outcome, or null when it is not that shape. */
function parseAnswer(text: string): HttpToolOutcome | null {
  let v: unknown
  try {
    v = JSON.parse(text)
  } catch {
    return null
  }
  if (!isObject(v)) return null
  if (v.isError !== undefined && typeof v.isError !== 'boolean') return null
  const isError = v.isError === true
  if (typeof v.content === 'string') return { content: [{ type: 'text', text: v.content }], isError }
  if (!Array.isArray(v.content)) return null
  const content: ContentBlock[] = []
  for (const item of v.content) {
    const b = block(item)
    if (!b) return null
    content.push(b)
  }
  return { content, isError }
}

/** POSTs one call to an http tool and returns its result; the address actually connected to is checked. */
export function callHttpTool(o: HttpToolCall): Promise<HttpToolOutcome> {
  const timeoutMs =
    o.timeoutMs !== undefined && Number.isFinite(o.timeoutMs) && o.timeoutMs > 0
      ? Math.min(o.timeoutMs, 2 ** 31 - 1)
      : DEFAULT_HTTP_TOOL_TIMEOUT_MS
  const maxBytes = o.maxResponseBytes ?? MAX_TOOL_RESPONSE_BYTES
  const resolve = o.resolve ?? defaultResolver

  let url: URL
  try {
    url = new URL(o.url)
  } catch {
    return Promise.resolve(failure('TOOL_ERROR', 'tool call failed: invalid URL'))
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    return Promise.resolve(failure('TOOL_ERROR', `tool call failed: unsupported URL scheme ${url.protocol}`))
  }
  if (o.signal.aborted) return Promise.resolve(failure('TOOL_ABORTED', 'tool call aborted', 'AbortError'))

  let payload: Buffer
  try {
    payload = Buffer.from(JSON.stringify(o.body), 'utf8')
  } catch (err) {
    return Promise.resolve(failure('TOOL_ERROR', `tool call failed: arguments are not JSON (${(err as Error).message})`))
  }

  const hostname = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname
  const port = url.port ? Number(url.port) : url.protocol === 'https:' ? 443 : 80

  // Node connects to an IP literal without calling `lookup`, so a literal is checked here instead
  if (net.isIP(hostname)) {
    const why = o.policy.check(hostname, port, hostname)
    if (why !== null) return Promise.resolve(failure('TOOL_ERROR', `tool address refused: ${why}`))
  }

  // every address is checked before the socket connects (DNS rebinding since creation is caught)
  const lookup = guardedLookup(o.policy, hostname, port, resolve)

  return new Promise<HttpToolOutcome>((done) => {
    let settled = false
    let req: http.ClientRequest | undefined
    const settle = (outcome: HttpToolOutcome) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      o.signal.removeEventListener('abort', onAbort)
      // the request may still be open (timeout, abort, early refusal of the body): close it now
      req?.destroy()
      done(outcome)
    }
    const onAbort = () => settle(failure('TOOL_ABORTED', 'tool call aborted', 'AbortError'))
    const timer = setTimeout(() => settle(failure('TOOL_TIMEOUT', `tool call timed out after ${timeoutMs} ms`)), timeoutMs)
    o.signal.addEventListener('abort', onAbort, { once: true })

    const options: http.RequestOptions = {
      method: 'POST',
      hostname,
      port,
      path: `${url.pathname}${url.search}`,
      headers: {
        ...(o.headers ?? {}),
        // API.md §19: the call's execute_tool span
        ...traceHeaders(),
        'content-type': 'application/json',
        'content-length': String(payload.length),
        accept: 'application/json',
      },
      lookup,
      // a fresh connection per call: a pooled socket would skip the address check of this call
      agent: false,
    }
    if (url.username || url.password) options.auth = `${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`

    try {
      req = (url.protocol === 'https:' ? https : http).request(options)
    } catch (err) {
      return settle(failure('TOOL_ERROR', `tool call failed: ${(err as Error).message}`, 'ToolError', o.secrets))
    }
    req.on('error', (err) => {
      if (err instanceof RefusedAddress) settle(failure('TOOL_ERROR', `tool address refused: ${err.message}`))
      else settle(failure('TOOL_ERROR', `tool call failed: ${err.message || String(err)}`, 'ToolError', o.secrets))
    })
    req.on('response', (res) => {
      res.on('error', () => settle(failure('TOOL_ERROR', 'tool call failed: the connection closed before the answer ended')))
      const status = res.statusCode ?? 0
      if (status < 200 || status > 299) return settle(failure('TOOL_HTTP_STATUS', `tool answered HTTP ${status}`))
      const chunks: Buffer[] = []
      let size = 0
      res.on('data', (chunk: Buffer) => {
        size += chunk.length
        if (size > maxBytes) return settle(BAD_RESULT())
        chunks.push(chunk)
      })
      res.on('end', () => settle(parseAnswer(Buffer.concat(chunks).toString('utf8')) ?? BAD_RESULT()))
      res.on('close', () => {
        if (!res.complete) settle(failure('TOOL_ERROR', 'tool call failed: the connection closed before the answer ended'))
      })
    })
    req.end(payload)
  })
}
