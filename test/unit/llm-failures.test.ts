import { describe, expect, it } from 'vitest'
import { classifyFailure, parseRetryAfter, type FailureInput } from '../../src/llm/index.js'

describe('classifyFailure (SPEC §8.11)', () => {
  const table: Array<[string, FailureInput, string, number | undefined]> = [
    ['429 text', { message: '429 Rate limit reached for requests' }, 'RATE_LIMIT', 429],
    ['observed 429 without status text', { message: 'slow down', status: 429 }, 'RATE_LIMIT', 429],
    ['402', { message: '402 Payment Required' }, 'QUOTA', 402],
    ['429 saying quota is exhausted', { message: '429 You exceeded your current quota, please check your plan and billing details.' }, 'QUOTA', 429],
    ['429 per-minute quota is a rate limit', { message: '429 Quota exceeded for requests per minute' }, 'RATE_LIMIT', 429],
    ['400 billing', { message: '400 Your credit balance is too low to access the API' }, 'QUOTA', 400],
    ['408', { message: '408 Request Timeout' }, 'TIMEOUT', 408],
    ['504', { message: '504 Gateway Timeout' }, 'TIMEOUT', 504],
    ['500', { message: '500 Internal Server Error' }, 'SERVER', 500],
    ['503 no body', { message: '503 status code (no body)' }, 'SERVER', 503],
    ['401', { message: '401 Incorrect API key provided' }, 'AUTH', 401],
    ['403', { message: '403 Forbidden' }, 'AUTH', 403],
    ['404', { message: '404 model not found' }, 'INVALID_REQUEST', 404],
    ['400', { message: '400 invalid tool schema' }, 'INVALID_REQUEST', 400],
    ['400 context length', { message: "400 This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens." }, 'CONTEXT_WINDOW_EXCEEDED', 400],
    ['pi-ai overflow verdict', { message: 'whatever', contextOverflow: true }, 'CONTEXT_WINDOW_EXCEEDED', undefined],
    ['in-band context_length_exceeded', { message: 'context_length_exceeded', streamStarted: true }, 'CONTEXT_WINDOW_EXCEEDED', undefined],
    ['connection refused', { message: 'Connection error.' }, 'TRANSPORT', undefined],
    ['stream cut', { message: 'terminated', streamStarted: true }, 'TRANSPORT', undefined],
    ['client timeout', { message: 'Request timed out.' }, 'TIMEOUT', undefined],
    ['missing key', { message: 'No API key for provider: openai' }, 'AUTH', undefined],
    ['in-band error', { message: 'the model crashed', streamStarted: true }, 'SERVER', undefined],
    ['in-band quota', { message: 'insufficient_quota', streamStarted: true }, 'QUOTA', undefined],
    ['other', { message: 'something odd' }, 'UNKNOWN', undefined],
  ]
  it.each(table)('%s', (_name, input, code, status) => {
    const f = classifyFailure(input)
    expect(f.code).toBe(code)
    expect(f.status).toBe(status)
    expect(f.message).toBe(input.message)
  })

  it('pi-ai 1.x HTTP failure texts: "<status>: <body>" and "<API> error (<status>): …"', () => {
    expect(classifyFailure({ message: '503: {"message":"overloaded"}' })).toMatchObject({ code: 'SERVER', status: 503 })
    expect(classifyFailure({ message: 'OpenAI API error (429): {"message":"Rate limit reached"}' })).toMatchObject({ code: 'RATE_LIMIT', status: 429 })
    expect(classifyFailure({ message: 'wire-responses API error (401): bad key' })).toMatchObject({ code: 'AUTH', status: 401 })
  })

  // what pi-ai 1.x reports for a provider that declines to answer: its raw stop reason, or Gemini's prompt block
  const refusals: Array<[string, FailureInput, string]> = [
    ['Anthropic refusal with an explanation', { message: 'This request asks for help writing malware.', stopReason: 'refusal', streamStarted: true }, 'the model refused to answer: This request asks for help writing malware.'],
    ['Anthropic refusal without one', { message: 'The model refused to complete the request', stopReason: 'refusal', streamStarted: true }, 'The model refused to complete the request'],
    ['Anthropic sensitive', { message: 'Provider stopped with: sensitive', stopReason: 'sensitive', streamStarted: true }, 'the model refused to answer: Provider stopped with: sensitive'],
    ['Chat Completions content_filter', { message: 'Provider finish_reason: content_filter', stopReason: 'content_filter', streamStarted: true }, 'the model refused to answer: Provider finish_reason: content_filter'],
    ['Responses incomplete for content_filter', { message: 'Response incomplete: content_filter', stopReason: 'incomplete.content_filter', streamStarted: true }, 'the model refused to answer: Response incomplete: content_filter'],
    ['Gemini SAFETY', { message: 'Provider stopped with: SAFETY', stopReason: 'SAFETY', streamStarted: true }, 'the model refused to answer: Provider stopped with: SAFETY'],
    ['Gemini PROHIBITED_CONTENT', { message: 'Provider stopped with: PROHIBITED_CONTENT', stopReason: 'PROHIBITED_CONTENT', streamStarted: true }, 'the model refused to answer: Provider stopped with: PROHIBITED_CONTENT'],
    ['Gemini RECITATION', { message: 'Provider stopped with: RECITATION', stopReason: 'RECITATION', streamStarted: true }, 'the model refused to answer: Provider stopped with: RECITATION'],
    ['Gemini prompt blocked', { message: 'Google prompt blocked: SAFETY\nSafety rating: HARM_CATEGORY_DANGEROUS_CONTENT (HIGH)', streamStarted: true }, 'the model refused to answer: Google prompt blocked: SAFETY\nSafety rating: HARM_CATEGORY_DANGEROUS_CONTENT (HIGH)'],
    ['Vertex prompt blocked', { message: 'Google Vertex prompt blocked: BLOCKLIST', streamStarted: true }, 'the model refused to answer: Google Vertex prompt blocked: BLOCKLIST'],
    ['Bedrock guardrail', { message: 'Provider stopped with: guardrail_intervened', stopReason: 'guardrail_intervened', streamStarted: true }, 'the model refused to answer: Provider stopped with: guardrail_intervened'],
    ['an OpenAI Responses refusal part (the adapter)', { message: "I'm sorry, I can't help with that.", refusal: true }, "the model refused to answer: I'm sorry, I can't help with that."],
  ]
  it.each(refusals)('REFUSAL: %s', (_name, input, message) => {
    expect(classifyFailure(input)).toEqual({ code: 'REFUSAL', message })
  })

  it('other stop reasons are not refusals', () => {
    for (const stopReason of ['length', 'MAX_TOKENS', 'incomplete.max_output_tokens', 'OTHER', 'MALFORMED_FUNCTION_CALL']) {
      expect(classifyFailure({ message: `Provider stopped with: ${stopReason}`, stopReason, streamStarted: true }).code).toBe('SERVER')
    }
    expect(classifyFailure({ message: 'Provider finish_reason: network_error', stopReason: 'network_error', streamStarted: true }).code).toBe('TRANSPORT')
  })

  it('REFUSAL is not a retryable code, in the default policy or a models file', async () => {
    const { DEFAULT_RETRY_POLICY, parseModelsFile } = await import('../../src/llm/index.js')
    expect(DEFAULT_RETRY_POLICY.codes).not.toContain('REFUSAL')
    const file = (codes: string[]) => ({ providers: { p: { api: 'openai-completions', baseUrl: 'http://127.0.0.1:9/v1', retry: { codes }, models: [{ id: 'm' }] } } })
    expect(() => parseModelsFile(file(['REFUSAL']))).toThrow(/providers\.p\.retry\.codes\[0\]: must be one of/)
  })

  it('abort wins over everything and carries no retry hint', () => {
    expect(classifyFailure({ message: '500 boom, try again in 3s', aborted: true })).toEqual({ code: 'ABORTED', message: '500 boom, try again in 3s' })
  })

  it('an observed 200 does not count as a failure status', () => {
    expect(classifyFailure({ message: 'broken', status: 200, streamStarted: true })).toEqual({ code: 'SERVER', message: 'broken' })
  })

  it('takes retry hints and the request id from headers', () => {
    const f = classifyFailure({ message: '429 slow down', headers: { 'Retry-After-Ms': '1500', 'X-Request-Id': 'req_1' } })
    expect(f).toEqual({ code: 'RATE_LIMIT', status: 429, message: '429 slow down', providerRetryAfterMs: 1500, requestId: 'req_1' })
  })

  it('never leaks the API key', () => {
    const f = classifyFailure({ message: '401 Incorrect API key provided: sk-secret-123', secrets: ['sk-secret-123'] })
    expect(f.message).toBe('401 Incorrect API key provided: [redacted]')
    expect(JSON.stringify(f)).not.toContain('sk-secret-123')
  })

  it('returns no undefined-valued fields (failures are stored in events)', () => {
    for (const [, input] of table) {
      const f = classifyFailure(input)
      expect(Object.values(f).every((v) => v !== undefined)).toBe(true)
    }
  })
})

describe('parseRetryAfter', () => {
  const now = Date.parse('2025-01-01T00:00:00Z')
  const table: Array<[string, Record<string, string> | undefined, string | undefined, number | undefined]> = [
    ['retry-after-ms', { 'retry-after-ms': '250' }, undefined, 250],
    ['retry-after-ms wins over retry-after', { 'retry-after-ms': '250', 'retry-after': '9' }, undefined, 250],
    ['retry-after seconds', { 'retry-after': '20' }, undefined, 20000],
    ['retry-after fractional seconds', { 'retry-after': '1.5' }, undefined, 1500],
    ['retry-after HTTP date', { 'retry-after': 'Wed, 01 Jan 2025 00:00:07 GMT' }, undefined, 7000],
    ['retry-after date in the past', { 'retry-after': 'Tue, 31 Dec 2024 23:59:00 GMT' }, undefined, 0],
    ['header beats text', { 'retry-after': '2' }, 'try again in 30s', 2000],
    ['garbage header falls back to text', { 'retry-after': 'soon' }, 'try again in 3s', 3000],
    ['"try again in 3s"', undefined, 'Rate limited, try again in 3s.', 3000],
    ['"retry after 20 seconds"', undefined, 'Please retry after 20 seconds', 20000],
    ['"try again in 1.5s"', undefined, 'Please try again in 1.5s.', 1500],
    ['"Please retry in 250ms"', undefined, 'Please retry in 250ms', 250],
    ['"try again in 2 minutes"', undefined, 'try again in 2 minutes', 120000],
    ['google retryDelay', undefined, '{"retryDelay": "37s"}', 37000],
    ['nothing', { 'content-type': 'x' }, 'no hint here', undefined],
  ]
  it.each(table)('%s', (_name, headers, message, expected) => {
    expect(parseRetryAfter(headers, message, now)).toBe(expected)
  })
})
