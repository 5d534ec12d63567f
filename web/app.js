// The console's shared state — the credential (an API key or a token), the client made for it, the
// open session view — and the two ways work reaches the server: a user's action and a background read.

import { createClient } from './api.js'
import { $, clearErrors, showError } from './dom.js'

const KEY_STORAGE = 'agentd.apiKey'
const NO_KEY = 'No API key yet: paste yours (or a token) in the key field at the top, then Save.'

/**
 * What a pasted credential may do, for what the console offers (API.md §18): a tenant key anything; a
 * token is not one of the tenant's own routes (usage, secrets, webhooks), and one of agentd's own with
 * only the `read` scope gets a read-only view. The token's claims are only read here, for the layout;
 * the server checks them on every request.
 */
function accessOf(credential) {
  if (!credential || credential.startsWith('agd_')) return { token: false, write: true }
  try {
    const payload = credential.split('.')[1].replace(/-/g, '+').replace(/_/g, '/')
    const claims = JSON.parse(atob(payload.padEnd(Math.ceil(payload.length / 4) * 4, '=')))
    return { token: true, write: claims.iss !== 'agentd' || String(claims.scope ?? '').split(' ').includes('write') }
  } catch {
    return { token: true, write: true }
  }
}

export const state = {
  key: '',
  /** whether the credential is a token, and whether it may write (accessOf) */
  access: accessOf(''),
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

/** Uses `key` (an API key or a token) from now on: a new client, so answers to the old key's requests are dropped (see run). */
export function setKey(key, { remember = true } = {}) {
  state.key = key
  state.access = accessOf(key)
  state.client = key ? createClient({ credential: key }) : null
  // body[data-access] hides what a read-only token may not do; body[data-cred] the tenant's own panels
  document.body.dataset.access = state.access.write ? 'write' : 'read'
  document.body.dataset.cred = state.access.token ? 'token' : 'key'
  $('session-title').readOnly = !state.access.write
  if (remember) {
    if (key) localStorage.setItem(KEY_STORAGE, key)
    else localStorage.removeItem(KEY_STORAGE)
  }
  keyState(key ? 'unchecked' : 'none')
}

export const storedKey = () => localStorage.getItem(KEY_STORAGE) ?? ''

export function keySaved() {
  keyStatus(!state.key ? 'no key' : !state.access.token ? 'saved' : state.access.write ? 'token saved' : 'token saved: read only', state.key ? 'ok' : 'warn')
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
    showError($('key-error'), state.access.token ? `The server rejected this token (${err}): it may have expired. Paste a new one and Save.` : `The server rejected this key (${err}). Paste a key of yours and Save.`)
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
