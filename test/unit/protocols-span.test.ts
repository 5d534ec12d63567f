// The span fold (src/protocols/span.ts, API.md §17 intro) on hand-made logs: where spans open and end
// (a claim, a wait on a client call or an approval with nothing else running, the turn's end), their
// ids, queued input, a cancelled queued input, a crash-interrupted turn and its continuation as one
// span, retried attempts as incomplete items, and live chunks giving the same ops as the settlement.

import { describe, expect, it } from 'vitest'
import { foldSpans, kindsOf, SpanFold } from '../../src/protocols/index.js'
import type { SpanOp } from '../../src/protocols/index.js'
import type { SessionEvent } from '../../src/session/index.js'

const user = (id: string, text: string) => ({ id, role: 'user', content: [{ type: 'text', text }], source: { kind: 'user' } })

/** A log builder: seq dense from 0, time = 1000 + seq. */
function log() {
  const events: SessionEvent[] = []
  const add = (type: string, data: any) => {
    const seq = events.length
    events.push({ seq, time: 1000 + seq, type, data })
    return seq
  }
  const b = {
    events,
    add,
    deliver: (id: string, text: string, start = 0, target = 'next-turn') => add('agent/inbox/spliced', { target, start, inserted: [user(id, text)] }),
    turn: (turn: number, extra: Record<string, unknown> = {}) => add('turn/start', { turn, ...extra }),
    claim: (target = 'next-turn', count = 1) => add('agent/inbox/spliced', { target, start: 0, removedCount: count, inserted: [] }),
    step: (turn: number, step: number) => add('step/start', { turn, step }),
    stepEnd: (turn: number, step: number) => add('step/end', { turn, step }),
    text: (turn: number, step: number, texts: string[], usage = { inputTokens: 3, outputTokens: 2 }) =>
      add('assistant/message', {
        turn,
        step,
        message: { id: `a${events.length}`, role: 'assistant', content: [{ type: 'text', text: texts.join('') }], source: { kind: 'model', provider: 'p', model: 'm' } },
        usage,
        stream: [
          { type: 'chunk', time: 1, chunk: { type: 'block-start', index: 0, blockType: 'text' } },
          { type: 'text-chunks', time0: 2, index: 0, dt: texts.map(() => 0), texts },
          { type: 'chunk', time: 3, chunk: { type: 'block-end', index: 0, block: { type: 'text', text: texts.join('') } } },
          { type: 'chunk', time: 3, chunk: { type: 'finish', reason: { kind: 'stop' } } },
        ],
      }),
    failed: (turn: number, step: number, texts: string[]) =>
      add('assistant/attempt', {
        turn,
        step,
        stream: [
          { type: 'text-chunks', time0: 2, index: 0, dt: texts.map(() => 0), texts },
          { type: 'chunk', time: 3, chunk: { type: 'usage', usage: { inputTokens: 5, outputTokens: 1 } } },
          { type: 'chunk', time: 3, chunk: { type: 'finish', reason: { kind: 'error', failure: { message: 'rate', code: 'RATE_LIMIT' } } } },
        ],
      }),
    calls: (turn: number, step: number, calls: Array<{ id: string; name: string }>) =>
      add('assistant/message', {
        turn,
        step,
        message: { id: `a${events.length}`, role: 'assistant', content: calls.map((c) => ({ type: 'tool-call', id: c.id, name: c.name, arguments: '{}' })), source: { kind: 'model', provider: 'p', model: 'm' } },
        stream: calls.flatMap((c, i) => [{ type: 'tool-call-chunks', time0: 1, index: i, dt: [0], id: c.id, name: c.name, args: ['{}'] }]).concat([{ type: 'chunk', time: 2, chunk: { type: 'finish', reason: { kind: 'tool-calls' } } } as any]),
      }),
    call: (turn: number, step: number, id: string, name: string) => add('tool/call', { turn, step, callId: id, name, arguments: '{}' }),
    result: (turn: number, step: number, id: string, text: string) =>
      add('tool/result', { turn, step, message: { id: `r${events.length}`, role: 'user', content: [{ type: 'tool-result', toolCallId: id, isError: false, content: [{ type: 'text', text }] }], source: { kind: 'tool', callId: id } } }),
    end: (turn: number, reason: Record<string, unknown> = { kind: 'completed' }) => add('turn/end', { turn, reason }),
  }
  return b
}

const kinds = kindsOf([
  { name: 'ask', execution: { type: 'client' } },
  { name: 'rm', execution: { type: 'http' }, approval: 'always' },
  { name: 'look', execution: { type: 'http' } },
])
const fold = (events: SessionEvent[], ops?: SpanOp[]) => foldSpans(events, { toolKind: kinds, onOp: ops ? (o) => ops.push(structuredClone({ ...o, span: o.span.id } as any)) : undefined })
const brief = (f: SpanFold) => f.spans.map((s) => [s.id, s.status, s.firstSeq, s.lastSeq, s.items.map((i) => `${i.type}:${i.status}`).join(',')])

describe('spans', () => {
  it('a followup to an idle session: one span i<delivery seq>, from its claim to the turn end, with usage', () => {
    const l = log()
    const d = l.deliver('m1', 'hi')
    l.turn(1)
    l.claim()
    l.step(1, 1)
    l.add('system/message', { turn: 1, step: 1, message: { id: 's1', role: 'system', content: [{ type: 'text', text: 'be brief' }], source: { kind: 'plugin', plugin: 'system-prompt' } } })
    l.add('request/header', { header: { config: { provider: 'p', model: 'm' } }, reason: 'initial' })
    l.text(1, 1, ['Hel', 'lo'])
    l.stepEnd(1, 1)
    const end = l.end(1)
    const f = fold(l.events)
    expect(brief(f)).toEqual([[`i${d}`, 'completed', 0, end, 'text:completed']])
    const s = f.get('i0')!
    expect(s.queued).toBe(false)
    expect(s.input.map((m) => m.id)).toEqual(['m1'])
    expect(s.usage).toMatchObject({ inputTokens: 3, outputTokens: 2 })
    expect([s.model, s.instructions]).toEqual(['p/m', 'be brief'])
  })

  it('a client call ends the span after its tool/call; the answer opens w<seq> of the same turn', () => {
    const l = log()
    l.deliver('m1', 'weather?')
    l.turn(1)
    l.claim()
    l.step(1, 1)
    l.calls(1, 1, [{ id: 'c1', name: 'ask' }])
    const wait = l.call(1, 1, 'c1', 'ask')
    const res = l.result(1, 1, 'c1', '3 degrees')
    l.stepEnd(1, 1)
    l.step(1, 2)
    l.text(1, 2, ['cold'])
    l.stepEnd(1, 2)
    const end = l.end(1)
    const f = fold(l.events.slice(0, wait + 1))
    expect(brief(f)).toEqual([['i0', 'completed', 0, wait, 'tool-call:completed']])
    expect(f.get('i0')!.waits).toEqual([{ callId: 'c1', name: 'ask', kind: 'client' }])
    expect(f.waiting?.seq).toBe(wait)
    expect(f.peek(SpanFold.answerId(wait))).toMatchObject({ id: `w${wait}`, status: 'in_progress', items: [] })
    const all = fold(l.events)
    expect(brief(all)).toEqual([
      ['i0', 'completed', 0, wait, 'tool-call:completed'],
      [`w${wait}`, 'completed', res, end, 'tool-result:completed,text:completed'],
    ])
    expect(all.get(`w${wait}`)!.previous).toBe('i0')
  })

  it('a server call before the client call keeps the span open until its result; one after it does not', () => {
    const l = log()
    l.deliver('m1', 'go')
    l.turn(1)
    l.claim()
    l.step(1, 1)
    l.calls(1, 1, [{ id: 'k1', name: 'look' }, { id: 'c1', name: 'ask' }, { id: 'k2', name: 'look' }])
    l.call(1, 1, 'k1', 'look')
    const c1 = l.call(1, 1, 'c1', 'ask')
    expect(fold(l.events).get('i0')!.ended).toBe(false)
    const r1 = l.result(1, 1, 'k1', 'found')
    expect(brief(fold(l.events))).toEqual([['i0', 'completed', 0, r1, 'tool-call:completed,tool-call:completed,tool-call:completed']])
    // a later call starting while the client call waits opens nothing
    l.call(1, 1, 'k2', 'look')
    expect(fold(l.events).spans).toHaveLength(1)
    void c1
  })

  it('an approval ends the span the same way', () => {
    const l = log()
    l.deliver('m1', 'rm it')
    l.turn(1)
    l.claim()
    l.step(1, 1)
    l.calls(1, 1, [{ id: 'a1', name: 'rm' }])
    const w = l.call(1, 1, 'a1', 'rm')
    const f = fold(l.events)
    expect(f.get('i0')).toMatchObject({ ended: true, status: 'completed', waits: [{ callId: 'a1', name: 'rm', kind: 'approval' }] })
    expect(f.get('i0')!.items[0]).toMatchObject({ type: 'tool-call', kind: 'approval', callId: 'a1' })
    void w
  })

  it('input queued behind a running turn is announced queued, then started; a cancelled one ends cancelled', () => {
    const l = log()
    l.deliver('m1', 'first')
    l.turn(1)
    l.claim()
    l.step(1, 1)
    const d2 = l.deliver('m2', 'second')
    const d3 = l.deliver('m3', 'third', 1)
    const ops: any[] = []
    l.add('agent/inbox/spliced', { target: 'next-turn', start: 1, removedCount: 1, inserted: [], outcome: 'canceled' })
    l.text(1, 1, ['one'])
    l.stepEnd(1, 1)
    l.end(1)
    l.turn(2)
    l.claim()
    const f = fold(l.events, ops)
    expect(f.get(`i${d2}`)).toMatchObject({ queued: true, status: 'in_progress', turn: 2, previous: 'i0' })
    expect(f.get(`i${d3}`)).toMatchObject({ queued: true, status: 'cancelled', ended: true })
    expect(ops.filter((o) => o.span === `i${d2}`).map((o) => o.op)).toEqual(['span-open', 'span-start'])
    expect(ops.filter((o) => o.span === `i${d3}`).map((o) => o.op)).toEqual(['span-open', 'span-end'])
  })

  it('a crash-interrupted turn and its continuation are one span; without a continuation it fails interrupted', () => {
    const l = log()
    l.deliver('m1', 'go')
    l.turn(1)
    l.claim()
    l.step(1, 1)
    l.stepEnd(1, 1)
    l.end(1, { kind: 'interrupted' })
    l.add('session/end-seed', {})
    const open = fold(l.events)
    expect(open.get('i0')).toMatchObject({ ended: false, status: 'in_progress' })
    const cut = l.events.length
    l.turn(2, { continues: 1 })
    l.step(2, 1)
    l.text(2, 1, ['resumed'])
    l.stepEnd(2, 1)
    const end = l.end(2)
    const f = fold(l.events)
    expect(brief(f)).toEqual([['i0', 'completed', 0, end, 'text:completed']])
    expect(f.get('i0')!.turn).toBe(2)
    // the same log with a new turn instead of a continuation
    const other = log()
    other.events.push(...l.events.slice(0, cut))
    other.deliver('m2', 'next')
    other.turn(2)
    other.claim()
    const g = fold(other.events)
    expect(g.get('i0')).toMatchObject({ status: 'failed', ended: true, error: { code: 'interrupted' } })
  })

  it('a retried attempt: its text ends incomplete, the retry completes; usage sums both', () => {
    const l = log()
    l.deliver('m1', 'go')
    l.turn(1)
    l.claim()
    l.step(1, 1)
    l.failed(1, 1, ['par'])
    l.add('llm/retry', { retryId: 'r', turn: 1, step: 1, provider: 'p', mode: 'normal', policyKey: 'k', retry: 1, delayMs: 1, failure: { message: 'rate', code: 'RATE_LIMIT' } })
    l.add('llm/retry-started', { retryId: 'r', turn: 1, step: 1, retry: 1 })
    l.text(1, 1, ['full'])
    l.stepEnd(1, 1)
    l.end(1)
    const s = fold(l.events).get('i0')!
    expect(s.items.map((i) => [i.type, i.status, (i as any).text])).toEqual([
      ['text', 'incomplete', 'par'],
      ['text', 'completed', 'full'],
    ])
    expect(s.usage).toMatchObject({ inputTokens: 8, outputTokens: 3 })
  })

  it('live chunks of an attempt, then its settlement, give the ops the settlement alone gives', () => {
    const l = log()
    l.deliver('m1', 'go')
    l.turn(1)
    l.claim()
    const st = l.step(1, 1)
    l.text(1, 1, ['a', 'b', 'c'])
    l.stepEnd(1, 1)
    l.end(1)
    const settled: any[] = []
    fold(l.events, settled)
    const live: any[] = []
    const f = new SpanFold({ toolKind: kinds, onOp: (o) => live.push(structuredClone({ ...o, span: o.span.id } as any)) })
    for (const e of l.events.slice(0, st + 1)) f.event(e)
    const attemptId = `s:${st + 1}`
    f.frame('agent/assistant-stream', { kind: 'start', attemptId, revision: 1, turn: 1, step: 1 })
    f.frame('agent/assistant-stream', { kind: 'chunk', attemptId, revision: 2, index: 0, time: 1, chunk: { type: 'block-start', index: 0, blockType: 'text' } })
    f.frame('agent/assistant-stream', { kind: 'chunk', attemptId, revision: 3, index: 1, time: 2, chunk: { type: 'text-delta', index: 0, text: 'a' } })
    // a repeated chunk is dropped; a gap stops the live feed until the settlement
    f.frame('agent/assistant-stream', { kind: 'chunk', attemptId, revision: 3, index: 1, time: 2, chunk: { type: 'text-delta', index: 0, text: 'a' } })
    f.frame('agent/assistant-stream', { kind: 'chunk', attemptId, revision: 5, index: 3, time: 2, chunk: { type: 'text-delta', index: 0, text: 'c' } })
    expect(live.map((o) => [o.op, o.delta])).toEqual([['span-open', undefined], ['item-add', undefined], ['delta', 'a']])
    for (const e of l.events.slice(st + 1)) f.event(e)
    expect(live).toEqual(settled)
    expect(settled.map((o) => [o.op, o.delta])).toEqual([['span-open', undefined], ['item-add', undefined], ['delta', 'a'], ['delta', 'b'], ['delta', 'c'], ['item-done', undefined], ['span-end', undefined]])
  })
})
