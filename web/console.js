// agentd web console: a dependency-free page that lists sessions, renders a session's durable log as a
// transcript and follows it live over Server-Sent Events (API.md §6). Every piece of text from the
// server is set with textContent, never parsed as HTML.

const KEY_STORAGE = 'agentd.apiKey'
const PAGE_SIZE = 30

const $ = (id) => document.getElementById(id)

/** Builds an element. `attrs` keys: class, text, title, dataset (object), on<event> handlers, others as attributes. */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag)
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue
    if (k === 'class') el.className = v
    else if (k === 'text') el.textContent = String(v)
    else if (k === 'dataset') Object.assign(el.dataset, v)
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v)
    else if (v === true) el.setAttribute(k, '')
    else el.setAttribute(k, String(v))
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue
    el.append(c instanceof Node ? c : document.createTextNode(String(c)))
  }
  return el
}

// ------------------------------------------------------------------------------------------------
// API

class ApiFailure extends Error {
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

const state = {
  key: localStorage.getItem(KEY_STORAGE) ?? '',
  sessions: [],
  nextCursor: null,
  listGen: 0,
  view: null,
}

async function api(method, path, body) {
  const headers = { authorization: `Bearer ${state.key}` }
  const init = { method, headers }
  if (body !== undefined) {
    headers['content-type'] = 'application/json'
    init.body = JSON.stringify(body)
  }
  let res
  try {
    res = await fetch(path, init)
  } catch (e) {
    throw new ApiFailure('network', `the server did not answer (${e.message})`, 0)
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
    throw new ApiFailure(err?.code ?? `http-${res.status}`, err?.message ?? (text || res.statusText), res.status, err?.details)
  }
  return json
}

const sessionPath = (id, rest = '') => `/v1/sessions/${encodeURIComponent(id)}${rest}`

function showError(el, err) {
  if (!err) {
    el.hidden = true
    el.textContent = ''
    return
  }
  el.hidden = false
  el.textContent = String(err)
}

// ------------------------------------------------------------------------------------------------
// Formatting

function relTime(iso) {
  const t = Date.parse(iso)
  if (!Number.isFinite(t)) return ''
  const s = Math.round((Date.now() - t) / 1000)
  if (s < 5) return 'just now'
  if (s < 60) return `${s}s ago`
  if (s < 3600) return `${Math.floor(s / 60)} min ago`
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`
  return new Date(t).toLocaleDateString()
}

const clock = (ms) => new Date(ms).toLocaleTimeString()

function fmtUsage(u) {
  if (!u) return ''
  const n = (x) => (x ?? 0).toLocaleString()
  const cost = typeof u.costUsd === 'number' ? ` · $${u.costUsd.toFixed(4)}` : ''
  return `in ${n(u.inputTokens)} · out ${n(u.outputTokens)} · cache ${n(u.cacheReadTokens)}/${n(u.cacheWriteTokens)}${cost}`
}

function fmtCause(c) {
  if (!c) return ''
  return c.kind === 'hook' && c.reason ? `hook: ${c.reason}` : c.kind
}

function fmtReason(r) {
  if (!r) return 'ended'
  switch (r.kind) {
    case 'aborted':
      return `aborted (${fmtCause(r.reason)})`
    case 'error':
      return `error: ${r.error?.code ?? ''} ${r.error?.message ?? ''}`.trim()
    default:
      return r.kind
  }
}

const textOf = (blocks) => (Array.isArray(blocks) ? blocks : []).map((b) => (b.type === 'text' || b.type === 'reasoning' ? b.text : b.type === 'image' ? '[image]' : '')).join('')

function fmtJson(raw) {
  if (typeof raw !== 'string') return JSON.stringify(raw, null, 2)
  try {
    return JSON.stringify(JSON.parse(raw), null, 2)
  } catch {
    return raw
  }
}

// ------------------------------------------------------------------------------------------------
// API key

function initKey() {
  const input = $('api-key')
  input.value = state.key
  $('key-form').addEventListener('submit', (e) => {
    e.preventDefault()
    state.key = input.value.trim()
    localStorage.setItem(KEY_STORAGE, state.key)
    $('key-status').textContent = state.key ? 'saved' : ''
    $('key-status').dataset.state = 'ok'
    void refreshSessions()
    if (state.view) openSession(state.view.id)
  })
}

function keyProblem(err) {
  if (err instanceof ApiFailure && err.status === 401) {
    $('key-status').textContent = 'key rejected'
    $('key-status').dataset.state = 'bad'
    return true
  }
  return false
}

// ------------------------------------------------------------------------------------------------
// Session list

function sessionItem(s) {
  const active = state.view?.id === s.id
  return h(
    'li',
    { class: `session-item${active ? ' active' : ''}`, dataset: { id: s.id } },
    h(
      'button',
      { type: 'button', class: 'session-link', onclick: () => selectSession(s.id) },
      h('span', { class: 'session-line' }, h('span', { class: 'session-name', text: s.title ?? '(untitled)' }), h('span', { class: 'badge small', dataset: { status: s.status }, text: s.status })),
      h('span', { class: 'session-line muted small' }, h('span', { class: 'mono', text: s.id }), h('span', { title: s.updatedAt, text: relTime(s.updatedAt) })),
      h('span', { class: 'session-line muted small' }, h('span', { class: 'mono', text: s.model }), h('span', { class: 'mono', title: 'headSeq: seq of the last durable event', text: s.headSeq < 0 ? 'empty' : `#${s.headSeq}` })),
    ),
  )
}

function renderSessions() {
  const list = $('session-list')
  list.replaceChildren(...state.sessions.map(sessionItem))
  $('sessions-empty').hidden = state.sessions.length > 0 || !state.key
  $('load-more').hidden = !state.nextCursor
}

async function refreshSessions() {
  if (!state.key) {
    state.sessions = []
    state.nextCursor = null
    renderSessions()
    return
  }
  const gen = ++state.listGen
  try {
    const limit = Math.min(200, Math.max(PAGE_SIZE, state.sessions.length))
    const r = await api('GET', `/v1/sessions?limit=${limit}`)
    if (gen !== state.listGen) return // a newer refresh or page answers
    state.sessions = r.sessions
    state.nextCursor = r.nextCursor
    showError($('sessions-error'), null)
    if ($('key-status').dataset.state === 'bad') $('key-status').textContent = ''
  } catch (e) {
    keyProblem(e)
    showError($('sessions-error'), e)
  }
  renderSessions()
}

async function loadMore() {
  if (!state.nextCursor) return
  const gen = ++state.listGen
  try {
    const r = await api('GET', `/v1/sessions?limit=${PAGE_SIZE}&cursor=${encodeURIComponent(state.nextCursor)}`)
    if (gen !== state.listGen) return
    const seen = new Set(state.sessions.map((s) => s.id))
    state.sessions.push(...r.sessions.filter((s) => !seen.has(s.id)))
    state.nextCursor = r.nextCursor
    showError($('sessions-error'), null)
  } catch (e) {
    showError($('sessions-error'), e)
  }
  renderSessions()
}

let listTimer = 0
function refreshSessionsSoon() {
  clearTimeout(listTimer)
  listTimer = setTimeout(() => void refreshSessions(), 400)
}

function upsertListed(s) {
  const i = state.sessions.findIndex((x) => x.id === s.id)
  if (i >= 0) state.sessions[i] = s
  else state.sessions.unshift(s)
  renderSessions()
}

function initNewSession() {
  $('new-form').addEventListener('submit', async (e) => {
    e.preventDefault()
    const body = {}
    const model = $('new-model').value.trim()
    const system = $('new-system').value
    if (model) body.model = model
    if (system.trim()) body.system = system
    const btn = $('create-session')
    btn.disabled = true
    try {
      const s = await api('POST', '/v1/sessions', body)
      showError($('new-error'), null)
      $('new-system').value = ''
      upsertListed(s)
      selectSession(s.id)
      $('composer-input').focus()
    } catch (err) {
      keyProblem(err)
      showError($('new-error'), err)
    } finally {
      btn.disabled = false
    }
  })
  $('refresh-sessions').addEventListener('click', () => void refreshSessions())
  $('load-more').addEventListener('click', () => void loadMore())
}

// ------------------------------------------------------------------------------------------------
// Session view

function selectSession(id) {
  const hash = `#session=${encodeURIComponent(id)}`
  if (location.hash !== hash) location.hash = hash
  else openSession(id)
}

function currentHashSession() {
  const m = /^#session=(.+)$/.exec(location.hash)
  return m ? decodeURIComponent(m[1]) : null
}

function closeView() {
  const v = state.view
  if (!v) return
  v.closed = true
  v.es?.close()
  clearTimeout(v.retryTimer)
  clearTimeout(v.sessionTimer)
  clearTimeout(v.inboxTimer)
  clearTimeout(v.pendingTimer)
  state.view = null
}

function openSession(id) {
  closeView()
  const v = {
    id,
    session: null,
    es: null,
    closed: false,
    lastSeq: -1,
    status: 'idle',
    tools: new Map(), // callId -> tool card element
    transient: null,
    retryTimer: 0,
    retryDelay: 1000,
    sessionTimer: 0,
    inboxTimer: 0,
    pendingTimer: 0,
    gens: {}, // read generations: an older answer never overwrites a newer one
  }
  state.view = v
  $('welcome').hidden = true
  $('session-view').hidden = false
  $('transcript').replaceChildren()
  $('transient-slot').replaceChildren()
  $('session-id').textContent = id
  $('session-model').textContent = ''
  $('session-title').value = ''
  $('session-head').textContent = '-1'
  $('session-usage').textContent = ''
  setStatus(v, 'idle')
  showError($('composer-error'), null)
  showError($('live-error'), null)
  renderSessions()
  void loadSession(v)
  void refreshInbox(v)
  void refreshPending(v)
  connect(v)
}

async function loadSession(v) {
  const gen = (v.gens.session = (v.gens.session ?? 0) + 1)
  try {
    const s = await api('GET', sessionPath(v.id))
    if (v.closed || v.gens.session !== gen) return
    v.session = s
    $('session-model').textContent = s.model
    if (document.activeElement !== $('session-title')) $('session-title').value = s.title ?? ''
    $('session-usage').textContent = fmtUsage(s.usage)
    if (s.headSeq > v.lastSeq) $('session-head').textContent = String(s.headSeq)
    upsertListed(s)
  } catch (e) {
    if (v.closed) return
    keyProblem(e)
    showError($('live-error'), e)
  }
}

function soon(v, timer, fn, ms = 150) {
  clearTimeout(v[timer])
  v[timer] = setTimeout(() => !v.closed && void fn(v), ms)
}

function setStatus(v, status) {
  v.status = status
  const b = $('status-badge')
  b.textContent = status
  b.dataset.status = status
  const listed = state.sessions.find((s) => s.id === v.id)
  if (listed && listed.status !== status) {
    listed.status = status
    renderSessions()
  }
}

function setConn(stateName, text) {
  $('conn-dot').dataset.state = stateName
  $('conn-text').textContent = text
}

// --- the stream -----------------------------------------------------------------------------------

function connect(v) {
  if (v.closed) return
  if (!state.key) {
    setConn('off', 'no API key')
    return
  }
  let url = `${sessionPath(v.id, '/stream')}?access_token=${encodeURIComponent(state.key)}`
  // a fresh EventSource carries no Last-Event-ID: resume with ?after= instead
  if (v.lastSeq >= 0) url += `&after=${v.lastSeq}`
  const es = new EventSource(url)
  v.es = es
  setConn('connecting', 'connecting…')
  const json = (fn) => (e) => {
    if (v.closed || v.es !== es) return
    let data
    try {
      data = JSON.parse(e.data)
    } catch {
      return
    }
    fn(data, e)
  }
  es.addEventListener('open', () => {
    if (v.es !== es) return
    setConn('live', 'live')
    v.retryDelay = 1000
  })
  es.addEventListener('session/event', json((ev) => onDurable(v, ev)))
  es.addEventListener('stream/ready', json(() => {
    // a transient bubble from before a reconnect is stale: the snapshot that follows (if an attempt
    // is still streaming) rebuilds it
    dropTransient(v)
    setConn('live', 'live')
  }))
  es.addEventListener('agent/status', json((d) => {
    setStatus(v, d.status)
    if (d.status === 'idle') soon(v, 'sessionTimer', loadSession, 50)
  }))
  es.addEventListener('agent/assistant-stream', json((f) => onStreamFrame(v, f)))
  es.addEventListener('agent/session-start', json(() => dropTransient(v)))
  for (const name of ['agent/inbox/inserted', 'agent/inbox/claimed', 'agent/inbox/discarded']) es.addEventListener(name, json(() => soon(v, 'inboxTimer', refreshInbox)))
  es.addEventListener('agent/error', json((d) => {
    const err = d.error ?? {}
    showError($('live-error'), `turn ${d.turn ?? '?'} failed: ${err.code ?? 'error'}: ${err.message ?? ''}`)
  }))
  es.addEventListener('stream/error', json((d) => setConn('connecting', `stream dropped (${d.code}), reconnecting…`)))
  es.addEventListener('error', () => {
    if (v.closed || v.es !== es) return
    if (es.readyState === EventSource.CONNECTING) {
      // the browser reconnects by itself, sending Last-Event-ID
      setConn('connecting', 'reconnecting…')
      return
    }
    // closed for good (an HTTP error, e.g. 401/404): find out why, then retry with backoff
    es.close()
    setConn('off', 'disconnected')
    void api('GET', sessionPath(v.id)).then(
      () => scheduleReconnect(v),
      (err) => {
        if (v.closed) return
        keyProblem(err)
        showError($('live-error'), err)
        if (err.status !== 404 && err.status !== 401) scheduleReconnect(v)
      },
    )
  })
}

function scheduleReconnect(v) {
  if (v.closed) return
  clearTimeout(v.retryTimer)
  v.retryTimer = setTimeout(() => connect(v), v.retryDelay)
  v.retryDelay = Math.min(v.retryDelay * 2, 15000)
}

// --- durable events -------------------------------------------------------------------------------

function onDurable(v, ev) {
  // at most once per seq, whatever a reconnect sends again
  if (typeof ev.seq !== 'number' || ev.seq <= v.lastSeq) return
  v.lastSeq = ev.seq
  const wrap = $('transcript-wrap')
  const stick = wrap.scrollHeight - wrap.scrollTop - wrap.clientHeight < 80
  renderEvent(v, ev)
  $('session-head').textContent = String(ev.seq)
  if (stick) wrap.scrollTop = wrap.scrollHeight
  switch (ev.type) {
    case 'turn/end':
    case 'assistant/message':
    case 'assistant/attempt':
      soon(v, 'sessionTimer', loadSession, 200)
      refreshSessionsSoon()
      break
    case 'tool/call':
    case 'tool/result':
      soon(v, 'pendingTimer', refreshPending)
      break
    case 'agent/inbox/spliced':
      soon(v, 'inboxTimer', refreshInbox)
      break
  }
}

function item(ev, cls, ...children) {
  return h('li', { class: `item ${cls}`, dataset: { seq: ev.seq, type: ev.type }, title: `#${ev.seq} ${ev.type} · ${clock(ev.time)}` }, ...children)
}

function add(el) {
  $('transcript').append(el)
  return el
}

function rawLine(ev) {
  const text = JSON.stringify(ev.data)
  return item(ev, 'raw', h('span', { class: 'mono seq', text: `#${ev.seq}` }), h('span', { class: 'mono raw-type', text: ev.type }), h('span', { class: 'mono raw-data', text: text.length > 240 ? `${text.slice(0, 240)}…` : text }))
}

function contentBlocks(blocks) {
  const out = []
  for (const b of Array.isArray(blocks) ? blocks : []) {
    if (b.type === 'text') {
      if (b.text) out.push(h('div', { class: 'text', text: b.text }))
    } else if (b.type === 'reasoning') {
      if (b.text) out.push(h('details', { class: 'reasoning' }, h('summary', { text: 'Reasoning' }), h('div', { class: 'text', text: b.text })))
    } else if (b.type === 'tool-call') {
      out.push(h('div', { class: 'call-chip', title: b.arguments }, h('span', { text: '↳ calls ' }), h('span', { class: 'mono', text: b.name })))
    } else if (b.type === 'image') {
      out.push(h('div', { class: 'muted small', text: '[image]' }))
    } else if (b.type === 'tool-result') {
      out.push(h('div', { class: 'text', text: textOf(b.content) }))
    }
  }
  return out
}

function who(source, surfaceOp) {
  if (surfaceOp && typeof surfaceOp === 'object') return 'checkpoint'
  if (!source || source.kind === 'user') return 'You'
  if (source.kind === 'plugin') return `plugin · ${source.plugin ?? '?'}`
  return source.kind
}

function renderEvent(v, ev) {
  const d = ev.data ?? {}
  switch (ev.type) {
    case 'turn/start':
      add(item(ev, 'turn-start', h('span', { text: `Turn ${d.turn}` }), h('span', { class: 'muted small', text: clock(ev.time) })))
      return
    case 'turn/end':
      add(item({ ...ev }, `turn-end reason-${d.reason?.kind ?? 'unknown'}`, h('span', { class: 'turn-end-text', text: `Turn ${d.turn} ${fmtReason(d.reason)}` }))).dataset.reason = d.reason?.kind ?? ''
      return
    case 'system/message':
      add(item(ev, 'system', h('details', {}, h('summary', { text: 'System prompt' }), h('div', { class: 'text', text: textOf(d.message?.content) || '(empty)' }))))
      return
    case 'user/message':
      add(item(ev, `msg user${d.source?.kind && d.source.kind !== 'user' ? ' from-plugin' : ''}`, h('div', { class: 'who', text: who(d.source, ev.surfaceOp) }), h('div', { class: 'bubble' }, contentBlocks(d.content))))
      return
    case 'assistant/message': {
      dropTransientFor(v, d.turn, d.step)
      const m = d.message ?? {}
      const tags = [d.interrupted ? h('span', { class: 'tag warn', text: 'interrupted' }) : null, d.usage ? h('span', { class: 'muted small', text: `${d.usage.inputTokens ?? 0} in · ${d.usage.outputTokens ?? 0} out` }) : null]
      const body = contentBlocks(m.content)
      if (!body.length) body.push(h('div', { class: 'muted small', text: '(empty answer)' }))
      add(item(ev, 'msg assistant', h('div', { class: 'who' }, h('span', { text: m.source?.model ? `${m.source.provider}/${m.source.model}` : 'assistant' }), ...tags), h('div', { class: 'bubble' }, body)))
      return
    }
    case 'assistant/attempt': {
      dropTransientFor(v, d.turn, d.step)
      const fin = (d.stream ?? []).map((r) => (r.type === 'chunk' ? r.chunk : null)).find((c) => c && c.type === 'finish')
      const f = fin?.reason?.failure
      add(item(ev, 'note attempt', h('span', { text: f ? `attempt ${fin.reason.kind}: ${f.code ?? ''} ${f.message ?? ''}` : 'attempt settled without an answer' })))
      return
    }
    case 'tool/call': {
      const result = h('div', { class: 'tool-result pending-result', text: 'waiting for the result…' })
      const card = add(item(ev, 'tool', h('div', { class: 'tool-head' }, h('span', { class: 'tool-icon', text: '⚙' }), h('span', { class: 'mono tool-name', text: d.name }), h('span', { class: 'muted small mono', text: d.callId })), h('details', { class: 'tool-args' }, h('summary', { text: 'arguments' }), h('pre', { class: 'mono', text: fmtJson(d.arguments) })), result))
      v.tools.set(d.callId, { card, result })
      return
    }
    case 'tool/result': {
      const block = (d.message?.content ?? []).find((b) => b.type === 'tool-result') ?? {}
      const text = textOf(block.content)
      const el = h('div', { class: `tool-result${block.isError ? ' is-error' : ''}` }, block.isError ? h('span', { class: 'tag bad', text: d.error?.code ?? 'error' }) : null, h('span', { class: 'text', text: text || '(no output)' }))
      const callId = block.toolCallId ?? d.message?.source?.callId
      const t = v.tools.get(callId)
      if (t && !(ev.surfaceOp && typeof ev.surfaceOp === 'object')) {
        t.result.replaceWith(el)
        t.result = el
        t.card.classList.toggle('failed', !!block.isError)
        t.card.classList.add('done')
      } else add(item(ev, 'tool done', h('div', { class: 'tool-head' }, h('span', { class: 'tool-icon', text: '⚙' }), h('span', { class: 'muted small', text: ev.surfaceOp && typeof ev.surfaceOp === 'object' ? 'pruned result' : 'result' }), h('span', { class: 'muted small mono', text: callId ?? '' })), el))
      return
    }
    case 'llm/retry':
      add(item(ev, 'note', h('span', { text: `retry ${d.retry}${d.maxRetries ? `/${d.maxRetries}` : ''} in ${d.delayMs} ms: ${d.failure?.code ?? ''} ${d.failure?.message ?? ''}` })))
      return
    case 'compaction/summary':
      add(item(ev, 'note compaction', h('details', {}, h('summary', { text: `Compacted ${d.shadowedSeqs?.length ?? 0} events (${d.shadowedTokenCount ?? '?'} tokens)` }), h('div', { class: 'text', text: d.summary ?? '' }))))
      return
    case 'compaction/end':
      if (d.error) add(item(ev, 'note', h('span', { text: `compaction failed: ${d.error}` })))
      else add(rawLine(ev))
      return
    case 'compaction/prune':
      add(item(ev, 'note', h('span', { text: `pruned ${d.shadowedSeqs?.length ?? 0} tool results (${d.shadowedTokenCount ?? '?'} tokens)` })))
      return
    case 'agent/inbox/spliced':
      if (d.outcome === 'canceled') add(item(ev, 'note', h('span', { text: `removed ${d.removedCount ?? 0} queued message(s) from ${d.target}` })))
      else add(rawLine(ev))
      return
    default:
      add(rawLine(ev))
  }
}

// --- live assistant stream --------------------------------------------------------------------------

function dropTransient(v) {
  v.transient?.el.remove()
  v.transient = null
}

function dropTransientFor(v, turn, step) {
  if (v.transient && v.transient.turn === turn && v.transient.step === step) dropTransient(v)
}

function newTransient(v, f) {
  dropTransient(v)
  const blocks = h('div', { class: 'bubble' })
  const el = h('div', { class: 'item msg assistant transient', dataset: { attempt: f.attemptId } }, h('div', { class: 'who' }, h('span', { text: 'assistant' }), h('span', { class: 'typing', text: 'streaming' })), blocks)
  $('transient-slot').append(el)
  v.transient = { attemptId: f.attemptId, turn: f.turn, step: f.step, el, blocks, parts: new Map(), next: 0 }
  return v.transient
}

function part(t, index, kind) {
  let p = t.parts.get(index)
  if (!p) {
    const text = h('div', { class: 'text' })
    const el = kind === 'reasoning' ? h('details', { class: 'reasoning', open: true }, h('summary', { text: 'Reasoning' }), text) : kind === 'tool' ? h('div', { class: 'call-chip' }, text) : text
    p = { kind, el, text }
    t.parts.set(index, p)
    t.blocks.append(el)
  }
  return p
}

function applyChunk(t, c) {
  if (!c) return
  if (c.type === 'text-delta') part(t, c.index, 'text').text.append(c.text)
  else if (c.type === 'reasoning-delta') part(t, c.index, 'reasoning').text.append(c.text)
  else if (c.type === 'tool-call-delta') {
    const p = part(t, c.index, 'tool')
    if (c.name) p.text.append(`↳ calls ${c.name} `)
  }
}

/** Expands compact stream records (SPEC §9.4) into chunks. */
function expand(records) {
  const out = []
  for (const r of records ?? []) {
    if (r.type === 'chunk') out.push(r.chunk)
    else if (r.type === 'text-chunks') for (const text of r.texts) out.push({ type: 'text-delta', index: r.index, text })
    else if (r.type === 'reasoning-chunks') for (const text of r.texts) out.push({ type: 'reasoning-delta', index: r.index, text })
    else if (r.type === 'tool-call-chunks') r.args.forEach((a, i) => out.push({ type: 'tool-call-delta', index: r.index, id: r.id, ...(i === 0 && r.name !== undefined ? { name: r.name } : {}), argumentsDelta: a }))
  }
  return out
}

function onStreamFrame(v, f) {
  const wrap = $('transcript-wrap')
  const stick = wrap.scrollHeight - wrap.scrollTop - wrap.clientHeight < 80
  if (f.kind === 'start') newTransient(v, f)
  else if (f.kind === 'snapshot') {
    const t = newTransient(v, f)
    const chunks = expand(f.stream)
    for (const c of chunks) applyChunk(t, c)
    t.next = chunks.length
  } else if (f.kind === 'chunk') {
    const t = v.transient
    if (!t || t.attemptId !== f.attemptId || f.index < t.next) return // another attempt, or a chunk already shown
    t.next = f.index + 1
    applyChunk(t, f.chunk)
  } else if (f.kind === 'end') {
    // the durable assistant/message (outcome.seq) replaces the bubble; it is published before `end`
    if (v.transient?.attemptId === f.attemptId) {
      const seq = f.outcome?.seq
      // otherwise the durable event is still on its way, and dropTransientFor removes the bubble then
      if (f.outcome?.kind !== 'committed' || typeof seq !== 'number' || seq <= v.lastSeq) dropTransient(v)
    }
  }
  if (stick) wrap.scrollTop = wrap.scrollHeight
}

// --- inbox and pending tool calls --------------------------------------------------------------------

/** Runs overlapping reads of one kind so that only the answer of the latest one is applied. */
async function latest(v, kind, read) {
  const gen = (v.gens[kind] = (v.gens[kind] ?? 0) + 1)
  let r
  try {
    r = await read()
  } catch (e) {
    if (!v.closed && v.gens[kind] === gen) showError($('live-error'), e)
    return undefined
  }
  return v.closed || v.gens[kind] !== gen ? undefined : r
}

async function refreshInbox(v) {
  const r = await latest(v, 'inbox', () => api('GET', sessionPath(v.id, '/inbox')))
  if (!r) return
  const box = $('inbox')
  const list = (title, msgs) =>
    msgs.length
      ? [
          h('h3', { text: `${title} (${msgs.length})` }),
          h(
            'ul',
            { class: 'inbox-list' },
            msgs.map((m) =>
              h(
                'li',
                { class: 'inbox-item', dataset: { id: m.id } },
                h('span', { class: 'inbox-text', text: textOf(m.content) || '(no text)' }),
                h('button', {
                  type: 'button',
                  class: 'btn ghost small',
                  title: 'remove from the inbox',
                  text: '✕',
                  'aria-label': 'remove',
                  onclick: async (e) => {
                    e.currentTarget.disabled = true
                    try {
                      await api('DELETE', sessionPath(v.id, `/inbox/${encodeURIComponent(m.id)}`))
                      showError($('live-error'), null)
                    } catch (err) {
                      showError($('live-error'), err)
                    }
                    void refreshInbox(v)
                  },
                }),
              ),
            ),
          ),
        ]
      : []
  const parts = [...list('Next turn', r.nextTurn ?? []), ...list('Next step', r.nextStep ?? [])]
  box.replaceChildren(...(parts.length ? parts : [h('p', { class: 'muted small', text: 'empty' })]))
}

async function refreshPending(v) {
  const r = await latest(v, 'pending', () => api('GET', sessionPath(v.id, '/pending')))
  if (!r) return
  const box = $('pending')
  // keep cards whose form is being filled in
  const old = new Map([...box.querySelectorAll('.pending-call')].map((el) => [el.dataset.callId, el]))
  const cards = (r.toolCalls ?? []).map((c) => old.get(c.callId) ?? pendingCard(v, c))
  box.replaceChildren(...(cards.length ? cards : [h('p', { class: 'muted small', text: 'none' })]))
}

function pendingCard(v, c) {
  const err = h('div', { class: 'error', role: 'alert', hidden: true })
  const run = async (path, body, buttons) => {
    for (const b of buttons) b.disabled = true
    try {
      await api('POST', sessionPath(v.id, path), body)
      showError(err, null)
      card.classList.add('answered')
    } catch (e) {
      showError(err, e)
    } finally {
      for (const b of buttons) b.disabled = false
    }
    void refreshPending(v)
  }
  let actions
  if (c.kind === 'approval') {
    const reason = h('input', { class: 'reason', placeholder: 'reason (optional, for deny)' })
    const allow = h('button', { type: 'button', class: 'btn primary small', text: 'Allow' })
    const deny = h('button', { type: 'button', class: 'btn danger small', text: 'Deny' })
    allow.addEventListener('click', () => run(`/approvals/${encodeURIComponent(c.callId)}`, { decision: 'allow' }, [allow, deny]))
    deny.addEventListener('click', () => run(`/approvals/${encodeURIComponent(c.callId)}`, { decision: 'deny', ...(reason.value.trim() ? { reason: reason.value.trim() } : {}) }, [allow, deny]))
    actions = h('div', { class: 'pending-actions' }, reason, h('div', { class: 'row' }, allow, deny))
  } else {
    const content = h('textarea', { class: 'result-input', rows: 2, placeholder: 'the tool result' })
    const isError = h('input', { type: 'checkbox' })
    const send = h('button', { type: 'submit', class: 'btn primary small', text: 'Send result' })
    actions = h('form', { class: 'pending-actions' }, content, h('div', { class: 'row' }, h('label', { class: 'toggle' }, isError, ' is error'), send))
    actions.addEventListener('submit', (e) => {
      e.preventDefault()
      void run('/tool-results', { callId: c.callId, content: content.value, ...(isError.checked ? { isError: true } : {}) }, [send])
    })
  }
  const card = h(
    'div',
    { class: `pending-call kind-${c.kind}`, dataset: { callId: c.callId, kind: c.kind } },
    h('div', { class: 'tool-head' }, h('span', { class: 'mono tool-name', text: c.name }), h('span', { class: `tag ${c.kind === 'approval' ? 'warn' : 'info'}`, text: c.kind === 'approval' ? 'needs approval' : 'client tool' })),
    h('pre', { class: 'mono args', text: fmtJson(c.rawArguments ?? c.arguments) }),
    actions,
    err,
  )
  return card
}

// --- input ----------------------------------------------------------------------------------------------

function initComposer() {
  const input = $('composer-input')
  const send = async (route) => {
    const v = state.view
    if (!v) return
    const text = input.value
    if (!text.trim()) {
      showError($('composer-error'), 'type a message first')
      return
    }
    try {
      await api('POST', sessionPath(v.id, `/${route}`), { content: text })
      if (input.value === text) input.value = ''
      showError($('composer-error'), null)
    } catch (e) {
      keyProblem(e)
      showError($('composer-error'), e)
    }
  }
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault()
    void send('followup')
  })
  $('btn-steer').addEventListener('click', () => void send('steer'))
  $('btn-inject').addEventListener('click', () => void send('inject'))
  $('btn-cancel').addEventListener('click', async () => {
    const v = state.view
    if (!v) return
    try {
      const r = await api('POST', sessionPath(v.id, '/cancel'), {})
      showError($('composer-error'), r && r.cancelled === false ? 'nothing was running' : null)
    } catch (e) {
      showError($('composer-error'), e)
    }
  })
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing && !e.altKey && !e.ctrlKey && !e.metaKey) {
      e.preventDefault()
      void send('followup')
    }
  })
  // title: saved on Enter or blur
  const title = $('session-title')
  const saveTitle = async () => {
    const v = state.view
    if (!v || !v.session) return
    const next = title.value.trim()
    if (next === (v.session.title ?? '')) return
    try {
      const s = await api('PATCH', sessionPath(v.id), { title: next || null })
      v.session = s
      upsertListed(s)
      showError($('live-error'), null)
    } catch (e) {
      showError($('live-error'), e)
    }
  }
  title.addEventListener('keydown', (e) => {
    if (e.key === 'Enter') {
      e.preventDefault()
      title.blur()
    } else if (e.key === 'Escape') {
      title.value = state.view?.session?.title ?? ''
      title.blur()
    }
  })
  title.addEventListener('blur', () => void saveTitle())
  $('show-raw').addEventListener('change', (e) => $('transcript').classList.toggle('show-raw', e.currentTarget.checked))
}

// ------------------------------------------------------------------------------------------------

function route() {
  const id = currentHashSession()
  if (id && id !== state.view?.id) openSession(id)
  if (!id && state.view) {
    closeView()
    setConn('off', 'not connected')
    $('session-view').hidden = true
    $('welcome').hidden = false
    renderSessions()
  }
}

initKey()
initNewSession()
initComposer()
window.addEventListener('hashchange', route)
void refreshSessions()
route()
// keep relative times fresh
setInterval(() => {
  if (document.visibilityState === 'visible') renderSessions()
}, 30000)
