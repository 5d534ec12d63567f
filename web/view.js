// The open session: opening and closing it, and its header — title (edited in place, `PATCH`),
// status, how the last turn ended, model, head seq, usage (API.md §4).

import { act, latest, state } from './app.js'
import { $, h } from './dom.js'
import { fmtUsage } from './format.js'
import { lastTurnBadge } from './last-turn.js'
import { refreshInbox } from './inbox.js'
import { refreshPending } from './pending.js'
import { resetMcp } from './mcp.js'
import { listedStatus, renderSessions, upsertListed } from './sessions.js'
import { resetTranscript, updateEmpty } from './transcript.js'

let onGone = () => {}

/** Shows session `id`, empty, and starts its reads; the caller connects its stream (live.js). */
export function openView(id) {
  closeView()
  const v = {
    id,
    session: null,
    closed: false,
    /** the stream's backlog has been received (stream/ready) */
    ready: false,
    /** seq of the last durable event shown */
    lastSeq: -1,
    status: 'idle',
    tools: new Map(), // callId -> its card in the transcript
    transient: null, // the streaming assistant bubble (live.js)
    stream: null,
    timers: {},
    gens: {},
  }
  state.view = v
  $('welcome').hidden = true
  $('session-view').hidden = false
  resetTranscript()
  updateEmpty(v)
  $('session-id').textContent = id
  $('session-model').textContent = ''
  $('session-agent').hidden = true
  $('session-title').value = ''
  $('session-head').textContent = '-1'
  $('session-usage').textContent = ''
  $('last-turn').replaceChildren()
  $('pending').replaceChildren(h('p', { class: 'muted small', text: 'none' }))
  $('inbox').replaceChildren(h('p', { class: 'muted small', text: 'empty' }))
  $('pending-panel').toggleAttribute('data-empty', true)
  $('inbox-panel').toggleAttribute('data-empty', true)
  resetMcp(v)
  setStatus(v, 'idle')
  renderSessions()
  void loadSession(v, { first: true })
  void refreshInbox(v)
  void refreshPending(v)
  return v
}

export function closeView() {
  const v = state.view
  if (!v) return
  v.closed = true
  v.stream?.close()
  for (const t of Object.values(v.timers)) clearTimeout(t)
  state.view = null
  $('session-view').hidden = true
  $('welcome').hidden = false
  resetTranscript()
  renderSessions()
}

/** Reloads the session object; the first load is the user's opening of it. */
export async function loadSession(v, { first = false } = {}) {
  const r = await latest(v, 'session', $('view-error'), (api) => api.getSession(v.id), { action: first })
  if (!r.ok) {
    if (r.error?.status === 404) sessionGone(v, r.error)
    return
  }
  const s = r.value
  v.session = s
  $('session-model').textContent = s.model
  $('session-agent').hidden = !s.agent
  $('session-agent-ref').textContent = s.agent ? `${s.agent.id}@${s.agent.version}` : ''
  if (document.activeElement !== $('session-title')) $('session-title').value = s.title ?? ''
  $('session-usage').textContent = fmtUsage(s.usage)
  $('last-turn').replaceChildren(...[lastTurnBadge(s.lastTurn)].filter(Boolean))
  if (s.headSeq > v.lastSeq) $('session-head').textContent = String(s.headSeq)
  upsertListed(s)
}

/** The session does not exist (for this key): leave it, and say so. */
export function sessionGone(v, err) {
  if (v.closed) return
  closeView()
  onGone(v.id, err)
}

export function setStatus(v, status) {
  v.status = status
  const b = $('status-badge')
  b.textContent = status
  b.dataset.status = status
  listedStatus(v.id, status)
}

async function saveTitle() {
  const v = state.view
  if (!v || !v.session) return
  const next = $('session-title').value.trim()
  if (next === (v.session.title ?? '')) return
  const r = await act($('view-error'), (api) => api.updateSession(v.id, { title: next || null }))
  if (!r.ok || v.closed) return
  v.session = r.value
  upsertListed(r.value)
}

/** `onSessionGone(id, error)`: the open session answered 404. */
export function initView({ onSessionGone }) {
  onGone = onSessionGone
  const title = $('session-title')
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
  $('show-raw').addEventListener('change', (e) => {
    $('transcript').classList.toggle('show-raw', e.currentTarget.checked)
    updateEmpty(state.view)
  })
}
