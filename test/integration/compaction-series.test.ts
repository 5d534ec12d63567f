// SPEC §17 C20 (both forms), C22 and C23, §16.1 items 3–4: prompt-node normalization after
// compaction and request series (SPEC §8.6–§8.8, §10.4). The capable (in-history) route is modelled
// by marking prepareCall results `systemPromptUpdate: 'in-history'` for one model id, since pi-ai
// routes are always plain (SPEC §8.11).

import { afterEach, describe, expect, it } from 'vitest'
import { agentOf } from '../../src/agent/index.js'
import type { Context } from '../../src/hooks/index.js'
import type { Json, SessionEvent } from '../../src/session/index.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { expectValidLog, reconstructionCheck } from '../helpers/invariants.js'
import type { Recorded } from '../helpers/scripted.js'

const OVERFLOW = "400 This model's maximum context length is 8192 tokens. However, your messages resulted in 9100 tokens."

/** Makes prepareCall of the given model ids report an in-history (capable) route. */
function capable(t: TestApp, ids: string[]): () => void {
  const llm = t.app.llm as unknown as { prepareCall: (c: any, s: AbortSignal) => Promise<any> }
  const orig = llm.prepareCall.bind(llm)
  llm.prepareCall = async (config, signal) => {
    const p = await orig(config, signal)
    if (!ids.includes(config.model)) return p
    return { config: p.config, adapterDefaults: p.adapterDefaults, retryPolicy: p.retryPolicy, context: p.context, systemPromptUpdate: 'in-history', stream: (r: any) => p.stream(r) }
  }
  return () => {
    llm.prepareCall = orig
  }
}

/** A prompt the test controls: the assembly's only section (the session's own text is ''). */
function promptPlugin(state: { text: string; startsSeries?: boolean; model?: string }) {
  return (root: Context) => {
    root.plugin({
      name: 'test-prompt',
      apply(ctx: any) {
        ctx.hooks.waterfall('system-prompt/assemble', async (a: any, next: () => Promise<any>) => {
          const out = await next()
          return { ...out, sections: [...out.sections, { name: 'test', text: state.text }] }
        })
        ctx.hooks.waterfall('agent/pre-step', async (_p: any, next: () => Promise<any>) => {
          const d = await next()
          if (state.startsSeries && d.kind === 'enter') return { ...d, startsRequestSeries: true }
          return d
        })
        ctx.hooks.waterfall('agent/request', async (_p: any, next: () => Promise<any>) => {
          const c = await next()
          return state.model ? { ...c, model: state.model } : c
        })
      },
    })
  }
}

/** Writes a compaction of surface nodes [from..to] (surface indexes) the way the plugin does. */
async function compactNodes(agent: any, from: number, to: number, turn: number) {
  const nodes = agent.state.nodes.slice(from, to + 1)
  const seqs = nodes.map((n: any) => n.seq)
  const start = await agent.appendOwned((u: any) => u.add({ type: 'compaction/start', data: { compactionId: 'c-test', turn } }))
  await agent.appendOwned((u: any) => {
    const s = u.add({ type: 'compaction/summary', data: { compactionId: 'c-test', summary: 'earlier turns summarized', shadowedRange: { start: seqs[0], end: seqs.at(-1) }, shadowedSeqs: seqs, shadowedTokenCount: 100, provider: 'test', model: 'capable' } })
    u.add({
      type: 'user/message',
      data: { id: `checkpoint-${seqs[0]}`, role: 'user', content: [{ type: 'text', text: 'SUMMARY of earlier turns' }], source: { kind: 'plugin', plugin: 'compaction', form: 'checkpoint' } } as unknown as Json,
      surfaceOp: { op: 'replace', start: seqs[0], end: seqs.at(-1) },
      sourceEventSeqs: [start.events[0].seq, s.seq, ...seqs],
    })
    u.add({ type: 'compaction/end', data: { compactionId: 'c-test', turn } })
  })
}

const wireTexts = (r: Recorded) => ({
  system: r.context.systemPrompt,
  roles: r.context.messages.map((m) => m.role),
  last: JSON.stringify(r.context.messages.at(-1)),
  all: JSON.stringify(r.context),
})
const sysEvents = (evs: SessionEvent[]) => evs.filter((e) => e.type === 'system/message')
const headers = (evs: SessionEvent[]) => evs.filter((e) => e.type === 'request/header').map((e) => e.data as { reason: string; startsSeries?: boolean })

let t: TestApp | undefined
afterEach(async () => {
  await t?.close()
  t = undefined
})

async function setup(extra: { startsSeries?: boolean } = {}) {
  const prompt: { text: string; startsSeries?: boolean; model?: string } = { text: 'P1', ...extra }
  const problems: string[] = []
  const counters = { assemble: 0, preStep: 0, prepare: 0 }
  let onError: ((p: any) => Promise<unknown>) | undefined
  t = await startTestApp({
    kind: 'pglite',
    env: { AGENTD_BUILTIN_PLUGINS: 'llm-retry' },
    models: [{ id: 'capable', contextWindow: 8192 }, { id: 'plain', contextWindow: 8192 }],
    plugins: [
      (root) => promptPlugin(prompt)(root),
      (root, db) => reconstructionCheck(db, problems)(root),
      (root) =>
        root.plugin({
          name: 'test-counters',
          apply(ctx: any) {
            ctx.hooks.waterfall('system-prompt/assemble', async (_a: any, next: () => Promise<any>) => {
              counters.assemble++
              return next()
            })
            ctx.hooks.waterfall('agent/pre-step', async (_p: any, next: () => Promise<any>) => {
              counters.preStep++
              return next()
            })
            ctx.hooks.waterfall('agent/request-error', async (p: any, next: () => Promise<unknown>) => (onError ? onError(p) : next()))
          },
        }),
    ],
  })
  const app = t
  const restore = capable(app, ['capable'])
  const llm = app.app.llm as unknown as { prepareCall: (c: any, s: AbortSignal) => Promise<any> }
  const counted = llm.prepareCall
  llm.prepareCall = async (c, s) => {
    counters.prepare++
    return counted(c, s)
  }
  const s = await app.createSession({ model: 'test/capable', system: '' })
  const run = async (text: string, turn: number) => {
    await app.api('POST', `/v1/sessions/${s.id}/followup`, { content: text })
    return app.waitForTurnEnd(s.id, turn)
  }
  return { t: app, s, prompt, problems, counters, run, restore, setOnError: (f: typeof onError) => (onError = f) }
}

describe('C20: overflow, compaction, retry on a capable route', () => {
  for (const form of ['stale head', 'stale later survivor'] as const) {
    it(`(${form === 'stale head' ? 'a' : 'b'}) ${form}: the retry sends the single current prompt and logs one series header`, async () => {
      const { t, s, prompt, problems, counters, run, setOnError } = await setup()
      t.models.script(s.id, { text: ['one'] }, { text: ['two'] })
      await run('first', 1)
      prompt.text = 'P2'
      await run('second', 2)
      let evs = await t.events(s.id)
      expect(sysEvents(evs).map((e) => e.surfaceOp)).toEqual(['append', 'append']) // nodes [P1 head, P2]
      const before = { ...counters }

      // turn 3 renders P3; attempt 1 overflows, the listener edits the section, compacts and retries;
      // attempt 2 overflows again and is retried unchanged; attempt 3 succeeds
      prompt.text = 'P3'
      t.models.script(s.id, { error: OVERFLOW }, { error: OVERFLOW }, { text: ['three'] })
      let overflows = 0
      setOnError(async (p) => {
        overflows++
        const agent = agentOf(p.agent)!
        if (overflows === 1) {
          prompt.text = 'P3 EDITED AFTER ACCEPTANCE'
          const nodes = agent.state.nodes
          const p3 = nodes.findIndex((n: any) => n.type === 'system/message' && (n.event.data as any).message.content[0]?.text === 'P3')
          if (form === 'stale head') await compactNodes(agent, 1, p3, p.turn)
          else await compactNodes(agent, p3, p3, p.turn)
        }
        return { kind: 'retry' }
      })
      await run('third', 3)
      evs = await t.events(s.id)
      const reqs = t.models.requestsOf(s.id)
      expect(reqs).toHaveLength(5)
      expect(counters.prepare - before.prepare).toBe(3) // one prepareCall per attempt
      expect(counters.assemble - before.assemble).toBe(1) // one assembly for turn 3
      expect(counters.preStep - before.preStep).toBe(1) // one pre-step for turn 3

      const turn3 = evs.slice(evs.findIndex((e) => e.type === 'turn/start' && (e.data as any).turn === 3))
      const sys3 = sysEvents(turn3)
      if (form === 'stale head') {
        // SYS+(P3) on attempt 1, then SYS~head(P3)
        expect(sys3.map((e) => (typeof e.surfaceOp === 'object' ? `~${e.surfaceOp.start}` : '+'))).toEqual(['+', `~${sysEvents(evs)[0].seq}`])
      } else {
        // SYS+(P3), then SYS~P2(empty), SYS~head(P3)
        const [head, p2] = sysEvents(evs)
        expect(sys3.map((e) => (typeof e.surfaceOp === 'object' ? `~${e.surfaceOp.start}` : '+'))).toEqual(['+', `~${p2.seq}`, `~${head.seq}`])
        expect((sys3[1].data as any).message.content).toEqual([])
      }
      expect((sys3.at(-1)!.data as any).message.content).toEqual([{ type: 'text', text: 'P3' }])
      expect(typeof sys3.at(-1)!.surfaceOp).toBe('object') // the turn's last system/message is a replacement
      expect(headers(evs).map((h) => h.reason)).toEqual(['initial', 'series'])
      expect(evs.filter((e) => e.type === 'user/message' && (e.data as any).source.kind === 'user')).toHaveLength(3)
      expect(evs.filter((e) => e.type === 'step/start')).toHaveLength(3)

      // request 4: the single effective prompt P3 first, no edited text, ends with "third"; request 5 equals it
      const r4 = wireTexts(reqs[3])
      expect(r4.system).toBe('P3')
      expect(r4.all).not.toContain('EDITED')
      expect(r4.all).not.toContain('"P1"')
      expect(r4.all).not.toContain('"P2"')
      expect(r4.last).toContain('third')
      expect(reqs[4].context).toEqual(reqs[3].context)
      // the third attempt wrote no system/message and no header
      const lastAttemptStart = turn3.findLastIndex((e) => e.type === 'llm/retry' || e.type === 'assistant/attempt')
      expect(turn3.slice(lastAttemptStart).filter((e) => e.type === 'system/message' || e.type === 'request/header')).toEqual([])
      expectValidLog(evs)
      expect(problems).toEqual([])
    })
  }
})

describe('C22 and C23: series breaks with unchanged text', () => {
  it('C22: switching to a plain route consolidates: later node emptied, head set, change header starting a series', async () => {
    const { t, s, prompt, problems, run } = await setup()
    t.models.script(s.id, { text: ['one'] }, { text: ['two'] }, { text: ['three'] }, { text: ['four'] })
    await run('first', 1)
    prompt.text = 'P2'
    await run('second', 2)
    prompt.model = 'plain' // an agent/request listener switches the route to a plain one; P2 unchanged
    await run('third', 3)
    let evs = await t.events(s.id)
    const [head, p2] = sysEvents(evs)
    const turn3 = evs.slice(evs.findIndex((e) => e.type === 'turn/start' && (e.data as any).turn === 3))
    expect(sysEvents(turn3).map((e) => [typeof e.surfaceOp === 'object' ? e.surfaceOp.start : '+', (e.data as any).message.content])).toEqual([
      [p2.seq, []],
      [head.seq, [{ type: 'text', text: 'P2' }]],
    ])
    expect(headers(turn3)).toEqual([expect.objectContaining({ reason: 'change', startsSeries: true })])
    await run('fourth', 4)
    evs = await t.events(s.id)
    const turn4 = evs.slice(evs.findIndex((e) => e.type === 'turn/start' && (e.data as any).turn === 4))
    expect(sysEvents(turn4)).toEqual([]) // a later same-prompt turn writes no system/message
    expect(t.models.requestsOf(s.id).at(-1)!.context.systemPrompt).toBe('P2')
    expectValidLog(evs)
    expect(problems).toEqual([])
  })

  it('C23: an explicit series on a capable route with unchanged text: the same two replacements, then a series header', async () => {
    const { t, s, prompt, problems, run } = await setup()
    t.models.script(s.id, { text: ['one'] }, { text: ['two'] }, { text: ['three'] })
    await run('first', 1)
    prompt.text = 'P2'
    await run('second', 2)
    prompt.startsSeries = true
    await run('third', 3)
    const evs = await t.events(s.id)
    const [head, p2] = sysEvents(evs)
    const turn3 = evs.slice(evs.findIndex((e) => e.type === 'turn/start' && (e.data as any).turn === 3))
    expect(sysEvents(turn3).map((e) => [typeof e.surfaceOp === 'object' ? e.surfaceOp.start : '+', (e.data as any).message.content])).toEqual([
      [p2.seq, []],
      [head.seq, [{ type: 'text', text: 'P2' }]],
    ])
    expect(headers(turn3).map((h) => h.reason)).toEqual(['series'])
    const r3 = t.models.requestsOf(s.id)[2]
    expect(r3.context.systemPrompt).toBe('P2')
    expect(JSON.stringify(r3.context.messages)).not.toContain('"P1"')
    expectValidLog(evs)
    expect(problems).toEqual([])
  })
})
