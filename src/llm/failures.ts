// Failure classification of SPEC §8.11: pi-ai reports a failed call as message text (an HTTP failure
// starts with its status), so the codes come from the observed status when there is one, else the text.

import type { LlmFailure } from '../session/index.js'

export interface FailureInput {
  /** pi-ai's errorMessage, or the message of whatever was thrown */
  message: string
  /** the caller's signal was aborted */
  aborted?: boolean
  /** HTTP status of the provider's response, when the adapter observed one */
  status?: number
  /** that response's headers (any case) */
  headers?: Record<string, string | undefined>
  /** the provider had answered 200 and started streaming before the failure */
  streamStarted?: boolean
  /** pi-ai's isContextOverflow verdict for the failed message */
  contextOverflow?: boolean
  /** the provider's own stop reason of the failed message (pi-ai's rawStopReason) */
  stopReason?: string
  /** the answer was a refusal the adapter recognized itself (an OpenAI Responses refusal part) */
  refusal?: boolean
  /** strings that must never appear in the failure (API keys) */
  secrets?: readonly string[]
  now?: number
}

// Provider phrasings of a full context window beyond pi-ai's own patterns.
const OVERFLOW_RE = /context[ _-]?(length|window)[ _-]?(exceeded|is exceeded)|maximum context (length|window)|context_length_exceeded|exceeds? (the )?(model'?s? )?(maximum )?context|prompt is too long|too many (input )?tokens|input is too long|reduce the length of the (messages|prompt)/i
// "quota or billing exhausted": OpenAI insufficient_quota, Anthropic credit balance, generic billing walls.
const QUOTA_RE = /insufficient[_ ]quota|exceeded your (current )?quota|quota (has been |is |was )?(exhausted|exceeded)|billing|credit balance|insufficient (balance|credits?|funds)|out of credits|payment required/i
// A per-window quota is a rate limit, not an exhausted budget (e.g. "Quota exceeded ... requests per minute").
const RATE_WINDOW_RE = /per (second|minute|hour)|rate[ _-]?limit/i
const TRANSPORT_RE = /connection error|fetch failed|\bterminated\b|socket hang up|other side closed|network[ _]error|\bECONN(RESET|REFUSED|ABORTED)\b|\bEPIPE\b|\bENOTFOUND\b|\bEAI_AGAIN\b|\bEHOSTUNREACH\b|premature close|UND_ERR_SOCKET/i
const TIMEOUT_RE = /timed? ?out|timeout|\bETIMEDOUT\b/i
const NO_KEY_RE = /no api key|api key is required|is not set \(api key\)/i
// Stop reasons of a provider that declined to answer on its safety or policy grounds, as pi-ai passes them on:
// Anthropic `refusal` (and `sensitive`), OpenAI `content_filter` (Chat Completions finish_reason, Responses
// `incomplete` reason), Gemini's safety finish reasons, Bedrock's guardrail and content filter.
const REFUSAL_STOPS = new Set([
  'refusal', 'sensitive', 'content_filter', 'incomplete.content_filter',
  'SAFETY', 'RECITATION', 'BLOCKLIST', 'PROHIBITED_CONTENT', 'SPII', 'IMAGE_SAFETY', 'IMAGE_PROHIBITED_CONTENT', 'IMAGE_RECITATION', 'MODEL_ARMOR',
  'guardrail_intervened', 'content_filtered',
])
// Gemini blocks a prompt before answering ("Google prompt blocked: SAFETY …", pi-ai's text of promptFeedback)
const PROMPT_BLOCKED_RE = /^(Google|Vertex AI|Google Vertex) prompt blocked: /i

/** Classifies a provider failure into the canonical codes of SPEC §3.5. Pure. */
export function classifyFailure(input: FailureInput): LlmFailure {
  const text = redact(input.message || 'model call failed', input.secrets)
  const headers = lowerKeys(input.headers)
  const failure = (code: string, status?: number): LlmFailure => {
    const f: LlmFailure = { message: text, code }
    if (status !== undefined) f.status = status
    const after = parseRetryAfter(headers, text, input.now)
    if (after !== undefined && code !== 'ABORTED') f.providerRetryAfterMs = after
    const requestId = headers['x-request-id'] ?? headers['request-id'] ?? headers['x-amzn-requestid']
    if (requestId) f.requestId = requestId
    return f
  }
  if (input.aborted) return { message: text, code: 'ABORTED' }
  // a refusal is an answer, not a fault: terminal, with its own code (SPEC §3.5: normal-mode retry never retries it)
  if (input.refusal || (input.stopReason !== undefined && REFUSAL_STOPS.has(input.stopReason)) || PROMPT_BLOCKED_RE.test(text)) {
    // the provider's text may be the model's own words ("I can't help with that."): say what happened first
    return { ...failure('REFUSAL'), message: /\brefus/i.test(text) ? text : `the model refused to answer: ${text}` }
  }

  const observed = input.status !== undefined && input.status >= 400 ? input.status : undefined
  const status = observed ?? statusFromMessage(text)
  if (input.contextOverflow || OVERFLOW_RE.test(text)) {
    // "too many tokens" also phrases some rate limits; a 429 stays a rate limit
    if (status !== 429 || input.contextOverflow) return failure('CONTEXT_WINDOW_EXCEEDED', status)
  }
  if (status !== undefined) {
    if (status === 402 || (QUOTA_RE.test(text) && !(status === 429 && RATE_WINDOW_RE.test(text)))) return failure('QUOTA', status)
    if (status === 429) return failure('RATE_LIMIT', status)
    if (status === 408 || status === 504) return failure('TIMEOUT', status)
    if (status >= 500) return failure('SERVER', status)
    if (status === 401 || status === 403) return failure('AUTH', status)
    if (status >= 400) return failure('INVALID_REQUEST', status)
    return failure('UNKNOWN', status)
  }
  if (TRANSPORT_RE.test(text)) return failure('TRANSPORT')
  if (TIMEOUT_RE.test(text)) return failure('TIMEOUT')
  if (NO_KEY_RE.test(text)) return failure('AUTH')
  if (QUOTA_RE.test(text)) return failure('QUOTA')
  if (/rate limit|too many requests/i.test(text)) return failure('RATE_LIMIT')
  if (input.streamStarted) return failure('SERVER')
  return failure('UNKNOWN')
}

/**
 * The HTTP status in pi-ai's text of an HTTP failure: at its start ("429 …", "429: {body}"), or after the
 * API's label ("OpenAI API error (429): …", pi-ai 1.x's openai-responses).
 */
function statusFromMessage(text: string): number | undefined {
  const m = /^\s*([1-5]\d\d)\b/.exec(text) ?? /^[^\n]{0,80}? error \(([1-5]\d\d)\):/.exec(text)
  return m ? Number(m[1]) : undefined
}

/**
 * Milliseconds the provider asked us to wait: `retry-after-ms`, else `Retry-After` (seconds or an HTTP
 * date), else a phrase in the message ("try again in 3s", "retry after 20 seconds", "retry in 250ms").
 */
export function parseRetryAfter(headers?: Record<string, string | undefined>, message?: string, now = Date.now()): number | undefined {
  const h = lowerKeys(headers)
  const ms = h['retry-after-ms']
  if (ms !== undefined && /^\s*\d+(\.\d+)?\s*$/.test(ms)) return Math.ceil(Number(ms))
  const ra = h['retry-after']
  if (ra !== undefined) {
    if (/^\s*\d+(\.\d+)?\s*$/.test(ra)) return Math.ceil(Number(ra) * 1000)
    const at = Date.parse(ra)
    if (!Number.isNaN(at)) return Math.max(0, at - now)
  }
  if (message) {
    const m = /(?:try again|retry)(?: (?:after|in))?\s+(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?)\b/i.exec(message)
    if (m) return Math.ceil(Number(m[1]) * unitMs(m[2]!))
    // Google: "retryDelay": "37s"
    const g = /"retryDelay"\s*:\s*"(\d+(?:\.\d+)?)s"/.exec(message)
    if (g) return Math.ceil(Number(g[1]) * 1000)
  }
  return undefined
}

function unitMs(unit: string): number {
  const u = unit.toLowerCase()
  if (u === 'ms' || u.startsWith('milli')) return 1
  if (u === 'm' || u.startsWith('min')) return 60_000
  return 1000
}

function lowerKeys(headers?: Record<string, string | undefined>): Record<string, string | undefined> {
  const out: Record<string, string | undefined> = {}
  for (const [k, v] of Object.entries(headers ?? {})) out[k.toLowerCase()] = v
  return out
}

/** Replaces every occurrence of a secret (an API key) with a marker. */
export function redact(text: string, secrets?: readonly string[]): string {
  let out = text
  for (const s of secrets ?? []) if (s && s.length >= 4) out = out.split(s).join('[redacted]')
  return out
}
