// AgentdError: every failure of a call, with the API's error body (API.md §10) when the server gave
// one, or a client-side code when it did not (`network-error`, `invalid-response`).

export interface ErrorDetail {
  path: string
  message: string
}

export interface AgentdErrorInit {
  status: number
  code: string
  message: string
  details?: ErrorDetail[]
  retryAfterMs?: number
  method?: string
  url?: string
  cause?: unknown
}

export class AgentdError extends Error {
  override readonly name = 'AgentdError'
  /** HTTP status; 0 when no answer came (network failure) */
  readonly status: number
  /** API.md §10 code (`session-not-found`, `idempotency-conflict`, …), or `network-error` / `invalid-response` */
  readonly code: string
  /** schema violations of a `bad-request`; empty otherwise */
  readonly details: ErrorDetail[]
  /** what `Retry-After` asked for, on 429 and 503 */
  readonly retryAfterMs?: number
  readonly method?: string
  readonly url?: string

  constructor(init: AgentdErrorInit) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause })
    this.status = init.status
    this.code = init.code
    this.details = init.details ?? []
    this.retryAfterMs = init.retryAfterMs
    this.method = init.method
    this.url = init.url
  }
}

/** The AgentdError for a non-2xx answer: the API body when it has one, else the status alone. */
export function errorFromResponse(status: number, text: string, o: { retryAfterMs?: number; method: string; url: string }): AgentdError {
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    body = undefined
  }
  const e = (body as { error?: { code?: unknown; message?: unknown; details?: unknown } } | undefined)?.error
  if (e && typeof e.code === 'string') {
    const details = Array.isArray(e.details) ? (e.details as ErrorDetail[]) : []
    return new AgentdError({ status, code: e.code, message: typeof e.message === 'string' ? e.message : e.code, details, ...o })
  }
  return new AgentdError({ status, code: `http-${status}`, message: `${o.method} ${o.url} answered HTTP ${status}${text ? `: ${text.slice(0, 200)}` : ''}`, ...o })
}
