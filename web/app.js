// The console's shared state — the API key, the client made for it, the open session view — and
// the two ways work reaches the server: a user's action and a background read.

import { createClient } from './api.js'
import { $, clearErrors, showError } from './dom.js'

const KEY_STORAGE = 'agentd.apiKey'
const NO_KEY = 'No API key yet: paste yours in the key field at the top, then Save.'

export const state = {
  key: '',
  /** null while there is no key: then nothing is sent at all (a missing key is not a rejected one) */
  client: null,
  /** the open session (view.js), or null */
  view: null,
}

/** `body[data-key]` drives the layout (the key field folds away on a phone once the key works): none | unchecked | ok | bad */
const keyState = (s) => (document.body.dataset.key = s)

function keyStatus(text, kind) {
  $('key-status').textContent = text
  $('key-status').dataset.state = kind
}

/** Uses `key` from now on: a new client, so answers to the old key's requests are dropped (see run). */
export function setKey(key, { remember = true } = {}) {
  state.key = key
  state.client = key ? createClient({ apiKey: key }) : null
  if (remember) {
    if (key) localStorage.setItem(KEY_STORAGE, key)
    else localStorage.removeItem(KEY_STORAGE)
  }
  keyState(key ? 'unchecked' : 'none')
}

export const storedKey = () => localStorage.getItem(KEY_STORAGE) ?? ''

export function keySaved() {
  keyStatus(state.key ? 'saved' : 'no key', state.key ? 'ok' : 'warn')
}

/** On a phone the session list is a drawer over the page (console.css). */
export function setDrawer(open) {
  document.body.classList.toggle('drawer-open', open)
  $('sessions-toggle').setAttribute('aria-expanded', String(open))
}

/** Brings the key field forward (it may be folded away or under the drawer on a phone) and says why. */
export function askForKey() {
  setDrawer(false)
  $('topbar').classList.add('key-open')
  keyStatus('paste a key first', 'warn')
  $('api-key').focus()
}

const STALE = { ok: false }

async function run(errorEl, fn, isAction, isCurrent = () => true) {
  const client = state.client
  if (!client) {
    if (isAction) {
      showError(errorEl, NO_KEY)
      askForKey()
    }
    return { ok: false, error: NO_KEY }
  }
  try {
    const value = await fn(client)
    if (client !== state.client || !isCurrent()) return STALE // answered for a key no longer in use, or superseded
    if (document.body.dataset.key !== 'ok') {
      keyState('ok')
      showError($('key-error'), null)
      if ($('key-status').dataset.state === 'bad') keyStatus('', '')
    }
    if (isAction) clearErrors()
    return { ok: true, value }
  } catch (e) {
    if (client !== state.client || !isCurrent()) return STALE
    reportError(errorEl, e)
    return { ok: false, error: e }
  }
}

/**
 * Shows an API error in `errorEl`. A 401 is about the key, not about the panel that asked: it marks
 * the key as rejected and shows once, under the key field, however many panels met it.
 */
export function reportError(errorEl, err) {
  if (err?.status === 401) {
    keyState('bad')
    keyStatus('key rejected', 'bad')
    showError(errorEl, null)
    showError($('key-error'), `The server rejected this key (${err}). Paste a key of yours and Save.`)
    return
  }
  showError(errorEl, err)
}

/**
 * A user's action: `fn(client)` runs only with a key; when it succeeds every error on screen is
 * stale and is cleared, when it fails its error shows in `errorEl`. Answers `{ok, value}` or
 * `{ok: false, error}` (no error when the answer came too late to matter).
 */
export const act = (errorEl, fn) => run(errorEl, fn, true)

/** A background read: like act, but without a key it does nothing, and success clears no error. */
export const read = (errorEl, fn) => run(errorEl, fn, false)

/** A read for the open view `v` of which only the latest answer of each `kind` counts; `action` as in act. */
export function latest(v, kind, errorEl, fn, { action = false } = {}) {
  const gen = (v.gens[kind] = (v.gens[kind] ?? 0) + 1)
  return run(errorEl, fn, action, () => !v.closed && v.gens[kind] === gen)
}

/** Runs `fn(v)` once after `ms`, however often it is asked for meanwhile. */
export function soon(v, kind, fn, ms = 150) {
  clearTimeout(v.timers[kind])
  v.timers[kind] = setTimeout(() => !v.closed && void fn(v), ms)
}
