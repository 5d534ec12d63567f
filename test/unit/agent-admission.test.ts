// Admission planning (SPEC §8.1 A3, §8.5–§8.8, §18.7) as the pure function the driver commits: from
// a folded log, the step's proposal, the attempt and the loop instance's series state to the drafts
// of the unit; and the config an attempt proposes (§7.5). Each plan is also folded into the state, so
// what the planner predicts of the generation is what the fold does.

import { describe, expect, it } from 'vitest'
import { planAdmission, proposeConfig, type AdmissionInput, type Proposal } from '../../src/agent/admission.js'
import { canonicalJson, type Draft, type EpochHeader, type Json, type SessionState, type ToolSchema } from '../../src/session/index.js'
import { stamp } from '../../src/store/index.js'
import { LogBuilder, sysMsg, userMsg } from '../helpers/session-log.js'

const tool = (name: string): ToolSchema => ({ name, description: `${name} tool`, parameters: { type: 'object', properties: {} } })
const proposal = (o: Partial<Proposal> & { startsRequestSeries?: true; messages?: ReturnType<typeof userMsg>[] } = {}): Proposal => ({
  decision: { kind: 'enter', messages: o.messages ?? [userMsg('u1', 'hello')], ...(o.startsRequestSeries ? { startsRequestSeries: true } : {}) },
  rendered: o.rendered ?? 'P',
  tools: o.tools ?? [],
})
const config = { provider: 'test', model: 'm' }
/** Thirty tools with schemas the size real agents send (about 37 KB of JSON), built anew on each call. */
const bigTools = (): ToolSchema[] =>
  Array.from({ length: 30 }, (_, i) => ({
    name: `tool_${i}`,
    description: `Tool ${i} does something useful; a longer description of its behaviour for the model.`,
    parameters: {
      type: 'object',
      properties: Object.fromEntries(Array.from({ length: 8 }, (_, j) => [`field_${j}`, { type: j % 2 ? 'string' : 'integer', description: `The ${j}th parameter of tool ${i}, described in a sentence or two as real tools do.`, ...(j % 3 === 0 ? { enum: ['a', 'b', 'c'] } : {}) }])),
      required: ['field_0', 'field_1'],
    },
  }))
const header = (h: EpochHeader) => JSON.parse(JSON.stringify(h)) as Json

/** A log with an open turn and step, and what the plan is built from. */
function opened(build: (b: LogBuilder) => void = () => {}): LogBuilder {
  const b = new LogBuilder()
  build(b)
  if (b.s.openTurn === null) b.turnStart()
  if (b.s.openStep === null) b.stepStart()
  return b
}
const input = (b: LogBuilder, o: Partial<AdmissionInput> = {}): AdmissionInput => ({
  state: b.s,
  proposal: proposal(),
  attempt: 1,
  turn: b.s.openTurn!,
  step: b.s.openStep!,
  config,
  series: { headerLogged: false, capturedGeneration: b.s.replaceGeneration },
  ...o,
})
const shape = (ds: Draft[]) =>
  ds.map((d) => {
    const x = d.data as Record<string, any>
    if (d.type === 'system/message') return `SYS${d.surfaceOp === 'append' ? '+' : `~${(d.surfaceOp as { start: number }).start}`}:${x.message.content.map((c: any) => c.text).join('') || '∅'}`
    if (d.type === 'user/message') return `U:${x.id}`
    if (d.type === 'request/header') return `H(${x.reason}${x.startsSeries ? ',series' : ''})`
    if (d.type === 'request/context') return 'C'
    return d.type
  })

/** Folds the planned drafts as the unit would; returns the state's generation afterwards. */
function fold(s: SessionState, drafts: Draft[]): number {
  for (const e of stamp(s, drafts, s.lastTime + 1)) s.apply(e)
  return s.replaceGeneration
}

/** A session that ran one attempt of a step: prompt P, header for `tools`, context. */
function afterOneAttempt(o: { tools?: ToolSchema[]; rendered?: string; contextWindow?: number } = {}) {
  const b = opened()
  const series = { headerLogged: false, capturedGeneration: b.s.replaceGeneration }
  const first = planAdmission(input(b, { proposal: proposal({ tools: o.tools, rendered: o.rendered }), series, prepared: o.contextWindow ? { context: { contextWindow: o.contextWindow } } : undefined }))
  fold(b.s, first)
  series.headerLogged = true
  series.capturedGeneration = b.s.replaceGeneration
  return { b, series }
}

describe('planAdmission (SPEC §8.1 A3)', () => {
  it('a fresh session: the prompt becomes the head, then the users, an initial header and the route context', () => {
    const b = opened()
    const drafts = planAdmission(input(b, { proposal: proposal({ messages: [userMsg('u1', 'a'), userMsg('u2', 'b')] }) }))
    expect(shape(drafts)).toEqual(['SYS+:P', 'U:u1', 'U:u2', 'H(initial)', 'C'])
    expect(drafts.find((d) => d.type === 'request/header')!.data).toEqual({ header: { config }, reason: 'initial' })
    expect(drafts.at(-1)!.data).toEqual({ provider: 'test', model: 'm' })
    expect(fold(b.s, drafts)).toBe(0)
  })

  it('a loop instance resuming a log with a header logs a resume header first; an unchanged context is not logged again', () => {
    const { b } = afterOneAttempt()
    b.stepEnd()
    b.turnEnd()
    b.add('session/end-seed', {})
    b.turnStart()
    b.stepStart()
    const drafts = planAdmission(input(b))
    expect(shape(drafts)).toEqual(['U:u1', 'H(resume)'])
  })

  it('a retry over an unchanged surface writes nothing: no users again, no header, no context (SPEC §10.4 d)', () => {
    const { b, series } = afterOneAttempt()
    expect(planAdmission(input(b, { attempt: 2, series }))).toEqual([])
  })

  it('startsRequestSeries counts on attempt 1 only: a series header, then nothing on the retry', () => {
    const { b, series } = afterOneAttempt()
    b.stepEnd()
    b.stepStart()
    const p = proposal({ startsRequestSeries: true })
    expect(shape(planAdmission(input(b, { proposal: p, series })))).toEqual(['U:u1', 'H(series)'])
    expect(planAdmission(input(b, { proposal: p, series, attempt: 2 }))).toEqual([])
  })

  it('tools that differ from the latest header start a series: a change header with startsSeries (SPEC §18.7)', () => {
    const { b, series } = afterOneAttempt({ tools: [tool('a')] })
    const drafts = planAdmission(input(b, { attempt: 2, series, proposal: proposal({ tools: [tool('a'), tool('b')] }) }))
    expect(shape(drafts)).toEqual(['H(change,series)'])
    expect((drafts[0].data as any).header.tools.map((t: ToolSchema) => t.name)).toEqual(['a', 'b'])
  })

  it('a list built anew each step with the header’s tools writes no header; a change deep in one schema of thirty is a change header', () => {
    const { b, series } = afterOneAttempt({ tools: bigTools() })
    b.stepEnd()
    b.stepStart()
    // the next step's list: new objects, keys in another order, the same content
    const same = bigTools().map((t) => ({ parameters: { ...t.parameters }, name: t.name, description: t.description }))
    expect(shape(planAdmission(input(b, { series, proposal: proposal({ tools: same }) })))).toEqual(['U:u1'])
    const changed = bigTools()
    ;(changed[17].parameters as any).properties.field_5.description = 'a changed description'
    const drafts = planAdmission(input(b, { series, proposal: proposal({ tools: changed }) }))
    expect(shape(drafts)).toEqual(['U:u1', 'H(change,series)'])
    expect((drafts[1].data as any).header.tools[17].parameters.properties.field_5.description).toBe('a changed description')
  })

  it('an unchanged tool list costs a step a comparison, not its canonical text written again', () => {
    // 30 tools with 37 KB of schemas, as real agents carry: writing the list's canonical text is the
    // cost a step saves when its (new) list equals the header's; ratios of one run, never absolute times
    const { b, series } = afterOneAttempt({ tools: bigTools() })
    b.stepEnd()
    b.stepStart()
    // fresh lists every round, as every step has: a text made once per list object is no help
    const time = (f: (list: ToolSchema[]) => unknown) => {
      const lists = Array.from({ length: 40 }, () => bigTools())
      const t0 = process.hrtime.bigint()
      for (const list of lists) f(list)
      return Number(process.hrtime.bigint() - t0)
    }
    const plan = (list: ToolSchema[]) => planAdmission(input(b, { series, proposal: proposal({ tools: list }) }))
    const ratios: number[] = []
    for (let round = 0; round < 21; round++) ratios.push(time(plan) / time(canonicalJson))
    ratios.sort((x, y) => x - y)
    // the median: about 0.35 (the comparison and the rest of the plan); writing the text again, as
    // each step did before, is about 1.1
    expect(ratios[10]).toBeLessThan(0.6)
  })

  it('another model alone is a change header without a series, and a new route context', () => {
    const { b, series } = afterOneAttempt()
    const drafts = planAdmission(input(b, { attempt: 2, series, config: { provider: 'test', model: 'other' } }))
    expect(shape(drafts)).toEqual(['H(change)', 'C'])
    expect(drafts[1].data).toEqual({ provider: 'test', model: 'other' })
  })

  it('a changed prompt on a plain route replaces the head; that replacement breaks the series (read after reconciliation, SPEC §8.8)', () => {
    const { b, series } = afterOneAttempt()
    b.stepEnd()
    b.stepStart()
    const drafts = planAdmission(input(b, { series, proposal: proposal({ rendered: 'P2', messages: [] }) }))
    // startsSeries was false before reconciliation, so only the head is rewritten; the bump makes the header a series one
    expect(shape(drafts)).toEqual(['SYS~2:P2', 'H(series)'])
    const before = b.s.replaceGeneration
    expect(fold(b.s, drafts)).toBe(before + 1)
  })

  it('a changed prompt on an in-history route is appended: no replacement, no series', () => {
    const prepared = { context: {}, systemPromptUpdate: 'in-history' as const }
    const b = opened()
    const series = { headerLogged: false, capturedGeneration: 0 }
    fold(b.s, planAdmission(input(b, { series, prepared })))
    series.headerLogged = true
    const drafts = planAdmission(input(b, { attempt: 2, series, prepared, proposal: proposal({ rendered: 'P2' }) }))
    expect(shape(drafts)).toEqual(['SYS+:P2'])
    expect(fold(b.s, drafts)).toBe(0)
  })

  it('a generation moved since the capture (compaction, pruning) normalizes every later prompt node and logs one series header (SPEC §10.4 a–b)', () => {
    const b = opened((x) => {
      x.turnStart()
      x.stepStart()
      x.add('system/message', { ...x.ts, message: sysMsg('s0', 'P') }, 'append')
      x.user(userMsg('u0', 'old'))
      x.add('system/message', { ...x.ts, message: sysMsg('s1', 'P') }, 'append')
    })
    b.add('request/header', { header: { config }, reason: 'initial' })
    b.add('request/context', { provider: 'test', model: 'm' })
    // the loop instance captured the generation before a replacement it did not make
    const series = { headerLogged: true, capturedGeneration: b.s.replaceGeneration - 1 }
    const drafts = planAdmission(input(b, { attempt: 2, series }))
    // the later node is emptied in place; the head already holds the text
    expect(shape(drafts)).toEqual(['SYS~4:∅', 'H(series)'])
    const before = b.s.replaceGeneration
    expect(fold(b.s, drafts)).toBe(before + 1)
  })

  it('adapter defaults ride in the header; a context window change is a new route context', () => {
    const b = opened()
    const prepared = { adapterDefaults: { maxTokens: true as const }, context: { contextWindow: 8192 } }
    const drafts = planAdmission(input(b, { prepared, config: { ...config, maxTokens: 1024 } }))
    expect(drafts.find((d) => d.type === 'request/header')!.data).toEqual({ header: header({ config: { ...config, maxTokens: 1024 }, adapterDefaults: { maxTokens: true } }), reason: 'initial' })
    expect(drafts.at(-1)!.data).toEqual({ provider: 'test', model: 'm', contextWindow: 8192 })
  })

  it('plans without folding: the state is unchanged until the unit adds the drafts', () => {
    const b = opened()
    const before = { nextSeq: b.s.nextSeq, generation: b.s.replaceGeneration, nodes: b.s.nodes.length }
    planAdmission(input(b))
    expect({ nextSeq: b.s.nextSeq, generation: b.s.replaceGeneration, nodes: b.s.nodes.length }).toEqual(before)
  })
})

describe('proposeConfig (SPEC §7.5)', () => {
  const spec = { model: 'test/m', system: '', tools: [] }
  const withHeader = (h: EpochHeader) => {
    const b = new LogBuilder()
    b.add('request/header', { header: header(h), reason: 'initial' })
    return b.s
  }

  it('the first request of a loop instance: provider and model from the session, its maxTokens and reasoningEffort', () => {
    const b = new LogBuilder()
    expect(proposeConfig(spec, b.s, false)).toEqual({ provider: 'test', model: 'm' })
    expect(proposeConfig({ ...spec, maxTokens: 99, reasoningEffort: 'low' }, b.s, false)).toEqual({ provider: 'test', model: 'm', maxTokens: 99, reasoningEffort: 'low' })
  })

  it('the first request after resume takes the latest header’s explicit effort on the same route, not a defaulted one', () => {
    expect(proposeConfig(spec, withHeader({ config: { provider: 'test', model: 'm', reasoningEffort: 'high' } }), false)).toEqual({ provider: 'test', model: 'm', reasoningEffort: 'high' })
    expect(proposeConfig(spec, withHeader({ config: { provider: 'test', model: 'm', reasoningEffort: 'high' }, adapterDefaults: { reasoningEffort: true } }), false)).toEqual({ provider: 'test', model: 'm' })
    expect(proposeConfig(spec, withHeader({ config: { provider: 'other', model: 'm', reasoningEffort: 'high' } }), false)).toEqual({ provider: 'test', model: 'm' })
  })

  it('later requests: the latest header’s config minus what the adapter defaulted', () => {
    const s = withHeader({ config: { provider: 'p', model: 'x', maxTokens: 10, reasoningEffort: 'low', temperature: 0.5 }, adapterDefaults: { maxTokens: true } })
    expect(proposeConfig(spec, s, true)).toEqual({ provider: 'p', model: 'x', reasoningEffort: 'low', temperature: 0.5 })
  })

  it('a model ref without provider/model is an error (the turn ends error)', () => {
    expect(() => proposeConfig({ ...spec, model: 'nomodel' }, new LogBuilder().s, false)).toThrow(/provider\/model/)
  })
})
