// Prompt assembly (SPEC §7.2), the runtime-context snapshot (§7.3) and prompt-node reconciliation
// (§8.5–§8.7).

import { Service, type Context } from 'cordis'
import { pluginName } from '../hooks/index.js'
import { jsonEqual, newMessageId, type ContentBlock, type Draft, type SessionState, type ToolSchema, type UserMessage } from '../session/index.js'

export interface PromptSection {
  name: string
  /** text with {{variable}} placeholders; the session's own text is taken literally */
  text: string
  literal?: boolean
  plugin?: string
}

export interface PromptContext {
  name: string
  text: string
}

/** SPEC §3.5 PromptAssembly. */
export interface PromptAssembly {
  sections: PromptSection[]
  contexts: PromptContext[]
  tools: ToolSchema[]
  variables: Record<string, string>
  /** the system-prompt plugin's canonical tool order, when set */
  toolOrder?: string[]
}

/** ctx.systemPrompt: sections (and runtime contexts) registered by plugins, in registration order. */
export class SystemPromptService extends Service {
  readonly sections: PromptSection[] = []
  readonly contexts: Array<{ name: string; text: string | (() => string); plugin: string }> = []

  constructor(ctx: Context) {
    super(ctx, 'systemPrompt', true)
  }

  section(name: string, text: string): () => void {
    if (typeof name !== 'string' || typeof text !== 'string') throw new TypeError('ctx.systemPrompt.section(name, text) takes two strings')
    const s: PromptSection = { name, text, plugin: pluginName(this.ctx) }
    return this.track(this.sections, s)
  }

  /** A dynamic runtime context, rendered into the per-step snapshot (SPEC §7.3), not the prompt. */
  context(name: string, text: string | (() => string)): () => void {
    return this.track(this.contexts, { name, text, plugin: pluginName(this.ctx) })
  }

  private track<T>(list: T[], item: T): () => void {
    const d = this.ctx.effect(() => {
      list.push(item)
      return () => {
        const i = list.indexOf(item)
        if (i >= 0) list.splice(i, 1)
      }
    })
    return typeof d === 'function' ? d : () => (d as { dispose(): void }).dispose()
  }
}

export class PromptError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'PromptError'
  }
}

/** Renders sections: interpolate, drop empty, join with a blank line (SPEC §7.2). */
export function renderPrompt(a: PromptAssembly): string {
  const out: string[] = []
  for (const s of a.sections) {
    const text = s.literal ? s.text : interpolate(s.text, a.variables)
    if (text.length) out.push(text)
  }
  return out.join('\n\n')
}

function interpolate(text: string, vars: Record<string, string>): string {
  return text.replace(/\{\{\s*([A-Za-z0-9_.-]+)\s*\}\}/g, (_m, name: string) => {
    if (!Object.prototype.hasOwnProperty.call(vars, name)) throw new PromptError(`prompt variable {{${name}}} is not defined`)
    return String(vars[name])
  })
}

/** Canonical tool order (SPEC §7.2): the toolOrder when given, else by name. */
export function canonicalTools(tools: ToolSchema[], order?: string[]): ToolSchema[] {
  const rank = (n: string) => {
    const i = order?.indexOf(n) ?? -1
    return i < 0 ? Number.MAX_SAFE_INTEGER : i
  }
  return [...tools].sort((a, b) => rank(a.name) - rank(b.name) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
}

export const SNAPSHOT_HEADER = 'Runtime context:'
export const SNAPSHOT_EMPTY_MARKER = 'No runtime context.'

/** SPEC §7.3: the snapshot candidate for a proposed step, or undefined. */
export function snapshotCandidate(state: SessionState, contexts: PromptContext[]): UserMessage | undefined {
  const body = contexts.filter((c) => c.text.length).map((c) => `## ${c.name}\n${c.text}`).join('\n\n')
  let text: string
  let sections: string[] | undefined
  if (!body) {
    if (state.snapshot === undefined) return undefined // nothing ever retained
    text = SNAPSHOT_EMPTY_MARKER
  } else {
    text = `${SNAPSHOT_HEADER}\n\n${body}`
    sections = contexts.filter((c) => c.text.length).map((c) => c.name)
  }
  if (state.snapshot && state.snapshot.text === text) return undefined
  const source: UserMessage['source'] = sections ? { kind: 'plugin', plugin: 'system-prompt', form: 'snapshot', sections } : { kind: 'plugin', plugin: 'system-prompt', form: 'snapshot' }
  return { id: newMessageId(), role: 'user', content: [{ type: 'text', text }], source }
}

// ---- reconciliation (SPEC §8.6) ----

export const promptContent = (s: string): ContentBlock[] => (s === '' ? [] : [{ type: 'text', text: s }])

export interface SystemNode {
  seq: number
  content: ContentBlock[]
}

/** Surviving system nodes in surface order. */
export function systemNodes(state: SessionState): SystemNode[] {
  const out: SystemNode[] = []
  for (const n of state.nodes) if (n.type === 'system/message') out.push({ seq: n.seq, content: ((n.event.data as unknown as { message: { content: ContentBlock[] } }).message?.content ?? []) as ContentBlock[] })
  return out
}

const active = (n: SystemNode) => n.content.length > 0

export type PromptCommit = { kind: 'append'; content: ContentBlock[] } | { kind: 'replace'; seq: number; content: ContentBlock[] }

/** The ordered commits that reconcile the rendered prompt with the surface (SPEC §8.6). */
export function reconcile(nodes: SystemNode[], rendered: string, inHistory: boolean, startsSeries: boolean): PromptCommit[] {
  const want = promptContent(rendered)
  if (!nodes.length) return [{ kind: 'append', content: want }]
  const head = nodes[0]
  if (!inHistory || startsSeries || rendered === '') {
    const out: PromptCommit[] = nodes.slice(1).filter(active).map((n) => ({ kind: 'replace' as const, seq: n.seq, content: [] }))
    if (!jsonEqual(head.content, want)) out.push({ kind: 'replace', seq: head.seq, content: want })
    return out
  }
  const latest = [...nodes].reverse().find(active) ?? head
  if (jsonEqual(latest.content, want)) return []
  return [{ kind: 'append', content: want }]
}

/** A prompt commit as a system/message draft. */
export function promptDraft(c: PromptCommit, turn: number, step: number): Draft {
  const message = { id: newMessageId(), role: 'system', content: c.content, source: { kind: 'plugin', plugin: 'system-prompt' } }
  const data = { turn, step, message } as unknown as Draft['data']
  if (c.kind === 'append') return { type: 'system/message', data, surfaceOp: 'append' }
  return { type: 'system/message', data, surfaceOp: { op: 'replace', start: c.seq, end: c.seq }, sourceEventSeqs: [c.seq] }
}
