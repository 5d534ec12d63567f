// SPEC §16.1 (prompt admission, without the compaction cases 3–4) and §16.2 (reconciliation) through
// the real server: HTTP deliveries, the real Agent and driver, the scripted model behind agentd's pi-ai
// adapter, on one database (docs/testing.md). Every session log is checked against SPEC §15 and every loop
// request against the reconstruction property (§8.10).

import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import type { TestApp } from '../helpers/app.js'
import { gate } from '../helpers/scripted.js'
import { ofType, textOf, turnOf, types, type Ev } from '../helpers/events.js'
import { harness, type Harness } from '../helpers/loop.js'
import { until } from '../helpers/wait.js'
import { agentOf } from '../../src/agent/index.js'

/**
 * Route capability for tests. agentd's scripted route is a pi-ai route, which is plain (SPEC §8.4,
 * §8.11: systemPromptUpdate never set). To model a *capable* (in-history) route, the LlmService's
 * prepareCall is wrapped at runtime: the Agent holds this same service object (AgentDeps.llm), so the
 * wrapper decides capability per attempt by adding `systemPromptUpdate: 'in-history'` to the real
 * prepared call, whose one-shot bound stream is kept as is. `beforePrepare` runs once, inside the
 * next prepareCall, before the real one (a pending prepareCall, a late selection change).
 */
interface Route {
  capable: boolean
  beforePrepare?: (config: any, signal: AbortSignal) => Promise<void>
  /** prepareCall invocations */
  prepared: number
}

function patchRoutes(t: TestApp): Route {
  const route: Route = { capable: false, prepared: 0 }
  const llm = t.app.llm as any
  const orig = llm.prepareCall.bind(llm)
  llm.prepareCall = async (config: any, signal: AbortSignal) => {
    route.prepared++
    const before = route.beforePrepare
    route.beforePrepare = undefined
    if (before) await before(config, signal)
    const p = await orig(config, signal)
    return route.capable ? { ...p, systemPromptUpdate: 'in-history' } : p
  }
  return route
}

interface AdmissionHarness extends Harness {
  route: Route
}

/** The loop harness with the route capability patched in (see Route). */
async function admissionHarness(kind: 'pg' | 'pglite'): Promise<AdmissionHarness> {
  const h = await harness(kind)
  return Object.assign(h, { route: patchRoutes(h.t) })
}

/** A system/message event as [surfaceOp, text] ('' for content []). */
const sysView = (e: Ev) => [e.surfaceOp, textOf(e.data.message)]
const replaceOf = (seq: number) => ({ op: 'replace', start: seq, end: seq })
const systemTexts = (req: any) => req.messages.filter((m: any) => m.role === 'system').map((m: any) => textOf(m))

describe.each(APP_DB_KINDS)('SPEC §16.1 prompt admission and §16.2 reconciliation on %s', (kind) => {
  let h: AdmissionHarness
  let t: TestApp
  beforeAll(async () => {
    h = await admissionHarness(kind)
    t = h.t
  })
  afterAll(async () => {
    await t?.close()
  })
  beforeEach(() => {
    h.route.capable = false
    h.route.beforePrepare = undefined
  })

  /**
   * A session without its own system text whose prompt is one plugin section set per turn
   * (`state.prompt`; '' renders no prompt), optionally starting a request series from pre-step.
   */
  async function promptSession(first: string) {
    const s = await t.createSession({})
    const state = { prompt: first, series: false, extraTool: false }
    h.ctl.set(s.id, {
      assemble: (a, next) => {
        a.sections.push({ name: 'p', text: state.prompt })
        if (state.extraTool) a.tools.push({ name: 'extra_tool', description: 'registered later', parameters: { type: 'object', properties: {} } })
        return next()
      },
      preStep: async (_p, next) => {
        const d = await next()
        return state.series ? { ...d, startsRequestSeries: true } : d
      },
    })
    let n = 0
    const turn = async (content: string) => {
      n++
      t.models.script(s.id, { text: [`answer ${n}`] })
      await h.post(s.id, 'followup', { content })
      await t.waitForTurnEnd(s.id, n)
    }
    return { id: s.id, state, turn }
  }

  const sysOfTurn = (evs: Ev[], n: number) => ofType(turnOf(evs, n), 'system/message')
  const reqs = (id: string) => h.loopRequests.get(id) ?? []
  const piText = (m: any) => (typeof m.content === 'string' ? m.content : m.content.map((b: any) => b.text ?? '').join(''))

  /** Releases the session's loop instance; the next delivery attaches a new one (SPEC §13.4). */
  async function newInstance(id: string) {
    await t.waitIdle(id)
    const key = await h.key(id)
    await t.app.host!.drop(key, { release: true })
    expect(t.app.host!.agent(key)).toBeUndefined()
  }

  it('16.1.1 explicit series, unchanged text: one system message (prompt two) and header series', async () => {
    h.route.capable = true
    const s = await promptSession('prompt one')
    await s.turn('first')
    s.state.prompt = 'prompt two'
    await s.turn('second')
    s.state.series = true
    await s.turn('third')
    const evs = await h.checked(s.id)
    const [p1, p2] = ofType(evs, 'system/message')
    expect([sysView(p1), sysView(p2)]).toEqual([['append', 'prompt one'], ['append', 'prompt two']])
    expect(sysOfTurn(evs, 3).map(sysView)).toEqual([[replaceOf(p2.seq), ''], [replaceOf(p1.seq), 'prompt two']])
    // before the series start the capable history carried both prompts
    expect(systemTexts(reqs(s.id)[1])).toEqual(['prompt one', 'prompt two'])
    const r3 = reqs(s.id)[2]
    expect(systemTexts(r3)).toEqual(['prompt two'])
    expect(r3.messages[0].role).toBe('system')
    const pi3 = t.models.requestsOf(s.id)[2].context
    expect(pi3.systemPrompt).toBe('prompt two')
    expect(pi3.messages.map(piText)).toEqual(['first', 'answer 1', 'second', 'answer 2', 'third'])
    expect(ofType(evs, 'request/header').map((e) => e.data.reason)).toEqual(['initial', 'series'])
  })

  it('16.1.2 tools-change series, unchanged text: last header change with startsSeries', async () => {
    h.route.capable = true
    const s = await promptSession('prompt one')
    await s.turn('first')
    s.state.prompt = 'prompt two'
    await s.turn('second')
    s.state.extraTool = true
    await s.turn('third')
    const evs = await h.checked(s.id)
    const [p1, p2] = ofType(evs, 'system/message')
    expect(sysOfTurn(evs, 3).map(sysView)).toEqual([[replaceOf(p2.seq), ''], [replaceOf(p1.seq), 'prompt two']])
    const headers = ofType(evs, 'request/header').map((e) => e.data)
    expect(headers.map((d) => d.reason)).toEqual(['initial', 'change'])
    expect(headers[1].startsSeries).toBe(true)
    expect(headers[1].header.tools.map((x: any) => x.name)).toEqual(['extra_tool'])
    expect(systemTexts(reqs(s.id)[2])).toEqual(['prompt two'])
    const pi3 = t.models.requestsOf(s.id)[2].context
    expect(pi3.systemPrompt).toBe('prompt two')
    expect(pi3.messages.map(piText)).toEqual(['first', 'answer 1', 'second', 'answer 2', 'third'])
    expect(pi3.tools?.map((x) => x.name)).toEqual(['extra_tool'])
  })

  for (const [item, third] of [['16.1.5', 'prompt two'], ['16.1.6', 'prompt three']] as const) {
    it(`${item} capable history on a plain route, prompt ${third === 'prompt two' ? 'unchanged' : 'changed'}: two replacements, then no system event`, async () => {
      h.route.capable = true
      const s = await promptSession('prompt one')
      await s.turn('first')
      s.state.prompt = 'prompt two'
      await s.turn('second')
      h.route.capable = false
      s.state.prompt = third
      await s.turn('third')
      await s.turn('fourth')
      const evs = await h.checked(s.id)
      const [p1, p2] = ofType(evs, 'system/message')
      expect(sysOfTurn(evs, 3).map(sysView)).toEqual([[replaceOf(p2.seq), ''], [replaceOf(p1.seq), third]])
      expect(sysOfTurn(evs, 4)).toEqual([])
      for (const i of [2, 3]) {
        expect(systemTexts(reqs(s.id)[i])).toEqual([third])
        const pi = t.models.requestsOf(s.id)[i].context
        expect(pi.systemPrompt).toBe(third)
        expect(pi.messages.every((m) => !/prompt/.test(piText(m)))).toBe(true)
      }
      expect(ofType(evs, 'request/header').map((e) => e.data.reason)).toEqual(['initial', 'series'])
    })
  }

  it('16.1.7 the first capable request after a plain route appends the changed prompt', async () => {
    const s = await promptSession('prompt one')
    await s.turn('first')
    h.route.capable = true
    s.state.prompt = 'prompt two'
    await s.turn('second')
    const evs = await h.checked(s.id)
    expect(sysOfTurn(evs, 2).map(sysView)).toEqual([['append', 'prompt two']])
    expect(reqs(s.id)[1].messages.map((m: any) => m.role)).toEqual(['system', 'user', 'assistant', 'system', 'user'])
    const pi2 = t.models.requestsOf(s.id)[1].context
    expect(pi2.systemPrompt).toBe('prompt one')
    // pi-ai conversion turns the later system message into a user message in place
    expect(pi2.messages.map((m) => [m.role, piText(m)])).toEqual([['user', 'first'], ['assistant', 'answer 1'], ['user', 'prompt two'], ['user', 'second']])
    expect(ofType(evs, 'request/header').map((e) => e.data.reason)).toEqual(['initial'])
    expect(ofType(turnOf(evs, 2), 'request/context').map((e) => e.data.systemPromptUpdate)).toEqual(['in-history'])
  })

  it('16.1.8 restored capable history on a plain route: a new loop instance sends a single prompt; first header resume', async () => {
    h.route.capable = true
    const s = await promptSession('prompt one')
    await s.turn('first')
    s.state.prompt = 'prompt two'
    await s.turn('second')
    await newInstance(s.id)
    h.route.capable = false
    await s.turn('third')
    const evs = await h.checked(s.id)
    const [p1, p2] = ofType(evs, 'system/message')
    const t3 = turnOf(evs, 3)
    // the new instance marked where its writes begin, after the accepted followup
    expect(types(evs.slice(t3[0].seq - 2, t3[0].seq))).toEqual(['agent/inbox/spliced', 'session/end-seed'])
    expect(ofType(evs, 'session/end-seed')).toHaveLength(1)
    expect(sysOfTurn(evs, 3).map(sysView)).toEqual([[replaceOf(p2.seq), ''], [replaceOf(p1.seq), 'prompt two']])
    const headers = ofType(evs, 'request/header').map((e) => e.data.reason)
    expect(headers).toEqual(['initial', 'resume'])
    expect(ofType(t3, 'request/header')).toHaveLength(1)
    expect(systemTexts(reqs(s.id)[2])).toEqual(['prompt two'])
    expect(t.models.requestsOf(s.id)[2].context.systemPrompt).toBe('prompt two')
  })

  /** A session whose first turn is held inside agent/request or prepareCall until the test cancels it. */
  for (const where of ['agent/request', 'prepareCall'] as const) {
    it(`16.1.${where === 'agent/request' ? 9 : 10} cancel while ${where} is pending: no adapter request, one step pair, nothing admitted`, async () => {
      const s = await t.createSession({ system: 'P' })
      const g = gate()
      let signal: AbortSignal | undefined
      let entered!: () => void
      const pending = new Promise<void>((r) => (entered = r))
      const hold = async (sig: AbortSignal) => {
        signal = sig
        entered()
        await g.promise
      }
      if (where === 'agent/request') {
        let first = true
        h.ctl.set(s.id, {
          request: async (p, next) => {
            if (first) {
              first = false
              await hold(p.signal)
            }
            return next()
          },
        })
      } else h.route.beforePrepare = (_c, sig) => hold(sig)
      const sse = await h.sse(s.id)
      try {
        const prepared = h.route.prepared
        await h.post(s.id, 'followup', { content: 'hi' })
        await pending
        const r = await t.api('POST', `/v1/sessions/${s.id}/cancel`, {})
        expect(r.status).toBe(202)
        expect(r.body).toEqual({ cancelled: true })
        await until('the turn signal to abort', () => signal?.aborted)
        g.open()
        await t.waitForTurnEnd(s.id, 1)
        await t.waitIdle(s.id)
        const evs = await h.log(s.id)
        expect(types(evs)).toEqual(['agent/inbox/spliced', 'turn/start', 'agent/inbox/spliced', 'step/start', 'step/end', 'turn/end'])
        expect(evs.at(-1)!.data.reason).toEqual({ kind: 'aborted', reason: { kind: 'user' } })
        expect(t.models.requestsOf(s.id)).toHaveLength(0)
        expect(h.route.prepared - prepared).toBe(where === 'agent/request' ? 0 : 1)
        // no attempt started: no frames
        expect(sse.frames.filter((f) => f.event === 'agent/assistant-stream')).toEqual([])
        // the session works afterwards
        t.models.script(s.id, { text: ['fine'] })
        await h.post(s.id, 'followup', { content: 'again' })
        await t.waitForTurnEnd(s.id, 2)
        const all = await h.checked(s.id)
        expect(turnOf(all, 2).at(-1)!.data.reason).toEqual({ kind: 'completed' })
        expect(ofType(all, 'request/header').map((e) => e.data.reason)).toEqual(['initial'])
      } finally {
        sse.close()
      }
    })
  }

  it('16.1.11 late selection change: the call goes to the first-selected route with the returned values; the capable prompt is appended', async () => {
    const s = await promptSession('prompt one')
    await s.turn('first')
    let selection: any
    h.ctl.set(s.id, {
      ...h.ctl.get(s.id),
      request: async (_p, next) => {
        const c = await next()
        selection = { ...c, temperature: 0.5, maxTokens: 100 }
        return selection
      },
    })
    h.route.capable = true
    // the selection changes after agent/request returned, before the route is prepared
    h.route.beforePrepare = async () => {
      selection.model = 'other'
      selection.temperature = 0.9
      selection.maxTokens = 7
    }
    const prepared = h.route.prepared
    s.state.prompt = 'prompt two'
    await s.turn('second')
    const evs = await h.checked(s.id)
    expect(h.route.prepared - prepared).toBe(1)
    const r2 = t.models.requestsOf(s.id)[1]
    expect(r2.model).toBe('scripted')
    expect(r2.options?.temperature).toBe(0.5)
    expect(r2.options?.maxTokens).toBe(100)
    const headers = ofType(evs, 'request/header').map((e) => e.data)
    expect(headers.map((d) => d.reason)).toEqual(['initial', 'change'])
    expect(headers[1].header.config).toEqual({ provider: 'test', model: 'scripted', temperature: 0.5, maxTokens: 100 })
    expect(sysOfTurn(evs, 2).map(sysView)).toEqual([['append', 'prompt two']])
    expect(ofType(evs, 'user/message')).toHaveLength(2)
  })

  // ---- §16.2 reconciliation ----

  it('16.2 first prompt appends; unchanged writes nothing; changed replaces the head on a plain route', async () => {
    const s = await promptSession('prompt one')
    await s.turn('first')
    await s.turn('second')
    s.state.prompt = 'prompt two'
    await s.turn('third')
    const evs = await h.checked(s.id)
    const t1 = turnOf(evs, 1)
    const head = sysOfTurn(evs, 1)
    expect(head.map(sysView)).toEqual([['append', 'prompt one']])
    expect(head[0].seq).toBeLessThan(t1.find((e) => e.type === 'user/message')!.seq)
    expect(sysOfTurn(evs, 2)).toEqual([])
    const t3 = sysOfTurn(evs, 3)
    expect(t3.map(sysView)).toEqual([[replaceOf(head[0].seq), 'prompt two']])
    expect(t3[0].sourceEventSeqs).toEqual([head[0].seq])
    expect(systemTexts(reqs(s.id)[2])).toEqual(['prompt two'])
    expect(reqs(s.id)[2].messages[0].role).toBe('system')
    expect(ofType(evs, 'request/header').map((e) => e.data.reason)).toEqual(['initial', 'series'])
    const msgs = (await t.api('GET', `/v1/sessions/${s.id}/messages`)).body.messages
    expect(msgs.map((m: any) => m.role)).toEqual(['system', 'user', 'assistant', 'user', 'assistant', 'user', 'assistant'])
  })

  it('16.2 an empty head holds node 0 ahead of history; restored by a new instance, it is replaced once a prompt appears (plain)', async () => {
    const s = await promptSession('')
    await s.turn('first')
    await newInstance(s.id)
    s.state.prompt = 'a prompt at last'
    await s.turn('second')
    const evs = await h.checked(s.id)
    const head = sysOfTurn(evs, 1)
    expect(head.map(sysView)).toEqual([['append', '']])
    expect(head[0].data.message.content).toEqual([])
    expect(head[0].seq).toBeLessThan(ofType(evs, 'user/message')[0].seq)
    expect(reqs(s.id)[0].messages.map((m: any) => m.role)).toEqual(['user'])
    expect(sysOfTurn(evs, 2).map(sysView)).toEqual([[replaceOf(head[0].seq), 'a prompt at last']])
    expect(reqs(s.id)[1].messages.map((m: any) => m.role)).toEqual(['system', 'user', 'assistant', 'user'])
    expect(ofType(evs, 'request/header').map((e) => e.data.reason)).toEqual(['initial', 'resume'])
  })

  it('16.2 shadowing a non-head system node leads to a fresh append', async () => {
    h.route.capable = true
    const s = await promptSession('prompt one')
    await s.turn('first')
    s.state.prompt = 'prompt two'
    await s.turn('second')
    const [, p2] = ofType(await h.log(s.id), 'system/message')
    // shadow the later node the way a compaction checkpoint does, in maintenance while idle
    const agent = await h.agent(s.id)
    await agent.runMaintenance(async () => {
      await agent.appendOwned((u) => {
        u.add({
          type: 'user/message',
          data: { id: 'checkpoint-1', role: 'user', content: [{ type: 'text', text: 'summary of what came before' }], source: { kind: 'plugin', plugin: 'test-ctl', form: 'checkpoint' } },
          surfaceOp: { op: 'replace', start: p2.seq, end: p2.seq },
          sourceEventSeqs: [p2.seq],
        } as any)
      })
    })
    // a new loop instance captures the generation at attach (SPEC §8.7), so no series breaks here
    await newInstance(s.id)
    await s.turn('third')
    const evs = await h.checked(s.id)
    expect(sysOfTurn(evs, 3).map(sysView)).toEqual([['append', 'prompt two']])
    expect(ofType(evs, 'request/header').map((e) => e.data.reason)).toEqual(['initial', 'resume'])
    expect(reqs(s.id)[2].messages.map((m: any) => [m.role, textOf(m)])).toEqual([
      ['system', 'prompt one'], ['user', 'first'], ['assistant', 'answer 1'], ['user', 'summary of what came before'], ['user', 'second'], ['assistant', 'answer 2'], ['system', 'prompt two'], ['user', 'third'],
    ])
  })

  it('16.2 in-history appends compare with the last active node; a series start empties later nodes, then resets the head', async () => {
    h.route.capable = true
    const s = await promptSession('P1')
    await s.turn('t1') // [P1]
    s.state.prompt = 'P2'
    await s.turn('t2') // [P1, P2]
    s.state.prompt = 'P1'
    await s.turn('t3') // the last active node is P2, not the head: [P1, P2, P1]
    await s.turn('t4') // unchanged
    s.state.prompt = 'P3'
    s.state.series = true
    await s.turn('t5') // normalize: [P3, -, -]
    s.state.series = false
    await s.turn('t6') // dormant nodes are skipped: the head is the last active node
    s.state.prompt = 'P2'
    await s.turn('t7') // [P3, -, -, P2]
    const evs = await h.checked(s.id)
    const appended = ofType(evs, 'system/message').filter((e) => e.surfaceOp === 'append')
    expect(appended.map((e) => textOf(e.data.message))).toEqual(['P1', 'P2', 'P1', 'P2'])
    const [n1, n2, n3] = appended
    expect(sysOfTurn(evs, 3).map(sysView)).toEqual([['append', 'P1']])
    expect(sysOfTurn(evs, 4)).toEqual([])
    expect(sysOfTurn(evs, 5).map(sysView)).toEqual([[replaceOf(n2.seq), ''], [replaceOf(n3.seq), ''], [replaceOf(n1.seq), 'P3']])
    expect(sysOfTurn(evs, 6)).toEqual([])
    expect(sysOfTurn(evs, 7).map(sysView)).toEqual([['append', 'P2']])
    expect(systemTexts(reqs(s.id)[2])).toEqual(['P1', 'P2', 'P1'])
    expect(systemTexts(reqs(s.id)[5])).toEqual(['P3'])
    expect(systemTexts(reqs(s.id)[6])).toEqual(['P3', 'P2'])
    expect(ofType(evs, 'request/header').map((e) => e.data.reason)).toEqual(['initial', 'series'])
  })

  it('16.2 in-history clearing empties all active nodes', async () => {
    h.route.capable = true
    const s = await promptSession('prompt one')
    await s.turn('first')
    s.state.prompt = 'prompt two'
    await s.turn('second')
    s.state.prompt = ''
    await s.turn('third')
    await s.turn('fourth')
    const evs = await h.checked(s.id)
    const [p1, p2] = ofType(evs, 'system/message')
    expect(sysOfTurn(evs, 3).map(sysView)).toEqual([[replaceOf(p2.seq), ''], [replaceOf(p1.seq), '']])
    expect(sysOfTurn(evs, 3).every((e) => e.data.message.content.length === 0)).toBe(true)
    expect(sysOfTurn(evs, 4)).toEqual([])
    for (const i of [2, 3]) {
      expect(systemTexts(reqs(s.id)[i])).toEqual([])
      expect(t.models.requestsOf(s.id)[i].context.systemPrompt).toBeUndefined()
    }
    expect(ofType(evs, 'request/header').map((e) => e.data.reason)).toEqual(['initial', 'series'])
  })

  it('16.2 multi-block and non-text system nodes are cleared, not dormant', async () => {
    const s = await promptSession('prompt one')
    await s.turn('first')
    // in turn 2, before admission, two later system nodes appear: one multi-block, one non-text
    let planted = false
    h.ctl.set(s.id, {
      ...h.ctl.get(s.id),
      request: async (p, next) => {
        if (!planted) {
          planted = true
          const agent = agentOf(p.agent)!
          await agent.appendOwned((u) => {
            const sys = (id: string, content: unknown[]) => ({ type: 'system/message', data: { turn: p.turn, step: p.step, message: { id, role: 'system', content, source: { kind: 'plugin', plugin: 'system-prompt' } } }, surfaceOp: 'append' }) as any
            u.add(sys('multi-1', [{ type: 'text', text: 'part one' }, { type: 'text', text: 'part two' }]))
            u.add(sys('image-1', [{ type: 'image', url: 'https://example.com/a.png' }]))
          })
        }
        return next()
      },
    })
    await s.turn('second')
    const evs = await h.checked(s.id)
    const t2 = sysOfTurn(evs, 2)
    expect(t2.map((e) => e.data.message.id).slice(0, 2)).toEqual(['multi-1', 'image-1'])
    expect(t2.slice(2).map(sysView)).toEqual([[replaceOf(t2[0].seq), ''], [replaceOf(t2[1].seq), '']])
    expect(t2.slice(2).every((e) => e.data.message.content.length === 0)).toBe(true)
    expect(systemTexts(reqs(s.id)[1])).toEqual(['prompt one'])
    expect(reqs(s.id)[1].messages.map((m: any) => m.role)).toEqual(['system', 'user', 'assistant', 'user'])
  })
})
