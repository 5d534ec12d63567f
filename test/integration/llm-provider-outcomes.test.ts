// Issue 34, items 2–4, through pi-ai's real anthropic-messages and openai-responses clients against a local
// server speaking their wire formats with recorded-shape streams, in the loop, on one database (docs/testing.md):
// - a refusal (Anthropic `stop_reason: "refusal"`, an OpenAI Responses refusal part, a Responses
//   `incomplete` for content_filter) is a terminal finish with code REFUSAL, never retried, and the turn
//   ends `error` saying so (SPEC §3.5, §10.5);
// - a compaction summary call carries the session's own settings (its reasoning effort), not pi-ai's
//   `reasoning: {effort: "none"}` for a reasoning model without one;
// - the usage a provider reported is recorded: a Responses stream ending in `response.incomplete` keeps
//   its usage, one with only reasoning is a `max-tokens` end and not EMPTY_RESPONSE, and reasoning tokens
//   (Responses `reasoning_tokens`, Anthropic thinking tokens) land in `reasoningTokens` (API.md §4).

import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { SessionEvent } from '../../src/session/index.js'
import { APP_DB_KINDS, openTestDb, type TestDb } from '../helpers/db.js'
import { startFixtureApp, type FixtureApp } from '../helpers/replay-fixture.js'
import { anthropicStream, geminiStream, responsesStream, startWireServer, type SseEvent, type WireServer } from '../helpers/wire-server.js'

const models = (origin: string) => ({
  providers: {
    anth: { api: 'anthropic-messages', baseUrl: origin, apiKey: 'sk-ant-outcomes', models: [{ id: 'claude-sonnet-4-5', reasoning: true, contextWindow: 200000, maxTokens: 4096 }] },
    gem: { api: 'google-generative-ai', baseUrl: `${origin}/v1beta`, apiKey: 'gem-outcomes', models: [{ id: 'gemini-2.5-flash', contextWindow: 200000, maxTokens: 4096 }] },
    oai: {
      api: 'openai-responses',
      baseUrl: `${origin}/v1`,
      apiKey: 'sk-outcomes',
      models: [
        { id: 'gpt-5-mini', reasoning: true, contextWindow: 200000, maxTokens: 4096 },
        // a small window, so manual compaction keeps only the last exchange and summarizes the rest
        { id: 'gpt-5-small', reasoning: true, contextWindow: 600, maxTokens: 1024 },
      ],
    },
  },
})

const ofType = <T = any>(log: SessionEvent[], type: string) => log.filter((e) => e.type === type).map((e) => e.data as T)

describe.each(APP_DB_KINDS)('provider outcomes through the real clients, on %s', (kind) => {
  let wire: WireServer
  let testDb: TestDb
  let f: FixtureApp
  beforeAll(async () => {
    wire = await startWireServer()
    testDb = await openTestDb(kind)
    f = await startFixtureApp({ db: testDb.db, origin: wire.origin, models: models(wire.origin), ...(testDb.url ? { databaseUrl: testDb.url } : {}), ...(testDb.dataDir ? { dataDir: testDb.dataDir } : {}) })
  })
  afterAll(async () => {
    await f?.close()
    await testDb?.drop()
    await wire?.close()
  })

  let n = 0
  /** A session on `model`, one followup answered by `answer`; the log once idle and the requests the turn made. */
  async function turn(model: string, answer: SseEvent[], settings: Record<string, unknown> = {}) {
    const id = `outcome-${kind}-${++n}`
    expect((await f.api('POST', '/v1/sessions', { id, model, ...settings })).status).toBe(201)
    const first = wire.requests.length
    wire.script({ sse: answer })
    expect((await f.api('POST', `/v1/sessions/${id}/followup`, { content: 'Tell me how to do the thing.' })).status).toBe(202)
    const log = await f.waitIdle(id)
    return { id, log, requests: wire.requests.slice(first) }
  }

  describe('item 2: a refusal is a terminal REFUSAL, never retried', () => {
    it('Anthropic stop_reason "refusal" (with stop_details): one request, the turn ends error REFUSAL with the explanation', async () => {
      const { id, log, requests } = await turn(
        'anth/claude-sonnet-4-5',
        anthropicStream({
          id: 'msg_refusal',
          model: 'claude-sonnet-4-5',
          blocks: [{ type: 'text', text: 'I ' }],
          stopReason: 'refusal',
          stopDetails: { type: 'refusal', category: 'cyber', explanation: 'This request asks for help writing malware.' },
          usage: { input_tokens: 40 },
          deltaUsage: { output_tokens: 2 },
        }),
      )
      expect(requests).toHaveLength(1)
      expect(wire.pending()).toBe(0)
      expect(ofType(log, 'llm/retry')).toEqual([])
      expect(ofType(log, 'turn/end').at(-1)).toEqual({ turn: 1, reason: { kind: 'error', error: { code: 'REFUSAL', message: 'the model refused to answer: This request asks for help writing malware.' } } })
      // the refused attempt is settled, and billed: its usage is the session's
      expect(ofType(log, 'assistant/attempt')).toHaveLength(1)
      expect((await f.api('GET', `/v1/sessions/${id}`)).body.usage).toMatchObject({ inputTokens: 40, outputTokens: 2 })
      expect((await f.api('GET', `/v1/sessions/${id}`)).body.lastTurn).toMatchObject({ turn: 1, reason: { kind: 'error', error: { code: 'REFUSAL' } } })
    })

    it('an OpenAI Responses answer whose message is a refusal part: one request, REFUSAL with the refusal text', async () => {
      const { log, requests } = await turn(
        'oai/gpt-5-mini',
        responsesStream({ id: 'resp_refusal', model: 'gpt-5-mini', items: [{ type: 'message', id: 'msg_r', text: "I'm sorry, I can't help with that.", refusal: true }], usage: { input_tokens: 30, output_tokens: 9 } }),
      )
      expect(requests).toHaveLength(1)
      expect(ofType(log, 'llm/retry')).toEqual([])
      expect(ofType(log, 'assistant/message')).toEqual([])
      expect(ofType(log, 'turn/end').at(-1)).toEqual({ turn: 1, reason: { kind: 'error', error: { code: 'REFUSAL', message: "the model refused to answer: I'm sorry, I can't help with that." } } })
    })

    it('an OpenAI Responses stream that ends incomplete for content_filter: REFUSAL, not retried', async () => {
      const { log, requests } = await turn(
        'oai/gpt-5-mini',
        responsesStream({ id: 'resp_filtered', model: 'gpt-5-mini', items: [{ type: 'message', id: 'msg_f', text: 'Here is' }], incomplete: 'content_filter', usage: { input_tokens: 30, output_tokens: 2 } }),
      )
      expect(requests).toHaveLength(1)
      expect(ofType(log, 'llm/retry')).toEqual([])
      expect(ofType(log, 'turn/end').at(-1)).toMatchObject({ reason: { kind: 'error', error: { code: 'REFUSAL', message: 'the model refused to answer: Response incomplete: content_filter' } } })
    })
  })

  describe('item 2, Gemini: safety blocks are refusals too', () => {
    it('a candidate that finishes with SAFETY: REFUSAL, not retried', async () => {
      const { log, requests } = await turn('gem/gemini-2.5-flash', geminiStream({ text: 'Here is how', finishReason: 'SAFETY', usage: { promptTokenCount: 20, candidatesTokenCount: 3 } }))
      expect(requests).toHaveLength(1)
      expect(requests[0]!.path).toContain('gemini-2.5-flash:streamGenerateContent')
      expect(ofType(log, 'llm/retry')).toEqual([])
      expect(ofType(log, 'turn/end').at(-1)).toMatchObject({ reason: { kind: 'error', error: { code: 'REFUSAL', message: 'the model refused to answer: Provider stopped with: SAFETY' } } })
    })

    it('a prompt Gemini blocks (promptFeedback.blockReason): REFUSAL, not retried', async () => {
      const { log, requests } = await turn('gem/gemini-2.5-flash', geminiStream({ blockReason: 'SAFETY', usage: { promptTokenCount: 20, candidatesTokenCount: 0 } }))
      expect(requests).toHaveLength(1)
      expect(ofType(log, 'llm/retry')).toEqual([])
      const end = ofType(log, 'turn/end').at(-1)
      expect(end).toMatchObject({ reason: { kind: 'error', error: { code: 'REFUSAL' } } })
      expect(end.reason.error.message).toMatch(/^the model refused to answer: Google prompt blocked: SAFETY/)
    })
  })

  describe('item 4: the usage the provider reported is recorded', () => {
    it('a Responses stream ending in response.incomplete (max_output_tokens) with only reasoning: a max-tokens end with its usage, not EMPTY_RESPONSE', async () => {
      const { id, log, requests } = await turn(
        'oai/gpt-5-mini',
        responsesStream({
          id: 'resp_incomplete',
          model: 'gpt-5-mini',
          items: [{ type: 'reasoning', id: 'rs_only', summary: [], encrypted: 'gAAAAB-reasoning-only' }],
          incomplete: 'max_output_tokens',
          usage: { input_tokens: 120, output_tokens: 64, cached_tokens: 20, reasoning_tokens: 64 },
        }),
        { reasoningEffort: 'high', maxTokens: 64 },
      )
      expect(requests).toHaveLength(1)
      expect(ofType(log, 'llm/retry')).toEqual([])
      expect(ofType(log, 'turn/end').at(-1)).toEqual({ turn: 1, reason: { kind: 'max-tokens' } })
      const [am] = ofType(log, 'assistant/message')
      expect(am.usage).toEqual({ inputTokens: 100, outputTokens: 64, cacheReadTokens: 20, reasoningTokens: 64 })
      // the hidden reasoning is kept for the next request, as replay state
      expect(am.message.content).toEqual([])
      expect(am.message.source.replayState.blocks).toEqual([{ type: 'reasoning', hidden: '', signature: expect.stringContaining('gAAAAB-reasoning-only') }])
      expect((await f.api('GET', `/v1/sessions/${id}`)).body.usage).toMatchObject({ inputTokens: 100, outputTokens: 64, cacheReadTokens: 20, reasoningTokens: 64 })
    })

    it('Responses reasoning_tokens and Anthropic thinking tokens become reasoningTokens, in the event and the session', async () => {
      const oai = await turn(
        'oai/gpt-5-mini',
        responsesStream({
          id: 'resp_reasoned',
          model: 'gpt-5-mini',
          items: [
            { type: 'reasoning', id: 'rs_1', summary: ['Thinking it over.'], encrypted: 'gAAAAB-enc' },
            { type: 'message', id: 'msg_1', text: 'Done.' },
          ],
          usage: { input_tokens: 50, output_tokens: 40, reasoning_tokens: 31 },
        }),
        { reasoningEffort: 'medium' },
      )
      expect(ofType(oai.log, 'assistant/message')[0].usage).toEqual({ inputTokens: 50, outputTokens: 40, reasoningTokens: 31 })
      expect((await f.api('GET', `/v1/sessions/${oai.id}`)).body.usage).toMatchObject({ outputTokens: 40, reasoningTokens: 31 })

      const anth = await turn(
        'anth/claude-sonnet-4-5',
        anthropicStream({
          id: 'msg_thought',
          model: 'claude-sonnet-4-5',
          blocks: [
            { type: 'thinking', thinking: 'Let me think.', signature: 'EqQBsig' },
            { type: 'text', text: 'Done.' },
          ],
          stopReason: 'end_turn',
          usage: { input_tokens: 60 },
          deltaUsage: { output_tokens: 80, output_tokens_details: { thinking_tokens: 50 } },
        }),
        { reasoningEffort: 'low' },
      )
      expect(ofType(anth.log, 'assistant/message')[0].usage).toEqual({ inputTokens: 60, outputTokens: 80, reasoningTokens: 50 })
      expect((await f.api('GET', `/v1/sessions/${anth.id}`)).body.usage).toMatchObject({ inputTokens: 60, outputTokens: 80, reasoningTokens: 50 })
    })
  })

  describe('item 3: compaction summary calls use the session\'s own settings', () => {
    it('on openai-responses, the summary request carries the session\'s reasoning effort, not effort "none"', async () => {
      const long = (s: string) => `${s} ${'and some more detail about the order, the parcel and the carrier '.repeat(4)}`
      const id = `outcome-${kind}-${++n}`
      expect((await f.api('POST', '/v1/sessions', { id, model: 'oai/gpt-5-small', reasoningEffort: 'low' })).status).toBe(201)
      const first = wire.requests.length
      const answer = (k: number, text: string) => ({ sse: responsesStream({ id: `resp_c${k}`, model: 'gpt-5-small', items: [{ type: 'message', id: `msg_c${k}`, text }], usage: { input_tokens: 60, output_tokens: 20 } }) })
      for (const [k, q] of [long('Where is order 7?'), long('And order 8?')].entries()) {
        wire.script(answer(k, long(`Answer ${k}.`)))
        expect((await f.api('POST', `/v1/sessions/${id}/followup`, { content: q })).status).toBe(202)
        await f.waitIdle(id)
      }
      wire.script(answer(9, 'Orders 7 and 8 were asked about.'))
      const r = await f.api('POST', `/v1/sessions/${id}/compact`)
      expect(r.body).toEqual({ compacted: true })
      const [turn1, turn2, summary] = wire.requests.slice(first)
      // the session's own requests and its summary request reason alike
      expect(turn1!.body.reasoning).toEqual({ effort: 'low', summary: 'auto' })
      expect(turn2!.body.reasoning).toEqual({ effort: 'low', summary: 'auto' })
      expect(JSON.stringify(summary!.body.input)).toContain('Summarize the conversation so far')
      expect(summary!.body.reasoning).toEqual({ effort: 'low', summary: 'auto' })
      // compaction's own output cap, not the session's
      expect(summary!.body.max_output_tokens).toBe(8192)
    })
  })
})
