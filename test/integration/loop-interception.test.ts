// SPEC §16.5 (interception) through the real server: plugin listeners on agent/pre-step,
// agent/session-start, tools/pre-execute and tool results with additionalContexts, with HTTP
// deliveries, the real Agent and driver and the scripted model behind agentd's pi-ai adapter, on
// one database (docs/testing.md). Every session log is checked against SPEC §15 and every loop request
// against the reconstruction property (§8.10).

import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import type { TestApp } from '../helpers/app.js'
import { gate } from '../helpers/scripted.js'
import { ofType, stepAt, textOf, turnOf, types } from '../helpers/events.js'
import { harness, type Harness } from '../helpers/loop.js'
import { until } from '../helpers/wait.js'

const piText = (m: any) => (typeof m.content === 'string' ? m.content : m.content.map((b: any) => b.text ?? '').join(''))

describe.each(APP_DB_KINDS)('SPEC §16.5 interception on %s', (kind) => {
  let h: Harness
  let t: TestApp
  beforeAll(async () => {
    h = await harness(kind, { parallelTools: ['par'] })
    t = h.t
  })
  afterAll(async () => {
    await t?.close()
  })

  const withTool = (name = 'work') => ({ system: 'P', tools: [{ name, execution: { type: 'builtin' } }] })

  it('pre-step enter: the default decision enters the claimed batch, and an empty batch on a tool continuation', async () => {
    const s = await t.createSession(withTool())
    const calls: Array<{ step: number; messages: any[]; decision: any }> = []
    h.ctl.set(s.id, {
      preStep: async (p, next) => {
        const decision = await next()
        calls.push({ step: p.step, messages: [...p.messages], decision })
        return decision
      },
    })
    t.models.script(s.id, { toolCalls: [{ id: 'c1', name: 'work', arguments: {} }] }, { text: ['done'] })
    const accepted = await h.post(s.id, 'followup', { content: 'hello' })
    await t.waitForTurnEnd(s.id, 1)
    const evs = await h.checked(s.id)
    expect(calls.map((c) => c.step)).toEqual([1, 2])
    expect(calls[0].messages.map((m) => m.id)).toEqual([accepted.messageId])
    expect(calls[0].decision).toEqual({ kind: 'enter', messages: calls[0].messages })
    expect(calls[1].messages).toEqual([])
    expect(calls[1].decision).toEqual({ kind: 'enter', messages: [] })
    const users = ofType(evs, 'user/message')
    expect(users.map((e) => e.data)).toEqual([{ id: accepted.messageId, role: 'user', content: [{ type: 'text', text: 'hello' }], source: { kind: 'user' } }])
    // the empty batch still opened step 2
    expect(ofType(evs, 'step/start').map((e) => e.data)).toEqual([{ turn: 1, step: 1 }, { turn: 1, step: 2 }])
  })

  it('step coordinates: assemble, pre-step, agent/request and turn-stopping payloads carry the turn and the proposed step', async () => {
    const s = await t.createSession(withTool())
    const seen: Record<string, Array<[number, number?]>> = { assemble: [], preStep: [], request: [], stopping: [] }
    const ids = new Set<string>()
    h.ctl.set(s.id, {
      assemble: (_a, next, c) => {
        seen.assemble.push([c.turn, c.step])
        ids.add(c.agent.id)
        return next()
      },
      preStep: (p, next) => {
        seen.preStep.push([p.turn, p.step])
        ids.add(p.agent.id)
        expect(p.signal.aborted).toBe(false)
        return next()
      },
      request: (p, next) => {
        seen.request.push([p.turn, p.step])
        return next()
      },
      turnStopping: (p) => {
        seen.stopping.push([p.turn])
      },
    })
    t.models.script(s.id, { toolCalls: [{ id: 'c1', name: 'work', arguments: {} }] }, { text: ['done'] }, { text: ['again'] })
    await h.post(s.id, 'followup', { content: 'one' })
    await t.waitForTurnEnd(s.id, 1)
    await h.post(s.id, 'followup', { content: 'two' })
    await t.waitForTurnEnd(s.id, 2)
    const evs = await h.checked(s.id)
    const steps = ofType(evs, 'step/start').map((e) => [e.data.turn, e.data.step])
    expect(steps).toEqual([[1, 1], [1, 2], [2, 1]])
    expect(seen.assemble).toEqual(steps)
    expect(seen.preStep).toEqual(steps)
    expect(seen.request).toEqual(steps)
    expect(seen.stopping).toEqual([[1], [2]])
    expect([...ids]).toEqual([s.id])
  })

  it('frozen input: the messages a pre-step listener receives are deep-frozen (SPEC §3.3)', async () => {
    const s = await t.createSession({ system: 'P' })
    const checks: unknown[] = []
    const throws = (fn: () => void) => {
      try {
        fn()
        return false
      } catch (e) {
        return e instanceof TypeError
      }
    }
    h.ctl.set(s.id, {
      preStep: (p, next) => {
        for (const m of p.messages) {
          const frozen = [Object.isFrozen(m), Object.isFrozen(m.content), Object.isFrozen(m.content[0]), Object.isFrozen(m.source)]
          // a listener cannot change the claimed input in place (strict mode: writes to frozen values throw)
          const refused = [throws(() => (m.content[0].text = 'tampered')), throws(() => m.content.push({ type: 'text', text: 'more' }))]
          checks.push([...frozen, ...refused])
        }
        return next()
      },
    })
    t.models.script(s.id, { text: ['ok'] })
    await h.post(s.id, 'followup', { content: 'original' })
    await t.waitForTurnEnd(s.id, 1)
    const evs = await h.checked(s.id)
    expect(checks).toEqual([[true, true, true, true, true, true]])
    expect(ofType(evs, 'user/message')[0].data.content).toEqual([{ type: 'text', text: 'original' }])
    expect(turnOf(evs, 1).at(-1)!.data.reason).toEqual({ kind: 'completed' })
  })

  it('pre-step rewrite: the rewritten batch is admitted, each message keeping its id and source', async () => {
    const s = await t.createSession({ system: 'P' })
    h.ctl.set(s.id, {
      preStep: async (_p, next) => {
        const d = await next()
        return { ...d, messages: d.messages.map((m: any) => ({ ...m, content: [{ type: 'text', text: textOf(m).toUpperCase() }] })) }
      },
    })
    t.models.script(s.id, { text: ['ok'] })
    const accepted = await h.post(s.id, 'followup', { content: 'quiet please' })
    await t.waitForTurnEnd(s.id, 1)
    const evs = await h.checked(s.id)
    expect(ofType(evs, 'user/message').map((e) => e.data)).toEqual([{ id: accepted.messageId, role: 'user', content: [{ type: 'text', text: 'QUIET PLEASE' }], source: { kind: 'user' } }])
    expect(t.models.requestsOf(s.id)[0].context.messages.map(piText)).toEqual(['QUIET PLEASE'])
  })

  it('C7 pre-step additions: [...messages, extra] become user/messages after the system prompt, in order, each keeping its source', async () => {
    const s = await t.createSession({ system: 'P' })
    const extra = { id: 'extra-1', role: 'user', content: [{ type: 'text', text: 'extra context' }], source: { kind: 'plugin', plugin: 'test-ctl', form: 'extra' } }
    h.ctl.set(s.id, {
      preStep: async (_p, next) => {
        const d = await next()
        return { ...d, messages: [...d.messages, extra] }
      },
    })
    t.models.script(s.id, { text: ['ok'] })
    const accepted = await h.post(s.id, 'followup', { content: 'hi' })
    await t.waitForTurnEnd(s.id, 1)
    const evs = await h.checked(s.id)
    const t1 = turnOf(evs, 1)
    expect(types(t1)).toEqual(['turn/start', 'agent/inbox/spliced', 'step/start', 'system/message', 'user/message', 'user/message', 'request/header', 'request/context', 'assistant/message', 'step/end', 'turn/end'])
    expect(t1[4].data).toEqual({ id: accepted.messageId, role: 'user', content: [{ type: 'text', text: 'hi' }], source: { kind: 'user' } })
    expect(t1[5].data).toEqual(extra)
    expect(t.models.requestsOf(s.id)[0].context.messages.map(piText)).toEqual(['hi', 'extra context'])
  })

  it('C6 pre-step reject: turn ends blocked with no step; the prompt queued behind stays parked until another wake', async () => {
    const s = await t.createSession({ system: 'P' })
    const g = gate()
    let entered!: () => void
    const inPreStep = new Promise<void>((r) => (entered = r))
    h.ctl.set(s.id, {
      preStep: async (p, next) => {
        if (p.messages.some((m: any) => textOf(m) === 'secret')) {
          entered()
          await g.promise
          return { kind: 'reject' }
        }
        return next()
      },
    })
    t.models.script(s.id, { text: ['safe answer'] }, { text: ['later answer'] })
    await h.post(s.id, 'followup', { content: 'secret' })
    await inPreStep
    const safe = await h.post(s.id, 'followup', { content: 'safe' })
    g.open()
    await t.waitForTurnEnd(s.id, 1)
    await t.waitIdle(s.id)
    const parked = await h.log(s.id)
    expect(types(parked)).toEqual(['agent/inbox/spliced', 'turn/start', 'agent/inbox/spliced', 'agent/inbox/spliced', 'turn/end'])
    expect(parked.at(-1)!.data).toEqual({ turn: 1, reason: { kind: 'blocked' } })
    expect(t.models.requestsOf(s.id)).toHaveLength(0)
    const inbox = (await t.api('GET', `/v1/sessions/${s.id}/inbox`)).body
    expect(inbox.nextTurn.map((m: any) => m.id)).toEqual([safe.messageId])
    expect((await t.api('GET', `/v1/sessions/${s.id}`)).body.status).toBe('idle')
    // another wake: the parked prompt runs first, then the new one
    await h.post(s.id, 'followup', { content: 'later' })
    await t.waitForTurnEnd(s.id, 3)
    const evs = await h.checked(s.id)
    expect(ofType(turnOf(evs, 2), 'user/message').map((e) => e.data.id)).toEqual([safe.messageId])
    expect(ofType(turnOf(evs, 3), 'user/message').map((e) => textOf(e.data))).toEqual(['later'])
    expect(ofType(evs, 'user/message').some((e) => textOf(e.data) === 'secret')).toBe(false)
  })

  for (const route of ['steer', 'inject'] as const) {
    it(`input arriving during pre-step stays pending for the next boundary (${route})`, async () => {
      const s = await t.createSession({ system: 'P' })
      const g = gate()
      let entered!: () => void
      const inPreStep = new Promise<void>((r) => (entered = r))
      let first = true
      h.ctl.set(s.id, {
        preStep: async (_p, next) => {
          if (first) {
            first = false
            entered()
            await g.promise
          }
          return next()
        },
      })
      t.models.script(s.id, { text: ['one'] }, { text: ['two'] })
      await h.post(s.id, 'followup', { content: 'first' })
      await inPreStep
      const late = await h.post(s.id, route, { content: 'late' })
      g.open()
      await t.waitForTurnEnd(s.id, 1)
      const evs = await h.checked(s.id)
      const t1 = turnOf(evs, 1)
      const users = ofType(t1, 'user/message')
      expect(users.map((e) => [stepAt(evs, e.seq), textOf(e.data)])).toEqual([[1, 'first'], [2, 'late']])
      expect(users[1].data.id).toBe(late.messageId)
      const [r1, r2] = t.models.requestsOf(s.id)
      expect(r1.context.messages.map(piText)).toEqual(['first'])
      expect(r2.context.messages.map(piText)).toEqual(['first', 'one', 'late'])
      expect(ofType(evs, 'turn/start')).toHaveLength(1)
    })
  }

  it('agent/session-start injection reaches the first turn', async () => {
    const s = await t.createSession({ system: 'P' })
    const sources: string[] = []
    h.ctl.set(s.id, {
      sessionStart: (p) => {
        sources.push(p.source)
        void p.agent.inject('context from session-start')
      },
    })
    t.models.script(s.id, { text: ['ok'] })
    const hi = await h.post(s.id, 'followup', { content: 'hi' })
    await t.waitForTurnEnd(s.id, 1)
    const evs = await h.checked(s.id)
    expect(sources).toEqual(['startup'])
    const t1 = turnOf(evs, 1)
    expect(t1.slice(1, 3).map((e) => e.data)).toEqual([
      { target: 'next-step', start: 0, removedCount: 1, inserted: [] },
      { target: 'next-turn', start: 0, removedCount: 1, inserted: [] },
    ])
    const users = ofType(t1, 'user/message')
    expect(users.map((e) => textOf(e.data))).toEqual(['context from session-start', 'hi'])
    expect(users[1].data.id).toBe(hi.messageId)
    expect(t.models.requestsOf(s.id)[0].context.messages.map(piText)).toEqual(['context from session-start', 'hi'])
  })

  it('a delivery through a notification payload handle defaults its source to the listening plugin (API.md §11)', async () => {
    const s = await t.createSession({ system: 'P' })
    h.ctl.set(s.id, { sessionStart: (p) => void p.agent.inject('from the plugin') })
    t.models.script(s.id, { text: ['ok'] })
    await h.post(s.id, 'followup', { content: 'hi' })
    await t.waitForTurnEnd(s.id, 1)
    const evs = await h.checked(s.id)
    const injected = ofType(evs, 'user/message').find((e) => textOf(e.data) === 'from the plugin')!
    expect(injected.data.source).toEqual({ kind: 'plugin', plugin: 'test-ctl' })
  })

  it('C12 additionalContexts: both results precede the contexts, which enter step 2 as user/messages in model order', async () => {
    const s = await t.createSession(withTool('par'))
    const secondDone = gate()
    const order: string[] = []
    h.ctl.set(s.id, {
      tool: async (_name, args) => {
        if (args.n === 'A') {
          // the first call waits until the second finished: both ran at once
          await Promise.race([secondDone.promise, new Promise((r) => setTimeout(r, 5000))])
          order.push('A')
        } else {
          order.push('B')
          secondDone.open()
        }
        return { content: `result ${args.n}`, additionalContexts: [`context ${args.n}`] }
      },
    })
    t.models.script(s.id, { toolCalls: [{ id: 'c1', name: 'par', arguments: { n: 'A' } }, { id: 'c2', name: 'par', arguments: { n: 'B' } }] }, { text: ['done'] })
    await h.post(s.id, 'followup', { content: 'go' })
    await t.waitForTurnEnd(s.id, 1)
    const evs = await h.checked(s.id)
    expect(order).toEqual(['B', 'A'])
    const t1 = turnOf(evs, 1)
    const results = ofType(t1, 'tool/result')
    expect(results.map((e) => e.data.message.source.callId)).toEqual(['c1', 'c2'])
    const ctxUsers = ofType(t1, 'user/message').filter((e) => /^context /.test(textOf(e.data)))
    expect(ctxUsers.map((e) => textOf(e.data))).toEqual(['context A', 'context B'])
    for (const u of ctxUsers) {
      expect(u.seq).toBeGreaterThan(results[1].seq)
      expect(stepAt(evs, u.seq)).toBe(2)
      expect(u.data.source).toEqual({ kind: 'plugin', plugin: 'test-ctl' })
    }
    // the contexts were queued with their results and claimed at step 2's boundary, before its step/start
    const start2 = t1.find((e) => e.type === 'step/start' && e.data.step === 2)!
    const claim = t1[t1.indexOf(start2) - 1]
    expect(claim.data).toEqual({ target: 'next-step', start: 0, removedCount: 2, inserted: [] })
    const r2 = t.models.requestsOf(s.id)[1]
    expect(r2.context.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'toolResult', 'toolResult', 'user', 'user'])
    expect(r2.context.messages.slice(-2).map(piText)).toEqual(['context A', 'context B'])
  })

  it('tools/pre-execute deny: an isError TOOL_DENIED result with the Error: prefix; the body never runs; the model sees it', async () => {
    const s = await t.createSession(withTool())
    let ran = 0
    h.ctl.set(s.id, {
      preExecute: async (p) => {
        expect(p.call).toMatchObject({ callId: 'c1', name: 'work', arguments: { q: 1 } })
        return { kind: 'deny', reason: 'not on my watch' }
      },
      tool: () => {
        ran++
        return { content: 'should not run' }
      },
    })
    t.models.script(s.id, { toolCalls: [{ id: 'c1', name: 'work', arguments: { q: 1 } }] }, { text: ['understood'] })
    await h.post(s.id, 'followup', { content: 'go' })
    await t.waitForTurnEnd(s.id, 1)
    const evs = await h.checked(s.id)
    expect(ran).toBe(0)
    const tc = ofType(evs, 'tool/call')[0]
    const tr = ofType(evs, 'tool/result')[0]
    expect(tr.sourceEventSeqs).toEqual([tc.seq])
    expect(tr.data.error).toEqual({ name: 'ToolError', code: 'TOOL_DENIED' })
    expect(tr.data.message.content).toEqual([{ type: 'tool-result', toolCallId: 'c1', isError: true, content: [{ type: 'text', text: 'Error: tool call denied: not on my watch' }] }])
    expect(ofType(evs, 'step/start')).toHaveLength(2)
    const r2 = t.models.requestsOf(s.id)[1].context.messages.at(-1) as any
    expect(r2).toMatchObject({ role: 'toolResult', toolCallId: 'c1', isError: true })
    expect(turnOf(evs, 1).at(-1)!.data.reason).toEqual({ kind: 'completed' })
  })

  it('an unanswered ask resolves deny when the turn is cancelled', async () => {
    const s = await t.createSession(withTool())
    let ran = 0
    h.ctl.set(s.id, {
      preExecute: async () => ({ kind: 'ask' }),
      tool: () => {
        ran++
        return { content: 'should not run' }
      },
    })
    t.models.script(s.id, { toolCalls: [{ id: 'c1', name: 'work', arguments: {} }] })
    await h.post(s.id, 'followup', { content: 'go' })
    const pending = await until('the pending approval', async () => {
      const r = await t.api('GET', `/v1/sessions/${s.id}/pending`)
      return r.body.toolCalls.length ? r.body.toolCalls : undefined
    })
    expect(pending).toEqual([{ callId: 'c1', name: 'work', arguments: {}, rawArguments: '{}', kind: 'approval' }])
    const r = await t.api('POST', `/v1/sessions/${s.id}/cancel`, {})
    expect(r.body).toEqual({ cancelled: true })
    await t.waitForTurnEnd(s.id, 1)
    await t.waitIdle(s.id)
    const evs = await h.checked(s.id)
    expect(ran).toBe(0)
    expect(types(turnOf(evs, 1)).slice(-5)).toEqual(['assistant/message', 'tool/call', 'tool/result', 'step/end', 'turn/end'])
    const tr = ofType(evs, 'tool/result')[0]
    expect(tr.data.error).toEqual({ name: 'ToolError', code: 'TOOL_DENIED' })
    expect(tr.data.message.content[0].isError).toBe(true)
    expect(tr.data.message.content[0].content[0].text).toMatch(/^Error: tool call denied: .*cancel/)
    expect(evs.at(-1)!.data.reason).toEqual({ kind: 'aborted', reason: { kind: 'user' } })
    expect((await t.api('GET', `/v1/sessions/${s.id}/pending`)).body.toolCalls).toEqual([])
    // answering now is too late
    const late = await t.api('POST', `/v1/sessions/${s.id}/approvals/c1`, { decision: 'allow' })
    expect(late.status).toBe(409)
  })
})
