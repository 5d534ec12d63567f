import { describe, expect, it } from 'vitest'
import { dropToolCallsFromReplayState, readReplayState, toPiContext } from '../../src/llm/index.js'
import type { AssistantMessage, Json, Message } from '../../src/session/index.js'
import { heapAfterGc } from '../helpers/heap.js'

const route = { api: 'openai-completions', provider: 'mock', id: 'm' }
const sys = (id: string, text: string | null): Message => ({ id, role: 'system', content: text === null ? [] : [{ type: 'text', text }], source: { kind: 'plugin', plugin: 'system-prompt' } })
const user = (id: string, text: string): Message => ({ id, role: 'user', content: [{ type: 'text', text }], source: { kind: 'user' } })
const asst = (id: string, content: AssistantMessage['content'], replayState?: Json): Message => ({
  id,
  role: 'assistant',
  content,
  source: replayState === undefined ? { kind: 'model', provider: 'mock', model: 'm' } : { kind: 'model', provider: 'mock', model: 'm', replayState },
})
const result = (id: string, callId: string, text: string, isError = false): Message => ({
  id,
  role: 'user',
  content: [{ type: 'tool-result', toolCallId: callId, isError, content: [{ type: 'text', text }] }],
  source: { kind: 'tool', callId },
})

describe('toPiContext (SPEC §8.11)', () => {
  it('a leading system message becomes systemPrompt; a later one a user message in place', () => {
    const ctx = toPiContext([sys('s1', 'be brief'), user('u1', 'hi'), asst('a1', [{ type: 'text', text: 'hello' }]), sys('s2', 'now be verbose'), user('u2', 'again')], undefined, route)
    expect(ctx.systemPrompt).toBe('be brief')
    expect(ctx.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'user', 'user'])
    expect(ctx.messages[2]).toEqual({ role: 'user', content: [{ type: 'text', text: 'now be verbose' }], timestamp: 0 })
    expect(ctx.tools).toBeUndefined()
  })

  it('joins the texts of a multi-block leading system message and skips empty system messages', () => {
    const multi: Message = { id: 's', role: 'system', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }], source: { kind: 'plugin', plugin: 'system-prompt' } }
    expect(toPiContext([multi, user('u', 'x')], undefined, route).systemPrompt).toBe('ab')
    const ctx = toPiContext([user('u', 'x'), sys('s', null)], undefined, route)
    expect(ctx.systemPrompt).toBeUndefined()
    expect(ctx.messages).toHaveLength(1)
  })

  it('has no systemPrompt when the first message is not a system message', () => {
    const ctx = toPiContext([user('u', 'x'), sys('s', 'late')], undefined, route)
    expect(ctx.systemPrompt).toBeUndefined()
    expect(ctx.messages[1]).toMatchObject({ role: 'user', content: [{ type: 'text', text: 'late' }] })
  })

  it('converts tool calls (arguments parsed) and tool results (toolName from the call)', () => {
    const ctx = toPiContext(
      [
        user('u', 'go'),
        asst('a', [
          { type: 'reasoning', text: 'hmm' },
          { type: 'text', text: 'calling' },
          { type: 'tool-call', id: 'c1', name: 'echo', arguments: '{"text":"x"}' },
          { type: 'tool-call', id: 'c2', name: 'broken', arguments: '{"text":' },
        ]),
        result('r1', 'c1', 'x'),
        result('r2', 'c2', 'bad args', true),
      ],
      [{ name: 'echo', description: 'echoes', parameters: { type: 'object', properties: { text: { type: 'string' } } } }],
      route,
    )
    const a = ctx.messages[1]!
    expect(a).toMatchObject({
      role: 'assistant',
      api: 'openai-completions',
      provider: 'mock',
      model: 'm',
      stopReason: 'toolUse',
      content: [
        { type: 'thinking', thinking: 'hmm' },
        { type: 'text', text: 'calling' },
        { type: 'toolCall', id: 'c1', name: 'echo', arguments: { text: 'x' } },
        { type: 'toolCall', id: 'c2', name: 'broken', arguments: {} },
      ],
    })
    expect(ctx.messages[2]).toEqual({ role: 'toolResult', toolCallId: 'c1', toolName: 'echo', content: [{ type: 'text', text: 'x' }], isError: false, timestamp: 0 })
    expect(ctx.messages[3]).toMatchObject({ role: 'toolResult', toolCallId: 'c2', toolName: 'broken', isError: true })
    expect(ctx.tools).toEqual([{ name: 'echo', description: 'echoes', parameters: { type: 'object', properties: { text: { type: 'string' } } } }])
  })

  it('keeps inline images and drops URL images (pi-ai sends only inline data)', () => {
    const m: Message = {
      id: 'u',
      role: 'user',
      content: [{ type: 'text', text: 'look' }, { type: 'image', mimeType: 'image/png', data: 'AAAA' }, { type: 'image', url: 'https://x/y.png' }],
      source: { kind: 'user' },
    }
    expect(toPiContext([m], undefined, route).messages[0]).toEqual({ role: 'user', content: [{ type: 'text', text: 'look' }, { type: 'image', mimeType: 'image/png', data: 'AAAA' }], timestamp: 0 })
  })

  it('puts replay state back: signatures by block, hidden reasoning in place, tool calls by id', () => {
    const replay = {
      v: 1,
      api: 'anthropic-messages',
      responseId: 'resp_1',
      blocks: [
        { type: 'reasoning', hidden: '[Reasoning redacted]', signature: 'opaque', redacted: true },
        { type: 'reasoning', signature: 'sig-r' },
        { type: 'text', signature: 'sig-t' },
        { type: 'tool-call', id: 'dropped', signature: 'x' },
        { type: 'tool-call', id: 'c1', signature: 'sig-c' },
      ],
    }
    const ctx = toPiContext(
      [asst('a', [{ type: 'reasoning', text: 'think' }, { type: 'text', text: 'answer' }, { type: 'tool-call', id: 'c1', name: 'f', arguments: '{}' }], replay as unknown as Json)],
      undefined,
      route,
    )
    expect(ctx.messages[0]).toMatchObject({
      api: 'anthropic-messages',
      responseId: 'resp_1',
      content: [
        { type: 'thinking', thinking: '[Reasoning redacted]', thinkingSignature: 'opaque', redacted: true },
        { type: 'thinking', thinking: 'think', thinkingSignature: 'sig-r' },
        { type: 'text', text: 'answer', textSignature: 'sig-t' },
        { type: 'toolCall', id: 'c1', thoughtSignature: 'sig-c' },
      ],
    })
  })

  it('ignores a replay state of a foreign shape', () => {
    const ctx = toPiContext([asst('a', [{ type: 'text', text: 'x' }], { whatever: true })], undefined, route)
    expect(ctx.messages[0]).toMatchObject({ api: 'openai-completions', content: [{ type: 'text', text: 'x' }] })
    expect(readReplayState({ v: 1, api: 'a', blocks: [{ type: 'nope' }] })).toBeUndefined()
  })

  it('an assistant message of another route gets a foreign api, so pi-ai drops its signatures', () => {
    const other: Message = { id: 'a', role: 'assistant', content: [{ type: 'text', text: 'x' }], source: { kind: 'model', provider: 'else', model: 'where' } }
    expect(toPiContext([other], undefined, route).messages[0]).toMatchObject({ api: 'unknown', provider: 'else', model: 'where' })
  })

  it('dropToolCallsFromReplayState prunes tool-call entries only', () => {
    const rs = { v: 1, api: 'x', blocks: [{ type: 'text' }, { type: 'tool-call', id: 'c' }] } as Json
    expect(dropToolCallsFromReplayState(rs)).toEqual({ v: 1, api: 'x', blocks: [{ type: 'text' }] })
    expect(dropToolCallsFromReplayState(undefined)).toBeUndefined()
  })

  describe('a step converts only what follows the previous step\'s messages (issue 16)', () => {
    const deepFreeze = <T>(v: T): T => {
      if (v && typeof v === 'object' && !Object.isFrozen(v)) {
        Object.freeze(v)
        for (const x of Object.values(v)) deepFreeze(x)
      }
      return v
    }
    /** frozen messages and a frozen array, as the driver's requests carry them */
    const frozen = (...ms: Message[]) => deepFreeze(ms) as readonly Message[]
    /** the same conversion from unfrozen copies: no memo, no prefix */
    const fresh = (ms: readonly Message[], r = route) => toPiContext(structuredClone([...ms]), undefined, r)
    const step1 = [sys('s1', 'be brief'), user('u1', 'go'), asst('a1', [{ type: 'tool-call', id: 'c1', name: 'echo', arguments: '{"text":"x"}' }], { v: 1, api: 'openai-completions', blocks: [{ type: 'tool-call', id: 'c1', signature: 'sig' }] })]

    it('a request that extends the previous one converts as a fresh one would, tool names from the prefix included', () => {
      const m1 = frozen(...step1)
      expect(toPiContext(m1, undefined, route)).toEqual(fresh(m1))
      const m2 = frozen(...m1, result('r1', 'c1', 'x'))
      const c2 = toPiContext(m2, undefined, route)
      expect(c2).toEqual(fresh(m2))
      expect(c2.messages[2]).toMatchObject({ role: 'toolResult', toolName: 'echo', toolCallId: 'c1' })
      expect(c2.systemPrompt).toBe('be brief')
      const m3 = frozen(...m2, asst('a2', [{ type: 'text', text: 'done' }]), user('u2', 'more'), sys('s2', 'later'))
      expect(toPiContext(m3, undefined, route)).toEqual(fresh(m3))
      // the earlier result is untouched by the later call
      expect(toPiContext(m2, undefined, route)).toEqual(fresh(m2))
    })

    it('a changed earlier message, another route or an unfrozen array is not taken for the prefix', () => {
      const m1 = frozen(...step1, result('r1', 'c1', 'x'))
      toPiContext(m1, undefined, route)
      // same length, same last message object, a different first message
      const edited = frozen(sys('s1', 'be verbose'), m1[1], m1[2], m1[3], asst('a2', [{ type: 'text', text: 'y' }]))
      expect(toPiContext(edited, undefined, route).systemPrompt).toBe('be verbose')
      expect(toPiContext(edited, undefined, route)).toEqual(fresh(edited))
      const other = { api: 'anthropic-messages', provider: 'else', id: 'x' }
      const more = frozen(...m1, user('u2', 'again'))
      expect(toPiContext(more, undefined, other)).toEqual(fresh(more, other))
      // a mutable array may change after the call: it never becomes a prefix
      const mutable: Message[] = [...m1]
      toPiContext(mutable, undefined, route)
      mutable[0] = deepFreeze(sys('s1', 'swapped'))
      const after = frozen(...mutable, user('u3', 'x'))
      expect(toPiContext(after, undefined, route).systemPrompt).toBe('swapped')
    })

    it('a result takes the name of the latest earlier call with its id, extending a prefix or not', () => {
      const m1 = frozen(user('u1', 'go'), asst('a1', [{ type: 'tool-call', id: 'c1', name: 'first', arguments: '{}' }]), result('r1', 'c1', 'x'))
      toPiContext(m1, undefined, route)
      // the id again, under another name, in the prefix's last message and then in a new one
      const m2 = frozen(...m1, asst('a2', [{ type: 'tool-call', id: 'c1', name: 'second', arguments: '{}' }]))
      toPiContext(m2, undefined, route)
      const m3 = frozen(...m2, result('r2', 'c1', 'y'), asst('a3', [{ type: 'tool-call', id: 'c1', name: 'third', arguments: '{}' }]), result('r3', 'c1', 'z'), result('r4', 'nobody', 'w'))
      const c3 = toPiContext(m3, undefined, route)
      expect(c3).toEqual(fresh(m3))
      expect(c3.messages.filter((m) => m.role === 'toolResult').map((m) => (m as { toolName: string }).toolName)).toEqual(['first', 'second', 'third', ''])
    })

    it('a long session holds its history once, not once per step', () => {
      const heap = heapAfterGc
      // the same 1,500 steps twice: converted as a session's requests are, and only built
      const chain = (convert: boolean) => {
        const ms: Message[] = [sys('s', 'be brief')]
        let request: readonly Message[] = frozen(...ms)
        for (let i = 0; i < 750; i++) {
          ms.push(user(`u${i}`, `question ${i}`), asst(`a${i}`, [{ type: 'tool-call', id: `c${i}`, name: 'noop', arguments: '{}' }]))
          request = frozen(...ms)
          if (convert) toPiContext(request, undefined, route)
          ms.push(result(`r${i}`, `c${i}`, 'ok'), asst(`b${i}`, [{ type: 'text', text: `answer ${i}` }]))
          request = frozen(...ms)
          if (convert) toPiContext(request, undefined, route)
        }
        return request
      }
      const h0 = heap()
      const built = chain(false)
      const h1 = heap()
      const converted = chain(true)
      const h2 = heap()
      expect(toPiContext(converted, undefined, route)).toEqual(fresh(converted))
      const history = h1 - h0
      // each message's conversion is kept, about 3.6 times what the messages take; a prefix kept per
      // step held 3,000 copies of the history's arrays besides, 72 times (63 MB here)
      expect(h2 - h1).toBeLessThan(10 * history)
      expect(built.length).toBe(converted.length)
    })
  })
})
