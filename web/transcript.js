// The transcript: a session's durable log (SPEC event catalogue) as a list, one renderer per event
// type. A new event type is one entry of `renderers`; a type without one is a raw line, shown only
// with "raw events" ticked.

import { $, h } from './dom.js'
import { clock, fmtJson, fmtReason, textOf } from './format.js'

function item(ev, cls, ...children) {
  return h('li', { class: `item ${cls}`, dataset: { seq: ev.seq, type: ev.type }, title: `#${ev.seq} ${ev.type} · ${clock(ev.time)}` }, ...children)
}

function rawLine(ev) {
  const text = JSON.stringify(ev.data)
  return item(ev, 'raw', h('span', { class: 'mono seq', text: `#${ev.seq}` }), h('span', { class: 'mono raw-type', text: ev.type }), h('span', { class: 'mono raw-data', text: text.length > 240 ? `${text.slice(0, 240)}…` : text }))
}

function contentBlocks(blocks) {
  const out = []
  for (const b of Array.isArray(blocks) ? blocks : []) {
    if (b.type === 'text') {
      if (b.text) out.push(h('div', { class: 'text', text: b.text }))
    } else if (b.type === 'reasoning') {
      if (b.text) out.push(h('details', { class: 'reasoning' }, h('summary', { text: 'Reasoning' }), h('div', { class: 'text', text: b.text })))
    } else if (b.type === 'tool-call') {
      out.push(h('div', { class: 'call-chip', title: b.arguments }, h('span', { text: '↳ calls ' }), h('span', { class: 'mono', text: b.name })))
    } else if (b.type === 'image') {
      out.push(h('div', { class: 'muted small', text: '[image]' }))
    } else if (b.type === 'tool-result') {
      out.push(h('div', { class: 'text', text: textOf(b.content) }))
    }
  }
  return out
}

/** a checkpoint is an event whose surfaceOp replaces earlier ones (SPEC §surfaceOp) */
const isCheckpoint = (ev) => !!ev.surfaceOp && typeof ev.surfaceOp === 'object'

function who(source, ev) {
  if (isCheckpoint(ev)) return 'checkpoint'
  if (!source || source.kind === 'user') return 'You'
  if (source.kind === 'plugin') return `plugin · ${source.plugin ?? '?'}`
  return source.kind
}

const toolHead = (...children) => h('div', { class: 'tool-head' }, h('span', { class: 'tool-icon', text: '⚙' }), ...children)

/**
 * `renderers[type](event, view)` answers the element to append, or null when it filled in an
 * element shown before (a tool result goes into its call's card). `view.tools` maps a callId to
 * that card.
 */
export const renderers = {
  // SPEC §19: a continuation turn carries on with a turn a crash interrupted
  'turn/start': (ev) => {
    const cont = typeof ev.data.continues === 'number'
    const el = item(
      ev,
      `turn-start${cont ? ' continuation' : ''}`,
      h('span', { text: `Turn ${ev.data.turn}` }),
      cont ? h('span', { class: 'tag warn continuation-tag', text: `continuing after an interruption (turn ${ev.data.continues})` }) : null,
      h('span', { class: 'muted small', text: clock(ev.time) }),
    )
    if (cont) el.dataset.continues = String(ev.data.continues)
    return el
  },

  'turn/end': (ev) => {
    const kind = ev.data.reason?.kind ?? 'unknown'
    const el = item(ev, `turn-end reason-${kind}`, h('span', { class: 'turn-end-text', text: `Turn ${ev.data.turn} ${fmtReason(ev.data.reason)}` }))
    el.dataset.reason = ev.data.reason?.kind ?? ''
    return el
  },

  'system/message': (ev) => item(ev, 'system', h('details', {}, h('summary', { text: 'System prompt' }), h('div', { class: 'text', text: textOf(ev.data.message?.content) || '(empty)' }))),

  'user/message': (ev) => {
    const d = ev.data
    return item(ev, `msg user${d.source?.kind && d.source.kind !== 'user' ? ' from-plugin' : ''}`, h('div', { class: 'who', text: who(d.source, ev) }), h('div', { class: 'bubble' }, contentBlocks(d.content)))
  },

  'assistant/message': (ev) => {
    const d = ev.data
    const m = d.message ?? {}
    const tags = [d.interrupted ? h('span', { class: 'tag warn', text: 'interrupted' }) : null, d.usage ? h('span', { class: 'muted small', text: `${d.usage.inputTokens ?? 0} in · ${d.usage.outputTokens ?? 0} out` }) : null]
    const body = contentBlocks(m.content)
    if (!body.length) body.push(h('div', { class: 'muted small', text: '(empty answer)' }))
    return item(ev, 'msg assistant', h('div', { class: 'who' }, h('span', { text: m.source?.model ? `${m.source.provider}/${m.source.model}` : 'assistant' }), ...tags), h('div', { class: 'bubble' }, body))
  },

  'assistant/attempt': (ev) => {
    const fin = (ev.data.stream ?? []).map((r) => (r.type === 'chunk' ? r.chunk : null)).find((c) => c && c.type === 'finish')
    const f = fin?.reason?.failure
    return item(ev, 'note attempt', h('span', { text: f ? `attempt ${fin.reason.kind}: ${f.code ?? ''} ${f.message ?? ''}` : 'attempt settled without an answer' }))
  },

  'tool/call': (ev, view) => {
    const d = ev.data
    const result = h('div', { class: 'tool-result pending-result', text: 'waiting for the result…' })
    const card = item(ev, 'tool', toolHead(h('span', { class: 'mono tool-name', text: d.name }), h('span', { class: 'muted small mono', text: d.callId })), h('details', { class: 'tool-args' }, h('summary', { text: 'arguments' }), h('pre', { class: 'mono', text: fmtJson(d.arguments) })), result)
    view.tools.set(d.callId, { card, result })
    return card
  },

  'tool/result': (ev, view) => {
    const d = ev.data
    const block = (d.message?.content ?? []).find((b) => b.type === 'tool-result') ?? {}
    const text = textOf(block.content)
    const el = h('div', { class: `tool-result${block.isError ? ' is-error' : ''}` }, block.isError ? h('span', { class: 'tag bad', text: d.error?.code ?? 'error' }) : null, h('span', { class: 'text', text: text || '(no output)' }))
    const callId = block.toolCallId ?? d.message?.source?.callId
    const t = view.tools.get(callId)
    if (t && !isCheckpoint(ev)) {
      t.result.replaceWith(el)
      t.result = el
      t.card.classList.toggle('failed', !!block.isError)
      t.card.classList.add('done')
      return null
    }
    return item(ev, 'tool done', toolHead(h('span', { class: 'muted small', text: isCheckpoint(ev) ? 'pruned result' : 'result' }), h('span', { class: 'muted small mono', text: callId ?? '' })), el)
  },

  'llm/retry': (ev) => {
    const d = ev.data
    return item(ev, 'note', h('span', { text: `retry ${d.retry}${d.maxRetries ? `/${d.maxRetries}` : ''} in ${d.delayMs} ms: ${d.failure?.code ?? ''} ${d.failure?.message ?? ''}` }))
  },

  'compaction/summary': (ev) => item(ev, 'note compaction', h('details', {}, h('summary', { text: `Compacted ${ev.data.shadowedSeqs?.length ?? 0} events (${ev.data.shadowedTokenCount ?? '?'} tokens)` }), h('div', { class: 'text', text: ev.data.summary ?? '' }))),

  'compaction/end': (ev) => (ev.data.error ? item(ev, 'note', h('span', { text: `compaction failed: ${ev.data.error}` })) : rawLine(ev)),

  'compaction/prune': (ev) => item(ev, 'note', h('span', { text: `pruned ${ev.data.shadowedSeqs?.length ?? 0} tool results (${ev.data.shadowedTokenCount ?? '?'} tokens)` })),

  'agent/inbox/spliced': (ev) => (ev.data.outcome === 'canceled' ? item(ev, 'note', h('span', { text: `removed ${ev.data.removedCount ?? 0} queued message(s) from ${ev.data.target}` })) : rawLine(ev)),
}

/** Appends durable event `ev` of the open `view`. */
export function renderEvent(view, ev) {
  const render = renderers[ev.type] ?? rawLine
  const el = render({ ...ev, data: ev.data ?? {} }, view)
  if (el) $('transcript').append(el)
  updateEmpty(view)
}

export function resetTranscript() {
  $('transcript').replaceChildren()
  $('transient-slot').replaceChildren()
  updateEmpty(null)
}

/** The line that stands in for an empty transcript: while the log loads, and while nothing in it shows. */
export function updateEmpty(view) {
  const shown = $('transcript').querySelector($('show-raw').checked ? '.item' : '.item:not(.raw)') || $('transient-slot').childElementCount > 0
  const line = $('transcript-empty')
  line.hidden = !view || !!shown
  line.textContent = view?.ready ? 'No messages yet. Write below and press Enter (or Followup) to start the first turn.' : 'Loading the log…'
}

/** Keeps the transcript scrolled to its end while the reader is at the end. */
export function stickToEnd(change) {
  const wrap = $('transcript-wrap')
  const stick = wrap.scrollHeight - wrap.scrollTop - wrap.clientHeight < 80
  change()
  if (stick) wrap.scrollTop = wrap.scrollHeight
}
