// The models file of API.md §2: parsed once at start and validated strictly, so a typo stops the start
// with a message naming the field instead of silently changing a route.
//
// Accepted shape (every field not listed here is an error):
//   { providers: { <name>: {
//       api: pi-ai API id (required), baseUrl: URL (required),
//       apiKey?: 'env:NAME' | literal   (absent: the key of pi-ai's built-in provider of that name),
//       headers?: {string: string}, compat?: pi-ai compat object for the api (keys checked against pi-ai's schema),
//       retry?: {mode?, maxRetries?, initialDelayMs?, maxDelayMs?, jitterRatio?, codes?}  (SPEC §10.5),
//       models: [{ id (required), name?, contextWindow?, maxTokens?, reasoning? (default false),
//                  input?: ('text'|'image')[] (default ['text']),
//                  cost?: {input, output, cacheRead?, cacheWrite?} (USD per million tokens) }] } } }

import fs from 'node:fs'
import { CompatSchemasByApi } from '@earendil-works/pi-ai/providers/compat-schema'
import { CHAT_APIS } from './apis.js'
import { DEFAULT_RETRY_POLICY, type RetryPolicy } from './types.js'

export interface ModelEntry {
  id: string
  name?: string
  contextWindow?: number
  maxTokens?: number
  reasoning: boolean
  input: ('text' | 'image')[]
  cost?: { input: number; output: number; cacheRead: number; cacheWrite: number }
}

export type ApiKeySpec = { env: string } | { literal: string }

export interface ProviderEntry {
  name: string
  api: string
  baseUrl: string
  apiKey?: ApiKeySpec
  headers?: Record<string, string>
  compat?: Record<string, unknown>
  retryPolicy: RetryPolicy
  models: ModelEntry[]
}

export interface ModelsFile {
  providers: ProviderEntry[]
}

/** The compat settings pi-ai defines for an API (its own models.json schema), or undefined when it takes none. */
function compatKeys(api: string): string[] | undefined {
  const schema = (CompatSchemasByApi as Record<string, { properties?: object }>)[api]
  return schema?.properties ? Object.keys(schema.properties) : undefined
}

/** Settings agentd decides itself, with the reason a models file may not set them. */
const OWN_SETTINGS: Record<string, string> = {
  // SPEC §8.10: every request carries the whole history the log reconstructs; see service.ts
  supportsMessageThreads: 'agentd sends the whole history with every request, so Anthropic message threads are always off',
}
/** Settings pi-ai 1.x no longer has, and what replaced them. */
const REPLACED_SETTINGS: Record<string, string> = {
  sendSessionIdHeader: 'pi-ai 1.x replaced it with sessionAffinityFormat ("openai", "openai-nosession" or "openrouter")',
}

const RETRY_CODES = ['CONTEXT_WINDOW_EXCEEDED', 'RATE_LIMIT', 'AUTH', 'SERVER', 'TIMEOUT', 'TRANSPORT', 'EMPTY_RESPONSE', 'QUOTA', 'INVALID_REQUEST', 'UNKNOWN']

type Obj = Record<string, unknown>

const fail = (path: string, why: string): never => {
  throw new Error(`${path}: ${why}`)
}

function object(v: unknown, path: string): Obj {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) fail(path, 'must be an object')
  return v as Obj
}

function onlyKeys(o: Obj, path: string, allowed: readonly string[]): void {
  for (const k of Object.keys(o)) if (!allowed.includes(k)) fail(path ? `${path}.${k}` : k, 'unknown field')
}

function string(v: unknown, path: string): string {
  if (typeof v !== 'string' || v === '') fail(path, 'must be a non-empty string')
  return v as string
}

function positiveInt(v: unknown, path: string): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) fail(path, 'must be a positive integer')
  return v as number
}

function nonNegative(v: unknown, path: string): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) fail(path, 'must be a non-negative number')
  return v as number
}

function boolean(v: unknown, path: string): boolean {
  if (typeof v !== 'boolean') fail(path, 'must be true or false')
  return v as boolean
}

/**
 * Validates parsed models-file JSON; throws an Error whose message starts with the offending path.
 * `extraApis`: API ids besides pi-ai's that the caller can serve (LlmServiceOptions.extraApis).
 */
export function parseModelsFile(json: unknown, extraApis: readonly string[] = []): ModelsFile {
  const root = object(json, '(top level)')
  onlyKeys(root, '', ['providers'])
  const providers = object(root.providers ?? fail('providers', 'required'), 'providers')
  return { providers: Object.entries(providers).map(([name, raw]) => parseProvider(name, raw, `providers.${name}`, extraApis)) }
}

function parseProvider(name: string, raw: unknown, path: string, extraApis: readonly string[]): ProviderEntry {
  // the route is split at the first '/', so a provider name must not contain one
  if (name === '' || name.includes('/')) fail(path, 'a provider name must be non-empty and contain no "/"')
  const p = object(raw, path)
  onlyKeys(p, path, ['api', 'baseUrl', 'apiKey', 'headers', 'compat', 'retry', 'models'])
  const api = string(p.api, `${path}.api`)
  if (!CHAT_APIS.includes(api) && !extraApis.includes(api)) fail(`${path}.api`, `unknown pi-ai API ${JSON.stringify(api)} (known: ${CHAT_APIS.join(', ')})`)
  const baseUrl = string(p.baseUrl, `${path}.baseUrl`)
  try {
    new URL(baseUrl)
  } catch {
    fail(`${path}.baseUrl`, 'must be an absolute URL')
  }
  const out: ProviderEntry = { name, api, baseUrl, retryPolicy: DEFAULT_RETRY_POLICY, models: [] }
  if (p.apiKey !== undefined) out.apiKey = parseApiKey(p.apiKey, `${path}.apiKey`)
  if (p.headers !== undefined) {
    const h = object(p.headers, `${path}.headers`)
    for (const [k, v] of Object.entries(h)) if (typeof v !== 'string') fail(`${path}.headers.${k}`, 'must be a string')
    out.headers = { ...(h as Record<string, string>) }
  }
  if (p.compat !== undefined) {
    const c = object(p.compat, `${path}.compat`)
    const allowed = compatKeys(api)
    if (!allowed) fail(`${path}.compat`, `api ${api} takes no compat settings`)
    for (const k of Object.keys(c)) {
      if (OWN_SETTINGS[k]) fail(`${path}.compat.${k}`, `not a setting of the models file: ${OWN_SETTINGS[k]}`)
      if (REPLACED_SETTINGS[k] && !allowed!.includes(k)) fail(`${path}.compat.${k}`, `unknown field: ${REPLACED_SETTINGS[k]}`)
    }
    onlyKeys(c, `${path}.compat`, allowed!)
    out.compat = structuredClone(c)
  }
  if (p.retry !== undefined) out.retryPolicy = parseRetry(p.retry, `${path}.retry`)
  if (!Array.isArray(p.models) || p.models.length === 0) fail(`${path}.models`, 'must be a non-empty array')
  const seen = new Set<string>()
  ;(p.models as unknown[]).forEach((m, i) => {
    const entry = parseModel(m, `${path}.models[${i}]`)
    if (seen.has(entry.id)) fail(`${path}.models[${i}].id`, `duplicate model id ${JSON.stringify(entry.id)}`)
    seen.add(entry.id)
    out.models.push(entry)
  })
  return out
}

function parseApiKey(v: unknown, path: string): ApiKeySpec {
  const s = string(v, path)
  if (!s.startsWith('env:')) return { literal: s }
  const env = s.slice(4)
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(env)) fail(path, `env:NAME needs a variable name, got ${JSON.stringify(env)}`)
  return { env }
}

function parseModel(raw: unknown, path: string): ModelEntry {
  const m = object(raw, path)
  onlyKeys(m, path, ['id', 'name', 'contextWindow', 'maxTokens', 'reasoning', 'input', 'cost'])
  const out: ModelEntry = { id: string(m.id, `${path}.id`), reasoning: false, input: ['text'] }
  if (m.name !== undefined) out.name = string(m.name, `${path}.name`)
  if (m.contextWindow !== undefined) out.contextWindow = positiveInt(m.contextWindow, `${path}.contextWindow`)
  if (m.maxTokens !== undefined) out.maxTokens = positiveInt(m.maxTokens, `${path}.maxTokens`)
  if (m.reasoning !== undefined) out.reasoning = boolean(m.reasoning, `${path}.reasoning`)
  if (m.input !== undefined) {
    if (!Array.isArray(m.input) || m.input.length === 0) fail(`${path}.input`, 'must be a non-empty array')
    ;(m.input as unknown[]).forEach((x, i) => {
      if (x !== 'text' && x !== 'image') fail(`${path}.input[${i}]`, 'must be "text" or "image"')
    })
    out.input = [...new Set(m.input as ('text' | 'image')[])]
  }
  if (m.cost !== undefined) {
    const c = object(m.cost, `${path}.cost`)
    onlyKeys(c, `${path}.cost`, ['input', 'output', 'cacheRead', 'cacheWrite'])
    out.cost = {
      input: nonNegative(c.input, `${path}.cost.input`),
      output: nonNegative(c.output, `${path}.cost.output`),
      cacheRead: c.cacheRead === undefined ? 0 : nonNegative(c.cacheRead, `${path}.cost.cacheRead`),
      cacheWrite: c.cacheWrite === undefined ? 0 : nonNegative(c.cacheWrite, `${path}.cost.cacheWrite`),
    }
  }
  return out
}

function parseRetry(raw: unknown, path: string): RetryPolicy {
  const r = object(raw, path)
  onlyKeys(r, path, ['mode', 'maxRetries', 'initialDelayMs', 'maxDelayMs', 'jitterRatio', 'codes'])
  const out: RetryPolicy = { ...DEFAULT_RETRY_POLICY, codes: [...DEFAULT_RETRY_POLICY.codes] }
  if (r.mode !== undefined) {
    if (r.mode !== 'normal' && r.mode !== 'always') fail(`${path}.mode`, 'must be "normal" or "always"')
    out.mode = r.mode as RetryPolicy['mode']
  }
  if (r.maxRetries !== undefined) {
    if (typeof r.maxRetries !== 'number' || !Number.isSafeInteger(r.maxRetries) || r.maxRetries < 0) fail(`${path}.maxRetries`, 'must be a non-negative integer')
    out.maxRetries = r.maxRetries as number
  }
  if (r.initialDelayMs !== undefined) out.initialDelayMs = nonNegative(r.initialDelayMs, `${path}.initialDelayMs`)
  if (r.maxDelayMs !== undefined) out.maxDelayMs = nonNegative(r.maxDelayMs, `${path}.maxDelayMs`)
  if (out.maxDelayMs < out.initialDelayMs) fail(`${path}.maxDelayMs`, 'must not be below initialDelayMs')
  if (r.jitterRatio !== undefined) {
    const j = nonNegative(r.jitterRatio, `${path}.jitterRatio`)
    if (j > 1) fail(`${path}.jitterRatio`, 'must be between 0 and 1')
    out.jitterRatio = j
  }
  if (r.codes !== undefined) {
    if (!Array.isArray(r.codes)) fail(`${path}.codes`, 'must be an array of failure codes')
    ;(r.codes as unknown[]).forEach((c, i) => {
      if (typeof c !== 'string' || !RETRY_CODES.includes(c)) fail(`${path}.codes[${i}]`, `must be one of ${RETRY_CODES.join(', ')}`)
    })
    out.codes = [...new Set(r.codes as string[])]
  }
  return Object.freeze(out)
}

/** Reads and validates a models file (AGENTD_MODELS); errors name the file and the field. */
export function loadModelsFile(file: string, extraApis: readonly string[] = []): ModelsFile {
  let text: string
  try {
    text = fs.readFileSync(file, 'utf8')
  } catch (e) {
    throw new Error(`models file ${file}: cannot read it (${(e as Error).message})`)
  }
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch (e) {
    throw new Error(`models file ${file}: not valid JSON (${(e as Error).message})`)
  }
  try {
    return parseModelsFile(json, extraApis)
  } catch (e) {
    throw new Error(`models file ${file}: ${(e as Error).message}`)
  }
}
