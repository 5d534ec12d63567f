// Compaction (SPEC §12): pressure (C21), pruning (§12.4), overflow recovery (§12.3) and its budget,
// failure handling, manual compaction (§12.7), and a 200-turn session on a small window.

import { afterEach, describe, expect, it } from 'vitest'
import { SUMMARY_INSTRUCTION, CHECKPOINT_PREAMBLE } from '../../src/plugins/compaction.js'
import type { SessionEvent } from '../../src/session/index.js'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { expectValidLog, reconstructionCheck } from '../helpers/invariants.js'
import type { Recorded, Step } from '../helpers/scripted.js'

const OVERFLOW = "400 This model's maximum context length is 2048 tokens. However, your messages resulted in 3000 tokens."
const isSummaryCall = (r: Recorded) => JSON.stringify(r.context.messages.at(-1)).includes(SUMMARY_INSTRUCTION)
const chars = (n: number, c = 'x') => c.repeat(n)
const types = (evs: SessionEvent[]) => evs.map((e) => e.type)
const turnOf = (evs: SessionEvent[], turn: number) => {
  const a = evs.findIndex((e) => e.type === 'turn/start' && (e.data as any).turn === turn)
  const b = evs.findIndex((e, i) => i > a && e.type === 'turn/end')
  return evs.slice(a, b + 1)
}

let t: TestApp | undefined
afterEach(async () => {
  await t?.close()
  t = undefined
})

describe.each(APP_DB_KINDS)('compaction on %s', (kind) => {
  const start = async (env: Record<string, string> = {}, window = 2048) => {
    const problems: string[] = []
    t = await startTestApp({ kind, env, models: [{ id: 'small', contextWindow: window, maxTokens: 256 }], plugins: [(root, db) => reconstructionCheck(db, problems)(root)] })
    const s = await t.createSession({ model: 'test/small', system: 'You are terse.' })
    return { t, s, problems }
  }

  it('C21: pressure above 0.8·W compacts before the step: summary, checkpoint replacing the range, series header', async () => {
    const { t, s, problems } = await start()
    // two big turns; the second reports usage above the threshold (0.8 · 2048 = 1638)
    t.models.script(s.id, { text: [chars(1600, 'a')], usage: { input: 500, output: 400 } }, { text: [chars(1600, 'b')], usage: { input: 1300, output: 400 } })
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: chars(1600, 'q') })
    await t.waitForTurnEnd(s.id, 1)
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: chars(1600, 'r') })
    await t.waitForTurnEnd(s.id, 2)
    t.models.fallback(s.id, (r) => (isSummaryCall(r) ? { text: ['the user sent long texts; the agent answered at length'] } : { text: ['after compaction'] }))
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'third' })
    const evs = await t.waitForTurnEnd(s.id, 3)
    const turn3 = turnOf(evs, 3)
    expect(types(turn3).slice(0, 7)).toEqual(['turn/start', 'agent/inbox/spliced', 'compaction/start', 'compaction/summary', 'user/message', 'compaction/end', 'step/start'])
    const [cs, summary, checkpoint] = turn3.slice(2, 5)
    expect(cs.data).toMatchObject({ turn: 3 })
    expect(checkpoint.surfaceOp).toMatchObject({ op: 'replace' })
    expect(checkpoint.sourceEventSeqs!.slice(0, 2)).toEqual([cs.seq, summary.seq])
    expect(checkpoint.sourceEventSeqs!.slice(2)).toEqual((summary.data as any).shadowedSeqs)
    expect((checkpoint.data as any).source).toEqual({ kind: 'plugin', plugin: 'compaction', form: 'checkpoint' })
    // the head is never compacted, and the step logs a series header
    const head = evs.find((e) => e.type === 'system/message')!
    expect((summary.data as any).shadowedSeqs).not.toContain(head.seq)
    expect(turn3.filter((e) => e.type === 'request/header').map((e) => (e.data as any).reason)).toEqual(['series'])
    // the request starts with the head, then the checkpoint
    const req = t.models.requestsOf(s.id).filter((r) => !isSummaryCall(r)).at(-1)!
    expect(req.context.systemPrompt).toBe('You are terse.')
    expect(JSON.stringify(req.context.messages[0])).toContain(CHECKPOINT_PREAMBLE)
    expect(JSON.stringify(req.context.messages.at(-1))).toContain('third')
    const summaryReq = t.models.requestsOf(s.id).find(isSummaryCall)!
    expect(summaryReq.context.systemPrompt).toBe('You are terse.') // the same prompt, for cache reuse
    expectValidLog(evs)
    expect(problems).toEqual([])
  })

  it('pruning alone relieves pressure when it can: compaction/prune and a replacing tool/result, no summary', async () => {
    const { t, s, problems } = await start({}, 8192)
    t.app.root.plugin({
      name: 'test-big-tool',
      apply(ctx: any) {
        ctx.tools.register({ name: 'dump', description: 'dumps a lot', parameters: { type: 'object', properties: {} }, execute: async () => ({ content: chars(40000, 'd') }) })
      },
    })
    const s2 = await t.createSession({ model: 'test/small', system: 'You are terse.', tools: [{ name: 'dump', execution: { type: 'builtin' } }] })
    // step 1 calls the tool; its 40 000-character result puts step 2 far above 0.8 · 8192 tokens
    t.models.script(s2.id, { toolCalls: [{ id: 'd1', name: 'dump', arguments: {} }] }, { text: ['ok'], usage: { input: 1500, output: 10 } })
    await t.api('POST', `/v1/sessions/${s2.id}/followup`, { content: 'dump it' })
    const evs = await t.waitForTurnEnd(s2.id, 1)
    const steps = evs.filter((e) => e.type === 'step/start')
    const between = evs.filter((e) => e.seq > steps[0].seq && e.seq < steps[1].seq)
    // the pressure listener of step 2's pre-step prunes, before step 2 opens
    expect(types(between)).toEqual(expect.arrayContaining(['compaction/prune', 'tool/result']))
    expect(types(evs)).not.toContain('compaction/summary')
    const prune = evs.find((e) => e.type === 'compaction/prune')!
    const repl = evs[evs.indexOf(prune) + 1]
    expect(repl.type).toBe('tool/result')
    const original = evs.find((e) => e.type === 'tool/result' && e.surfaceOp === 'append')!
    expect(repl.surfaceOp).toEqual({ op: 'replace', start: original.seq, end: original.seq })
    expect(repl.sourceEventSeqs).toEqual([original.seq])
    expect(prune.data).toMatchObject({ shadowedRange: { start: original.seq, end: original.seq }, shadowedSeqs: [original.seq] })
    const text = (repl.data as any).message.content[0].content[0].text as string
    expect(text.startsWith(chars(4096, 'd'))).toBe(true)
    expect(text.endsWith(chars(1024, 'd'))).toBe(true)
    expect(text.length).toBeLessThan(8192)
    // step 2's request carries the pruned result
    const req2 = t.models.requestsOf(s2.id)[1]
    expect(JSON.stringify(req2.context.messages).length).toBeLessThan(12000)
    expect(t.models.requestsOf(s2.id).some(isSummaryCall)).toBe(false)
    expectValidLog(evs)
    expect(problems).toEqual([])
    void s
  })

  it('overflow: compacts and retries in the open step; a second overflow in the same sequence is not compacted again', async () => {
    const { t, s, problems } = await start({}, 8192)
    t.models.script(s.id, { text: [chars(2000, 'a')] }, { text: [chars(2000, 'b')] })
    for (const [i, q] of ['one', 'two'].entries()) {
      await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: `${q} ${chars(2000, 'q')}` })
      await t.waitForTurnEnd(s.id, i + 1)
    }
    const steps: Step[] = [{ error: OVERFLOW }, { error: OVERFLOW }]
    t.models.fallback(s.id, (r) => (isSummaryCall(r) ? { text: ['a short summary'] } : steps.shift() ?? { text: ['done'] }))
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'three' })
    const evs = await t.waitForTurnEnd(s.id, 3)
    const turn3 = turnOf(evs, 3)
    // attempt 1 overflows → compaction inside the open step → retry; attempt 2 overflows → not compacted again → error
    expect(types(turn3).filter((x) => x.startsWith('compaction/'))).toEqual(['compaction/start', 'compaction/summary', 'compaction/end'])
    expect(turn3.filter((e) => e.type === 'assistant/attempt')).toHaveLength(2)
    expect((turn3.at(-1)!.data as any).reason).toMatchObject({ kind: 'error', error: { code: 'CONTEXT_WINDOW_EXCEEDED' } })
    expect(turn3.filter((e) => e.type === 'step/start')).toHaveLength(1)
    // the open step's own nodes are never compacted: its user/message survives
    const u3 = turn3.find((e) => e.type === 'user/message' && e.surfaceOp === 'append')!
    const summary = turn3.find((e) => e.type === 'compaction/summary')!
    expect((summary.data as any).shadowedSeqs).not.toContain(u3.seq)
    expectValidLog(evs)
    expect(problems).toEqual([])
  })

  it('overflow without progress leaves the original error authoritative; a failing summary is logged and the step proceeds', async () => {
    const { t, s, problems } = await start({}, 8192)
    // nothing compactable yet: the first request overflows; no compaction can help
    t.models.script(s.id, { error: OVERFLOW })
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hello' })
    let evs = await t.waitForTurnEnd(s.id, 1)
    expect((evs.at(-1)!.data as any).reason).toMatchObject({ kind: 'error', error: { code: 'CONTEXT_WINDOW_EXCEEDED' } })
    expect(types(evs).filter((x) => x.startsWith('compaction/'))).toEqual([])

    // pressure with a summary call that fails: compaction/end {error}, surface unchanged, the turn completes
    t.models.script(s.id, { text: [chars(6000, 'a')], usage: { input: 7000, output: 1500 } })
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: chars(6000, 'q') })
    await t.waitForTurnEnd(s.id, 2)
    t.models.fallback(s.id, (r) => (isSummaryCall(r) ? { error: '500 summarizer down' } : { text: ['still answering'] }))
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'go on' })
    evs = await t.waitForTurnEnd(s.id, 3)
    const turn3 = turnOf(evs, 3)
    const end = turn3.find((e) => e.type === 'compaction/end')!
    expect((end.data as any).error).toMatch(/summar/)
    expect(types(turn3)).not.toContain('compaction/summary')
    expect((turn3.at(-1)!.data as any).reason).toEqual({ kind: 'completed' })
    expectValidLog(evs)
    expect(problems).toEqual([])
  })

  it('manual compaction (POST /compact) runs as maintenance while idle and answers whether it compacted', async () => {
    const { t, s } = await start({}, 8192)
    const empty = await t.api('POST', `/v1/sessions/${s.id}/compact`)
    expect(empty.status).toBe(202)
    expect(empty.body).toEqual({ compacted: false })
    expect(await t.events(s.id)).toEqual([])
    t.models.script(s.id, { text: [chars(3000, 'a')] }, { text: [chars(3000, 'b')] }, { text: [chars(3000, 'c')] })
    for (let i = 1; i <= 3; i++) {
      await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: `turn ${i} ${chars(3000, 'q')}` })
      await t.waitForTurnEnd(s.id, i)
    }
    t.models.fallback(s.id, (r) => (isSummaryCall(r) ? { text: ['summary of three long turns'] } : { text: ['x'] }))
    const r = await t.api('POST', `/v1/sessions/${s.id}/compact`)
    expect(r.status).toBe(202)
    expect(r.body).toEqual({ compacted: true })
    const evs = await t.events(s.id)
    const begun = evs.find((e) => e.type === 'compaction/start')!
    expect(begun.data).toMatchObject({ turn: null })
    expect(evs.at(-1)!.type).toBe('compaction/end')
    expect((await t.api('GET', `/v1/sessions/${s.id}`)).body.status).toBe('idle')
    expectValidLog(evs)
  })
})

describe('a long session on a small window', () => {
  it('200 turns keep every request under the window and every log valid', async () => {
    const window = 3000
    const problems: string[] = []
    t = await startTestApp({ kind: 'pg', models: [{ id: 'small', contextWindow: window, maxTokens: 256 }], plugins: [(root, db) => reconstructionCheck(db, problems)(root)] })
    const s = await t.createSession({ model: 'test/small', system: 'Keep going.' })
    const sizes: number[] = []
    const estimate = (r: Recorded) => Math.ceil(JSON.stringify([r.context.systemPrompt, r.context.messages]).length / 4)
    t.models.fallback(s.id, (r) => {
      if (isSummaryCall(r)) return { text: [`summary #${r.n}: many turns of filler text were exchanged`], usage: { input: estimate(r), output: 20 } }
      sizes.push(estimate(r))
      return { text: [chars(300, 'z')], usage: { input: estimate(r), output: 75 } }
    })
    for (let i = 1; i <= 200; i++) {
      await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: `turn ${i}: ${chars(300, 'y')}` })
      await t.waitForTurnEnd(s.id, i, 20000)
    }
    const evs = await t.events(s.id)
    expect(evs.filter((e) => e.type === 'turn/end').every((e) => (e.data as any).reason.kind === 'completed')).toBe(true)
    expect(sizes).toHaveLength(200)
    expect(Math.max(...sizes)).toBeLessThan(window)
    expect(evs.filter((e) => e.type === 'compaction/summary').length).toBeGreaterThan(5)
    expectValidLog(evs)
    expect(problems).toEqual([])
  }, 120000)
})
