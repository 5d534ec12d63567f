// The tenant's agents (API.md §16) in the sidebar, each at its latest version, with a button that makes
// a session from it (`POST /v1/sessions {agent}`) and opens it. Through the SDK with the console's key.

import { act, read, state } from './app.js'
import { $, h, showError } from './dom.js'
import { upsertListed } from './sessions.js'

const PAGE_SIZE = 50

const list = { agents: [], nextCursor: null, gen: 0 }
let select = () => {}

async function startSession(a, btn) {
  btn.disabled = true
  try {
    const r = await act($('agents-error'), (api) => api.createSession({ agent: a.id }))
    if (!r.ok) return
    upsertListed(r.value)
    select(r.value.id)
    $('composer-input').focus()
  } finally {
    btn.disabled = false
  }
}

function agentItem(a) {
  const start = h('button', { type: 'button', class: 'btn small', text: 'New session', title: `a session from ${a.id}@${a.version}` })
  start.addEventListener('click', () => void startSession(a, start))
  return h(
    'li',
    { class: 'agent', dataset: { id: a.id } },
    h('span', { class: 'agent-line' }, h('span', { class: 'agent-name', text: a.name, title: a.description ?? undefined }), start),
    h('span', { class: 'agent-line muted small' }, h('span', { class: 'mono', text: `${a.id}@${a.version}`, title: 'id@version' }), h('span', { class: 'mono', text: a.model })),
  )
}

function render() {
  $('agent-list').replaceChildren(...list.agents.map(agentItem))
  $('agents-empty').hidden = list.agents.length > 0
  $('agents-more').hidden = !list.nextCursor
}

/** Reads the first page of the key's tenant's agents; hides the panel without a key. */
export async function refreshAgents() {
  const gen = ++list.gen
  $('agents-panel').hidden = !state.key
  if (!state.key) return
  const r = await read($('agents-error'), (api) => api.listAgents({ limit: PAGE_SIZE }))
  if (gen !== list.gen) return
  if (!r.ok) {
    if (r.error) $('agent-list').replaceChildren()
    return
  }
  showError($('agents-error'), null)
  list.agents = r.value.agents
  list.nextCursor = r.value.nextCursor
  render()
}

async function loadMore() {
  const gen = ++list.gen
  const r = await act($('agents-error'), (api) => api.listAgents({ limit: PAGE_SIZE, cursor: list.nextCursor }))
  if (gen !== list.gen || !r.ok) return
  const seen = new Set(list.agents.map((a) => a.id))
  list.agents.push(...r.value.agents.filter((a) => !seen.has(a.id)))
  list.nextCursor = r.value.nextCursor
  render()
}

/** `onSelect(id)` opens a session. */
export function initAgents({ onSelect }) {
  select = onSelect
  $('agents-refresh').addEventListener('click', () => void refreshAgents())
  $('agents-more').addEventListener('click', () => void loadMore())
  void refreshAgents()
}
