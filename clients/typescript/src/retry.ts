// Backoff and waiting: exponential delays with jitter, `Retry-After` (seconds or an HTTP date), and
// an abortable sleep. Shared by calls (http.ts) and stream reconnects (stream.ts).

export interface RetryOptions {
  /** attempts in all, the first included (calls: 8; streams reconnect without limit) */
  maxAttempts?: number
  /** delay before the first retry (default 200 ms); doubles per retry */
  initialDelayMs?: number
  /** ceiling of one delay (default 8000 ms for calls, 5000 ms for stream reconnects) */
  maxDelayMs?: number
}

/** Delay before retry number `retry` (1-based): initial·2^(retry-1), capped, with ±25 % jitter. */
export function backoffDelay(retry: number, o: RetryOptions, random: () => number = Math.random): number {
  const initial = o.initialDelayMs ?? 200
  const max = o.maxDelayMs ?? 8000
  const base = Math.min(max, initial * 2 ** Math.max(0, retry - 1))
  return Math.round(base * (0.75 + random() * 0.5))
}

/** `Retry-After` in milliseconds, or undefined when absent or unreadable. */
export function parseRetryAfter(value: string | null | undefined, now = Date.now()): number | undefined {
  if (!value) return undefined
  const v = value.trim()
  if (/^\d+(\.\d+)?$/.test(v)) return Math.round(Number(v) * 1000)
  const at = Date.parse(v)
  return Number.isNaN(at) ? undefined : Math.max(0, at - now)
}

/** The reason an aborted signal carries, as something throwable. */
export function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException('The operation was aborted', 'AbortError')
}

/** Resolves after `ms`; rejects with the signal's reason as soon as it aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortReason(signal))
    const done = () => {
      signal?.removeEventListener('abort', onAbort)
      resolve()
    }
    const timer = setTimeout(done, ms)
    const onAbort = () => {
      clearTimeout(timer)
      reject(abortReason(signal!))
    }
    signal?.addEventListener('abort', onAbort, { once: true })
  })
}

/** A signal that aborts when `parent` does or after `timeoutMs`; `dispose` detaches it. */
export function linkedSignal(parent: AbortSignal | undefined, timeoutMs?: number): { signal: AbortSignal; abort(reason?: unknown): void; dispose(): void } {
  const ac = new AbortController()
  const onAbort = () => ac.abort(abortReason(parent!))
  if (parent?.aborted) ac.abort(abortReason(parent))
  else parent?.addEventListener('abort', onAbort, { once: true })
  const timer = timeoutMs === undefined ? undefined : setTimeout(() => ac.abort(new DOMException(`no answer within ${timeoutMs} ms`, 'TimeoutError')), timeoutMs)
  return {
    signal: ac.signal,
    abort: (reason) => ac.abort(reason),
    dispose() {
      if (timer !== undefined) clearTimeout(timer)
      parent?.removeEventListener('abort', onAbort)
    },
  }
}
