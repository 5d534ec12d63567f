// Sees the HTTP status and headers of the provider calls made inside one adapter call. pi-ai calls
// `onResponse` only for successful responses and turns an HTTP error into bare message text, so the
// `Retry-After` and request-id headers of a 429 would otherwise be lost (SPEC §8.11). Node's fetch
// (undici) publishes every request on diagnostics channels; we tag requests created inside an
// AsyncLocalStorage scope and record the response head. Purely passive: nothing is changed.

import { AsyncLocalStorage } from 'node:async_hooks'
import dc from 'node:diagnostics_channel'

export interface HttpObservation {
  status?: number
  /** lower-case header names */
  headers?: Record<string, string>
}

const scope = new AsyncLocalStorage<HttpObservation>()
const owners = new WeakMap<object, HttpObservation>()
let subscribed = false

function subscribe(): void {
  if (subscribed) return
  subscribed = true
  dc.subscribe('undici:request:create', (msg) => {
    const obs = scope.getStore()
    const request = (msg as { request?: object }).request
    if (obs && request) owners.set(request, obs)
  })
  dc.subscribe('undici:request:headers', (msg) => {
    const { request, response } = msg as { request?: object; response?: { statusCode?: number; headers?: unknown[] } }
    const obs = request ? owners.get(request) : undefined
    if (!obs || !response) return
    obs.status = response.statusCode
    const headers: Record<string, string> = {}
    const raw = response.headers ?? []
    for (let i = 0; i + 1 < raw.length; i += 2) headers[String(raw[i]).toLowerCase()] = String(raw[i + 1])
    obs.headers = headers
  })
}

/** Runs `fn` so that HTTP responses of requests it starts (synchronously or later) land in `obs`. */
export function observeHttp<T>(obs: HttpObservation, fn: () => T): T {
  subscribe()
  return scope.run(obs, fn)
}
