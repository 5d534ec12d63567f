// Sees the HTTP status and headers of the provider calls made inside one adapter call. pi-ai calls
// `onResponse` only for successful responses and turns an HTTP error into bare message text, so the
// `Retry-After` and request-id headers of a 429 would otherwise be lost (SPEC §8.11). Node's fetch
// (undici) publishes every request on diagnostics channels; we tag requests created inside an
// AsyncLocalStorage scope and record the response head. Purely passive: nothing is changed.
//
// The scope is held open only for a call's *window*: from the call's start until it creates its
// request to the model's own origin (or until its first event or its end, should that come first).
// On Node 20 an enabled AsyncLocalStorage runs a hook on every promise of the process, so the
// storage is disabled whenever no window is open: the hook then costs nothing while calls stream,
// which is nearly all of their life. A model without an HTTP origin (faux/echo, a provider served in
// this process) opens no window at all: it has no request of its own to observe, and its window
// would have held the hook on for every promise of every session until its first event (measured:
// 14 % of the server's CPU per turn at 10 sessions). A request made after its window closed is not
// observed (a redirect, say); its failure is still classified from the message text.

import { AsyncLocalStorage } from 'node:async_hooks'
import dc from 'node:diagnostics_channel'

export interface HttpObservation {
  status?: number
  /** lower-case header names */
  headers?: Record<string, string>
}

/** One adapter call's window: requests created inside it are this observation's. */
interface Window {
  readonly obs: HttpObservation
  /** the model's origin (`https://host:port`); the request to it closes the window */
  readonly origin: string | undefined
  closed: boolean
}

const scope = new AsyncLocalStorage<Window>()
const owners = new WeakMap<object, HttpObservation>()
let subscribed = false
/** windows not yet closed; the storage is enabled exactly while this is above 0 */
let open = 0

function closeWindow(w: Window): void {
  if (w.closed) return
  w.closed = true
  if (--open === 0) scope.disable()
}

function subscribe(): void {
  if (subscribed) return
  subscribed = true
  dc.subscribe('undici:request:create', (msg) => {
    const w = scope.getStore()
    const request = (msg as { request?: { origin?: unknown } }).request
    // a store left on an older async resource after its window closed is not a window any more
    if (!w || w.closed || !request) return
    owners.set(request, w.obs)
    if (w.origin !== undefined && String(request.origin) === w.origin) closeWindow(w)
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

function originOf(baseUrl: string | undefined): string | undefined {
  if (!baseUrl) return undefined
  try {
    const o = new URL(baseUrl).origin
    return o === 'null' ? undefined : o
  } catch {
    return undefined
  }
}

/** An open observation window; `close()` is idempotent and must be called when the call has its first event or ends. */
export interface HttpWindow<T> {
  value: T
  close(): void
}

/**
 * Runs `fn` so that HTTP responses of requests it starts (synchronously or later, while the window is
 * open) land in `obs`. `baseUrl` is the model's: its origin's request closes the window by itself;
 * without one (no HTTP origin) `fn` just runs.
 */
export function observeHttp<T>(obs: HttpObservation, baseUrl: string | undefined, fn: () => T): HttpWindow<T> {
  const origin = originOf(baseUrl)
  if (origin === undefined) return { value: fn(), close: () => {} }
  subscribe()
  const w: Window = { obs, origin, closed: false }
  open++
  try {
    return { value: scope.run(w, fn), close: () => closeWindow(w) }
  } catch (e) {
    closeWindow(w)
    throw e
  }
}

/** Windows open now (tests). */
export function openHttpWindows(): number {
  return open
}
