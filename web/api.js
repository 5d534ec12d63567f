// The console's only door to the server: a thin adapter over the project's SDK (@agentd/client), whose
// browser build agentd serves at /console/sdk/. The SDK does the HTTP and the stream — auth, API.md §10
// errors, retries, idempotency keys on every send, resume with Last-Event-ID, each durable event once,
// no stream chunk twice after a snapshot (API.md §5, §6); this file only keeps the shapes the other
// console modules use, and never calls fetch or EventSource itself.

import { AgentdClient, AgentdError, expandRecords } from './sdk/index.js'

/** The compact stream records of a snapshot (SPEC §9.4) as chunks, for the streaming bubble (live.js). */
export { expandRecords }

/** An error answer of the API (API.md §10), or `network-error` when the server did not answer. */
export class ApiError extends Error {
  constructor(code, message, status, details) {
    super(message)
    this.code = code
    this.status = status
    this.details = details
  }
  toString() {
    const details = Array.isArray(this.details) && this.details.length ? ` (${this.details.map((d) => `${d.path}: ${d.message}`).join('; ')})` : ''
    return `${this.code}: ${this.message}${details}`
  }
}

/** The SDK's error as the console shows it; anything else (an abort, a bug) as it is. */
const asApiError = (e) => (e instanceof AgentdError ? Object.assign(new ApiError(e.code, e.message, e.status, e.details), { cause: e }) : e)

/**
 * A client for one credential: a tenant API key (`agd_…`) or a token (API.md §18). Every method returns
 * the answer's JSON body (undefined when it has none) or rejects with an ApiError.
 */
export function createClient({ credential, baseUrl = location.origin }) {
  const sdk = new AgentdClient({ baseUrl, ...(credential.startsWith('agd_') ? { apiKey: credential } : { token: credential }) })
  const wrap = (fn) => async (...args) => {
    try {
      return await fn(...args)
    } catch (e) {
      throw asApiError(e)
    }
  }

  return {
    // §4 sessions
    listSessions: wrap(({ limit, cursor } = {}) => sdk.sessions.page({ limit, cursor })),
    createSession: wrap((body = {}) => sdk.sessions.create(body)),
    getSession: wrap((id) => sdk.sessions.get(id)),
    updateSession: wrap((id, patch) => sdk.sessions.update(id, patch)),
    // §16 agents; a session is made from one with createSession({agent})
    listAgents: wrap(({ limit, cursor } = {}) => sdk.agents.page({ limit, cursor })),
    // §5 input; `kind` is the route: followup | steer | inject. The SDK sends an idempotency key (or
    // `messageId`, the message's own id) and repeats the send through failures: never lost, never doubled
    deliver: wrap((id, kind, content, { messageId } = {}) => sdk.send(kind, id, content, messageId ? { id: messageId } : {})),
    cancel: wrap((id, { keepInbox } = {}) => sdk.cancel(id, { keepInbox })),
    inbox: wrap((id) => sdk.inbox(id)),
    removeFromInbox: wrap((id, messageId) => sdk.removeFromInbox(id, messageId)),
    // §7 tools that wait for someone
    pending: wrap(async (id) => ({ toolCalls: await sdk.pending(id) })),
    sendToolResult: wrap((id, { callId, content, isError }) => sdk.submitToolResult(id, { callId, content, ...(isError ? { isError: true } : {}) })),
    answerApproval: wrap((id, callId, { decision, reason }) => sdk.decide(id, callId, { decision, ...(reason ? { reason } : {}) })),
    // §6 reading
    events: wrap((id, { after, limit } = {}) => sdk.events(id, { after, limit })),
    stream: (id, handlers) => follow(sdk, id, handlers),
    /**
     * Any other route (secrets, webhooks, usage, …): `request('PUT', '/v1/…', body)`. GET is repeated
     * through failures, PUT too (it is idempotent), other methods only when nothing reached the server.
     */
    request: wrap((method, path, body) => sdk.request(method, path, body === undefined ? {} : { body })),
  }
}

/** A handler's failure is reported as the page's error, without ending the stream that called it. */
function call(fn, ...args) {
  try {
    fn?.(...args)
  } catch (e) {
    queueMicrotask(() => {
      throw e
    })
  }
}

/**
 * Follows a session's stream (API.md §6) through `client.stream()`: every durable event with
 * seq > `after`, once and in order, across reconnects, then live frames. Handlers:
 *   onEvent(sessionEvent)      durable events
 *   onFrame(name, data)        live frames (stream/ready, agent/status, agent/assistant-stream, …)
 *   onState(state, error?)     'connecting' | 'live' | 'reconnecting' | 'failed' (for good: 401, 404, …)
 * Returns `{close()}`.
 */
function follow(sdk, id, { after = -1, onEvent, onFrame, onState }) {
  // no Last-Event-ID on the first connection unless there is something to resume after
  const stream = sdk.stream(id, after >= 0 ? { after } : {})
  let closed = false
  call(onState, 'connecting')
  void (async () => {
    try {
      for await (const f of stream) {
        if (closed) return
        if (f.event === 'session/event') call(onEvent, f.data)
        else if (f.event === 'client/reconnecting') call(onState, 'reconnecting')
        else if (f.event !== 'unknown') {
          // the backlog of this connection is in: from here on it is live
          if (f.event === 'stream/ready') call(onState, 'live')
          call(onFrame, f.event, f.data)
        }
      }
    } catch (e) {
      // the SDK ends the stream only when reconnecting cannot help (a bad key, a missing session)
      if (!closed) call(onState, 'failed', asApiError(e))
    }
  })()
  return {
    close() {
      closed = true
      stream.close()
    },
  }
}
