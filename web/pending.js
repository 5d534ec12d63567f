// The pending tool calls panel (API.md §7): approvals to allow or deny, client tools to answer.

import { act, latest } from './app.js'
import { $, h } from './dom.js'
import { fmtJson } from './format.js'

function pendingCard(v, c) {
  const err = h('div', { class: 'error', role: 'alert', hidden: true })
  const answer = async (send, buttons) => {
    for (const b of buttons) b.disabled = true
    const r = await act(err, send)
    for (const b of buttons) b.disabled = false
    if (r.ok) card.classList.add('answered')
    void refreshPending(v)
  }
  let actions
  if (c.kind === 'approval') {
    const reason = h('input', { class: 'reason', placeholder: 'reason (optional, for deny)', 'aria-label': 'reason' })
    const allow = h('button', { type: 'button', class: 'btn primary small', text: 'Allow' })
    const deny = h('button', { type: 'button', class: 'btn danger small', text: 'Deny' })
    allow.addEventListener('click', () => answer((api) => api.answerApproval(v.id, c.callId, { decision: 'allow' }), [allow, deny]))
    deny.addEventListener('click', () => answer((api) => api.answerApproval(v.id, c.callId, { decision: 'deny', reason: reason.value.trim() }), [allow, deny]))
    actions = h('div', { class: 'pending-actions needs-write' }, reason, h('div', { class: 'row' }, allow, deny))
  } else {
    const content = h('textarea', { class: 'result-input', rows: 2, placeholder: 'the tool result', 'aria-label': 'tool result' })
    const isError = h('input', { type: 'checkbox' })
    const send = h('button', { type: 'submit', class: 'btn primary small', text: 'Send result' })
    actions = h('form', { class: 'pending-actions needs-write' }, content, h('div', { class: 'row' }, h('label', { class: 'toggle' }, isError, ' is error'), send))
    actions.addEventListener('submit', (e) => {
      e.preventDefault()
      void answer((api) => api.sendToolResult(v.id, { callId: c.callId, content: content.value, isError: isError.checked }), [send])
    })
  }
  const card = h(
    'div',
    { class: `pending-call kind-${c.kind}`, dataset: { callId: c.callId, kind: c.kind } },
    h('div', { class: 'tool-head' }, h('span', { class: 'mono tool-name', text: c.name }), h('span', { class: `tag ${c.kind === 'approval' ? 'warn' : 'info'}`, text: c.kind === 'approval' ? 'needs approval' : 'client tool' })),
    h('pre', { class: 'mono args', text: fmtJson(c.rawArguments ?? c.arguments) }),
    actions,
    err,
  )
  return card
}

/**
 * Reloads the pending calls of the open view `v`; a card being filled in is kept as it is. A card is
 * a call waiting for one thing: an allowed client call with approval comes back as a new card.
 */
export async function refreshPending(v) {
  const r = await latest(v, 'pending', $('view-error'), (api) => api.pending(v.id))
  if (!r.ok) return
  const box = $('pending')
  const old = new Map([...box.querySelectorAll('.pending-call')].map((el) => [`${el.dataset.kind}:${el.dataset.callId}`, el]))
  const cards = (r.value.toolCalls ?? []).map((c) => old.get(`${c.kind}:${c.callId}`) ?? pendingCard(v, c))
  box.replaceChildren(...(cards.length ? cards : [h('p', { class: 'muted small', text: 'none' })]))
  $('pending-panel').toggleAttribute('data-empty', cards.length === 0)
}
