// Our messages → a pi-ai Context (SPEC §8.11), and the replay state that carries provider signatures
// between a finish chunk and the next request.

import type {
  AssistantMessage as PiAssistantMessage,
  Context,
  ImageContent,
  Message as PiMessage,
  TextContent,
  ThinkingContent,
  Tool,
  ToolCall,
  ToolResultMessage as PiToolResultMessage,
  UserMessage as PiUserMessage,
} from '@earendil-works/pi-ai'
import type { AssistantMessage, ContentBlock, Json, Message, ToolSchema } from '../session/index.js'

/**
 * Replay state (the finish chunk's `replayState`, stored in `source.replayState`): the provider's
 * opaque per-block data, in pi-ai content order. Visible blocks match the message's blocks of the same
 * type in order (tool calls by id); `hidden` entries are reasoning the provider returned without
 * visible text (redacted or encrypted), replayed verbatim.
 */
export interface ReplayState {
  v: 1
  api: string
  responseId?: string
  blocks: ReplayBlock[]
}

export type ReplayBlock =
  | { type: 'text'; signature?: string }
  | { type: 'reasoning'; signature?: string; redacted?: true; hidden?: string }
  | { type: 'tool-call'; id: string; signature?: string }

export interface RouteIdentity {
  api: string
  provider: string
  id: string
}

const ZERO_USAGE = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, totalTokens: 0, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } }

/**
 * Converts a loop request's messages and tools into a pi-ai Context. A leading system message becomes
 * `systemPrompt`; a later one becomes a user message in place; empty system messages are skipped.
 */
export function toPiContext(messages: readonly Message[], tools: readonly ToolSchema[] | undefined, route: RouteIdentity): Context {
  const routeKey = `${route.api}\u0000${route.provider}\u0000${route.id}`
  const from = prefixOf(messages, routeKey)
  const out: PiMessage[] = from ? from.out.slice() : []
  let systemPrompt = from?.systemPrompt
  // a whole walk collects the call names as it goes; a step that extends a prefix converts a few new
  // messages, and looks the calls of their results up backwards instead of copying a map of them all
  const toolNames = from ? undefined : new Map<string, string>()
  const nameOf = (id: string, before: number) => (toolNames ? toolNames.get(id) : callName(messages, id, before)) ?? ''
  let first = from ? from.n === 0 : true
  let frozen = true
  for (let i = from?.n ?? 0; i < messages.length; i++) {
    const m = messages[i]
    if (!Object.isFrozen(m)) frozen = false
    if (m.role === 'system') {
      if (m.content.length === 0) continue
      if (first) systemPrompt = m.content.flatMap((b) => (b.type === 'text' ? [b.text] : [])).join('')
      else out.push(...cached(m, routeKey, () => [user(m.content)]))
    } else if (m.role === 'assistant') {
      if (toolNames) for (const b of m.content) if (b.type === 'tool-call') toolNames.set(b.id, b.name)
      out.push(...cached(m, routeKey, () => [assistant(m, route)]))
    } else {
      // a tool result is a user message holding a tool-result block; anything else beside it stays a user message
      const results = m.content.filter((b) => b.type === 'tool-result') as Array<Extract<ContentBlock, { type: 'tool-result' }>>
      const names = results.map((b) => nameOf(b.toolCallId, i))
      out.push(
        ...cached(m, `${routeKey}\u0000${names.join('\u0000')}`, () => {
          const conv: PiMessage[] = []
          const rest: ContentBlock[] = []
          let k = 0
          for (const b of m.content) {
            if (b.type === 'tool-result') {
              const result: PiToolResultMessage = {
                role: 'toolResult',
                toolCallId: b.toolCallId,
                toolName: names[k++],
                content: media(b.content),
                isError: b.isError,
                timestamp: 0,
              }
              conv.push(result)
            } else rest.push(b)
          }
          if (rest.length > 0 || results.length === 0) conv.push(user(rest))
          return conv
        }),
      )
    }
    first = false
  }
  // the next step's request starts with these same frozen messages: it converts only what follows them
  if (frozen && messages.length > 0 && Object.isFrozen(messages)) {
    // and the prefix it extended is dropped: each prefix holds copies of the whole history, and one kept
    // per step of a long session would hold the history as many times as it has steps
    if (from && from.n < messages.length) prefixes.delete(from.messages[from.n - 1])
    prefixes.set(messages[messages.length - 1], { n: messages.length, messages, routeKey, out: out.slice(), systemPrompt })
  }
  const ctx: Context = { messages: out }
  if (systemPrompt !== undefined) ctx.systemPrompt = systemPrompt
  if (tools && tools.length > 0) ctx.tools = tools.map((t) => ({ name: t.name, description: t.description, parameters: t.parameters }) as unknown as Tool)
  return ctx
}

/**
 * A converted prefix: the first `n` messages of `messages` (all frozen), keyed by the last of them.
 * A step's request is the previous step's messages and a few new ones; the prefix spares the walk over
 * the whole history (each message's conversion is memoized anyway, below), so a step's conversion costs
 * what is new, not what came before.
 */
interface Prefix {
  n: number
  messages: readonly Message[]
  routeKey: string
  out: readonly PiMessage[]
  systemPrompt: string | undefined
}

const prefixes = new WeakMap<object, Prefix>()

/** The name of call `id` as the latest assistant message before index `before` has it; undefined if none has it. */
function callName(messages: readonly Message[], id: string, before: number): string | undefined {
  for (let j = before - 1; j >= 0; j--) {
    const m = messages[j]
    if (m.role !== 'assistant') continue
    for (let k = m.content.length - 1; k >= 0; k--) {
      const b = m.content[k]
      if (b.type === 'tool-call' && b.id === id) return b.name
    }
  }
  return undefined
}

/** how far back from the end a prefix is looked for (a step adds an assistant message and its results) */
const PREFIX_LOOKBACK = 8

function prefixOf(messages: readonly Message[], routeKey: string): Prefix | undefined {
  for (let j = messages.length - 1; j >= 0 && j >= messages.length - PREFIX_LOOKBACK; j--) {
    const p = prefixes.get(messages[j])
    if (!p || p.n !== j + 1 || p.routeKey !== routeKey) continue
    let same = true
    for (let i = 0; i <= j && same; i++) same = p.messages[i] === messages[i]
    if (same) return p
  }
  return undefined
}

/**
 * Conversions of frozen log messages, memoized per message (and per route, which decides the replay
 * fields): a step converts only what is new, so its cost does not grow with the history.
 */
const conversions = new WeakMap<object, { key: string; value: PiMessage[] }>()

function cached(m: Message, key: string, convert: () => PiMessage[]): PiMessage[] {
  if (!Object.isFrozen(m)) return convert()
  const hit = conversions.get(m)
  if (hit && hit.key === key) return hit.value
  const value = convert()
  deepFreeze(value)
  conversions.set(m, { key, value })
  return value
}

function deepFreeze<T>(v: T): T {
  if (v !== null && typeof v === 'object' && !Object.isFrozen(v)) {
    Object.freeze(v)
    for (const k of Object.keys(v as object)) deepFreeze((v as Record<string, unknown>)[k])
  }
  return v
}

function user(content: readonly ContentBlock[]): PiUserMessage {
  return { role: 'user', content: media(content), timestamp: 0 }
}

/** Text and inline images; pi-ai cannot send images by URL, and other block kinds carry nothing here. */
function media(content: readonly ContentBlock[]): (TextContent | ImageContent)[] {
  const out: (TextContent | ImageContent)[] = []
  for (const b of content) {
    if (b.type === 'text') out.push({ type: 'text', text: b.text })
    else if (b.type === 'image' && b.data !== undefined && b.mimeType !== undefined) out.push({ type: 'image', data: b.data, mimeType: b.mimeType })
  }
  return out
}

function assistant(m: AssistantMessage, route: RouteIdentity): PiAssistantMessage {
  const replay = readReplayState(m.source.replayState)
  const content: PiAssistantMessage['content'] = []
  const entries = replay?.blocks ?? []
  let cursor = 0
  const pushHidden = (upTo: number) => {
    for (; cursor < upTo; cursor++) {
      const e = entries[cursor]!
      if (e.type === 'reasoning' && e.hidden !== undefined) content.push(thinking(e.hidden, e))
    }
  }
  for (const b of m.content) {
    if (b.type !== 'text' && b.type !== 'reasoning' && b.type !== 'tool-call') continue
    const j = entries.findIndex((e, k) => k >= cursor && matches(e, b))
    const entry = j >= 0 ? entries[j] : undefined
    if (j >= 0) pushHidden(j)
    if (b.type === 'text') {
      const t: TextContent = { type: 'text', text: b.text }
      if (entry?.signature !== undefined) t.textSignature = entry.signature
      content.push(t)
    } else if (b.type === 'reasoning') {
      content.push(thinking(b.text, entry?.type === 'reasoning' ? entry : undefined))
    } else {
      const call: ToolCall = { type: 'toolCall', id: b.id, name: b.name, arguments: parseArguments(b.arguments) }
      if (entry?.signature !== undefined) call.thoughtSignature = entry.signature
      content.push(call)
    }
    if (j >= 0) cursor = j + 1
  }
  pushHidden(entries.length)
  const sameRoute = m.source.provider === route.provider && m.source.model === route.id
  const msg: PiAssistantMessage = {
    role: 'assistant',
    content,
    // pi-ai keeps signatures only when api, provider and model all match the target route
    api: replay?.api ?? (sameRoute ? route.api : 'unknown'),
    provider: m.source.provider,
    model: m.source.model,
    usage: structuredClone(ZERO_USAGE),
    stopReason: content.some((c) => c.type === 'toolCall') ? 'toolUse' : 'stop',
    timestamp: 0,
  }
  if (replay?.responseId !== undefined) msg.responseId = replay.responseId
  return msg
}

function matches(e: ReplayBlock, b: ContentBlock): boolean {
  if (e.type === 'reasoning') return b.type === 'reasoning' && e.hidden === undefined
  if (e.type === 'tool-call') return b.type === 'tool-call' && b.id === e.id
  return b.type === 'text'
}

function thinking(text: string, e?: { signature?: string; redacted?: true }): ThinkingContent {
  const t: ThinkingContent = { type: 'thinking', thinking: text }
  if (e?.signature !== undefined) t.thinkingSignature = e.signature
  if (e?.redacted) t.redacted = true
  return t
}

/** Our tool-call arguments are JSON text; pi-ai wants the object. Unparseable or non-object text → {}. */
export function parseArguments(text: string): Record<string, any> {
  try {
    const v = JSON.parse(text)
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? v : {}
  } catch {
    return {}
  }
}

/** Builds the replay state of a finished pi-ai message; `shown[i]` says whether content block i became a visible block. */
export function buildReplayState(message: PiAssistantMessage, shown: (i: number) => boolean): ReplayState | undefined {
  const blocks: ReplayBlock[] = []
  let informative = message.responseId !== undefined
  message.content.forEach((b, i) => {
    if (b.type === 'text') {
      if (!shown(i)) return
      blocks.push(b.textSignature ? { type: 'text', signature: b.textSignature } : { type: 'text' })
      if (b.textSignature) informative = true
    } else if (b.type === 'thinking') {
      const e: ReplayBlock = { type: 'reasoning' }
      if (b.thinkingSignature) e.signature = b.thinkingSignature
      if (b.redacted) e.redacted = true
      if (!shown(i)) {
        if (!b.thinkingSignature && !b.redacted) return
        e.hidden = b.thinking
      }
      if (e.signature !== undefined || e.redacted) informative = true
      blocks.push(e)
    } else {
      blocks.push(b.thoughtSignature ? { type: 'tool-call', id: b.id, signature: b.thoughtSignature } : { type: 'tool-call', id: b.id })
      if (b.thoughtSignature) informative = true
    }
  })
  if (!informative) return undefined
  const state: ReplayState = { v: 1, api: message.api, blocks }
  if (message.responseId !== undefined) state.responseId = message.responseId
  return state
}

/** Removes the tool-call entries of a replay state (a `max-tokens` finish drops its tool calls, SPEC §9.5). */
export function dropToolCallsFromReplayState(state: Json | undefined): Json | undefined {
  const rs = readReplayState(state)
  if (!rs) return state
  return { ...rs, blocks: rs.blocks.filter((b) => b.type !== 'tool-call') } as unknown as Json
}

/** The replay state if `v` has our shape, else undefined (a foreign or damaged value is ignored, not trusted). */
export function readReplayState(v: Json | undefined): ReplayState | undefined {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return undefined
  if (v.v !== 1 || typeof v.api !== 'string' || !Array.isArray(v.blocks)) return undefined
  if (v.responseId !== undefined && typeof v.responseId !== 'string') return undefined
  for (const b of v.blocks) {
    if (typeof b !== 'object' || b === null || Array.isArray(b)) return undefined
    if (b.type !== 'text' && b.type !== 'reasoning' && b.type !== 'tool-call') return undefined
    if (b.signature !== undefined && typeof b.signature !== 'string') return undefined
    if (b.type === 'tool-call' && typeof b.id !== 'string') return undefined
    if (b.hidden !== undefined && typeof b.hidden !== 'string') return undefined
  }
  return v as unknown as ReplayState
}
