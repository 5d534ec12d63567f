// What API.md §10 says an error answer is, written here from the contract (not imported from the
// server), so the checks would catch the server drifting from it.

/** API.md §10: each code and the one status it comes with. */
export const ERROR_STATUS: Record<string, number> = {
  'bad-request': 400,
  unauthorized: 401,
  forbidden: 403,
  'session-not-found': 404,
  'not-found': 404,
  'session-busy': 409,
  'session-conflict': 409,
  'idempotency-conflict': 409,
  'queue-item-not-found': 409,
  'tool-call-not-pending': 409,
  'fork-unavailable': 409,
  'secrets-unavailable': 409,
  'payload-too-large': 413,
  'unsupported-media-type': 415,
  'model-unavailable': 422,
  'rate-limited': 429,
  internal: 500,
  unavailable: 503,
}

/** Why an answer of status ≥ 400 breaks §10's shape, else undefined. `head` answers carry no body. */
export function errorShapeViolation(status: number, body: unknown, opts: { head?: boolean; retryAfter?: string | null } = {}): string | undefined {
  if (status < 400) return undefined
  if (opts.head) return undefined
  if (!body || typeof body !== 'object' || Array.isArray(body)) return `status ${status} without a JSON object body`
  const keys = Object.keys(body)
  if (keys.length !== 1 || keys[0] !== 'error') return `status ${status}: body keys ${JSON.stringify(keys)}, expected only "error"`
  const e = (body as { error: unknown }).error as Record<string, unknown>
  if (!e || typeof e !== 'object') return `status ${status}: error is not an object`
  for (const k of Object.keys(e)) if (!['code', 'message', 'details'].includes(k)) return `status ${status}: unexpected error field ${k}`
  if (typeof e.code !== 'string' || !(e.code in ERROR_STATUS)) return `status ${status}: code ${JSON.stringify(e.code)} is not one of API.md §10`
  if (ERROR_STATUS[e.code] !== status) return `status ${status} with code ${e.code}, which §10 gives ${ERROR_STATUS[e.code]}`
  if (typeof e.message !== 'string' || !e.message) return `status ${status}: no message`
  if (e.details !== undefined) {
    if (!Array.isArray(e.details)) return `status ${status}: details is not a list`
    for (const d of e.details as Array<Record<string, unknown>>) if (!d || typeof d.path !== 'string' || typeof d.message !== 'string') return `status ${status}: a detail is not {path, message}`
  }
  if ((status === 429 || status === 503) && opts.retryAfter !== undefined && !opts.retryAfter) return `status ${status} without Retry-After`
  return undefined
}

/** The JSON-RPC endpoints of the client protocols (API.md §17.4, §17.5): their errors take JSON-RPC's shape. */
export const isJsonRpcRoute = (method: string, path: string) => /^\/v1\/mcp(\?|$)/.test(path) || (method === 'POST' && /^\/v1\/a2a\/[^/?]+(\?|$)/.test(path))

/**
 * Why a JSON-RPC endpoint's answer breaks its contract, else undefined: a JSON-RPC 2.0 response object
 * (`result`, or `error {code: integer, message}`); an error the HTTP layer gave (status ≥ 400) carries
 * API.md §10's code in `error.data.code`, with §10's status. The MCP transport's own refusals (406 for a
 * client that does not accept both answers, 405) name no §10 code.
 */
export function jsonRpcShapeViolation(status: number, body: unknown): string | undefined {
  if (status === 202 && body === undefined) return undefined // an MCP notification accepted
  // what the server refuses before it knows the route (see openAiShapeViolation) gets §10's answer
  if (status === 400 && errorShapeViolation(status, body) === undefined && ['request', 'url', 'params'].includes((body as { error: { details?: Array<{ path: string }> } }).error.details?.[0]?.path ?? '')) return undefined
  if (!body || typeof body !== 'object' || Array.isArray(body)) return `status ${status} without a JSON-RPC response object`
  const r = body as { jsonrpc?: unknown; id?: unknown; result?: unknown; error?: { code?: unknown; message?: unknown; data?: { code?: unknown } } }
  if (r.jsonrpc !== '2.0') return `status ${status}: jsonrpc is ${JSON.stringify(r.jsonrpc)}`
  if (!('id' in r)) return `status ${status}: no id`
  if (('result' in r) === ('error' in r)) return `status ${status}: exactly one of result and error is required`
  if (r.error) {
    if (!Number.isInteger(r.error.code)) return `status ${status}: error.code is not an integer`
    if (typeof r.error.message !== 'string') return `status ${status}: error.message is not a string`
    const code = r.error.data?.code
    if (status >= 400 && typeof code === 'string' && ERROR_STATUS[code] !== status) return `status ${status} with data.code ${code}, which §10 gives ${ERROR_STATUS[code]}`
  } else if (status >= 400) return `status ${status} with a result`
  return undefined
}

/** The OpenAI-compatible routes (API.md §17.1), as the router matches them (it resolves no dot segments): their errors take OpenAI's shape. */
export function isOpenAiRoute(method: string, path: string): boolean {
  // the routes of API.md §17.1 by method; an empty id before a sub-route still reaches it (`/v1/responses//cancel`)
  const routes: Record<string, RegExp[]> = {
    POST: [/^\/v1\/(responses|conversations)$/, /^\/v1\/responses\/[^/]*\/cancel$/],
    GET: [/^\/v1\/(responses|conversations)\/[^/]+$/, /^\/v1\/responses\/[^/]*\/input_items$/, /^\/v1\/conversations\/[^/]*\/items$/],
    DELETE: [/^\/v1\/conversations\/[^/]+$/],
  }
  const p = path.split('?')[0]
  return (routes[method] ?? []).some((r) => r.test(p))
}

/**
 * Why an OpenAI-compatible route's error answer breaks its contract (API.md §17.1, §10), else undefined:
 * `{error: {message, type, param, code}}` — a non-empty message, OpenAI's error type, `param` the field at
 * fault or null, and `code` §10's code with §10's status (so the typed errors of OpenAI's client follow).
 */
export function openAiShapeViolation(status: number, body: unknown, opts: { head?: boolean; retryAfter?: string | null } = {}): string | undefined {
  if (status < 400 || opts.head) return undefined
  // what the server refuses before it knows the route — a request that is not HTTP, a URL it cannot read,
  // a path parameter over the length limit — gets §10's answer, as on every route (docs/protocols.md)
  if (status === 400 && errorShapeViolation(status, body) === undefined && ['request', 'url', 'params'].includes((body as { error: { details?: Array<{ path: string }> } }).error.details?.[0]?.path ?? '')) return undefined
  if (!body || typeof body !== 'object' || Array.isArray(body)) return `status ${status} without a JSON object body`
  const keys = Object.keys(body)
  if (keys.length !== 1 || keys[0] !== 'error') return `status ${status}: body keys ${JSON.stringify(keys)}, expected only "error"`
  const e = (body as { error: Record<string, unknown> }).error
  if (!e || typeof e !== 'object') return `status ${status}: error is not an object`
  for (const k of Object.keys(e)) if (!['message', 'type', 'param', 'code'].includes(k)) return `status ${status}: unexpected error field ${k}`
  if (typeof e.message !== 'string' || !e.message) return `status ${status}: no message`
  if (typeof e.type !== 'string' || !e.type) return `status ${status}: no type`
  if (e.param !== null && typeof e.param !== 'string') return `status ${status}: param is neither a string nor null`
  if (typeof e.code !== 'string' || !(e.code in ERROR_STATUS)) return `status ${status}: code ${JSON.stringify(e.code)} is not one of API.md §10`
  if (ERROR_STATUS[e.code] !== status) return `status ${status} with code ${e.code}, which §10 gives ${ERROR_STATUS[e.code]}`
  if ((status === 429 || status === 503) && opts.retryAfter !== undefined && !opts.retryAfter) return `status ${status} without Retry-After`
  return undefined
}

/** The contract an answer of `method path` is held to: a protocol's own error shape where it has one (API.md §17), else §10's. */
export function shapeViolation(method: string, path: string, status: number, body: unknown, opts: { head?: boolean; retryAfter?: string | null } = {}): string | undefined {
  if (isJsonRpcRoute(method, path)) return jsonRpcShapeViolation(status, body)
  if (isOpenAiRoute(method, path)) return openAiShapeViolation(status, body, opts)
  return errorShapeViolation(status, body, opts)
}

/**
 * The fields a 400 names, in §10's path form (`body.x`, `querystring.x`, `params.x`, `url`): from
 * `details`, from JSON-RPC's `error.data.details`, or from OpenAI's `param` (which names a body field
 * bare, as OpenAI does).
 */
export function errorPaths(method: string, path: string, body: any): string[] {
  if (isJsonRpcRoute(method, path)) return (body?.error?.data?.details ?? body?.error?.details ?? []).map((d: { path: string }) => d.path)
  if (isOpenAiRoute(method, path) && body?.error && !('details' in body.error)) {
    const p = body.error.param
    if (typeof p !== 'string') return []
    return [/^(body|url|params|querystring|headers)(\.|$)/.test(p) ? p : `body.${p}`]
  }
  return (body?.error?.details ?? []).map((d: { path: string }) => d.path)
}
