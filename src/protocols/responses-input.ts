// The request side of POST /v1/responses (API.md §17.1): its input items as one followup and answers
// to pending calls, its settings as session settings (those that differ from the session's), and
// agentd's errors in OpenAI's shape {error: {message, type, param, code}}.

import { ApiError, badRequest } from '../errors.js'
import type { SettingsInput } from '../agent/index.js'
import { canonicalJson, normalizeContent, type ContentBlock, type JsonObject } from '../session/index.js'
import type { SessionRow } from '../store/index.js'
import type { HttpDeps } from '../http/index.js'

/** OpenAI request fields agentd accepts and leaves to the session (sampling, formatting, routing hints). */
export const IGNORED = new Set(['temperature', 'top_p', 'parallel_tool_calls', 'tool_choice', 'text', 'truncation', 'user', 'include', 'service_tier', 'prompt_cache_key', 'safety_identifier', 'top_logprobs', 'stream_options', 'max_tool_calls'])
export const FIELDS = new Set(['model', 'input', 'instructions', 'tools', 'max_output_tokens', 'reasoning', 'conversation', 'previous_response_id', 'store', 'stream', 'background', 'metadata'])

export const bad = (message: string, param: string) => badRequest(message, [{ path: param, message }])
export const notFound = (what: string) => new ApiError('not-found', `${what} not found`)

/** OpenAI's error `type` for a status. */
function errorType(status: number): string {
  if (status === 401) return 'authentication_error'
  if (status === 403) return 'permission_error'
  if (status === 429) return 'rate_limit_error'
  if (status >= 500) return 'server_error'
  return 'invalid_request_error'
}

/** An agentd error body (API.md §10) as OpenAI's. */
export function openaiErrorBody(status: number, payload: string): string {
  let parsed: { error?: { code?: string; message?: string; details?: Array<{ path?: string }> } }
  try {
    parsed = JSON.parse(payload)
  } catch {
    return payload
  }
  const e = parsed?.error
  if (!e || typeof e.message !== 'string') return payload
  const param = e.details?.[0]?.path ? String(e.details[0].path).replace(/^body\./, '') || null : null
  return JSON.stringify({ error: { message: e.message, type: errorType(status), param, code: e.code ?? null } })
}

export interface ParsedInput {
  content?: ContentBlock[]
  answers: Array<{ callId: string; kind: 'client' | 'approval'; answer: unknown; param: string }>
}

function contentPart(p: unknown, at: string): ContentBlock {
  const o = p as Record<string, unknown>
  if (!o || typeof o !== 'object') throw bad('a content part must be an object', at)
  if (o.type === 'input_text' && typeof o.text === 'string') return { type: 'text', text: o.text }
  if (o.type === 'input_image' && typeof o.image_url === 'string') {
    const m = /^data:([^;,]+);base64,(.*)$/s.exec(o.image_url)
    return m ? { type: 'image', mimeType: m[1], data: m[2] } : { type: 'image', url: o.image_url }
  }
  throw bad(`content part type ${JSON.stringify(o.type)} is not supported (input_text, input_image)`, at)
}

/** API.md §17.1 Input: user message parts (one followup), function_call_output and mcp_approval_response items. */
export function parseInput(input: unknown): ParsedInput {
  if (typeof input === 'string') return { content: normalizeContent(input, 'input'), answers: [] }
  if (!Array.isArray(input)) throw bad('input must be a string or a list of items', 'input')
  const parts: ContentBlock[] = []
  const answers: ParsedInput['answers'] = []
  input.forEach((raw, i) => {
    const at = `input[${i}]`
    const it = raw as Record<string, unknown>
    if (!it || typeof it !== 'object' || Array.isArray(it)) throw bad('an input item must be an object', at)
    const type = it.type ?? (it.role !== undefined ? 'message' : undefined)
    if (type === 'message') {
      if (it.role !== 'user') throw bad(`input messages of role ${JSON.stringify(it.role)} are not accepted: agentd keeps the history itself`, `${at}.role`)
      if (typeof it.content === 'string') parts.push({ type: 'text', text: it.content })
      else if (Array.isArray(it.content)) it.content.forEach((p, j) => parts.push(contentPart(p, `${at}.content[${j}]`)))
      else throw bad('content must be a string or a list of parts', `${at}.content`)
    } else if (type === 'function_call_output') {
      if (typeof it.call_id !== 'string' || !it.call_id) throw bad('call_id must be a string', `${at}.call_id`)
      const out = it.output
      const content = typeof out === 'string' ? normalizeContent(out === '' ? [] : out, `${at}.output`) : Array.isArray(out) ? out.map((p, j) => contentPart(p, `${at}.output[${j}]`)) : undefined
      if (!content) throw bad('output must be a string or a list of parts', `${at}.output`)
      answers.push({ callId: it.call_id, kind: 'client', answer: { content, isError: false }, param: `${at}.call_id` })
    } else if (type === 'mcp_approval_response') {
      if (typeof it.approval_request_id !== 'string' || !it.approval_request_id) throw bad('approval_request_id must be a string', `${at}.approval_request_id`)
      if (typeof it.approve !== 'boolean') throw bad('approve must be a boolean', `${at}.approve`)
      const answer: { decision: string; reason?: string } = { decision: it.approve ? 'allow' : 'deny' }
      if (typeof it.reason === 'string' && it.reason) answer.reason = it.reason
      answers.push({ callId: it.approval_request_id, kind: 'approval', answer, param: `${at}.approval_request_id` })
    } else throw bad(`input items of type ${JSON.stringify(type)} are not accepted: agentd keeps the history itself`, `${at}.type`)
  })
  const content = parts.length ? normalizeContent(parts, 'input') : undefined
  return { content, answers }
}

/** API.md §17.1 Settings, as session settings (SettingsInput) and the agent a `model` of `agent:<id>` names. */
export function parseSettings(b: Record<string, unknown>): { settings: SettingsInput; agent?: string } {
  const settings: SettingsInput = {}
  let agent: string | undefined
  if (b.model !== undefined) {
    if (typeof b.model !== 'string' || !b.model) throw bad('model must be a string', 'model')
    if (b.model.startsWith('agent:')) agent = b.model.slice(6)
    else settings.model = b.model
  }
  if (b.instructions !== undefined && b.instructions !== null) {
    if (typeof b.instructions !== 'string') throw bad('instructions must be a string', 'instructions')
    settings.system = b.instructions
  }
  if (b.tools !== undefined) {
    if (!Array.isArray(b.tools)) throw bad('tools must be a list', 'tools')
    settings.tools = b.tools.map((t, i) => {
      const o = t as Record<string, unknown>
      if (!o || o.type !== 'function') throw bad(`tools of type ${JSON.stringify(o?.type)} are not supported: only function tools (client tools)`, `tools[${i}].type`)
      if (typeof o.name !== 'string') throw bad('a function tool needs a name', `tools[${i}].name`)
      const spec: JsonObject = { name: o.name, description: typeof o.description === 'string' ? o.description : '', parameters: (o.parameters as JsonObject) ?? { type: 'object', properties: {} }, execution: { type: 'client' } }
      return spec
    })
  }
  if (b.max_output_tokens !== undefined && b.max_output_tokens !== null) {
    if (!Number.isInteger(b.max_output_tokens) || (b.max_output_tokens as number) < 1) throw bad('max_output_tokens must be a positive integer', 'max_output_tokens')
    settings.maxTokens = b.max_output_tokens as number
  }
  const effort = (b.reasoning as { effort?: unknown } | undefined)?.effort
  if (effort !== undefined && effort !== null) {
    if (typeof effort !== 'string') throw bad('reasoning.effort must be a string', 'reasoning.effort')
    settings.reasoningEffort = effort
  }
  return { settings, agent }
}

/** Settings given that differ from the session's (API.md §17.1: omitted ones stay). */
export async function differing(deps: HttpDeps, row: SessionRow, s: SettingsInput): Promise<SettingsInput> {
  const out: SettingsInput = {}
  if (s.model !== undefined && s.model !== row.model) out.model = s.model
  if (s.system !== undefined && s.system !== row.system) out.system = s.system
  if (s.maxTokens !== undefined && s.maxTokens !== row.maxTokens) out.maxTokens = s.maxTokens
  if (s.reasoningEffort !== undefined && s.reasoningEffort !== row.reasoningEffort) out.reasoningEffort = s.reasoningEffort
  if (s.tools !== undefined) {
    const v = await deps.sessions.validateSettings({ tools: s.tools })
    if (canonicalJson(v.tools as JsonObject[]) !== canonicalJson(row.tools)) out.tools = s.tools
  }
  return out
}
