// The event catalogue (SPEC §3.4, §3.6): a known event type with the wrong shape is refused before it
// can enter a log; tool-owned types (SPEC §11.9) may carry any JSON.

import { describe, expect, it } from 'vitest'
import { checkEventShape, EventShapeError, KNOWN_EVENT_TYPES, LogError, SessionState } from '../../src/session/index.js'

const user = { id: 'm1', role: 'user', content: [{ type: 'text', text: 'hi' }], source: { kind: 'user' } }
const good: Record<string, unknown> = {
  'agent/inbox/spliced': { target: 'next-turn', start: 0, inserted: [user] },
  'turn/start': { turn: 1 },
  'turn/end': { turn: 1, reason: { kind: 'completed' } },
  'step/start': { turn: 1, step: 1 },
  'step/end': { turn: 1, step: 1 },
  'system/message': { turn: 1, step: 1, message: { id: 's', role: 'system', content: [], source: { kind: 'plugin', plugin: 'system-prompt' } } },
  'user/message': user,
  'request/header': { header: { config: { provider: 'p', model: 'm' } }, reason: 'initial' },
  'request/context': { provider: 'p', model: 'm', contextWindow: 8192 },
  'assistant/message': { turn: 1, step: 1, message: { id: 'a', role: 'assistant', content: [], source: { kind: 'model', provider: 'p', model: 'm' } }, stream: [] },
  'assistant/attempt': { turn: 1, step: 1, stream: [] },
  'tool/call': { turn: 1, step: 1, callId: 'c', name: 'n', arguments: '{}' },
  'tool/result': { turn: 1, step: 1, message: { id: 'r', role: 'user', content: [{ type: 'tool-result', toolCallId: 'c', isError: false, content: [] }], source: { kind: 'tool', callId: 'c' } } },
  'session/end-seed': {},
  'llm/retry': { retryId: 'r', turn: 1, step: 1, provider: 'p', mode: 'normal', policyKey: '{}', retry: 1, maxRetries: 5, delayMs: 500, failure: { code: 'SERVER', message: 'x' } },
  'llm/retry-started': { retryId: 'r', turn: 1, step: 1, retry: 1 },
  'compaction/start': { compactionId: 'c', turn: null },
  'compaction/summary': { compactionId: 'c', summary: 's', shadowedRange: { start: 1, end: 2 }, shadowedSeqs: [1, 2], shadowedTokenCount: 10, provider: 'p', model: 'm' },
  'compaction/end': { compactionId: 'c', turn: 1 },
  'compaction/prune': { shadowedRange: { start: 1, end: 1 }, shadowedSeqs: [1], shadowedTokenCount: 10 },
}

const bad: Array<[string, unknown, RegExp]> = [
  ['agent/inbox/spliced', { target: 'elsewhere', start: 0, inserted: [] }, /target/],
  ['agent/inbox/spliced', { target: 'next-turn', start: -1, inserted: [] }, /start/],
  ['agent/inbox/spliced', { target: 'next-turn', start: 0, removedCount: 0, inserted: [] }, /removedCount/],
  ['agent/inbox/spliced', { target: 'next-turn', start: 0, inserted: [{ id: 'x', role: 'assistant', content: [], source: { kind: 'user' } }] }, /role/],
  ['agent/inbox/spliced', { target: 'next-turn', start: 0, inserted: [], outcome: 'lost' }, /outcome/],
  ['turn/start', { turn: 0 }, /turn/],
  ['turn/end', { turn: 1, reason: { kind: 'finished' } }, /reason/],
  ['step/start', { turn: 1 }, /step/],
  ['user/message', { ...user, role: 'system' }, /role/],
  ['user/message', { ...user, content: 'hi' }, /content/],
  ['request/header', { header: { config: { provider: 'p' } }, reason: 'initial' }, /header/],
  ['request/header', { header: { config: { provider: 'p', model: 'm' } }, reason: 'because' }, /reason/],
  ['request/header', { header: { config: { provider: 'p', model: 'm' } }, reason: 'change', startsSeries: false }, /startsSeries/],
  ['assistant/message', { ...(good['assistant/message'] as object), interrupted: false }, /interrupted/],
  ['assistant/attempt', { turn: 1, step: 1 }, /stream/],
  ['tool/call', { turn: 1, step: 1, callId: 'c', name: 'n', arguments: {} }, /arguments/],
  ['tool/result', { turn: 1, step: 1, message: { id: 'r', role: 'user', content: [{ type: 'text', text: 'x' }], source: { kind: 'tool', callId: 'c' } } }, /tool-result/],
  ['session/end-seed', { note: 'x' }, /\{\}/],
  ['compaction/start', { compactionId: 'c', turn: 'one' }, /turn/],
  ['compaction/end', { compactionId: 'c', turn: 1, error: 42 }, /error/],
]

describe('the event catalogue', () => {
  it('covers every loop- and plugin-owned type of SPEC §3.4 and §3.6', () => {
    expect([...KNOWN_EVENT_TYPES].sort()).toEqual(Object.keys(good).sort())
  })
  it.each(Object.entries(good))('accepts a well-formed %s', (type, data) => {
    expect(() => checkEventShape(type, data)).not.toThrow()
  })
  it.each(bad)('refuses a malformed %s (%#)', (type, data, why) => {
    expect(() => checkEventShape(type, data)).toThrow(EventShapeError)
    expect(() => checkEventShape(type, data)).toThrow(why)
  })
  it('lets tool-owned event types carry any JSON', () => {
    expect(() => checkEventShape('tool/progress', { percent: 50 })).not.toThrow()
  })
  it('keeps a malformed event out of the fold: the state is unchanged', () => {
    const s = new SessionState()
    expect(() => s.apply({ seq: 0, time: 1, type: 'turn/start', data: { turn: 'one' } })).toThrow(LogError)
    expect(s.nextSeq).toBe(0)
    expect(s.openTurn).toBeNull()
  })
})
