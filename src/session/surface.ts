// The surface (SPEC §3.2): the ordered list of model-visible nodes, with its replacement rules,
// and the projection of each node into model history (SPEC §14).

import { jsonEqual } from './json.js'
import type { ContentBlock, Message, SessionEvent, SurfaceOp } from './types.js'
import { SURFACE_TYPES } from './types.js'

export class SurfaceError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'SurfaceError'
  }
}

export interface SurfaceNode {
  readonly seq: number
  readonly type: string
  readonly event: SessionEvent
  /** The projected message (SPEC §14.1), or null when the node projects to nothing. */
  readonly message: Message | null
  /** Memoized token estimate of the node (SPEC §12.2). */
  tokens?: number
}

const isReplace = (op: SurfaceOp | undefined): op is { op: 'replace'; start: number; end: number } => typeof op === 'object' && op !== null && op.op === 'replace'

/** SPEC §14.1 projection of one surface event. */
export function project(e: SessionEvent): Message | null {
  const d = e.data as Record<string, unknown>
  switch (e.type) {
    case 'system/message':
    case 'assistant/message': {
      const m = d.message as Message
      return m && Array.isArray(m.content) && m.content.length > 0 ? m : null
    }
    case 'user/message':
      return d as unknown as Message
    case 'tool/result':
      return d.message as Message
    default:
      return null
  }
}

/** Code points of a string. */
export function codePoints(s: string): number {
  let n = 0
  for (const _ of s) n++
  return n
}

/** SPEC §12.2 estimate of a text: ceil(codePoints / 4). */
export const estimateText = (s: string): number => Math.ceil(codePoints(s) / 4)

/** Estimate of a node: the JSON text of its content. */
export function nodeTokens(n: SurfaceNode): number {
  if (n.tokens === undefined) {
    const content = contentOf(n.event)
    n.tokens = content ? estimateText(JSON.stringify(content)) : 0
  }
  return n.tokens
}

export function contentOf(e: SessionEvent): ContentBlock[] | undefined {
  const d = e.data as Record<string, unknown>
  if (e.type === 'user/message') return d.content as ContentBlock[]
  return (d.message as { content?: ContentBlock[] } | undefined)?.content
}

/**
 * Checks the surface fields of an event against the surface before it (SPEC §3.2). Throws
 * SurfaceError; returns the index range it replaces (or null for an append / non-surface event).
 */
export function checkSurfaceEvent(nodes: readonly SurfaceNode[], e: SessionEvent): { a: number; b: number } | null {
  const surface = SURFACE_TYPES.has(e.type)
  if (!surface) {
    if (e.surfaceOp !== undefined || e.sourceEventSeqs !== undefined) throw new SurfaceError(`${e.type} is not a surface event and cannot carry surfaceOp or sourceEventSeqs`)
    return null
  }
  if (e.surfaceOp === undefined) throw new SurfaceError(`${e.type} must carry surfaceOp`)
  const src = e.sourceEventSeqs
  if (src !== undefined) {
    if (!Array.isArray(src) || src.length === 0) throw new SurfaceError('sourceEventSeqs must be a non-empty array')
    if (new Set(src).size !== src.length) throw new SurfaceError('sourceEventSeqs has duplicates')
    if (src.some((x) => !Number.isInteger(x) || x < 0 || x >= e.seq)) throw new SurfaceError('sourceEventSeqs must lie below the event seq')
    if (e.type === 'assistant/message') throw new SurfaceError('assistant/message must not carry sourceEventSeqs')
  }
  if (e.surfaceOp === 'append') return null
  if (!isReplace(e.surfaceOp)) throw new SurfaceError(`bad surfaceOp ${JSON.stringify(e.surfaceOp)}`)
  const { start, end } = e.surfaceOp
  const a = nodes.findIndex((n) => n.seq === start)
  const b = a < 0 ? -1 : nodes.findIndex((n, i) => i >= a && n.seq === end)
  if (a < 0 || b < 0) throw new SurfaceError(`replace range ${start}..${end} is not on the surface in order`)
  const shadowed = nodes.slice(a, b + 1)
  const missing = shadowed.filter((n) => !(src ?? []).includes(n.seq))
  if (missing.length) throw new SurfaceError(`sourceEventSeqs must list every shadowed seq (missing ${missing.map((n) => n.seq).join(',')})`)
  if (a === 0 && nodes[0].type === 'system/message' && !(e.type === 'system/message' && a === b)) throw new SurfaceError('the head system node may only be replaced by a single-node system/message')
  if (e.type === 'tool/result') {
    if (a !== b || nodes[a].type !== 'tool/result') throw new SurfaceError('a replacing tool/result must shadow exactly one tool/result')
    if (!sameExceptToolContent(nodes[a].event.data, e.data)) throw new SurfaceError('a replacing tool/result must equal the shadowed one except inside the tool-result content')
  }
  return { a, b }
}

function sameExceptToolContent(before: unknown, after: unknown): boolean {
  const strip = (d: unknown): unknown => {
    const o = d as { message?: { content?: Array<Record<string, unknown>> } }
    const msg = o?.message
    if (!msg || !Array.isArray(msg.content)) return d
    return { ...(d as object), message: { ...msg, content: msg.content.map((b) => (b?.type === 'tool-result' ? { ...b, content: null } : b)) } }
  }
  return jsonEqual(strip(before), strip(after))
}
