// Turning delivered input into UserMessages (SPEC §3.3, API.md §5, §11): validation before anything is
// written, message ids.

import crypto from 'node:crypto'
import { assertLosslessJson, assertStorableText, deepFreeze, JsonValueError } from './json.js'
import type { ContentBlock, UserMessage, UserSource } from './types.js'

export class InputError extends Error {
  constructor(message: string, readonly path = 'content') {
    super(message)
    this.name = 'InputError'
  }
}

export const newMessageId = () => `msg_${crypto.randomUUID().replace(/-/g, '')}`

/** API.md §5: an Idempotency-Key header names the message `idem-` + 32 hex digits of its SHA-256. */
export const idempotencyMessageId = (key: string) => `idem-${crypto.createHash('sha256').update(key).digest('hex').slice(0, 32)}`

/** Validates user content blocks; a string becomes one text block. */
export function normalizeContent(content: unknown, path = 'content'): ContentBlock[] {
  const blocks: unknown[] = typeof content === 'string' ? [{ type: 'text', text: content }] : Array.isArray(content) ? content : []
  if (typeof content !== 'string' && !Array.isArray(content)) throw new InputError('content must be a string or an array of content blocks', path)
  blocks.forEach((b, i) => checkInputBlock(b, `${path}[${i}]`))
  if (!blocks.some(carriesSomething)) throw new InputError('content must carry something: a non-empty text or an image', path)
  return blocks as ContentBlock[]
}

function carriesSomething(b: unknown): boolean {
  const x = b as ContentBlock
  return (x.type === 'text' && x.text.length > 0) || x.type === 'image'
}

function checkInputBlock(b: unknown, path: string): void {
  if (b === null || typeof b !== 'object' || Array.isArray(b)) throw new InputError('a content block must be an object', path)
  const x = b as Record<string, unknown>
  const keys = Object.keys(x)
  const only = (allowed: string[]) => {
    for (const k of keys) if (!allowed.includes(k)) throw new InputError(`unknown field ${k} in a ${String(x.type)} block`, `${path}.${k}`)
  }
  if (x.type === 'text') {
    only(['type', 'text'])
    if (typeof x.text !== 'string') throw new InputError('text must be a string', `${path}.text`)
  } else if (x.type === 'image') {
    only(['type', 'mimeType', 'data', 'url'])
    const hasData = typeof x.data === 'string' && typeof x.mimeType === 'string' && /^image\//.test(x.mimeType)
    const hasUrl = typeof x.url === 'string' && /^https?:\/\//.test(x.url)
    if (!hasData && !hasUrl) throw new InputError('an image block needs {mimeType: "image/…", data: base64} or {url}', path)
  } else throw new InputError(`unknown content block type ${JSON.stringify(x.type)} (text and image are accepted)`, `${path}.type`)
}

export type MessageInput = string | { content: unknown; id?: unknown; source?: unknown; role?: unknown }

/**
 * A UserMessage from a delivery: a string, or {content, id?, source?} (a `role`, if present, must be
 * "user"). Throws InputError for bad content and non-JSON values, before anything is written.
 */
export function toUserMessage(input: MessageInput, defaultSource: UserSource, id?: string): UserMessage {
  const o = typeof input === 'string' ? { content: input } : input
  if (o === null || typeof o !== 'object') throw new InputError('a message is a string or {content, id?, source?}', '')
  for (const k of Object.keys(o)) if (!['content', 'id', 'source', 'role'].includes(k)) throw new InputError(`unknown field ${k}`, k)
  if (o.role !== undefined && o.role !== 'user') throw new InputError('role must be "user"', 'role')
  if (o.id !== undefined && (typeof o.id !== 'string' || o.id.length === 0 || o.id.length > 200)) throw new InputError('id must be a non-empty string of at most 200 characters', 'id')
  let source = defaultSource
  if (o.source !== undefined) {
    const s = o.source as Record<string, unknown>
    if (s === null || typeof s !== 'object' || Array.isArray(s) || typeof s.kind !== 'string') throw new InputError('source must be an object with a string kind', 'source')
    source = s as UserSource
  }
  const content = normalizeContent(o.content)
  const message: UserMessage = { id: (o.id as string | undefined) ?? id ?? newMessageId(), role: 'user', content, source }
  try {
    assertLosslessJson(message)
    // what PostgreSQL text cannot hold is refused here as it is at the HTTP door
    assertStorableText(message)
  } catch (e) {
    if (e instanceof JsonValueError) throw new InputError(`not storable: ${e.why}`, e.path.replace(/^\$\.?/, ''))
    throw e
  }
  return deepFreeze(structuredClone(message))
}
