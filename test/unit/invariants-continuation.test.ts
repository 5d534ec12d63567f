// The §15 checker's invariants 15–17 (SPEC §19.7) catch what they name: a valid continuation log
// passes, and each broken variant is reported.

import { describe, expect, it } from 'vitest'
import type { SessionEvent } from '../../src/session/index.js'
import { violations } from '../helpers/invariants.js'

const msg = (id: string) => ({ id, role: 'user', content: [{ type: 'text', text: id }], source: { kind: 'user' } })

/** A log: p1 queued, turn 1 claims it and dies before admission (repaired), turn 2 continues it and admits p1. */
function base(): Array<Omit<SessionEvent, 'seq' | 'time'>> {
  return [
    { type: 'agent/inbox/spliced', data: { target: 'next-turn', start: 0, inserted: [msg('p1')] } },
    { type: 'turn/start', data: { turn: 1 } },
    { type: 'agent/inbox/spliced', data: { target: 'next-turn', start: 0, removedCount: 1, inserted: [] } },
    { type: 'turn/end', data: { turn: 1, reason: { kind: 'interrupted' } } },
    { type: 'session/end-seed', data: {} },
    { type: 'turn/start', data: { turn: 2, continues: 1 } },
    { type: 'step/start', data: { turn: 2, step: 1 } },
    { type: 'user/message', data: msg('p1'), surfaceOp: 'append' },
    { type: 'step/end', data: { turn: 2, step: 1 } },
    { type: 'turn/end', data: { turn: 2, reason: { kind: 'completed' } } },
  ]
}
const seal = (ds: Array<Omit<SessionEvent, 'seq' | 'time'>>): SessionEvent[] => ds.map((d, i) => ({ ...d, seq: i, time: 1000 }) as SessionEvent)

describe('SPEC §19.7 in the §15 checker', () => {
  it('a continuation admitting its carried message passes', () => {
    expect(violations(seal(base()))).toEqual([])
  })

  it('15: a claimed message admitted by a turn that does not continue its claimer', () => {
    const ds = base()
    ds[5] = { type: 'turn/start', data: { turn: 2 } }
    expect(violations(seal(ds)).join('\n')).toMatch(/claimed by turn 1 is admitted in turn 2, which does not continue it/)
  })

  it('15 holds along a chain of continuations', () => {
    const ds = base()
    ds.splice(5, 0, { type: 'turn/start', data: { turn: 2, continues: 1 } }, { type: 'turn/end', data: { turn: 2, reason: { kind: 'interrupted' } } })
    ds[7] = { type: 'turn/start', data: { turn: 3, continues: 2 } }
    ds[8] = { type: 'step/start', data: { turn: 3, step: 1 } }
    ds[10] = { type: 'step/end', data: { turn: 3, step: 1 } }
    ds[11] = { type: 'turn/end', data: { turn: 3, reason: { kind: 'completed' } } }
    expect(violations(seal(ds))).toEqual([])
  })

  it('16: the same id admitted twice', () => {
    const ds = base()
    ds.splice(8, 0, { type: 'user/message', data: msg('p1'), surfaceOp: 'append' })
    expect(violations(seal(ds)).join('\n')).toMatch(/message p1 admitted twice/)
  })

  it('17: continuing a turn that did not end interrupted, or one already continued', () => {
    const ds = base()
    ds[3] = { type: 'turn/end', data: { turn: 1, reason: { kind: 'completed' } } }
    expect(violations(seal(ds)).join('\n')).toMatch(/continues 1, which did not end interrupted/)
    const twice = base()
    twice[9] = { type: 'turn/end', data: { turn: 2, reason: { kind: 'interrupted' } } }
    twice.push({ type: 'turn/start', data: { turn: 3, continues: 1 } }, { type: 'turn/end', data: { turn: 3, reason: { kind: 'completed' } } })
    expect(violations(seal(twice)).join('\n')).toMatch(/turn 1 is continued twice/)
  })
})
