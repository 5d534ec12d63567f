// One HTTP call with the API's auth, error bodies and retries. Which failures are retried depends on
// what a repeat could do (API.md §5, §10): a 429 was refused before anything happened, so every call
// repeats it after `Retry-After`; network errors, 502/503/504 repeat only calls that are safe to run
// twice (reads, and sends carrying an idempotency key); other calls repeat a network error only when
// the connection was never made.

import { AgentdError, errorFromResponse } from './errors.js'
import { abortReason, backoffDelay, linkedSignal, parseRetryAfter, sleep, type RetryOptions } from './retry.js'

/** How a call may be repeated. */
export type Repeatable = 'safe' | 'idempotent' | 'once'

export interface RetryEvent {
  method: string
  url: string
  /** the attempt that failed, from 1 */
  attempt: number
  delayMs: number
  error: AgentdError
}

/** A token as a backend gets it from `POST /v1/tokens` (API.md §18). */
export interface MintedToken {
  token: string
  /** when the server starts refusing it (ISO-8601, epoch ms or a Date) */
  expiresAt: string | number | Date
}

/**
 * Gets a token, typically from your own backend, which mints it with the tenant key. Called when the
 * client has none, again before the one it has expires (when it knows `expiresAt`), and once more when
 * the server refuses it (401).
 */
export type TokenProvider = () => Promise<string | MintedToken> | string | MintedToken

export interface TransportOptions {
  /** the server's origin, e.g. `http://127.0.0.1:8080` (a path prefix is kept) */
  baseUrl: string
  /** tenant API key for `/v1` routes; for servers only (a browser gets `token`) */
  apiKey?: string
  /** a token (API.md §18) in place of the API key, or a provider that gets one and is asked again before it expires */
  token?: string | TokenProvider
  /** how long before `expiresAt` a provider's token is replaced (default 60000 ms, or a third of its lifetime when that is shorter) */
  tokenRefreshMs?: number
  /** admin token for `/v1/admin` routes (API.md §3) */
  adminToken?: string
  /** the platform's fetch unless given (tests, proxies, instrumentation) */
  fetch?: typeof fetch
  retry?: RetryOptions
  /** longest wait for an answer of one attempt (default 30000 ms; streams excepted) */
  timeoutMs?: number
  /** longest `Retry-After` honoured; a longer one fails the call at once (default 60000 ms) */
  maxRetryAfterMs?: number
  /** told before each retry */
  onRetry?: (e: RetryEvent) => void
}

export interface CallOptions {
  method: string
  path: string
  query?: Record<string, string | number | undefined>
  body?: unknown
  headers?: Record<string, string>
  auth?: 'key' | 'admin' | 'none'
  repeat: Repeatable
  signal?: AbortSignal
}

const RETRY_STATUSES = new Set([502, 503, 504])
/** network errors that mean the request never left: safe to repeat whatever the call */
const NOT_SENT = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH'])

function errorCode(e: unknown): string | undefined {
  for (let c: unknown = e, i = 0; c && i < 5; c = (c as { cause?: unknown }).cause, i++) {
    const code = (c as { code?: unknown }).code
    if (typeof code === 'string') return code
  }
  return undefined
}

function describe(e: unknown): string {
  const code = errorCode(e)
  const msg = e instanceof Error ? e.message : String(e)
  return code && !msg.includes(code) ? `${msg} (${code})` : msg
}

/** When a token obtained at `now` and refused from `expiresAt` is replaced. */
function refreshTime(now: number, expiresAt: number, marginMs: number): number {
  return expiresAt - Math.min(marginMs, Math.max(0, expiresAt - now) / 3)
}

export class Transport {
  readonly baseUrl: string
  /** the platform's fetch, or the one given */
  readonly fetch: typeof fetch
  /** the provider's token and when to replace it (undefined: only when refused) */
  private held?: { token: string; refreshAt?: number }
  private obtaining?: Promise<string>

  constructor(readonly o: TransportOptions) {
    if (!o.baseUrl) throw new TypeError('AgentdClient: baseUrl is required')
    if (o.apiKey !== undefined && o.token !== undefined) throw new TypeError('AgentdClient: give apiKey or token, not both')
    this.baseUrl = o.baseUrl.replace(/\/+$/, '')
    // called through a closure: a browser's fetch refuses to run as a method of another object
    const given = o.fetch
    this.fetch = given ? (input, init) => given(input, init) : (input, init) => globalThis.fetch(input, init)
  }

  url(path: string, query?: Record<string, string | number | undefined>): string {
    const q = new URLSearchParams()
    for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) q.set(k, String(v))
    const s = q.toString()
    return `${this.baseUrl}${path}${s ? `?${s}` : ''}`
  }

  /** Whether the credential comes from a provider, which can give another when one is refused. */
  get refreshable(): boolean {
    return typeof this.o.token === 'function'
  }

  /**
   * The tenant credential: the API key, the token, or the provider's token — asked for when there is
   * none, when the one held is due for replacement, or (`renew`) when the server refused it. Concurrent
   * calls share one request to the provider.
   */
  async credential(renew = false): Promise<string | undefined> {
    const source = this.o.token
    if (typeof source !== 'function') return source ?? this.o.apiKey
    const held = this.held
    if (!renew && held && (held.refreshAt === undefined || Date.now() < held.refreshAt)) return held.token
    if (renew && this.obtaining === undefined && held) this.held = undefined
    this.obtaining ??= (async () => {
      const got = await source()
      const now = Date.now()
      const token = typeof got === 'string' ? got : got?.token
      if (typeof token !== 'string' || !token) throw new TypeError('AgentdClient: the token provider gave no token')
      const expiresAt = typeof got === 'string' ? undefined : new Date(got.expiresAt).getTime()
      this.held = { token, ...(expiresAt !== undefined && Number.isFinite(expiresAt) ? { refreshAt: refreshTime(now, expiresAt, this.o.tokenRefreshMs ?? 60000) } : {}) }
      return token
    })().finally(() => (this.obtaining = undefined))
    return this.obtaining
  }

  async headers(auth: CallOptions['auth'], extra?: Record<string, string>, renew = false): Promise<Record<string, string>> {
    const h: Record<string, string> = { accept: 'application/json', ...(extra ?? {}) }
    const token = auth === 'admin' ? this.o.adminToken : auth === 'none' ? undefined : await this.credential(renew)
    if (auth === 'admin' && !token) throw new TypeError('AgentdClient: admin routes need the adminToken option')
    if (token) h.authorization = `Bearer ${token}`
    return h
  }

  /** The parsed JSON answer (undefined for an empty one), after the retries `repeat` allows. */
  async call<T>(c: CallOptions): Promise<T> {
    const url = this.url(c.path, c.query)
    const auth = c.auth ?? 'key'
    let headers = await this.headers(auth, c.headers)
    let body: string | undefined
    if (c.body !== undefined) {
      headers['content-type'] = 'application/json'
      body = JSON.stringify(c.body)
    }
    const maxAttempts = this.o.retry?.maxAttempts ?? 8
    let renewed = false
    for (let attempt = 1; ; attempt++) {
      const { error, retryable, retryAfterMs, value } = await this.attempt<T>(c, url, headers, body)
      if (!error) return value as T
      // a refused token is replaced once, at once: the server does not act on a request it refused
      if (error.status === 401 && auth === 'key' && this.refreshable && !renewed) {
        renewed = true
        headers = { ...headers, ...(await this.headers(auth, undefined, true)) }
        attempt--
        continue
      }
      const tooLong = retryAfterMs !== undefined && retryAfterMs > (this.o.maxRetryAfterMs ?? 60000)
      if (!retryable || tooLong || attempt >= maxAttempts) throw error
      const delayMs = retryAfterMs !== undefined ? Math.max(100, retryAfterMs) : backoffDelay(attempt, this.o.retry ?? {})
      this.o.onRetry?.({ method: c.method, url, attempt, delayMs, error })
      await sleep(delayMs, c.signal)
    }
  }

  private async attempt<T>(c: CallOptions, url: string, headers: Record<string, string>, body: string | undefined): Promise<{ value?: T; error?: AgentdError; retryable?: boolean; retryAfterMs?: number }> {
    const link = linkedSignal(c.signal, this.o.timeoutMs ?? 30000)
    try {
      let res: Response
      let text: string
      try {
        res = await this.fetch(url, { method: c.method, headers, body, signal: link.signal })
        text = await res.text()
      } catch (e) {
        if (c.signal?.aborted) throw abortReason(c.signal)
        const error = new AgentdError({ status: 0, code: 'network-error', message: `${c.method} ${url}: ${describe(link.signal.aborted ? link.signal.reason : e)}`, method: c.method, url, cause: e })
        return { error, retryable: c.repeat !== 'once' || NOT_SENT.has(errorCode(e) ?? '') }
      }
      const retryAfterMs = parseRetryAfter(res.headers.get('retry-after'))
      if (!res.ok) {
        const error = errorFromResponse(res.status, text, { retryAfterMs, method: c.method, url })
        return { error, retryAfterMs, retryable: res.status === 429 || (c.repeat !== 'once' && RETRY_STATUSES.has(res.status)) }
      }
      if (!text) return { value: undefined }
      try {
        return { value: JSON.parse(text) as T }
      } catch (e) {
        return { error: new AgentdError({ status: res.status, code: 'invalid-response', message: `${c.method} ${url}: the answer is not JSON`, method: c.method, url, cause: e }), retryable: false }
      }
    } finally {
      link.dispose()
    }
  }
}
