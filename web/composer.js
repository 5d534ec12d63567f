// The composer: a message delivered as followup, steer or inject (API.md §5), and Cancel.

import { act, state } from './app.js'
import { $, showError } from './dom.js'

async function send(kind) {
  const v = state.view
  if (!v) return
  const input = $('composer-input')
  const text = input.value
  if (!text.trim()) return showError($('composer-error'), 'Type a message first.')
  const r = await act($('composer-error'), (api) => api.deliver(v.id, kind, text))
  if (r.ok && input.value === text) input.value = ''
}

async function cancel() {
  const v = state.view
  if (!v) return
  const r = await act($('composer-error'), (api) => api.cancel(v.id))
  if (r.ok && r.value?.cancelled === false) showError($('composer-error'), 'nothing was running')
}

export function initComposer() {
  const input = $('composer-input')
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault()
    void send('followup')
  })
  $('btn-steer').addEventListener('click', () => void send('steer'))
  $('btn-inject').addEventListener('click', () => void send('inject'))
  $('btn-cancel').addEventListener('click', () => void cancel())
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing && !e.altKey && !e.ctrlKey && !e.metaKey) {
      e.preventDefault()
      void send('followup')
    }
  })
}
