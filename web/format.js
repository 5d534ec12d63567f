// Turning API values into short text for the console: times, usage, turn-end reasons, content.

export function relTime(iso) {
  const t = Date.parse(iso)
  if (!Number.isFinite(t)) return ''
  const s = Math.round((Date.now() - t) / 1000)
  if (s < 5) return 'just now'
  if (s < 60) return `${s}s ago`
  if (s < 3600) return `${Math.floor(s / 60)} min ago`
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`
  return new Date(t).toLocaleDateString()
}

/** an event's `time` (epoch ms) as a wall-clock time */
export const clock = (ms) => new Date(ms).toLocaleTimeString()

/** a session's `usage` (API.md §4) */
export function fmtUsage(u) {
  if (!u) return ''
  const n = (x) => (x ?? 0).toLocaleString()
  const cost = typeof u.costUsd === 'number' ? ` · $${u.costUsd.toFixed(4)}` : ''
  return `in ${n(u.inputTokens)} · out ${n(u.outputTokens)} · cache ${n(u.cacheReadTokens)}/${n(u.cacheWriteTokens)}${cost}`
}

function fmtCause(c) {
  if (!c) return ''
  return c.kind === 'hook' && c.reason ? `hook: ${c.reason}` : c.kind
}

/** a TurnEndReason (SPEC §turn/end) */
export function fmtReason(r) {
  if (!r) return 'ended'
  switch (r.kind) {
    case 'aborted':
      return `aborted (${fmtCause(r.reason)})`
    case 'error':
      return `error: ${r.error?.code ?? ''} ${r.error?.message ?? ''}`.trim()
    default:
      return r.kind
  }
}

/** the text of content blocks, images as a placeholder */
export const textOf = (blocks) => (Array.isArray(blocks) ? blocks : []).map((b) => (b.type === 'text' || b.type === 'reasoning' ? b.text : b.type === 'image' ? '[image]' : '')).join('')

/** tool arguments, pretty-printed when they are JSON */
export function fmtJson(raw) {
  if (typeof raw !== 'string') return JSON.stringify(raw, null, 2)
  try {
    return JSON.stringify(JSON.parse(raw), null, 2)
  } catch {
    return raw
  }
}
