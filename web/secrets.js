// The tenant's secrets (API.md §13), in the sidebar: their names and when each was last set, never a
// value (the server shows none); a form to set one (create or replace) and a button to delete one.
// Through the SDK's `request()` with the console's key.

import { act, read, state } from './app.js'
import { $, h, showError } from './dom.js'
import { relTime } from './format.js'

const NAME = /^[A-Z0-9_]{1,64}$/

function render(secrets) {
  $('secrets-empty').hidden = secrets.length > 0
  $('secret-list').replaceChildren(
    ...secrets.map((s) => {
      const del = h('button', { type: 'button', class: 'btn ghost small', text: 'Delete', title: `DELETE /v1/secrets/${s.name}` })
      del.addEventListener('click', async () => {
        if (!confirm(`Delete the secret ${s.name}? Tools that refer to it fail until it is set again.`)) return
        del.disabled = true
        const r = await act($('secrets-error'), (api) => api.request('DELETE', `/v1/secrets/${encodeURIComponent(s.name)}`))
        del.disabled = false
        if (r.ok) void refreshSecrets()
      })
      return h('li', { class: 'secret', dataset: { name: s.name } }, h('span', { class: 'mono', text: s.name }), h('span', { class: 'muted small', text: relTime(s.updatedAt), title: `created ${s.createdAt}, set ${s.updatedAt}` }), del)
    }),
  )
}

/** Reads and shows the key's tenant's secret names; hides the panel without a key. */
export async function refreshSecrets() {
  const key = state.key
  // the tenant's own business takes its key: a token is refused it (API.md §18)
  $('secrets-panel').hidden = !key || state.access.token
  if (!key || state.access.token) return
  const r = await read($('secrets-error'), (api) => api.request('GET', '/v1/secrets'))
  if (!r.ok) {
    if (r.error) $('secret-list').replaceChildren()
    return
  }
  showError($('secrets-error'), null)
  render(r.value.secrets)
}

async function save(e) {
  e.preventDefault()
  const name = $('secret-name').value.trim()
  const value = $('secret-value').value
  if (!NAME.test(name)) return showError($('secrets-error'), 'A secret name is upper-case letters, digits and _ (at most 64).')
  const r = await act($('secrets-error'), (api) => api.request('PUT', `/v1/secrets/${encodeURIComponent(name)}`, { value }))
  if (!r.ok) return
  // the value leaves the page once it is stored
  $('secret-value').value = ''
  $('secret-name').value = ''
  void refreshSecrets()
}

export function initSecrets() {
  $('secrets-refresh').addEventListener('click', () => void refreshSecrets())
  $('secret-form').addEventListener('submit', (e) => void save(e))
  void refreshSecrets()
}
