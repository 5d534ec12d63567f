// The console's only door to the server: the HTTP routes of API.md §4–§7 and the SSE stream of §6.
// Everything else in web/ calls this client and never builds a URL; a later issue swaps these
// internals for the browser build of the project's TypeScript SDK behind the same interface.

/** An error answer of the API (API.md §10), or `network` when the server did not answer. */
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

const enc = encodeURIComponent
const query = (params) => {
  const q = Object.entries(params)
    .filter(([, v]) => v !== undefined && v !== null)
    .map(([k, v]) => `${k}=${enc(v)}`)
  return q.length ? `?${q.join('&')}` : ''
}

/**
 * A client for one API key. Every method returns the answer's JSON body (undefined for 204) or
 * rejects with an ApiError.
 */
export function createClient({ apiKey, baseUrl = '' }) {
  const session = (id, rest = '') => `${baseUrl}/v1/sessions/${enc(id)}${rest}`

  async function call(method, url, body) {
    const headers = { authorization: `Bearer ${apiKey}` }
    const init = { method, headers }
    if (body !== undefined) {
      headers['content-type'] = 'application/json'
      init.body = JSON.stringify(body)
    }
    let res
    try {
      res = await fetch(url, init)
    } catch (e) {
      throw new ApiError('network', `the server did not answer (${e.message})`, 0)
    }
    const text = await res.text()
    let json
    try {
      json = text ? JSON.parse(text) : undefined
    } catch {
      json = undefined
    }
    if (!res.ok) {
      const err = json && json.error
      throw new ApiError(err?.code ?? `http-${res.status}`, err?.message ?? (text || res.statusText), res.status, err?.details)
    }
    return json
  }

  return {
    // §4 sessions
    listSessions: ({ limit, cursor } = {}) => call('GET', `${baseUrl}/v1/sessions${query({ limit, cursor })}`),
    createSession: (body = {}) => call('POST', `${baseUrl}/v1/sessions`, body),
    getSession: (id) => call('GET', session(id)),
    updateSession: (id, patch) => call('PATCH', session(id), patch),
    // §5 input; `kind` is the route: followup | steer | inject; `messageId` makes it safe to repeat
    deliver: (id, kind, content, { messageId } = {}) => call('POST', session(id, `/${kind}`), { content, ...(messageId ? { id: messageId } : {}) }),
    cancel: (id, { keepInbox } = {}) => call('POST', session(id, '/cancel'), keepInbox === undefined ? {} : { keepInbox }),
    inbox: (id) => call('GET', session(id, '/inbox')),
    removeFromInbox: (id, messageId) => call('DELETE', session(id, `/inbox/${enc(messageId)}`)),
    // §7 tools that wait for someone
    pending: (id) => call('GET', session(id, '/pending')),
    sendToolResult: (id, { callId, content, isError }) => call('POST', session(id, '/tool-results'), { callId, content, ...(isError ? { isError: true } : {}) }),
    answerApproval: (id, callId, { decision, reason }) => call('POST', session(id, `/approvals/${enc(callId)}`), { decision, ...(reason ? { reason } : {}) }),
    // §6 reading
    events: (id, { after, limit } = {}) => call('GET', session(id, `/events${query({ after, limit })}`)),
    stream: (id, handlers) => openStream(session(id, '/stream'), apiKey, () => call('GET', session(id)), handlers),
  }
}

const LIVE_FRAMES = ['stream/ready', 'agent/status', 'agent/session-start', 'agent/inbox/inserted', 'agent/inbox/claimed', 'agent/inbox/discarded', 'agent/assistant-stream', 'agent/error', 'stream/error']

/**
 * Follows a session's stream (API.md §6): every durable event with seq > `after`, once and in order,
 * across reconnects, then live frames. Handlers:
 *   onEvent(sessionEvent)      durable events
 *   onFrame(name, data)        live frames (LIVE_FRAMES)
 *   onState(state, error?)     'connecting' | 'live' | 'reconnecting' | 'failed' (for good: 401, 404)
 * Returns `{close()}`.
 */
function openStream(url, apiKey, probe, { after = -1, onEvent, onFrame, onState }) {
  let lastSeq = after
  let es = null
  let closed = false
  let retryTimer = 0
  let retryDelay = 1000

  const connect = () => {
    if (closed) return
    // a fresh EventSource carries no Last-Event-ID: resume with ?after= instead
    const mine = new EventSource(`${url}?access_token=${enc(apiKey)}${lastSeq >= 0 ? `&after=${lastSeq}` : ''}`)
    es = mine
    onState('connecting')
    const json = (fn) => (e) => {
      if (closed || es !== mine) return
      let data
      try {
        data = JSON.parse(e.data)
      } catch {
        return
      }
      fn(data)
    }
    mine.addEventListener('open', () => {
      if (closed || es !== mine) return
      retryDelay = 1000
      onState('live')
    })
    mine.addEventListener(
      'session/event',
      json((ev) => {
        // at most once per seq, whatever a reconnect sends again
        if (typeof ev.seq !== 'number' || ev.seq <= lastSeq) return
        lastSeq = ev.seq
        onEvent(ev)
      }),
    )
    for (const name of LIVE_FRAMES) mine.addEventListener(name, json((data) => onFrame(name, data)))
    mine.addEventListener('error', () => {
      if (closed || es !== mine) return
      // the browser reconnects by itself, sending Last-Event-ID
      if (mine.readyState === EventSource.CONNECTING) return onState('reconnecting')
      // closed for good (an HTTP error): find out why, then retry with backoff unless it is final
      mine.close()
      onState('reconnecting')
      probe().then(
        () => retry(),
        (err) => {
          if (closed) return
          if (err.status === 401 || err.status === 404) onState('failed', err)
          else retry()
        },
      )
    })
  }
  const retry = () => {
    if (closed) return
    clearTimeout(retryTimer)
    retryTimer = setTimeout(connect, retryDelay)
    retryDelay = Math.min(retryDelay * 2, 15000)
  }
  connect()
  return {
    close() {
      closed = true
      clearTimeout(retryTimer)
      es?.close()
    },
  }
}
