// The A2A projection (src/protocols/a2a.ts, API.md §17.4) on a hand-made log: task ids, the state of
// each kind of span, the stream of one task (a task, artifact chunks, the end) the same whether the
// span is read live chunk by chunk or from its settlement, nothing of other spans, and the refusals of
// message parts before anything is written.

import { describe, expect, it } from 'vitest'
import { TaskState } from '@a2a-js/sdk'
import { contentOf, MAX_PART_BYTES, parseTaskId, stateOf, TaskStream, taskIdOf, taskOf } from '../../src/protocols/a2a.js'
import { foldSpans, kindsOf, SpanFold } from '../../src/protocols/index.js'
import type { SessionEvent } from '../../src/session/index.js'

const user = (id: string, text: string) => ({ id, role: 'user', content: [{ type: 'text', text }], source: { kind: 'user' } })

/** One completed turn answering "Hello" in two deltas, then a second input that waits on an approval. */
function events(): SessionEvent[] {
  const evs: SessionEvent[] = []
  const add = (type: string, data: any) => evs.push({ seq: evs.length, time: 1000 + evs.length, type, data })
  add('agent/inbox/spliced', { target: 'next-turn', start: 0, inserted: [user('m1', 'hi')] })
  add('turn/start', { turn: 1 })
  add('agent/inbox/spliced', { target: 'next-turn', start: 0, removedCount: 1, inserted: [] })
  add('step/start', { turn: 1, step: 1 })
  add('user/message', user('m1', 'hi'))
  add('assistant/message', {
    turn: 1,
    step: 1,
    message: { id: 'a1', role: 'assistant', content: [{ type: 'text', text: 'Hello' }], source: { kind: 'model', provider: 'p', model: 'm' } },
    stream: [
      { type: 'chunk', time: 1, chunk: { type: 'block-start', index: 0, blockType: 'text' } },
      { type: 'text-chunks', time0: 2, index: 0, dt: [0, 0], texts: ['Hel', 'lo'] },
      { type: 'chunk', time: 3, chunk: { type: 'block-end', index: 0, block: { type: 'text', text: 'Hello' } } },
      { type: 'chunk', time: 3, chunk: { type: 'finish', reason: { kind: 'stop' } } },
    ],
  })
  add('step/end', { turn: 1, step: 1 })
  add('turn/end', { turn: 1, reason: { kind: 'completed' } })
  add('agent/inbox/spliced', { target: 'next-turn', start: 0, inserted: [user('m2', 'refund')] })
  add('turn/start', { turn: 2 })
  add('agent/inbox/spliced', { target: 'next-turn', start: 0, removedCount: 1, inserted: [] })
  add('step/start', { turn: 2, step: 1 })
  add('user/message', user('m2', 'refund'))
  add('assistant/message', {
    turn: 2,
    step: 1,
    message: { id: 'a2', role: 'assistant', content: [{ type: 'tool-call', id: 'c1', name: 'refund', arguments: '{"order":"A1"}' }], source: { kind: 'model', provider: 'p', model: 'm' } },
    stream: [
      { type: 'tool-call-chunks', time0: 1, index: 0, dt: [0], id: 'c1', name: 'refund', args: ['{"order":"A1"}'] },
      { type: 'chunk', time: 2, chunk: { type: 'finish', reason: { kind: 'tool-calls' } } },
    ],
  })
  add('tool/call', { turn: 2, step: 1, callId: 'c1', name: 'refund', arguments: '{"order":"A1"}' })
  return evs
}

const toolKind = kindsOf([{ name: 'refund', approval: 'always', execution: { type: 'http' } }])
const line = (u: any) => {
  const p = u.payload
  if (p.$case === 'task') return `task ${TaskState[p.value.status.state]}`
  if (p.$case === 'statusUpdate') return `status ${TaskState[p.value.status.state]}`
  return `artifact ${p.value.artifact.artifactId} "${p.value.artifact.parts[0].content.value}"${p.value.append ? ' +' : ''}${p.value.lastChunk ? ' last' : ''}`
}

describe('A2A projection', () => {
  it('task ids name the session (which may hold ":") and the span; anything else is no task', () => {
    expect(taskIdOf('s:1', 'i0')).toBe('s:1:i0')
    expect(parseTaskId('s:1:i0')).toEqual({ session: 's:1', span: 'i0' })
    expect(parseTaskId('s:1:w12')).toEqual({ session: 's:1', span: 'w12' })
    for (const bad of ['i0', ':i0', 's:x0', 's:i', 's:i-1', 's:i0 ']) expect(parseTaskId(bad), bad).toBeUndefined()
  })

  it('a completed span is a completed task with its text as an artifact; a span at an approval is input-required naming the call', () => {
    const fold = foldSpans(events(), { toolKind })
    const [done, waiting] = fold.spans
    expect(stateOf(done)).toBe(TaskState.TASK_STATE_COMPLETED)
    const task = taskOf('s', done)
    expect(task).toMatchObject({ id: 's:i0', contextId: 's', metadata: { turn: 1 } })
    expect(task.artifacts.map((a) => [a.artifactId, (a.parts[0].content as any).value])).toEqual([['i0.0', 'Hello']])
    expect(task.history.map((m) => m.messageId)).toEqual(['m1'])
    expect(stateOf(waiting)).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    const w = taskOf('s', waiting)
    expect((w.status!.message!.parts[1].content as any).value).toEqual({ pending: [{ callId: 'c1', name: 'refund', kind: 'approval', arguments: '{"order":"A1"}' }] })
    expect(taskOf('s', done, 0).history).toEqual([])
  })

  it("a task's stream: the task, its text in chunks, the end; only its own span's ops; the same from live chunks as from the settlement", () => {
    const settled = new TaskStream('s', 'i0')
    const fromLog: any[] = []
    foldSpans(events(), { toolKind, onOp: (op) => fromLog.push(...settled.render(op)) })
    expect(fromLog.map(line)).toEqual(['task TASK_STATE_WORKING', 'artifact i0.0 "Hel"', 'artifact i0.0 "lo" +', 'artifact i0.0 "" + last', 'status TASK_STATE_COMPLETED'])
    expect(settled.done).toBe(true)

    // the same log, the attempt's chunks arriving live before its settlement
    const live = new TaskStream('s', 'i0')
    const fromLive: any[] = []
    const fold = new SpanFold({ toolKind, onOp: (op) => fromLive.push(...live.render(op)) })
    const evs = events()
    for (const e of evs.slice(0, 5)) fold.event(e)
    const attemptId = 's:5'
    fold.frame('agent/assistant-stream', { kind: 'start', attemptId })
    const chunks = [
      { type: 'block-start', index: 0, blockType: 'text' },
      { type: 'text-delta', index: 0, text: 'Hel' },
      { type: 'text-delta', index: 0, text: 'lo' },
    ]
    chunks.forEach((chunk, index) => fold.frame('agent/assistant-stream', { kind: 'chunk', attemptId, index, chunk }))
    // the deltas are out before the settlement is folded
    expect(fromLive.map(line)).toEqual(['task TASK_STATE_WORKING', 'artifact i0.0 "Hel"', 'artifact i0.0 "lo" +'])
    for (const e of evs.slice(5)) fold.event(e)
    expect(fromLive).toEqual(fromLog)

    const other = new TaskStream('s', 'i8')
    const second: any[] = []
    foldSpans(events(), { toolKind, onOp: (op) => second.push(...other.render(op)) })
    expect(second.map(line)).toEqual(['task TASK_STATE_WORKING', 'status TASK_STATE_INPUT_REQUIRED'])
  })

  it('message parts: text, data as JSON text, raw images; too large, too many, empty, file URLs and other media refused', () => {
    const part = (content: any, mediaType = '') => ({ content, metadata: undefined, filename: '', mediaType })
    expect(contentOf([part({ $case: 'text', value: 'hi' }), part({ $case: 'data', value: { a: 1 } }), part({ $case: 'raw', value: Buffer.from([1, 2]) }, 'image/png')])).toEqual([
      { type: 'text', text: 'hi' },
      { type: 'text', text: '{"a":1}' },
      { type: 'image', mimeType: 'image/png', data: 'AQI=' },
    ])
    const refused = (parts: any[]) => {
      try {
        contentOf(parts)
      } catch (e) {
        return (e as Error).name
      }
      return 'accepted'
    }
    expect(refused([])).toBe('RequestMalformedError')
    expect(refused([part({ $case: 'text', value: 'x'.repeat(MAX_PART_BYTES + 1) })])).toBe('RequestMalformedError')
    expect(refused([part({ $case: 'text', value: 'x'.repeat(MAX_PART_BYTES) })])).toBe('accepted')
    expect(refused(Array.from({ length: 65 }, () => part({ $case: 'text', value: 'x' })))).toBe('RequestMalformedError')
    expect(refused([part({ $case: 'url', value: 'http://x/a.png' }, 'image/png')])).toBe('ContentTypeNotSupportedError')
    expect(refused([part({ $case: 'raw', value: Buffer.from('x') }, 'application/pdf')])).toBe('ContentTypeNotSupportedError')
  })
})
