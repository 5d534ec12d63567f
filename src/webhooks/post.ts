// One webhook POST under the `http` tools' address guard (API.md §1 AGENTD_TOOL_HOSTS, §14): the
// address actually connected to is checked, redirects are not followed, the whole exchange is bounded.

import http from 'node:http'
import https from 'node:https'
import net from 'node:net'
import { guardedLookup, RefusedAddress, type HostPolicy, type Resolver } from '../tools/index.js'

export interface PostResult {
  /** the answer's HTTP status, when one came */
  status: number | null
  /** a short text saying what went wrong (null for a 2xx) */
  error: string | null
  kind: 'ok' | 'status' | 'timeout' | 'refused' | 'error'
}

const short = (s: string) => s.replace(/\s+/g, ' ').trim().slice(0, 300)

export function postWebhook(o: { url: string; headers: Record<string, string>; body: string; timeoutMs: number; policy: HostPolicy; resolve?: Resolver; signal?: AbortSignal }): Promise<PostResult> {
  let url: URL
  try {
    url = new URL(o.url)
  } catch {
    return Promise.resolve({ status: null, error: 'invalid URL', kind: 'error' })
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return Promise.resolve({ status: null, error: `unsupported URL scheme ${url.protocol}`, kind: 'error' })
  const hostname = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname
  const port = url.port ? Number(url.port) : url.protocol === 'https:' ? 443 : 80
  if (net.isIP(hostname)) {
    const why = o.policy.check(hostname, port, hostname)
    if (why !== null) return Promise.resolve({ status: null, error: short(`address refused: ${why}`), kind: 'refused' })
  }
  const payload = Buffer.from(o.body, 'utf8')
  return new Promise<PostResult>((done) => {
    let settled = false
    let req: http.ClientRequest | undefined
    const settle = (r: PostResult) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      o.signal?.removeEventListener('abort', onAbort)
      req?.destroy()
      done(r)
    }
    const onAbort = () => settle({ status: null, error: 'aborted (shutdown)', kind: 'error' })
    const timer = setTimeout(() => settle({ status: null, error: `no answer within ${o.timeoutMs} ms`, kind: 'timeout' }), o.timeoutMs)
    o.signal?.addEventListener('abort', onAbort, { once: true })
    const options: http.RequestOptions = {
      method: 'POST',
      hostname,
      port,
      path: `${url.pathname}${url.search}`,
      headers: { ...o.headers, 'content-type': 'application/json', 'content-length': String(payload.length), 'user-agent': 'agentd-webhooks' },
      lookup: guardedLookup(o.policy, hostname, port, o.resolve),
      // a fresh connection per attempt: a pooled socket would skip the address check
      agent: false,
    }
    if (url.username || url.password) options.auth = `${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`
    try {
      req = (url.protocol === 'https:' ? https : http).request(options)
    } catch (err) {
      return settle({ status: null, error: short(`request failed: ${(err as Error).message}`), kind: 'error' })
    }
    req.on('error', (err) => {
      if (err instanceof RefusedAddress) settle({ status: null, error: short(`address refused: ${err.message}`), kind: 'refused' })
      else settle({ status: null, error: short(`request failed: ${err.message || String(err)}`), kind: 'error' })
    })
    // the status decides; the answer's body is not read
    req.on('response', (res) => {
      const status = res.statusCode ?? 0
      res.resume()
      if (status >= 200 && status <= 299) settle({ status, error: null, kind: 'ok' })
      else settle({ status, error: `HTTP ${status}`, kind: 'status' })
    })
    req.end(payload)
  })
}
