// The compact stream (SPEC §9.4), block assembly (SPEC §9.5) and interrupted prefixes (SPEC §18.8).

import { describe, expect, it } from 'vitest'
import {
  assembleBlocks,
  assertLosslessJson,
  expandStream,
  interruptedPrefix,
  StreamAccumulator,
  type AssistantStreamRecord,
  type ContentBlock,
  type StreamChunk,
  type TimedChunk,
} from '../../src/session/index.js'

function accumulate(chunks: TimedChunk[]): AssistantStreamRecord[] {
  const acc = new StreamAccumulator()
  for (const c of chunks) acc.push(c.time, c.chunk)
  return acc.records
}

/** Round trip through the compact form, and through JSON as the log stores it. */
function roundTrip(chunks: TimedChunk[]): AssistantStreamRecord[] {
  const records = accumulate(structuredClone(chunks))
  expect(expandStream(records)).toEqual(chunks)
  assertLosslessJson(records)
  expect(expandStream(JSON.parse(JSON.stringify(records)))).toEqual(chunks)
  return records
}

const T = 1_764_523_200_000
const text = (index: number, t: string): StreamChunk => ({ type: 'text-delta', index, text: t })
const reason = (index: number, t: string): StreamChunk => ({ type: 'reasoning-delta', index, text: t })
const call = (index: number, id: string, argumentsDelta: string, name?: string): StreamChunk =>
  name === undefined ? { type: 'tool-call-delta', index, id, argumentsDelta } : { type: 'tool-call-delta', index, id, name, argumentsDelta }

describe('compact stream (SPEC §9.4)', () => {
  it('three text deltas become block-start, one text-chunks run, block-end, usage, finish — and expand back exactly', () => {
    const chunks: TimedChunk[] = [
      { time: T, chunk: { type: 'block-start', index: 0, blockType: 'text' } },
      { time: T + 3, chunk: text(0, 'Hel') },
      { time: T + 3, chunk: text(0, 'lo') },
      { time: T + 10, chunk: text(0, '!') },
      { time: T + 11, chunk: { type: 'block-end', index: 0, block: { type: 'text', text: 'Hello!' } } },
      { time: T + 12, chunk: { type: 'usage', usage: { inputTokens: 21, outputTokens: 3 } } },
      { time: T + 12, chunk: { type: 'finish', reason: { kind: 'stop' } } },
    ]
    const records = roundTrip(chunks)
    expect(records).toEqual([
      { type: 'chunk', time: T, chunk: chunks[0].chunk },
      { type: 'text-chunks', time0: T + 3, index: 0, dt: [0, 0, 7], texts: ['Hel', 'lo', '!'] },
      { type: 'chunk', time: T + 11, chunk: chunks[4].chunk },
      { type: 'chunk', time: T + 12, chunk: chunks[5].chunk },
      { type: 'chunk', time: T + 12, chunk: chunks[6].chunk },
    ])
    const expanded = expandStream(records)
    expect(expanded.map((c) => c.chunk.type)).toEqual(['block-start', 'text-delta', 'text-delta', 'text-delta', 'block-end', 'usage', 'finish'])
  })

  it('text, reasoning and tool-call runs, with name only on the first delta of a tool-call run', () => {
    const chunks: TimedChunk[] = [
      { time: T, chunk: reason(0, 'let me ') },
      { time: T + 1, chunk: reason(0, 'think') },
      { time: T + 4, chunk: text(1, 'Sure') },
      { time: T + 9, chunk: text(1, '.') },
      { time: T + 9, chunk: call(2, 'c1', '{"a"', 'lookup') },
      { time: T + 15, chunk: call(2, 'c1', ':1') },
      { time: T + 16, chunk: call(2, 'c1', '}') },
      { time: T + 20, chunk: { type: 'finish', reason: { kind: 'tool-calls' } } },
    ]
    const records = roundTrip(chunks)
    expect(records).toEqual([
      { type: 'reasoning-chunks', time0: T, index: 0, dt: [0, 1], texts: ['let me ', 'think'] },
      { type: 'text-chunks', time0: T + 4, index: 1, dt: [0, 5], texts: ['Sure', '.'] },
      { type: 'tool-call-chunks', time0: T + 9, index: 2, dt: [0, 6, 1], id: 'c1', name: 'lookup', args: ['{"a"', ':1', '}'] },
      { type: 'chunk', time: T + 20, chunk: { type: 'finish', reason: { kind: 'tool-calls' } } },
    ])
    const deltas = expandStream(records).filter((c) => c.chunk.type === 'tool-call-delta').map((c) => c.chunk as Extract<StreamChunk, { type: 'tool-call-delta' }>)
    expect(deltas.map((d) => 'name' in d)).toEqual([true, false, false])
  })

  it('a tool-call run without any name expands without names', () => {
    const chunks: TimedChunk[] = [
      { time: T, chunk: call(0, 'c1', '{') },
      { time: T + 2, chunk: call(0, 'c1', '}') },
    ]
    const records = roundTrip(chunks)
    expect(records).toHaveLength(1)
    expect('name' in records[0]).toBe(false)
  })

  it('a named delta after the first cannot join the run (its name would be lost)', () => {
    const chunks: TimedChunk[] = [
      { time: T, chunk: call(0, 'c1', '{', 'f') },
      { time: T + 1, chunk: call(0, 'c1', '"x"', 'f') },
      { time: T + 2, chunk: call(0, 'c1', '}') },
    ]
    const records = roundTrip(chunks)
    expect(records.map((r) => r.type === 'tool-call-chunks' && r.args)).toEqual([['{'], ['"x"', '}']])
  })

  it('a different block index or call id breaks a run', () => {
    const chunks: TimedChunk[] = [
      { time: T, chunk: text(0, 'a') },
      { time: T + 1, chunk: text(1, 'b') },
      { time: T + 2, chunk: text(0, 'c') },
      { time: T + 3, chunk: reason(0, 'd') },
      { time: T + 4, chunk: text(0, 'e') },
      { time: T + 5, chunk: call(3, 'c1', 'x', 'f') },
      { time: T + 6, chunk: call(3, 'c2', 'y', 'g') },
      { time: T + 7, chunk: call(3, 'c2', 'z') },
      { time: T + 8, chunk: call(4, 'c2', 'w') },
    ]
    const records = roundTrip(chunks)
    expect(records.map((r) => r.type)).toEqual(['text-chunks', 'text-chunks', 'text-chunks', 'reasoning-chunks', 'text-chunks', 'tool-call-chunks', 'tool-call-chunks', 'tool-call-chunks'])
    expect(records.map((r) => ('dt' in r ? r.dt.length : 0))).toEqual([1, 1, 1, 1, 1, 1, 2, 1])
  })

  it('a non-delta chunk between deltas breaks a run, and the next run starts with dt[0] = 0 at its own time', () => {
    const chunks: TimedChunk[] = [
      { time: T, chunk: text(0, 'a') },
      { time: T + 4, chunk: { type: 'usage', usage: { inputTokens: 1, outputTokens: 1 } } },
      { time: T + 9, chunk: text(0, 'b') },
    ]
    const records = roundTrip(chunks)
    expect(records[2]).toEqual({ type: 'text-chunks', time0: T + 9, index: 0, dt: [0], texts: ['b'] })
  })

  it('a gap that is not a safe integer breaks a run, and the round trip stays exact', () => {
    const chunks: TimedChunk[] = [
      { time: T, chunk: text(0, 'a') },
      { time: T + 0.25, chunk: text(0, 'b') }, // fractional gap
      { time: T + 1.25, chunk: text(0, 'c') }, // integer gap: joins b's run
      { time: 2 ** 60, chunk: text(0, 'd') }, // a gap beyond 2^53
      { time: 2 ** 60, chunk: text(0, 'e') }, // gap 0 joins again
    ]
    const records = roundTrip(chunks)
    expect(records).toEqual([
      { type: 'text-chunks', time0: T, index: 0, dt: [0], texts: ['a'] },
      { type: 'text-chunks', time0: T + 0.25, index: 0, dt: [0, 1], texts: ['b', 'c'] },
      { type: 'text-chunks', time0: 2 ** 60, index: 0, dt: [0, 0], texts: ['d', 'e'] },
    ])
    for (const r of records) if ('dt' in r) for (const d of r.dt) expect(Number.isSafeInteger(d)).toBe(true)
  })

  it('empty deltas and unicode survive; every chunk kind round-trips', () => {
    const chunks: TimedChunk[] = [
      { time: T, chunk: { type: 'block-start', index: 0, blockType: 'reasoning' } },
      { time: T, chunk: reason(0, '') },
      { time: T + 1, chunk: reason(0, 'é🙂\u0000') },
      { time: T + 2, chunk: { type: 'block-end', index: 0, block: { type: 'reasoning', text: 'é🙂\u0000' } } },
      { time: T + 2, chunk: { type: 'block-start', index: 1, blockType: 'image' } },
      { time: T + 3, chunk: { type: 'block-end', index: 1, block: { type: 'image', mimeType: 'image/png', data: 'AAAA' } } },
      { time: T + 5, chunk: { type: 'finish', reason: { kind: 'error', failure: { message: 'boom', code: 'SERVER', status: 500 } }, replayState: { opaque: [1, 'x'] } } },
    ]
    roundTrip(chunks)
  })
})

describe('block assembly (SPEC §9.5, §18.8)', () => {
  it('assembles deltas into blocks', () => {
    const a = assembleBlocks([
      { type: 'block-start', index: 0, blockType: 'reasoning' },
      reason(0, 'hmm'),
      reason(0, '…'),
      text(1, 'Hel'),
      text(1, 'lo'),
      call(2, 'c1', '{"q":', 'search'),
      call(2, 'c1', '"x"}'),
      { type: 'usage', usage: { inputTokens: 1, outputTokens: 2 } },
      { type: 'usage', usage: { inputTokens: 10, outputTokens: 20 } },
      { type: 'finish', reason: { kind: 'tool-calls' }, replayState: { sig: 'abc' } },
    ])
    expect(a.content).toEqual([
      { type: 'reasoning', text: 'hmm…' },
      { type: 'text', text: 'Hello' },
      { type: 'tool-call', id: 'c1', name: 'search', arguments: '{"q":"x"}' },
    ])
    expect(a.usage).toEqual({ inputTokens: 10, outputTokens: 20 }) // the last reported usage
    expect(a.finish).toEqual({ kind: 'tool-calls' })
    expect(a.replayState).toEqual({ sig: 'abc' })
  })

  it('a block-end block wins over the deltas of its index', () => {
    const a = assembleBlocks([
      text(0, 'Hel'),
      text(0, 'lo'),
      { type: 'block-end', index: 0, block: { type: 'text', text: 'Hello, world' } },
      call(1, 'c1', '{"a":1', 'f'),
      { type: 'block-end', index: 1, block: { type: 'tool-call', id: 'c1', name: 'f', arguments: '{"a":1}' } },
      { type: 'finish', reason: { kind: 'stop' } },
    ])
    expect(a.content).toEqual([
      { type: 'text', text: 'Hello, world' },
      { type: 'tool-call', id: 'c1', name: 'f', arguments: '{"a":1}' },
    ])
  })

  it('a stream without a finish chunk counts as stop', () => {
    expect(assembleBlocks([text(0, 'hi')]).finish).toEqual({ kind: 'stop' })
    expect(assembleBlocks([]).finish).toEqual({ kind: 'stop' })
    expect(assembleBlocks([]).content).toEqual([])
  })

  it('a max-tokens finish drops every tool-call block, finished or not, and keeps the rest', () => {
    const a = assembleBlocks([
      text(0, 'partial '),
      call(1, 'c1', '{"a":1}', 'f'),
      { type: 'block-end', index: 1, block: { type: 'tool-call', id: 'c1', name: 'f', arguments: '{"a":1}' } },
      reason(2, 'more'),
      call(3, 'c2', '{"b":', 'g'),
      { type: 'finish', reason: { kind: 'max-tokens' } },
    ])
    expect(a.finish).toEqual({ kind: 'max-tokens' })
    expect(a.content).toEqual([
      { type: 'text', text: 'partial ' },
      { type: 'reasoning', text: 'more' },
    ])
    // any other finish keeps tool calls
    expect(assembleBlocks([call(0, 'c1', '{}', 'f'), { type: 'finish', reason: { kind: 'stop' } }]).content).toHaveLength(1)
  })

  it('assembles what the compact stream expands to (replay never needs live frames)', () => {
    const chunks: TimedChunk[] = [
      { time: T, chunk: text(0, 'a') },
      { time: T + 1, chunk: text(0, 'b') },
      { time: T + 2, chunk: call(1, 'c1', '{}', 'f') },
      { time: T + 3, chunk: { type: 'finish', reason: { kind: 'tool-calls' } } },
    ]
    const direct = assembleBlocks(chunks.map((c) => c.chunk))
    const replayed = assembleBlocks(expandStream(accumulate(chunks)).map((c) => c.chunk))
    expect(replayed).toEqual(direct)
    expect(direct.content).toEqual([{ type: 'text', text: 'ab' }, { type: 'tool-call', id: 'c1', name: 'f', arguments: '{}' }])
  })
})

describe('interrupted prefix (SPEC §9.5, §18.8)', () => {
  it('keeps only non-blank text and reasoning, in order', () => {
    const content: ContentBlock[] = [
      { type: 'reasoning', text: 'thinking' },
      { type: 'text', text: '   \n\t' },
      { type: 'text', text: 'Hello' },
      { type: 'tool-call', id: 'c1', name: 'f', arguments: '{"a":1}' },
      { type: 'reasoning', text: '' },
      { type: 'image', mimeType: 'image/png', data: 'AAAA' },
      { type: 'tool-call', id: 'c2', name: 'g', arguments: '{"b' },
      { type: 'text', text: ' world' },
    ]
    expect(interruptedPrefix(content)).toEqual([
      { type: 'reasoning', text: 'thinking' },
      { type: 'text', text: 'Hello' },
      { type: 'text', text: ' world' },
    ])
  })
  it('is empty when nothing visible was streamed', () => {
    expect(interruptedPrefix([{ type: 'text', text: ' ' }, { type: 'tool-call', id: 'c', name: 'f', arguments: '{}' }])).toEqual([])
    expect(interruptedPrefix([])).toEqual([])
  })
})
