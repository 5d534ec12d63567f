// The open session, live: its stream (API.md §6) feeds the transcript with durable events, and the
// assistant's answer shows in a transient bubble while it streams, until its durable event replaces it.

import { expandRecords } from './api.js'
import { reportError, soon, state } from './app.js'
import { $, h, showError } from './dom.js'
import { refreshInbox } from './inbox.js'
import { mcpHeader, mcpUnavailable } from './mcp.js'
import { refreshPending } from './pending.js'
import { refreshSessionsSoon } from './sessions.js'
import { renderEvent, stickToEnd, updateEmpty } from './transcript.js'
import { loadSession, sessionGone, setStatus } from './view.js'

export function setConn(stateName, text) {
  $('conn-dot').dataset.state = stateName
  $('conn-text').textContent = text
}

const CONN_TEXT = { connecting: 'connecting…', live: 'live', reconnecting: 'reconnecting…' }

/** Follows the stream of the open view `v` from the start of its log. */
export function follow(v) {
  v.stream = state.client.stream(v.id, {
    onEvent: (ev) => onDurable(v, ev),
    onFrame: (name, data) => onFrame(v, name, data),
    onState: (s, err) => {
      if (v.closed) return
      if (s !== 'failed') return setConn(s, CONN_TEXT[s])
      setConn('off', 'disconnected')
      if (err.status === 404) sessionGone(v, err)
      else reportError($('view-error'), err)
    },
  })
}

// ------------------------------------------------------------------------------------------------
// durable events

function onDurable(v, ev) {
  if (ev.type === 'assistant/message' || ev.type === 'assistant/attempt') dropTransientFor(v, ev.data?.turn, ev.data?.step)
  v.lastSeq = ev.seq
  stickToEnd(() => renderEvent(v, ev))
  $('session-head').textContent = String(ev.seq)
  switch (ev.type) {
    case 'turn/end':
    case 'assistant/message':
    case 'assistant/attempt':
      soon(v, 'session', loadSession, 200)
      refreshSessionsSoon()
      break
    case 'tool/call':
    case 'tool/result':
      soon(v, 'pending', refreshPending)
      break
    case 'agent/inbox/spliced':
      soon(v, 'inbox', refreshInbox)
      break
    case 'request/header':
      mcpHeader(v, ev)
      break
  }
}

// ------------------------------------------------------------------------------------------------
// live frames

function onFrame(v, name, d) {
  switch (name) {
    case 'stream/ready':
      // a transient bubble from before a reconnect is stale: the snapshot that follows (if an attempt
      // is still streaming) rebuilds it
      dropTransient(v)
      v.ready = true
      updateEmpty(v)
      setConn('live', 'live')
      return
    case 'agent/status':
      setStatus(v, d.status)
      if (d.status === 'idle') soon(v, 'session', loadSession, 50)
      return
    case 'agent/assistant-stream':
      return stickToEnd(() => onStreamFrame(v, d))
    case 'agent/session-start':
      return dropTransient(v)
    case 'agent/inbox/inserted':
    case 'agent/inbox/claimed':
    case 'agent/inbox/discarded':
      return soon(v, 'inbox', refreshInbox)
    case 'agent/error': {
      const err = d.error ?? {}
      // an MCP server that could not be listed: the turn goes on without its tools (API.md §12)
      if (err.code === 'MCP_UNAVAILABLE') return mcpUnavailable(v, d)
      return showError($('view-error'), `turn ${d.turn ?? '?'} failed: ${err.code ?? 'error'}: ${err.message ?? ''}`)
    }
    case 'stream/error':
      return setConn('connecting', `stream dropped (${d.code}), reconnecting…`)
  }
}

// ------------------------------------------------------------------------------------------------
// the transient bubble of the attempt that is streaming

function dropTransient(v) {
  if (!v.transient) return
  v.transient.el.remove()
  v.transient = null
  updateEmpty(v)
}

function dropTransientFor(v, turn, step) {
  if (v.transient && v.transient.turn === turn && v.transient.step === step) dropTransient(v)
}

function newTransient(v, f) {
  dropTransient(v)
  const blocks = h('div', { class: 'bubble' })
  const el = h('div', { class: 'item msg assistant transient', dataset: { attempt: f.attemptId } }, h('div', { class: 'who' }, h('span', { text: 'assistant' }), h('span', { class: 'typing', text: 'streaming' })), blocks)
  $('transient-slot').append(el)
  v.transient = { attemptId: f.attemptId, turn: f.turn, step: f.step, el, blocks, parts: new Map() }
  updateEmpty(v)
  return v.transient
}

function part(t, index, kind) {
  let p = t.parts.get(index)
  if (!p) {
    const text = h('div', { class: 'text' })
    const el = kind === 'reasoning' ? h('details', { class: 'reasoning', open: true }, h('summary', { text: 'Reasoning' }), text) : kind === 'tool' ? h('div', { class: 'call-chip' }, text) : text
    p = { kind, el, text }
    t.parts.set(index, p)
    t.blocks.append(el)
  }
  return p
}

function applyChunk(t, c) {
  if (!c) return
  if (c.type === 'text-delta') part(t, c.index, 'text').text.append(c.text)
  else if (c.type === 'reasoning-delta') part(t, c.index, 'reasoning').text.append(c.text)
  else if (c.type === 'tool-call-delta') {
    const p = part(t, c.index, 'tool')
    if (c.name) p.text.append(`↳ calls ${c.name} `)
  }
}

function onStreamFrame(v, f) {
  if (f.kind === 'start') newTransient(v, f)
  else if (f.kind === 'snapshot') {
    const t = newTransient(v, f)
    for (const c of expandRecords(f.stream)) applyChunk(t, c)
  } else if (f.kind === 'chunk') {
    // client.stream() already dropped chunks this bubble has (shown, or in the snapshot it began from)
    const t = v.transient
    if (t?.attemptId === f.attemptId) applyChunk(t, f.chunk)
  } else if (f.kind === 'end') {
    // the durable assistant/message (outcome.seq) replaces the bubble; it is published before `end`
    if (v.transient?.attemptId === f.attemptId) {
      const seq = f.outcome?.seq
      // otherwise the durable event is still on its way, and dropTransientFor removes the bubble then
      if (f.outcome?.kind !== 'committed' || typeof seq !== 'number' || seq <= v.lastSeq) dropTransient(v)
    }
  }
}
