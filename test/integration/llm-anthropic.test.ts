// pi-ai keeps nothing per session for agentd: the anthropic-messages client against api.anthropic.com itself
// (answered by undici's MockAgent, so nothing leaves the machine), where pi-ai would otherwise use message
// threads; and a session's Agent, when its driver lets it go, asks pi-ai to free the session's resources.

import { getGlobalDispatcher, MockAgent, setGlobalDispatcher, type Dispatcher } from 'undici'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { createLlmService, type LlmRequest } from '../../src/llm/index.js'
import type { Message, StreamChunk } from '../../src/session/index.js'
import { startTestApp } from '../helpers/app.js'
import { APP_DB_KINDS } from '../helpers/db.js'
import { anthropicStream, type AnthropicReply } from '../helpers/wire-server.js'

const user = (text: string, id: string): Message => ({ id, role: 'user', content: [{ type: 'text', text }], source: { kind: 'user' } })

const sse = (r: AnthropicReply) => anthropicStream(r).map((e) => `event: ${e.event}\ndata: ${JSON.stringify(e.data)}\n\n`).join('')

describe('Anthropic message threads stay off (SPEC §8.10)', () => {
  let saved: Dispatcher
  let mock: MockAgent
  beforeEach(() => {
    saved = getGlobalDispatcher()
    mock = new MockAgent()
    mock.disableNetConnect()
    setGlobalDispatcher(mock)
  })
  afterEach(async () => {
    setGlobalDispatcher(saved)
    await mock.close()
  })

  it('a catalogue route on api.anthropic.com sends the whole history every time, with no thread and no threads beta', async () => {
    const bodies: any[] = []
    const betas: string[] = []
    const pool = mock.get('https://api.anthropic.com')
    for (let n = 1; n <= 2; n++) {
      pool
        .intercept({ path: (p) => p.startsWith('/v1/messages'), method: 'POST' })
        .reply(200, (opts) => {
          bodies.push(JSON.parse(String(opts.body)))
          betas.push(String((opts.headers as Record<string, string>)['anthropic-beta'] ?? ''))
          return sse({ id: `msg_${n}`, model: 'claude-sonnet-4-5', blocks: [{ type: 'text', text: `answer ${n}` }], stopReason: 'end_turn', usage: { input_tokens: 10 }, deltaUsage: { output_tokens: 2 } })
        }, { headers: { 'content-type': 'text/event-stream' } })
    }
    const llm = createLlmService({ env: { ANTHROPIC_API_KEY: 'sk-ant-api03-test' } })
    const history: Message[] = [user('first question', 'u1')]
    const turn = async () => {
      const call = await llm.prepareCall({ provider: 'anthropic', model: 'claude-sonnet-4-5', maxTokens: 100 }, new AbortController().signal)
      const req: LlmRequest = Object.freeze({ ...call.config, messages: Object.freeze([...history]), sessionId: 'sess-threads', signal: new AbortController().signal })
      const chunks: StreamChunk[] = []
      for await (const c of call.stream(req)) chunks.push(c)
      expect(chunks.at(-1)).toMatchObject({ type: 'finish', reason: { kind: 'stop' } })
      const text = chunks.flatMap((c) => (c.type === 'text-delta' ? [c.text] : [])).join('')
      history.push({ id: `a${history.length}`, role: 'assistant', content: [{ type: 'text', text }], source: { kind: 'model', provider: 'anthropic', model: 'claude-sonnet-4-5' } })
    }
    await turn()
    history.push(user('second question', 'u2'))
    await turn()
    expect(bodies).toHaveLength(2)
    // with threads, pi-ai would send `thread: {type: "continue", …}` and only the new user message
    for (const b of bodies) expect(b.thread).toBeUndefined()
    for (const b of betas) expect(b).not.toMatch(/message-threads/)
    expect(bodies[1].messages.map((m: any) => m.role)).toEqual(['user', 'assistant', 'user'])
    expect(JSON.stringify(bodies[1].messages[0])).toContain('first question')
  })
})

describe.each(APP_DB_KINDS)('pi-ai session resources (%s)', (kind) => {
  it("are freed when the driver releases a session's Agent (cleanupSessionResources)", async () => {
    const t = await startTestApp({ kind, env: { AGENTD_IDLE_RELEASE_MS: '200' } })
    try {
      const ended: string[] = []
      const endSession = t.app.llm.endSession.bind(t.app.llm)
      t.app.llm.endSession = (id) => {
        ended.push(id)
        endSession(id)
      }
      const s = await t.createSession()
      t.models.script(s.id, { text: ['hi'] })
      await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hello' })
      await t.waitIdle(s.id)
      for (let i = 0; i < 200 && !ended.includes(s.id); i++) await new Promise((r) => setTimeout(r, 25))
      expect(ended).toEqual([s.id])
    } finally {
      await t.close()
    }
  })
})
