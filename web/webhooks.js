// The tenant's webhooks (API.md §14), in the sidebar: each webhook with its events and its recent
// deliveries (status, attempts, the latest answer), a ping and a delete; a form subscribes a new URL
// and shows its secret once. Calls go through the SDK (`state.client.request`).

import { reportError, state } from './app.js'
import { $, h, showError } from './dom.js'

const TYPES = ['turn.completed', 'turn.failed', 'turn.cancelled', 'turn.interrupted', 'session.requires_action']
const REFRESH_MS = 30_000
const time = (iso) => (iso ? new Date(iso).toLocaleTimeString() : '')

function deliveryRow(d) {
  const last = d.lastStatus !== undefined ? `HTTP ${d.lastStatus}` : (d.lastError ?? '')
  const when = d.status === 'delivered' ? `at ${time(d.deliveredAt)}` : d.nextAttemptAt ? `next ${time(d.nextAttemptAt)}` : ''
  return h(
    'li',
    { class: 'delivery', dataset: { status: d.status }, title: `${d.id}${d.lastError ? ` — ${d.lastError}` : ''}` },
    h('span', { class: 'badge small', dataset: { status: d.status }, text: d.status }),
    ' ',
    h('span', { class: 'mono', text: d.type }),
    d.sessionId ? h('span', { class: 'muted small', text: ` ${d.sessionId}#${d.seq}` }) : null,
    h('span', { class: 'muted small', text: ` · ${d.attempts} attempt${d.attempts === 1 ? '' : 's'}${last ? ` · ${last}` : ''}${when ? ` · ${when}` : ''}` }),
  )
}

async function showDeliveries(hook, list) {
  const { deliveries } = await state.client.request('GET', `/v1/webhooks/${encodeURIComponent(hook.id)}/deliveries?limit=10`)
  list.replaceChildren(...(deliveries.length ? deliveries.map(deliveryRow) : [h('li', { class: 'muted small', text: 'no deliveries yet' })]))
}

function hookItem(hook) {
  const list = h('ul', { class: 'deliveries' })
  const act = (fn) => async () => {
    try {
      await fn()
      showError($('webhooks-error'), null)
    } catch (e) {
      reportError($('webhooks-error'), e)
    }
  }
  const item = h(
    'li',
    { class: 'webhook', dataset: { id: hook.id } },
    h('div', { class: 'mono small webhook-url', text: hook.url, title: hook.description ?? '' }),
    h('div', { class: 'muted small', text: hook.events.join(', ') }),
    h(
      'div',
      { class: 'row' },
      h('button', { type: 'button', class: 'btn ghost small', text: 'Test', title: 'POST …/test: send a ping delivery', onclick: act(async () => {
        await state.client.request('POST', `/v1/webhooks/${encodeURIComponent(hook.id)}/test`)
        await showDeliveries(hook, list)
      }) }),
      h('button', { type: 'button', class: 'btn ghost small', text: 'Deliveries', onclick: act(() => showDeliveries(hook, list)) }),
      h('button', { type: 'button', class: 'btn danger small', text: 'Delete', title: 'its pending deliveries are dropped', onclick: act(async () => {
        if (!confirm(`Delete the webhook to ${hook.url}?`)) return
        await state.client.request('DELETE', `/v1/webhooks/${encodeURIComponent(hook.id)}`)
        await refreshWebhooks()
      }) }),
    ),
    list,
  )
  void showDeliveries(hook, list).catch(() => {})
  return item
}

let timer = 0

/** Reads and shows the key's tenant's webhooks; hides the panel without a key. */
export async function refreshWebhooks() {
  clearTimeout(timer)
  const key = state.key
  // the tenant's own business takes its key: a token is refused it (API.md §18)
  $('webhooks-panel').hidden = !key || state.access.token
  if (!key || !state.client || state.access.token) return
  timer = setTimeout(() => void refreshWebhooks(), REFRESH_MS)
  try {
    const { webhooks } = await state.client.request('GET', '/v1/webhooks')
    if (key !== state.key) return
    showError($('webhooks-error'), null)
    $('webhook-list').replaceChildren(...(webhooks.length ? webhooks.map(hookItem) : [h('li', { class: 'muted small', text: 'none' })]))
  } catch (e) {
    if (key !== state.key) return
    $('webhook-list').replaceChildren()
    reportError($('webhooks-error'), e)
  }
}

async function create(e) {
  e.preventDefault()
  const events = TYPES.filter((t) => $(`webhook-event-${t}`).checked)
  try {
    const created = await state.client.request('POST', '/v1/webhooks', { url: $('webhook-url').value.trim(), events })
    $('webhook-secret').hidden = false
    $('webhook-secret').replaceChildren('Secret (shown only now): ', h('code', { text: created.secret }))
    $('webhook-url').value = ''
    showError($('webhooks-error'), null)
    await refreshWebhooks()
  } catch (err) {
    reportError($('webhooks-error'), err)
  }
}

export function initWebhooks() {
  $('webhook-events').replaceChildren(
    ...TYPES.map((t) => h('label', { class: 'toggle small' }, h('input', { type: 'checkbox', id: `webhook-event-${t}`, checked: t === 'turn.completed' }), ` ${t}`)),
  )
  $('webhook-form').addEventListener('submit', (e) => void create(e))
  $('webhooks-refresh').addEventListener('click', () => void refreshWebhooks())
  void refreshWebhooks()
}
