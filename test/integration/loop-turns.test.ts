// SPEC §16.3 (the loop) through the real server: HTTP deliveries, the real Agent and driver, the
// scripted model behind agentd's pi-ai adapter, on one database (docs/testing.md). Every session log is
// checked against SPEC §15 and every loop request against the reconstruction property (§8.10).

import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import type { SseFrame, TestApp } from '../helpers/app.js'
import { gate } from '../helpers/scripted.js'
import { expand, ofType, stepAt, textOf, turnOf, types, type Ev } from '../helpers/events.js'
import { harness, type Harness } from '../helpers/loop.js'
import { until } from '../helpers/wait.js'
import type { Context } from '../../src/hooks/index.js'
import { readEvents } from '../../src/store/index.js'

/** Prompt sections registered by two further plugins, in this order (SPEC §7.2). */
function sectionPlugins(root: Context) {
  root.plugin({
    name: 'test-sections-a',
    apply(ctx: any) {
      ctx.systemPrompt.section('test-a', 'Section A for {{who}}.')
      ctx.systemPrompt.section('test-empty', '')
    },
  })
  root.plugin({
    name: 'test-sections-b',
    apply(ctx: any) {
      ctx.systemPrompt.section('test-b', 'Section B.')
    },
  })
}

const streamFrames = (frames: SseFrame[]) => frames.filter((f) => f.event === 'agent/assistant-stream').map((f) => f.json)
/** Waits until an agent/status frame follows the SSE frame of turn/end {turn}. */
async function idleAfterTurn(sse: { frames: SseFrame[] }, turn: number): Promise<void> {
  await until(`agent/status idle after turn ${turn}`, () => {
    const at = sse.frames.findIndex((f) => f.event === 'session/event' && f.json.type === 'turn/end' && f.json.data.turn === turn)
    return at >= 0 && sse.frames.slice(at).some((f) => f.event === 'agent/status' && f.json.status === 'idle')
  })
}

const finishOf = (am: Ev) => am.data.stream.filter((r: any) => r.type === 'chunk' && r.chunk.type === 'finish').at(-1)?.chunk

// ---------------------------------------------------------------------------------------------

describe.each(APP_DB_KINDS)('SPEC §16.3 the loop on %s', (kind) => {
  let h: Harness
  let t: TestApp
  beforeAll(async () => {
    h = await harness(kind, { plugins: [(root) => sectionPlugins(root)] })
    t = h.t
  })
  afterAll(async () => {
    await t?.close()
  })

  it('C1 simple turn: durable events and live frames in the order SPEC §17 gives', async () => {
    const s = await t.createSession({ system: 'P' })
    const sse = await h.sse(s.id)
    try {
      t.models.script(s.id, { text: ['hel', 'lo'] })
      await h.post(s.id, 'followup', { content: 'hi' })
      await t.waitForTurnEnd(s.id, 1)
      await idleAfterTurn(sse, 1)
      const after = sse.frames.slice(sse.frames.findIndex((f) => f.event === 'stream/ready') + 2) // skip ready and the connect status
      const shown = new Set(['session/event', 'agent/inbox/inserted', 'agent/status', 'agent/inbox/claimed', 'agent/assistant-stream'])
      const tokens = after
        .filter((f) => shown.has(f.event!) && (f.event !== 'agent/assistant-stream' || f.json.kind !== 'chunk'))
        .map((f) => (f.event === 'session/event' ? f.json.type : f.event === 'agent/assistant-stream' ? `[${f.json.kind}]` : f.event === 'agent/status' ? `[${f.json.status}]` : `[${f.event}]`))
      expect(tokens).toEqual([
        'agent/inbox/spliced', '[agent/inbox/inserted]', '[running]', 'turn/start', 'agent/inbox/spliced', '[agent/inbox/claimed]',
        'step/start', 'system/message', 'user/message', 'request/header', 'request/context', '[start]', 'assistant/message', '[end]',
        'step/end', 'turn/end', '[idle]',
      ])
      const chunks = after.filter((f) => f.event === 'agent/assistant-stream' && f.json.kind === 'chunk')
      expect(chunks.map((f) => f.json.chunk.type)).toEqual(['block-start', 'text-delta', 'text-delta', 'block-end', 'usage', 'finish'])
      const claimed = after.find((f) => f.event === 'agent/inbox/claimed')!
      expect(claimed.json.turn).toBe(1)
      const evs = await h.checked(s.id)
      expect(evs.at(-1)!.data.reason).toEqual({ kind: 'completed' })
      const msgs = (await t.api('GET', `/v1/sessions/${s.id}/messages`)).body.messages
      expect(msgs.map((m: any) => m.role)).toEqual(['system', 'user', 'assistant'])
    } finally {
      sse.close()
    }
  })

  it('framing: dense revisions and chunk indexes, no per-chunk events, expanded stream equals the chunk frames, end carries the committed seq', async () => {
    const s = await t.createSession({ system: 'P' })
    const sse = await h.sse(s.id)
    try {
      t.models.script(s.id, { text: ['a', 'b', 'c'] }, { text: ['d', 'e'] })
      await h.post(s.id, 'followup', { content: 'one' })
      await t.waitForTurnEnd(s.id, 1)
      await h.post(s.id, 'followup', { content: 'two' })
      await t.waitForTurnEnd(s.id, 2)
      await until('two end frames', () => streamFrames(sse.frames).filter((f) => f.kind === 'end').length >= 2)
      const evs = await h.checked(s.id)
      // no per-chunk durable events: each turn is exactly the C1 shape
      expect(types(turnOf(evs, 1))).toEqual(['turn/start', 'agent/inbox/spliced', 'step/start', 'system/message', 'user/message', 'request/header', 'request/context', 'assistant/message', 'step/end', 'turn/end'])
      expect(types(turnOf(evs, 2))).toEqual(['turn/start', 'agent/inbox/spliced', 'step/start', 'user/message', 'assistant/message', 'step/end', 'turn/end'])
      const frames = streamFrames(sse.frames)
      // revision counts frames per loop instance from 1, densely
      expect(frames.map((f) => f.revision)).toEqual(frames.map((_f, i) => i + 1))
      const ams = ofType(evs, 'assistant/message')
      const attempts = [...new Set(frames.map((f) => f.attemptId))]
      expect(attempts).toHaveLength(2)
      attempts.forEach((id, i) => {
        const fs = frames.filter((f) => f.attemptId === id)
        const am = ams[i]
        expect(fs[0]).toMatchObject({ kind: 'start', turn: i + 1, step: 1 })
        // attemptId is <sessionId>:<the seq the log assigns next at dispatch>
        expect(id).toBe(`${s.id}:${am.seq}`)
        const chunks = fs.slice(1, -1)
        expect(chunks.every((f) => f.kind === 'chunk')).toBe(true)
        expect(chunks.map((f) => f.index)).toEqual(chunks.map((_f, j) => j))
        expect(chunks.map((f) => ({ time: f.time, chunk: f.chunk }))).toEqual(expand(am.data.stream))
        expect(fs.at(-1)).toMatchObject({ kind: 'end', index: chunks.length, outcome: { kind: 'committed', eventType: 'assistant/message', seq: am.seq } })
        // the SSE layer sends the end frame only after the event it names
        const endAt = sse.frames.findIndex((f) => f.event === 'agent/assistant-stream' && f.json.kind === 'end' && f.json.attemptId === id)
        const evAt = sse.frames.findIndex((f) => f.event === 'session/event' && f.json.seq === am.seq)
        expect(evAt).toBeGreaterThanOrEqual(0)
        expect(evAt).toBeLessThan(endAt)
      })
    } finally {
      sse.close()
    }
  })

  it('a failed attempt settles before its retry: end outcomes [assistant/attempt, assistant/message]', async () => {
    const s = await t.createSession({ system: 'P' })
    const sse = await h.sse(s.id)
    try {
      t.models.script(s.id, { error: '500 upstream exploded' }, { text: ['ok'] })
      await h.post(s.id, 'followup', { content: 'hi' })
      await t.waitForTurnEnd(s.id, 1, 15000)
      await until('two end frames', () => streamFrames(sse.frames).filter((f) => f.kind === 'end').length >= 2)
      const evs = await h.checked(s.id)
      expect(types(turnOf(evs, 1))).toEqual([
        'turn/start', 'agent/inbox/spliced', 'step/start', 'system/message', 'user/message', 'request/header', 'request/context',
        'assistant/attempt', 'llm/retry', 'llm/retry-started', 'assistant/message', 'step/end', 'turn/end',
      ])
      const aa = ofType(evs, 'assistant/attempt')[0]
      const am = ofType(evs, 'assistant/message')[0]
      expect(aa.data.stream.at(-1).chunk.reason).toMatchObject({ kind: 'error', failure: { code: 'SERVER' } })
      const frames = streamFrames(sse.frames)
      expect(frames.map((f) => f.kind).filter((k) => k !== 'chunk')).toEqual(['start', 'end', 'start', 'end'])
      const ends = frames.filter((f) => f.kind === 'end')
      expect(ends.map((f) => f.outcome)).toEqual([
        { kind: 'committed', eventType: 'assistant/attempt', seq: aa.seq },
        { kind: 'committed', eventType: 'assistant/message', seq: am.seq },
      ])
      expect(new Set(frames.map((f) => f.attemptId)).size).toBe(2)
      expect(evs.at(-1)!.data.reason).toEqual({ kind: 'completed' })
      expect(t.models.requestsOf(s.id)).toHaveLength(2)
    } finally {
      sse.close()
    }
  })

  it('maxTokens and reasoningEffort options reach the first request', async () => {
    const s = await t.createSession({ system: 'P', maxTokens: 77, reasoningEffort: 'low' })
    t.models.script(s.id, { text: ['ok'] })
    await h.post(s.id, 'followup', { content: 'hi' })
    await t.waitForTurnEnd(s.id, 1)
    const evs = await h.checked(s.id)
    const header = ofType(evs, 'request/header')[0].data
    expect(header.reason).toBe('initial')
    expect(header.header.config).toEqual({ provider: 'test', model: 'scripted', maxTokens: 77, reasoningEffort: 'low' })
    expect(header.header.adapterDefaults).toBeUndefined()
    const req = t.models.requestsOf(s.id)[0]
    expect(req.options?.maxTokens).toBe(77)
    expect((req.options as any)?.reasoning).toBe('low')
    // without the option, the route's default fills in and is marked as an adapter default
    const s2 = await t.createSession({ system: 'P' })
    t.models.script(s2.id, { text: ['ok'] })
    await h.post(s2.id, 'followup', { content: 'hi' })
    await t.waitForTurnEnd(s2.id, 1)
    const h2 = ofType(await h.checked(s2.id), 'request/header')[0].data.header
    expect(h2).toMatchObject({ config: { provider: 'test', model: 'scripted', maxTokens: 1024 }, adapterDefaults: { maxTokens: true } })
    expect(t.models.requestsOf(s2.id)[0].options?.maxTokens).toBe(1024)
  })

  it('an invalid request option fails its turn with nothing admitted; the next turn works', async () => {
    const s = await t.createSession({ system: 'P' })
    let n = 0
    h.ctl.set(s.id, {
      request: async (_p, next) => {
        const c = await next()
        n++
        if (n === 1) return { ...c, maxTokens: -5 }
        if (n === 2) return { ...c, reasoningEffort: 'extreme' }
        return c
      },
    })
    t.models.script(s.id, { text: ['fine'] })
    for (const [i, content] of ['one', 'two', 'three'].entries()) {
      await h.post(s.id, 'followup', { content })
      await t.waitForTurnEnd(s.id, i + 1)
    }
    const evs = await h.checked(s.id)
    for (const [turn, field] of [[1, /maxTokens/], [2, /reasoningEffort/]] as const) {
      const tevs = turnOf(evs, turn)
      expect(types(tevs)).toEqual(['turn/start', 'agent/inbox/spliced', 'step/start', 'step/end', 'turn/end'])
      expect(tevs.at(-1)!.data.reason.kind).toBe('error')
      expect(tevs.at(-1)!.data.reason.error.message).toMatch(field)
    }
    expect(turnOf(evs, 3).at(-1)!.data.reason).toEqual({ kind: 'completed' })
    expect(t.models.requestsOf(s.id)).toHaveLength(1)
    expect(ofType(evs, 'user/message').map((e) => textOf(e.data))).toEqual(['three'])
  })

  it('C8 tool round trip with a builtin tool: call, result, step 2 without a claim or header', async () => {
    const s = await t.createSession({ system: 'P', tools: [{ name: 'work', execution: { type: 'builtin' } }] })
    const seenArgs: unknown[] = []
    const preSteps: Array<[number, number]> = []
    h.ctl.set(s.id, {
      tool: (_name, args) => {
        seenArgs.push(args)
        return { content: 'worked' }
      },
      preStep: (p, next) => {
        preSteps.push([p.turn, p.step])
        return next()
      },
    })
    t.models.script(s.id, { toolCalls: [{ id: 'c1', name: 'work', arguments: { x: 1 } }] }, { text: ['done'] })
    await h.post(s.id, 'followup', { content: 'call it' })
    await t.waitForTurnEnd(s.id, 1)
    const evs = await h.checked(s.id)
    expect(types(turnOf(evs, 1))).toEqual([
      'turn/start', 'agent/inbox/spliced',
      'step/start', 'system/message', 'user/message', 'request/header', 'request/context', 'assistant/message', 'tool/call', 'tool/result', 'step/end',
      'step/start', 'assistant/message', 'step/end', 'turn/end',
    ])
    const tc = ofType(evs, 'tool/call')[0]
    const tr = ofType(evs, 'tool/result')[0]
    expect(tc.data).toMatchObject({ turn: 1, step: 1, callId: 'c1', name: 'work', arguments: '{"x":1}' })
    expect(tr.sourceEventSeqs).toEqual([tc.seq])
    expect(tr.data.message.content[0]).toEqual({ type: 'tool-result', toolCallId: 'c1', isError: false, content: [{ type: 'text', text: 'worked' }] })
    expect(seenArgs).toEqual([{ x: 1 }])
    expect(preSteps).toEqual([[1, 1], [1, 2]])
    const req2 = t.models.requestsOf(s.id)[1]
    expect(req2.context.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'toolResult'])
    expect(evs.at(-1)!.data.reason).toEqual({ kind: 'completed' })
  })

  it('prompt sections render in order after the literal session text; a missing variable fails only its turn', async () => {
    const s = await t.createSession({ system: 'Literal {{notavar}}' })
    let who: string | undefined = 'tester'
    h.ctl.set(s.id, {
      sections: true,
      assemble: (a, next) => {
        if (who !== undefined) a.variables.who = who
        return next()
      },
    })
    t.models.script(s.id, { text: ['one'] }, { text: ['three'] })
    await h.post(s.id, 'followup', { content: 'first' })
    await t.waitForTurnEnd(s.id, 1)
    who = undefined
    await h.post(s.id, 'followup', { content: 'second' })
    await t.waitForTurnEnd(s.id, 2)
    who = 'tester'
    await h.post(s.id, 'followup', { content: 'third' })
    await t.waitForTurnEnd(s.id, 3)
    const evs = await h.checked(s.id)
    const expected = 'Literal {{notavar}}\n\nSection A for tester.\n\nSection B.'
    const sys = ofType(evs, 'system/message')
    expect(sys).toHaveLength(1)
    expect(sys[0].data.message.content).toEqual([{ type: 'text', text: expected }])
    expect(t.models.requestsOf(s.id)[0].context.systemPrompt).toBe(expected)
    const t2 = turnOf(evs, 2)
    expect(types(t2)).toEqual(['turn/start', 'agent/inbox/spliced', 'turn/end'])
    expect(t2.at(-1)!.data.reason.kind).toBe('error')
    expect(t2.at(-1)!.data.reason.error.message).toMatch(/who/)
    expect(turnOf(evs, 3).at(-1)!.data.reason).toEqual({ kind: 'completed' })
    // the failed turn's prompt was claimed and is gone for good
    expect(t.models.requestsOf(s.id)).toHaveLength(2)
    expect(t.models.requestsOf(s.id)[1].context.messages.map((m: any) => (typeof m.content === 'string' ? m.content : m.content.map((b: any) => b.text).join('')))).toEqual(['first', 'one', 'third'])
  })

  it('empty assembly: an empty head, no system message to the model; a later prompt replaces the head; headers initial then series', async () => {
    const s = await t.createSession({})
    let prompt = ''
    h.ctl.set(s.id, {
      assemble: (a, next) => {
        if (prompt) a.sections.push({ name: 'late', text: prompt })
        return next()
      },
    })
    t.models.script(s.id, { text: ['one'] }, { text: ['two'] })
    await h.post(s.id, 'followup', { content: 'first' })
    await t.waitForTurnEnd(s.id, 1)
    prompt = 'Now a prompt.'
    await h.post(s.id, 'followup', { content: 'second' })
    await t.waitForTurnEnd(s.id, 2)
    const evs = await h.checked(s.id)
    const t1 = turnOf(evs, 1)
    const head = t1.find((e) => e.type === 'system/message')!
    expect(head.surfaceOp).toBe('append')
    expect(head.data.message.content).toEqual([])
    expect(head.seq).toBeLessThan(t1.find((e) => e.type === 'user/message')!.seq)
    const reqs = h.loopRequests.get(s.id)!
    expect(reqs[0].messages.map((m: any) => m.role)).toEqual(['user'])
    expect(t.models.requestsOf(s.id)[0].context.systemPrompt).toBeUndefined()
    const sys2 = ofType(turnOf(evs, 2), 'system/message')
    expect(sys2).toHaveLength(1)
    expect(sys2[0].surfaceOp).toEqual({ op: 'replace', start: head.seq, end: head.seq })
    expect(sys2[0].sourceEventSeqs).toEqual([head.seq])
    expect(sys2[0].data.message.content).toEqual([{ type: 'text', text: 'Now a prompt.' }])
    expect(reqs[1].messages.map((m: any) => m.role)).toEqual(['system', 'user', 'assistant', 'user'])
    expect(t.models.requestsOf(s.id)[1].context.systemPrompt).toBe('Now a prompt.')
    expect(ofType(evs, 'request/header').map((e) => e.data.reason)).toEqual(['initial', 'series'])
  })

  it('a three-delta text response expands to exactly 7 chunks', async () => {
    const s = await t.createSession({ system: 'P' })
    t.models.script(s.id, { text: ['x', 'y', 'z'] })
    await h.post(s.id, 'followup', { content: 'hi' })
    await t.waitForTurnEnd(s.id, 1)
    const evs = await h.checked(s.id)
    const am = ofType(evs, 'assistant/message')[0]
    const chunks = expand(am.data.stream)
    expect(chunks.map((c) => c.chunk.type)).toEqual(['block-start', 'text-delta', 'text-delta', 'text-delta', 'block-end', 'usage', 'finish'])
    const runs = am.data.stream.filter((r: any) => r.type === 'text-chunks')
    expect(runs).toHaveLength(1)
    expect(runs[0].texts).toEqual(['x', 'y', 'z'])
    expect(runs[0].dt[0]).toBe(0)
    expect(am.data.message.content).toEqual([{ type: 'text', text: 'xyz' }])
  })

  /** A session whose `work` tool waits on a gate; resolves once the tool body runs. */
  function gatedTool(id: string) {
    const g = gate()
    let entered!: () => void
    const running = new Promise<void>((r) => (entered = r))
    h.ctl.set(id, {
      ...(h.ctl.get(id) ?? {}),
      tool: async () => {
        entered()
        await g.promise
        return { content: 'worked' }
      },
    })
    return { open: g.open, running }
  }

  for (const route of ['steer', 'inject'] as const) {
    it(`${route} while a tool runs is admitted in step 2, after its step/start and after the tool result`, async () => {
      const s = await t.createSession({ system: 'P', tools: [{ name: 'work', execution: { type: 'builtin' } }] })
      const tool = gatedTool(s.id)
      t.models.script(s.id, { toolCalls: [{ id: 'c1', name: 'work', arguments: {} }] }, { text: ['after'] })
      await h.post(s.id, 'followup', { content: 'go' })
      await tool.running
      const accepted = await h.post(s.id, route, { content: 'mid' })
      tool.open()
      await t.waitForTurnEnd(s.id, 1)
      const evs = await h.checked(s.id)
      const t1 = turnOf(evs, 1)
      expect(types(t1)).toEqual([
        'turn/start', 'agent/inbox/spliced',
        'step/start', 'system/message', 'user/message', 'request/header', 'request/context', 'assistant/message', 'tool/call', 'agent/inbox/spliced', 'tool/result', 'step/end',
        'agent/inbox/spliced', 'step/start', 'user/message', 'assistant/message', 'step/end', 'turn/end',
      ])
      const insert = evs.find((e) => e.seq === accepted.seq)!
      expect(insert.data).toMatchObject({ target: 'next-step', start: 0 })
      const claim = t1[12]
      expect(claim.data).toEqual({ target: 'next-step', start: 0, removedCount: 1, inserted: [] })
      const u2 = t1[14]
      expect(u2.data.id).toBe(accepted.messageId)
      expect(u2.data.content).toEqual([{ type: 'text', text: 'mid' }])
      expect(u2.seq).toBeGreaterThan(ofType(t1, 'tool/result')[0].seq)
      const req2 = t.models.requestsOf(s.id)[1]
      expect(req2.context.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'toolResult', 'user'])
      expect(ofType(evs, 'turn/start')).toHaveLength(1)
    })
  }

  it('C5 steer while idle opens a turn; a second steer during the stream lands in step 2 of that turn', async () => {
    const s = await t.createSession({ system: 'P' })
    const g = gate()
    t.models.script(s.id, { text: ['a', 'b'], holdAfter: 1, gate: g.promise }, { text: ['c'] })
    const sse = await h.sse(s.id)
    try {
      await h.post(s.id, 'steer', { content: 'm1' })
      await t.models.waitForRequest(s.id, 1)
      await sse.waitFor((f) => f.event === 'agent/assistant-stream' && f.json.kind === 'chunk' && f.json.chunk.type === 'text-delta')
      const m2 = await h.post(s.id, 'steer', { content: 'm2' })
      g.open()
      await t.waitForTurnEnd(s.id, 1)
      const evs = await h.checked(s.id)
      expect(ofType(evs, 'turn/start')).toHaveLength(1)
      const t1 = turnOf(evs, 1)
      expect(types(t1)).toEqual([
        'turn/start', 'agent/inbox/spliced',
        'step/start', 'system/message', 'user/message', 'request/header', 'request/context', 'agent/inbox/spliced', 'assistant/message', 'step/end',
        'agent/inbox/spliced', 'step/start', 'user/message', 'assistant/message', 'step/end', 'turn/end',
      ])
      // the idle steer was claimed by the wake prefix from next-step
      expect(t1[1].data).toEqual({ target: 'next-step', start: 0, removedCount: 1, inserted: [] })
      expect(ofType(t1, 'step/start').map((e) => e.data)).toEqual([{ turn: 1, step: 1 }, { turn: 1, step: 2 }])
      expect(t1[12].data.id).toBe(m2.messageId)
      const [r1, r2] = t.models.requestsOf(s.id)
      expect(r1.context.messages.map((m: any) => m.content[0].text)).toEqual(['m1'])
      expect(r2.context.messages.at(-1)).toMatchObject({ role: 'user', content: [{ type: 'text', text: 'm2' }] })
    } finally {
      sse.close()
    }
  })

  it('steering issued from a pre-step that then throws waits for the next wake', async () => {
    const s = await t.createSession({ system: 'P' })
    let first = true
    h.ctl.set(s.id, {
      preStep: async (p, next) => {
        if (first) {
          first = false
          await p.agent.steer('steered before the throw')
          throw new Error('pre-step exploded')
        }
        return next()
      },
    })
    t.models.script(s.id, { text: ['ok'] })
    await h.post(s.id, 'followup', { content: 'one' })
    await t.waitForTurnEnd(s.id, 1)
    await t.waitIdle(s.id)
    const inbox = (await t.api('GET', `/v1/sessions/${s.id}/inbox`)).body
    expect(inbox.nextStep.map((m: any) => textOf(m))).toEqual(['steered before the throw'])
    expect(ofType(await h.log(s.id), 'turn/start')).toHaveLength(1)
    await h.post(s.id, 'followup', { content: 'two' })
    await t.waitForTurnEnd(s.id, 2)
    const evs = await h.checked(s.id)
    expect(turnOf(evs, 1).at(-1)!.data.reason.kind).toBe('error')
    expect(ofType(turnOf(evs, 2), 'user/message').map((e) => textOf(e.data))).toEqual(['steered before the throw', 'two'])
  })

  it('C4 idle inject writes only a splice; a followup then claims the context first', async () => {
    const s = await t.createSession({ system: 'P' })
    const sse = await h.sse(s.id)
    try {
      const inj = await h.post(s.id, 'inject', { content: 'ctx' })
      const before = await h.log(s.id)
      expect(types(before)).toEqual(['agent/inbox/spliced'])
      expect(before[0].data).toMatchObject({ target: 'next-step', start: 0 })
      expect((await t.api('GET', `/v1/sessions/${s.id}`)).body.status).toBe('idle')
      t.models.script(s.id, { text: ['ok'] })
      const go = await h.post(s.id, 'followup', { content: 'go' })
      await t.waitForTurnEnd(s.id, 1)
      await idleAfterTurn(sse, 1)
      const evs = await h.checked(s.id)
      expect(types(evs)).toEqual([
        'agent/inbox/spliced', 'agent/inbox/spliced', 'turn/start', 'agent/inbox/spliced', 'agent/inbox/spliced', 'step/start', 'system/message',
        'user/message', 'user/message', 'request/header', 'request/context', 'assistant/message', 'step/end', 'turn/end',
      ])
      expect(evs[3].data).toEqual({ target: 'next-step', start: 0, removedCount: 1, inserted: [] })
      expect(evs[4].data).toEqual({ target: 'next-turn', start: 0, removedCount: 1, inserted: [] })
      expect([evs[7].data.id, evs[8].data.id]).toEqual([inj.messageId, go.messageId])
      const claimed = sse.frames.filter((f) => f.event === 'agent/inbox/claimed').map((f) => [f.json.message.id, f.json.turn])
      expect(claimed).toEqual([[inj.messageId, 1], [go.messageId, 1]])
      // the inject changed no status: the only transitions are the followup's
      const statuses = sse.frames.filter((f) => f.event === 'agent/status').map((f) => f.json.status)
      expect(statuses).toEqual(['idle', 'running', 'idle'])
      const firstRunning = sse.frames.findIndex((f) => f.event === 'agent/status' && f.json.status === 'running')
      const goSplice = sse.frames.findIndex((f) => f.event === 'session/event' && f.json.seq === go.seq)
      expect(goSplice).toBeLessThan(firstRunning)
    } finally {
      sse.close()
    }
  })

  it('inject keeps content and source: from HTTP and from a plugin handle, entered unchanged', async () => {
    const s = await t.createSession({ system: 'P' })
    const agent = await h.agent(s.id)
    const blocks = [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }]
    const viaHttp = await h.post(s.id, 'inject', { content: blocks, id: 'client-ctx-1' })
    const viaPlugin = await agent.handle('test-ctl').inject({ content: 'note', source: { kind: 'plugin', plugin: 'memo', form: 'note' } })
    expect(types(await h.log(s.id))).toEqual(['agent/inbox/spliced', 'agent/inbox/spliced'])
    expect(agent.status).toBe('idle')
    t.models.script(s.id, { text: ['ok'] })
    await h.post(s.id, 'followup', { content: 'go' })
    await t.waitForTurnEnd(s.id, 1)
    const evs = await h.checked(s.id)
    const users = ofType(evs, 'user/message')
    expect(users.map((e) => e.data.id)).toEqual(['client-ctx-1', viaPlugin.messageId, expect.any(String)])
    expect(viaHttp.messageId).toBe('client-ctx-1')
    expect(users[0].data).toEqual({ id: 'client-ctx-1', role: 'user', content: blocks, source: { kind: 'user' } })
    expect(users[1].data).toEqual({ id: viaPlugin.messageId, role: 'user', content: [{ type: 'text', text: 'note' }], source: { kind: 'plugin', plugin: 'memo', form: 'note' } })
    // each entered message equals what its splice inserted
    for (const u of users.slice(0, 2)) {
      const ins = evs.find((e) => e.type === 'agent/inbox/spliced' && e.data.inserted.some((m: any) => m.id === u.data.id))!
      expect(ins.data.inserted[0]).toEqual(u.data)
    }
  })

  it('C14 turn-stopping steer loop: three steps in turn 1, three turn-stopping calls, completed', async () => {
    const s = await t.createSession({ system: 'P' })
    const calls: number[] = []
    h.ctl.set(s.id, {
      turnStopping: async (p) => {
        calls.push(p.turn)
        if (calls.length < 3) await p.agent.steer(`more ${calls.length}`)
      },
    })
    t.models.script(s.id, { text: ['1'] }, { text: ['2'] }, { text: ['3'] })
    await h.post(s.id, 'followup', { content: 'go' })
    await t.waitForTurnEnd(s.id, 1)
    const evs = await h.checked(s.id)
    const t1 = turnOf(evs, 1)
    expect(ofType(t1, 'step/start').map((e) => e.data.step)).toEqual([1, 2, 3])
    expect(calls).toEqual([1, 1, 1])
    expect(t1.at(-1)!.data.reason).toEqual({ kind: 'completed' })
    expect(ofType(t1, 'user/message').map((e) => [stepAt(evs, e.seq), textOf(e.data)])).toEqual([[1, 'go'], [2, 'more 1'], [3, 'more 2']])
    expect(ofType(evs, 'turn/start')).toHaveLength(1)
  })

  it('C13 concludesTurn: one adapter request, the result, then turn/end completed without step 2', async () => {
    const s = await t.createSession({ system: 'P', tools: [{ name: 'conclude', execution: { type: 'builtin' } }] })
    t.models.script(s.id, { toolCalls: [{ id: 'c1', name: 'conclude', arguments: {} }] })
    await h.post(s.id, 'followup', { content: 'go' })
    await t.waitForTurnEnd(s.id, 1)
    const evs = await h.checked(s.id)
    expect(types(turnOf(evs, 1)).slice(-5)).toEqual(['assistant/message', 'tool/call', 'tool/result', 'step/end', 'turn/end'])
    expect(ofType(evs, 'step/start')).toHaveLength(1)
    expect(t.models.requestsOf(s.id)).toHaveLength(1)
    expect(evs.at(-1)!.data.reason).toEqual({ kind: 'completed' })
  })

  it('C13 concludesTurn overridden: steering that arrives during the concluding tool runs step 2', async () => {
    const s = await t.createSession({ system: 'P', tools: [{ name: 'conclude', execution: { type: 'builtin' } }] })
    const g = gate()
    let entered!: () => void
    const running = new Promise<void>((r) => (entered = r))
    h.ctl.set(s.id, {
      tool: async () => {
        entered()
        await g.promise
        return { content: 'concluded', concludesTurn: true }
      },
    })
    t.models.script(s.id, { toolCalls: [{ id: 'c1', name: 'conclude', arguments: {} }] }, { text: ['more'] })
    await h.post(s.id, 'followup', { content: 'go' })
    await running
    await h.post(s.id, 'steer', { content: 'wait, one more thing' })
    g.open()
    await t.waitForTurnEnd(s.id, 1)
    const evs = await h.checked(s.id)
    const t1 = turnOf(evs, 1)
    expect(ofType(t1, 'step/start')).toHaveLength(2)
    expect(textOf(ofType(t1, 'user/message')[1].data)).toBe('wait, one more thing')
    expect(t.models.requestsOf(s.id)).toHaveLength(2)
    expect(t1.at(-1)!.data.reason).toEqual({ kind: 'completed' })
  })

  it('an agent/request model switch shows in the header (reason change) and reaches the other route', async () => {
    const s = await t.createSession({ system: 'P' })
    let swap = false
    h.ctl.set(s.id, {
      request: async (_p, next) => {
        const c = await next()
        return swap ? { ...c, model: 'other' } : c
      },
    })
    t.models.script(s.id, { text: ['one'] }, { text: ['two'] })
    await h.post(s.id, 'followup', { content: 'first' })
    await t.waitForTurnEnd(s.id, 1)
    swap = true
    await h.post(s.id, 'followup', { content: 'second' })
    await t.waitForTurnEnd(s.id, 2)
    const evs = await h.checked(s.id)
    const headers = ofType(evs, 'request/header').map((e) => e.data)
    expect(headers.map((d) => d.reason)).toEqual(['initial', 'change'])
    expect(headers[1].header.config).toMatchObject({ provider: 'test', model: 'other' })
    expect(headers[1].startsSeries).toBeUndefined()
    const ctx2 = ofType(turnOf(evs, 2), 'request/context')
    expect(ctx2.map((e) => e.data)).toEqual([{ provider: 'test', model: 'other', contextWindow: 8192 }])
    expect(t.models.requestsOf(s.id).map((r) => r.model)).toEqual(['scripted', 'other'])
    // nothing but the header and route context changed: no prompt rewrite on an unchanged plain route
    expect(ofType(turnOf(evs, 2), 'system/message')).toHaveLength(0)
  })

  it('agent/pre-step precedes each step/start', async () => {
    const s = await t.createSession({ system: 'P', tools: [{ name: 'work', execution: { type: 'builtin' } }] })
    const agent = await h.agent(s.id)
    const seen: Array<{ turn: number; step: number; head: number }> = []
    h.ctl.set(s.id, {
      preStep: (p, next) => {
        seen.push({ turn: p.turn, step: p.step, head: agent.state.headSeq })
        return next()
      },
    })
    t.models.script(s.id, { toolCalls: [{ id: 'c1', name: 'work', arguments: {} }] }, { text: ['done'] }, { text: ['again'] })
    await h.post(s.id, 'followup', { content: 'one' })
    await t.waitForTurnEnd(s.id, 1)
    await h.post(s.id, 'followup', { content: 'two' })
    await t.waitForTurnEnd(s.id, 2)
    const evs = await h.checked(s.id)
    const starts = ofType(evs, 'step/start')
    expect(seen.map((x) => [x.turn, x.step])).toEqual(starts.map((e) => [e.data.turn, e.data.step]))
    seen.forEach((x, i) => {
      expect(x.head).toBeLessThan(starts[i].seq)
      // and after the previous step closed
      if (i > 0) expect(x.head).toBeGreaterThanOrEqual(evs.find((e) => e.type === 'step/end' && e.data.turn === starts[i - 1].data.turn && e.data.step === starts[i - 1].data.step)!.seq)
    })
  })

  it('a pre-step throw fails only its turn: turn/end error with no step, agent/error; the next followup works', async () => {
    const s = await t.createSession({ system: 'P' })
    const sse = await h.sse(s.id)
    try {
      let fail = true
      h.ctl.set(s.id, {
        preStep: (_p, next) => {
          if (fail) throw new Error('moderation exploded')
          return next()
        },
      })
      t.models.script(s.id, { text: ['fine'] })
      await h.post(s.id, 'followup', { content: 'bad' })
      await t.waitForTurnEnd(s.id, 1)
      fail = false
      await h.post(s.id, 'followup', { content: 'good' })
      await t.waitForTurnEnd(s.id, 2)
      const evs = await h.checked(s.id)
      const t1 = turnOf(evs, 1)
      expect(types(t1)).toEqual(['turn/start', 'agent/inbox/spliced', 'turn/end'])
      expect(t1[2].data.reason.kind).toBe('error')
      expect(t1[2].data.reason.error.message).toMatch(/moderation exploded/)
      const err = await sse.waitFor((f) => f.event === 'agent/error')
      expect(err.json).toMatchObject({ turn: 1, error: { message: expect.stringMatching(/moderation exploded/) } })
      expect(turnOf(evs, 2).at(-1)!.data.reason).toEqual({ kind: 'completed' })
      expect(ofType(evs, 'user/message').map((e) => textOf(e.data))).toEqual(['good'])
      expect(t.models.requestsOf(s.id)).toHaveLength(1)
    } finally {
      sse.close()
    }
  })

  it('cancel mid-stream: an interrupted message with the visible prefix, turn/end aborted by user, end frame committed', async () => {
    const s = await t.createSession({ system: 'P' })
    const sse = await h.sse(s.id)
    try {
      t.models.script(s.id, { text: ['Hel', 'lo'], hang: true })
      await h.post(s.id, 'followup', { content: 'hi' })
      await sse.waitFor((f) => f.event === 'agent/assistant-stream' && f.json.kind === 'chunk' && f.json.chunk.type === 'text-delta' && f.json.chunk.text === 'lo')
      const r = await t.api('POST', `/v1/sessions/${s.id}/cancel`, {})
      expect(r.status).toBe(202)
      expect(r.body).toEqual({ cancelled: true })
      await t.waitForTurnEnd(s.id, 1)
      await t.waitIdle(s.id)
      const end = await sse.waitFor((f) => f.event === 'agent/assistant-stream' && f.json.kind === 'end')
      const evs = await h.checked(s.id)
      const t1 = turnOf(evs, 1)
      expect(types(t1).slice(-4)).toEqual(['request/context', 'assistant/message', 'step/end', 'turn/end'])
      const am = ofType(t1, 'assistant/message')[0]
      expect(am.data.interrupted).toBe(true)
      expect(am.data.message.content).toEqual([{ type: 'text', text: 'Hello' }])
      expect(t1.at(-1)!.data.reason).toEqual({ kind: 'aborted', reason: { kind: 'user' } })
      expect(end.json.outcome).toEqual({ kind: 'committed', eventType: 'assistant/message', seq: am.seq })
      const msgs = (await t.api('GET', `/v1/sessions/${s.id}/messages`)).body.messages
      expect(msgs.map((m: any) => m.role)).toEqual(['system', 'user', 'assistant'])
      expect(t.models.requestsOf(s.id)[0].aborted).toBe(true)
    } finally {
      sse.close()
    }
  })

  it('C15 max-tokens: the reason, sticky through a turn-stopping steer, and no leak into the next turn', async () => {
    const s = await t.createSession({ system: 'P' })
    let steered = false
    h.ctl.set(s.id, {
      turnStopping: async (p) => {
        if (p.turn === 1 && !steered) {
          steered = true
          await p.agent.steer('go on')
        }
      },
    })
    t.models.script(s.id, { text: ['trunc'], stop: 'length' }, { text: ['rest'] }, { text: ['fresh'] })
    await h.post(s.id, 'followup', { content: 'one' })
    await t.waitForTurnEnd(s.id, 1)
    await h.post(s.id, 'followup', { content: 'two' })
    await t.waitForTurnEnd(s.id, 2)
    const evs = await h.checked(s.id)
    const t1 = turnOf(evs, 1)
    const ams = ofType(t1, 'assistant/message')
    expect(finishOf(ams[0]).reason).toEqual({ kind: 'max-tokens' })
    expect(finishOf(ams[1]).reason).toEqual({ kind: 'stop' })
    expect(ofType(t1, 'step/start')).toHaveLength(2)
    expect(t1.at(-1)!.data.reason).toEqual({ kind: 'max-tokens' })
    expect(turnOf(evs, 2).at(-1)!.data.reason).toEqual({ kind: 'completed' })
    // a max-tokens message with text is projected
    expect(t.models.requestsOf(s.id)[1].context.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'user'])
  })

  it('max-tokens: truncated tool calls are dropped and not dispatched, the safe text is kept', async () => {
    const s = await t.createSession({ system: 'P', tools: [{ name: 'work', execution: { type: 'builtin' } }] })
    let ran = 0
    h.ctl.set(s.id, {
      tool: () => {
        ran++
        return { content: 'no' }
      },
    })
    t.models.script(s.id, { text: ['safe text'], toolCalls: [{ id: 'c1', name: 'work', arguments: { a: 1 } }], stop: 'length' })
    await h.post(s.id, 'followup', { content: 'go' })
    await t.waitForTurnEnd(s.id, 1)
    const evs = await h.checked(s.id)
    const t1 = turnOf(evs, 1)
    expect(ofType(t1, 'tool/call')).toHaveLength(0)
    expect(ofType(t1, 'tool/result')).toHaveLength(0)
    expect(ran).toBe(0)
    const am = ofType(t1, 'assistant/message')[0]
    expect(am.data.message.content).toEqual([{ type: 'text', text: 'safe text' }])
    expect(ofType(t1, 'step/start')).toHaveLength(1)
    expect(t1.at(-1)!.data.reason).toEqual({ kind: 'max-tokens' })
    const msgs = (await t.api('GET', `/v1/sessions/${s.id}/messages`)).body.messages
    expect(msgs.at(-1)).toMatchObject({ role: 'assistant', content: [{ type: 'text', text: 'safe text' }] })
  })

  it('max-tokens: a content-empty message hosts only usage and stream and is not derived', async () => {
    const s = await t.createSession({ system: 'P', tools: [{ name: 'work', execution: { type: 'builtin' } }] })
    t.models.script(s.id, { toolCalls: [{ id: 'c1', name: 'work', arguments: { a: 1 } }], stop: 'length' }, { text: ['ok'] })
    await h.post(s.id, 'followup', { content: 'one' })
    await t.waitForTurnEnd(s.id, 1)
    await h.post(s.id, 'followup', { content: 'two' })
    await t.waitForTurnEnd(s.id, 2)
    const evs = await h.checked(s.id)
    const am = ofType(turnOf(evs, 1), 'assistant/message')[0]
    expect(am.surfaceOp).toBe('append')
    expect(am.data.message.content).toEqual([])
    expect(am.data.usage).toBeDefined()
    expect(ofType(evs, 'tool/call')).toHaveLength(0)
    expect(turnOf(evs, 1).at(-1)!.data.reason).toEqual({ kind: 'max-tokens' })
    const r2 = t.models.requestsOf(s.id)[1]
    expect(r2.context.messages.map((m) => m.role)).toEqual(['user', 'user'])
    const msgs = (await t.api('GET', `/v1/sessions/${s.id}/messages`)).body.messages
    expect(msgs.map((m: any) => m.role)).toEqual(['system', 'user', 'user', 'assistant'])
  })

  it('C2 wake prefix: once a handle followup resolves the Agent is running and the log ends with turn/start and the claim', async () => {
    // session B is woken from a tool body of session A, through B's Agent handle
    const b = await t.createSession({ system: 'B' })
    const agentB = await h.agent(b.id)
    const hold = gate()
    h.ctl.set(b.id, {
      preStep: async (_p, next) => {
        await hold.promise
        return next()
      },
    })
    t.models.script(b.id, { text: ['b'] })
    const a = await t.createSession({ system: 'A', tools: [{ name: 'work', execution: { type: 'builtin' } }] })
    let observed: any
    h.ctl.set(a.id, {
      tool: async () => {
        const hb = agentB.handle('test-ctl')
        const r = await hb.followup('wake up')
        // nothing else awaited since the followup resolved
        observed = { status: hb.status, openTurn: agentB.state.openTurn, head: agentB.state.headSeq, nextTurn: agentB.state.inbox.nextTurn.length, r }
        return { content: 'woke B' }
      },
    })
    t.models.script(a.id, { toolCalls: [{ id: 'c1', name: 'work', arguments: {} }] }, { text: ['a'] })
    await h.post(a.id, 'followup', { content: 'wake B' })
    await until('the tool body of A', () => observed)
    expect(observed.status).toBe('running')
    expect(observed.openTurn).toBe(1)
    expect(observed.nextTurn).toBe(0)
    const logB = (await readEvents(t.app.db, await h.key(b.id))) as unknown as Ev[]
    // B's pre-step is held, so the log is as it was when followup() resolved
    expect(logB.at(-1)!.seq).toBe(observed.head)
    expect(types(logB.slice(-2))).toEqual(['turn/start', 'agent/inbox/spliced'])
    expect(logB.at(-2)!.data).toEqual({ turn: 1 })
    expect(logB.at(-1)!.data).toEqual({ target: 'next-turn', start: 0, removedCount: 1, inserted: [] })
    const accepted = logB.find((e) => e.seq === observed.r.seq)!
    expect(accepted.data.inserted.map((m: any) => m.id)).toEqual([observed.r.messageId])
    expect(accepted.seq).toBeLessThan(logB.at(-2)!.seq)
    hold.open()
    await t.waitForTurnEnd(b.id, 1)
    await t.waitForTurnEnd(a.id, 1)
    await h.checked(a.id)
    const evsB = await h.checked(b.id)
    expect(ofType(evsB, 'user/message').map((e) => e.data.id)).toEqual([observed.r.messageId])
    expect(ofType(evsB, 'user/message')[0].data.source).toEqual({ kind: 'plugin', plugin: 'test-ctl' })
  })

  it('C3 followup burst: three followups in one tick give turns 1, 2, 3; status running once, idle once', async () => {
    const s = await t.createSession({ system: 'P' })
    const agent = await h.agent(s.id)
    const sse = await h.sse(s.id)
    try {
      t.models.script(s.id, { text: ['1'] }, { text: ['2'] }, { text: ['3'] })
      const hd = agent.handle('test-ctl')
      const accepted = await Promise.all([hd.followup('a'), hd.followup('b'), hd.followup('c')])
      await t.waitForTurnEnd(s.id, 3)
      await t.waitIdle(s.id)
      await idleAfterTurn(sse, 3)
      const evs = await h.checked(s.id)
      expect(ofType(evs, 'turn/start').map((e) => e.data.turn)).toEqual([1, 2, 3])
      for (const [i, text] of ['a', 'b', 'c'].entries()) {
        const tevs = turnOf(evs, i + 1)
        expect(tevs[1].data).toEqual({ target: 'next-turn', start: 0, removedCount: 1, inserted: [] })
        expect(ofType(tevs, 'user/message').map((e) => e.data.id)).toEqual([accepted[i].messageId])
        expect(textOf(ofType(tevs, 'user/message')[0].data)).toBe(text)
        expect(tevs.at(-1)!.data.reason).toEqual({ kind: 'completed' })
      }
      const statuses = sse.frames.filter((f) => f.event === 'agent/status').map((f) => f.json.status)
      // the first frame states the status on connect; then exactly one transition each way
      expect(statuses).toEqual(['idle', 'running', 'idle'])
    } finally {
      sse.close()
    }
  })
})
