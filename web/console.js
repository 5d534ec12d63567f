// agentd web console (API.md §8 `GET /`), the entry module: it wires the others, the key form, the
// route (`#session=<id>`) and the toggles of the narrow layout (the session drawer, the key field).

import { keySaved, setDrawer, setKey, state, storedKey } from './app.js'
import { initComposer } from './composer.js'
import { $, clearErrors, showError } from './dom.js'
import { follow, setConn } from './live.js'
import { initSessions, refreshSessions, resetSessions } from './sessions.js'
import { closeView, initView, openView } from './view.js'
import { initUsage, refreshUsage } from './usage.js'
import { initSecrets, refreshSecrets } from './secrets.js'
import { initWebhooks, refreshWebhooks } from './webhooks.js'
import { initAgents, refreshAgents } from './agents.js'

function hashSession() {
  const m = /^#session=(.+)$/.exec(location.hash)
  return m ? decodeURIComponent(m[1]) : null
}

function show(id) {
  follow(openView(id))
}

/** Shows the session named by the address, or the welcome. */
function route() {
  const id = hashSession()
  if (id && state.client) {
    if (id !== state.view?.id) show(id)
    return
  }
  closeView()
  setConn('off', state.client ? 'not connected' : 'no API key')
}

function selectSession(id) {
  setDrawer(false)
  const hash = `#session=${encodeURIComponent(id)}`
  if (location.hash !== hash) location.hash = hash
  else show(id) // picked again: reload it
}

function sessionGone(id, err) {
  history.replaceState(null, '', location.pathname + location.search)
  route()
  showError($('welcome-error'), `Session ${id} is not there for this key (${err.code}): it was deleted, or it belongs to another tenant.`)
}

function saveKey(e) {
  e.preventDefault()
  const key = $('api-key').value.trim()
  // errors on screen were about the key before, or are retried now
  clearErrors()
  if (key !== state.key) {
    // nothing of the old key's tenant may stay on screen
    setKey(key)
    resetSessions()
    closeView()
  }
  keySaved()
  $('topbar').classList.remove('key-open')
  void refreshSessions()
  void refreshAgents()
  void refreshUsage()
  void refreshSecrets()
  void refreshWebhooks()
  route()
}

function init() {
  setKey(storedKey(), { remember: false })
  $('api-key').value = state.key
  $('key-form').addEventListener('submit', saveKey)
  $('key-toggle').addEventListener('click', () => {
    $('topbar').classList.toggle('key-open')
    if ($('topbar').classList.contains('key-open')) $('api-key').focus()
  })
  $('sessions-toggle').addEventListener('click', () => setDrawer(!document.body.classList.contains('drawer-open')))
  $('welcome-sessions').addEventListener('click', () => setDrawer(true))
  $('drawer-backdrop').addEventListener('click', () => setDrawer(false))
  $('drawer-close').addEventListener('click', () => setDrawer(false))
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape') setDrawer(false)
  })
  initSessions({ onSelect: selectSession })
  initAgents({ onSelect: selectSession })
  initView({ onSessionGone: sessionGone })
  initComposer()
  initUsage()
  initSecrets()
  initWebhooks()
  window.addEventListener('hashchange', route)
  void refreshSessions()
  route()
}

init()
