// The inbox panel (API.md §5): what waits for the next turn and the next step, each removable.

import { act, latest } from './app.js'
import { $, h } from './dom.js'
import { textOf } from './format.js'

function inboxItem(v, m) {
  return h(
    'li',
    { class: 'inbox-item', dataset: { id: m.id } },
    h('span', { class: 'inbox-text', text: textOf(m.content) || '(no text)' }),
    h('button', {
      type: 'button',
      class: 'btn ghost small needs-write',
      title: 'remove from the inbox',
      text: '✕',
      'aria-label': 'remove',
      onclick: async (e) => {
        e.currentTarget.disabled = true
        await act($('view-error'), (api) => api.removeFromInbox(v.id, m.id))
        void refreshInbox(v)
      },
    }),
  )
}

/** Reloads the inbox of the open view `v`. */
export async function refreshInbox(v) {
  const r = await latest(v, 'inbox', $('view-error'), (api) => api.inbox(v.id))
  if (!r.ok) return
  const section = (title, msgs) => (msgs.length ? [h('h3', { text: `${title} (${msgs.length})` }), h('ul', { class: 'inbox-list' }, msgs.map((m) => inboxItem(v, m)))] : [])
  const parts = [...section('Next turn', r.value.nextTurn ?? []), ...section('Next step', r.value.nextStep ?? [])]
  $('inbox').replaceChildren(...(parts.length ? parts : [h('p', { class: 'muted small', text: 'empty' })]))
  $('inbox-panel').toggleAttribute('data-empty', parts.length === 0)
}
