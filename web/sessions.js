// The session list (API.md §4 `GET /v1/sessions`, paged) and the new-session form, with an optional
// title set by `PATCH` right after the create (the create body has no title).

import { act, read, state } from './app.js'
import { $, h, showError } from './dom.js'
import { relTime } from './format.js'
import { lastTurnBadge } from './last-turn.js'

const PAGE_SIZE = 30

const list = {
  sessions: [],
  nextCursor: null,
  /** a listing was answered for the current key */
  loaded: false,
  /** bumped by every read and by reset, so that an older answer is never applied */
  gen: 0,
}

let select = () => {}

function sessionItem(s) {
  const active = state.view?.id === s.id
  return h(
    'li',
    { class: `session-item${active ? ' active' : ''}`, dataset: { id: s.id } },
    h(
      'button',
      { type: 'button', class: 'session-link', onclick: () => select(s.id) },
      h('span', { class: 'session-line' }, h('span', { class: `session-name${s.title ? '' : ' untitled'}`, text: s.title ?? '(untitled)', title: s.title ?? undefined }), h('span', { class: 'badge small', dataset: { status: s.status }, text: s.status })),
      h('span', { class: 'session-line muted small' }, h('span', { class: 'mono', text: s.id }), h('span', { title: s.updatedAt, text: relTime(s.updatedAt) })),
      h('span', { class: 'session-line muted small' }, h('span', { class: 'mono', text: s.model }), h('span', { class: 'mono', title: 'headSeq: seq of the last durable event', text: s.headSeq < 0 ? 'empty' : `#${s.headSeq}` })),
      lastTurnLine(s),
    ),
  )
}

/** A line of its own when the last turn failed, was cancelled or cut short: it must catch the eye. */
function lastTurnLine(s) {
  const b = lastTurnBadge(s.lastTurn)
  return b && h('span', { class: 'session-line' }, b)
}

export function renderSessions() {
  $('session-list').replaceChildren(...list.sessions.map(sessionItem))
  const empty = $('sessions-empty')
  // a rejected key is said under the key field (app.js reportError); the list only says why it is empty
  const rejected = document.body.dataset.key === 'bad'
  empty.hidden = list.sessions.length > 0 || (state.client !== null && !list.loaded && !rejected)
  empty.textContent = !state.client ? 'Enter your API key at the top to see your sessions.' : rejected ? 'This key was rejected: correct it at the top to see your sessions.' : 'No sessions yet: create the first one above.'
  $('load-more').hidden = !list.nextCursor
}

/** Forgets the list at once (the key changed: the old tenant's sessions must not stay on screen). */
export function resetSessions() {
  list.gen++
  list.sessions = []
  list.nextCursor = null
  list.loaded = false
  showError($('sessions-error'), null)
  renderSessions()
}

/** Reloads the first page(s); `user` when the user asked for it (then success clears stale errors). */
export async function refreshSessions({ user = false } = {}) {
  if (!state.client) return resetSessions()
  const gen = ++list.gen
  const limit = Math.min(200, Math.max(PAGE_SIZE, list.sessions.length))
  const r = await (user ? act : read)($('sessions-error'), (api) => api.listSessions({ limit }))
  if (gen !== list.gen) return // a newer read or a reset came since
  if (r.ok) {
    const first = !list.loaded
    list.sessions = r.value.sessions
    list.nextCursor = r.value.nextCursor
    list.loaded = true
    showError($('sessions-error'), null)
    // a new user sees the form; someone with sessions opens it when needed
    if (first) $('new-session').open = list.sessions.length === 0
  }
  renderSessions()
}

async function loadMore() {
  if (!list.nextCursor) return
  const gen = ++list.gen
  const r = await act($('sessions-error'), (api) => api.listSessions({ limit: PAGE_SIZE, cursor: list.nextCursor }))
  if (gen !== list.gen || !r.ok) return
  const seen = new Set(list.sessions.map((s) => s.id))
  list.sessions.push(...r.value.sessions.filter((s) => !seen.has(s.id)))
  list.nextCursor = r.value.nextCursor
  renderSessions()
}

let listTimer = 0
export function refreshSessionsSoon() {
  clearTimeout(listTimer)
  listTimer = setTimeout(() => void refreshSessions(), 400)
}

/** Puts a session object the console got elsewhere into the list (new ones first). */
export function upsertListed(s) {
  const i = list.sessions.findIndex((x) => x.id === s.id)
  if (i >= 0) list.sessions[i] = s
  else list.sessions.unshift(s)
  renderSessions()
}

/** The listed status follows the open session's live status. */
export function listedStatus(id, status) {
  const listed = list.sessions.find((s) => s.id === id)
  if (listed && listed.status !== status) {
    listed.status = status
    renderSessions()
  }
}

async function create(e) {
  e.preventDefault()
  const body = {}
  const model = $('new-model').value.trim()
  const system = $('new-system').value
  const title = $('new-title').value.trim()
  if (model) body.model = model
  if (system.trim()) body.system = system
  const btn = $('create-session')
  btn.disabled = true
  try {
    const created = await act($('new-error'), (api) => api.createSession(body))
    if (!created.ok) return
    let s = created.value
    if (title) {
      const titled = await act($('new-error'), (api) => api.updateSession(s.id, { title }))
      if (titled.ok) s = titled.value
      else $('new-error').prepend(`session ${s.id} was created, but its title was not set: `)
    }
    $('new-title').value = ''
    $('new-system').value = ''
    $('new-session').open = false
    upsertListed(s)
    select(s.id)
    $('composer-input').focus()
  } finally {
    btn.disabled = false
  }
}

/** `onSelect(id)` opens a session. */
export function initSessions({ onSelect }) {
  select = onSelect
  $('new-form').addEventListener('submit', create)
  $('refresh-sessions').addEventListener('click', () => void refreshSessions({ user: true }))
  $('load-more').addEventListener('click', () => void loadMore())
  // keep relative times fresh
  setInterval(() => {
    if (document.visibilityState === 'visible') renderSessions()
  }, 30000)
}
