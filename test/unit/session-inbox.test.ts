// The inbox fold of SPEC §4: splice normalization (§4.2), no-op splices, id uniqueness, the fold
// and its fatal load errors (§4.1), claim (§4.5), clear (§4.3) and the routing of a delivery (§4.4,
// §5.4, §18.4).

import { describe, expect, it } from 'vitest'
import {
  applySplice,
  assertLosslessJson,
  emptyInbox,
  foldInbox,
  InboxError,
  normalizeSplice,
  planClaim,
  planClear,
  planDelivery,
  planSplice,
  SessionState,
  type Inbox,
  type InboxTarget,
  type Json,
  type SessionEvent,
  type SplicedData,
  type UserMessage,
} from '../../src/session/index.js'

const msg = (id: string, text = id): UserMessage => ({ id, role: 'user', content: [{ type: 'text', text }], source: { kind: 'user' } })
const ids = (l: UserMessage[]) => l.map((m) => m.id)
const inboxOf = (nextTurn: string[], nextStep: string[]): Inbox => ({ nextTurn: nextTurn.map((i) => msg(i)), nextStep: nextStep.map((i) => msg(i)) })

/** A log of splice events (the shape stored in agent/inbox/spliced). */
function spliceLog(datas: SplicedData[]): SessionEvent[] {
  return datas.map((d, i) => ({ seq: i, time: 1000 + i, type: 'agent/inbox/spliced', data: d as unknown as Json }))
}

describe('normalizeSplice (SPEC §4.2 step 1)', () => {
  it.each([
    // [length, start, deleteCount] → [start, deleteCount]
    [5, 2, 1, 2, 1],
    [5, 2.9, 1.9, 2, 1], // truncate toward zero
    [5, -1.5, 1, 4, 1], // truncate toward zero: -1.5 → -1 → from the end
    [5, NaN, 2, 0, 2], // NaN start → 0
    [5, 1, NaN, 1, 0], // NaN deleteCount → 0
    [5, -2, 5, 3, 2], // negative counts from the end; delete clamped to length − start
    [5, -9, 1, 0, 1], // floored at 0
    [5, -Infinity, 1, 0, 1],
    [5, 7, 3, 5, 0], // past the end → length, nothing to delete
    [5, Infinity, 1, 5, 0],
    [5, 0, -3, 0, 0], // negative deleteCount → 0
    [5, 1, Infinity, 1, 4],
    [5, 3, 99, 3, 2],
    [0, 0, 1, 0, 0],
    [0, -1, 1, 0, 0],
  ])('length %d, splice(%d, %d) → (%d, %d)', (length, start, del, s, d) => {
    expect(normalizeSplice(length, start, del)).toEqual({ start: s, deleteCount: d })
    // the same as Array.prototype.splice does
    const arr = Array.from({ length }, (_, i) => i)
    const removed = arr.splice(start, del)
    expect(removed).toEqual(Array.from({ length: d }, (_, i) => s + i))
  })
})

describe('normalized coordinates are lossless JSON (SPEC §4.2 steps 1 and 3, §3.1.3)', () => {
  it('a start in (-1, 0) truncates to 0, not -0, so the splice it plans can be logged', () => {
    // Array.prototype.splice treats -0.5 as 0 (ToIntegerOrInfinity yields the mathematical 0)
    const n = normalizeSplice(5, -0.5, 1)
    expect(Object.is(n.start, 0)).toBe(true)
    const d = planSplice(inboxOf(['a', 'b'], []), 'next-turn', -0.5, 1, [], 'canceled')!
    expect(d).not.toBeNull()
    expect(Object.is(d.start, 0)).toBe(true)
    expect(() => assertLosslessJson(d)).not.toThrow()
  })
  it('a deleteCount in (-1, 0) clamps to 0, not -0', () => {
    expect(Object.is(normalizeSplice(5, 1, -0.5).deleteCount, 0)).toBe(true)
  })
})

describe('planSplice (SPEC §4.2 steps 2–4)', () => {
  it('returns null when nothing is removed or inserted', () => {
    const inbox = inboxOf(['a', 'b'], ['s'])
    expect(planSplice(inbox, 'next-turn', 0, 0, [])).toBeNull()
    expect(planSplice(inbox, 'next-turn', 5, 3, [])).toBeNull() // past the end: nothing to delete
    expect(planSplice(inbox, 'next-step', 1, 1, [])).toBeNull()
    expect(planSplice(inbox, 'next-turn', 0, -1, [], 'canceled')).toBeNull()
    expect(planSplice(emptyInbox(), 'next-step', 0, 10, [])).toBeNull()
  })
  it('writes normalized coordinates, omits removedCount when 0 and outcome unless something is removed', () => {
    const inbox = inboxOf(['a', 'b', 'c'], [])
    expect(planSplice(inbox, 'next-turn', -1, 1, [], 'canceled')).toEqual({ target: 'next-turn', start: 2, removedCount: 1, inserted: [], outcome: 'canceled' })
    const ins = planSplice(inbox, 'next-turn', 99, 0, [msg('d')])!
    expect(ins).toEqual({ target: 'next-turn', start: 3, inserted: [msg('d')] })
    expect('removedCount' in ins).toBe(false)
    const insCanceled = planSplice(inbox, 'next-turn', 0, 0, [msg('e')], 'canceled')!
    expect('outcome' in insCanceled).toBe(false)
    // a plain removal (claim-style) carries no outcome
    expect(planSplice(inbox, 'next-turn', 0, 1, [])).toEqual({ target: 'next-turn', start: 0, removedCount: 1, inserted: [] })
  })
  it('rejects an id already pending in either list', () => {
    const inbox = inboxOf(['a'], ['s'])
    expect(() => planSplice(inbox, 'next-turn', 1, 0, [msg('a')])).toThrow(InboxError)
    expect(() => planSplice(inbox, 'next-turn', 1, 0, [msg('s')])).toThrow(InboxError)
    expect(() => planSplice(inbox, 'next-step', 0, 0, [msg('a')])).toThrow(InboxError)
  })
  it('rejects an id repeated within one insertion', () => {
    expect(() => planSplice(emptyInbox(), 'next-turn', 0, 0, [msg('x'), msg('y'), msg('x')])).toThrow(InboxError)
  })
  it('allows re-inserting the id that the same splice removes (replace(id, msg))', () => {
    const inbox = inboxOf(['a', 'b'], [])
    const d = planSplice(inbox, 'next-turn', 1, 1, [msg('b', 'edited')], 'canceled')!
    expect(d).toEqual({ target: 'next-turn', start: 1, removedCount: 1, inserted: [msg('b', 'edited')], outcome: 'canceled' })
    applySplice(inbox, d)
    expect(inbox.nextTurn).toEqual([msg('a'), msg('b', 'edited')])
  })
  it('does not mutate the inbox it plans against', () => {
    const inbox = inboxOf(['a'], ['s'])
    const copy = structuredClone(inbox)
    planSplice(inbox, 'next-turn', 0, 1, [msg('z')], 'canceled')
    expect(inbox).toEqual(copy)
  })
})

describe('applySplice and foldInbox (SPEC §4.1)', () => {
  it('applies a splice in place and returns the removed messages', () => {
    const inbox = inboxOf(['a', 'b', 'c'], ['s'])
    const removed = applySplice(inbox, { target: 'next-turn', start: 1, removedCount: 1, inserted: [msg('x'), msg('y')] })
    expect(ids(removed)).toEqual(['b'])
    expect(ids(inbox.nextTurn)).toEqual(['a', 'x', 'y', 'c'])
    expect(ids(inbox.nextStep)).toEqual(['s'])
  })
  it.each<[string, SplicedData]>([
    ['a start past the end', { target: 'next-turn', start: 3, inserted: [msg('z')] }],
    ['a negative start', { target: 'next-turn', start: -1, inserted: [msg('z')] }],
    ['a fractional start', { target: 'next-turn', start: 0.5, inserted: [msg('z')] }],
    ['a removal past the end', { target: 'next-turn', start: 1, removedCount: 2, inserted: [] }],
    ['a negative removedCount', { target: 'next-turn', start: 0, removedCount: -1, inserted: [] }],
    ['an unknown target', { target: 'later' as InboxTarget, start: 0, inserted: [msg('z')] }],
    ['a duplicate of a pending id (other list)', { target: 'next-turn', start: 0, inserted: [msg('s')] }],
    ['a duplicate of a pending id (same list)', { target: 'next-step', start: 1, inserted: [msg('s')] }],
    ['an id twice in one insertion', { target: 'next-step', start: 0, inserted: [msg('q'), msg('q')] }],
  ])('rejects %s with an InboxError and changes nothing', (_name, d) => {
    const inbox = inboxOf(['a', 'b'], ['s'])
    const copy = structuredClone(inbox)
    expect(() => applySplice(inbox, d)).toThrow(InboxError)
    expect(inbox).toEqual(copy)
  })

  it('folding the splices of a long random mutation sequence reproduces the inbox exactly', () => {
    // a seeded PRNG (mulberry32)
    let seed = 12345
    const rnd = () => {
      seed |= 0
      seed = (seed + 0x6d2b79f5) | 0
      let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296
    }
    const live = emptyInbox()
    // a reference model: plain arrays under Array.prototype.splice
    const ref: Record<InboxTarget, string[]> = { 'next-turn': [], 'next-step': [] }
    const log: SplicedData[] = []
    let n = 0
    for (let i = 0; i < 400; i++) {
      const target: InboxTarget = rnd() < 0.5 ? 'next-turn' : 'next-step'
      // fractional starts only where truncation cannot give -0 (covered by its own test above)
      const int = Math.floor(rnd() * 12) - 6
      const start = int >= 0 && rnd() < 0.2 ? int + 0.7 : int
      const del = Math.floor(rnd() * 4) - 1
      const inserted = Array.from({ length: Math.floor(rnd() * 3) }, () => msg(`m${n++}`))
      const d = planSplice(live, target, start, del, inserted, rnd() < 0.5 ? 'canceled' : undefined)
      const before = ref[target].slice()
      ref[target].splice(start, del, ...ids(inserted))
      if (!d) {
        expect(ref[target]).toEqual(before)
        continue
      }
      applySplice(live, d)
      log.push(structuredClone(d))
      expect(ids(live.nextTurn)).toEqual(ref['next-turn'])
      expect(ids(live.nextStep)).toEqual(ref['next-step'])
    }
    expect(log.length).toBeGreaterThan(100)
    expect(foldInbox(log)).toEqual(live)
    // and through the session fold
    expect(SessionState.fromEvents(spliceLog(log)).inbox).toEqual(live)
  })

  it('a SessionState fed a splice log with a duplicate id throws (fatal load error)', () => {
    const good: SplicedData[] = [
      { target: 'next-turn', start: 0, inserted: [msg('a')] },
      { target: 'next-step', start: 0, inserted: [msg('b')] },
    ]
    expect(SessionState.fromEvents(spliceLog(good)).inbox).toEqual(inboxOf(['a'], ['b']))
    expect(() => SessionState.fromEvents(spliceLog([...good, { target: 'next-step', start: 1, inserted: [msg('a')] }]))).toThrow(InboxError)
    expect(() => SessionState.fromEvents(spliceLog([...good, { target: 'next-turn', start: 1, inserted: [msg('c'), msg('c')] }]))).toThrow(InboxError)
    expect(() => foldInbox([...good, { target: 'next-turn', start: 0, inserted: [msg('b')] }])).toThrow(InboxError)
  })

  it('a SessionState fed an out-of-range splice throws (fatal load error)', () => {
    expect(() => SessionState.fromEvents(spliceLog([{ target: 'next-turn', start: 1, inserted: [msg('a')] }]))).toThrow(InboxError)
    expect(() => SessionState.fromEvents(spliceLog([{ target: 'next-turn', start: 0, inserted: [msg('a')] }, { target: 'next-turn', start: 0, removedCount: 2, inserted: [] }]))).toThrow(InboxError)
  })

  it('an id removed by a splice may be pending again later', () => {
    const log: SplicedData[] = [
      { target: 'next-turn', start: 0, inserted: [msg('a')] },
      { target: 'next-turn', start: 0, removedCount: 1, inserted: [] },
      { target: 'next-step', start: 0, inserted: [msg('a', 'again')] },
    ]
    expect(foldInbox(log)).toEqual({ nextTurn: [], nextStep: [msg('a', 'again')] })
  })
})

describe('planClaim (SPEC §4.5)', () => {
  it('at a turn boundary takes all next-step input, then the first queued prompt', () => {
    const inbox = inboxOf(['p1', 'p2'], ['s1', 's2'])
    const { splices, claimed } = planClaim(inbox, 'next-turn')
    expect(ids(claimed)).toEqual(['s1', 's2', 'p1'])
    expect(splices).toEqual([
      { target: 'next-step', start: 0, removedCount: 2, inserted: [] },
      { target: 'next-turn', start: 0, removedCount: 1, inserted: [] },
    ])
    for (const d of splices) expect('outcome' in d).toBe(false)
    for (const d of splices) applySplice(inbox, d)
    expect(inbox).toEqual(inboxOf(['p2'], []))
  })
  it('at a step boundary takes next-step input only', () => {
    const inbox = inboxOf(['p1'], ['s1'])
    const { splices, claimed } = planClaim(inbox, 'next-step')
    expect(ids(claimed)).toEqual(['s1'])
    expect(splices).toEqual([{ target: 'next-step', start: 0, removedCount: 1, inserted: [] }])
    const none = planClaim(inboxOf(['p1'], []), 'next-step')
    expect(none).toEqual({ splices: [], claimed: [] })
  })
  it('at a turn boundary with empty next-step takes one prompt; with nothing pending takes nothing', () => {
    expect(ids(planClaim(inboxOf(['p1', 'p2'], []), 'next-turn').claimed)).toEqual(['p1'])
    expect(planClaim(emptyInbox(), 'next-turn')).toEqual({ splices: [], claimed: [] })
  })
})

describe('planClear (SPEC §4.3)', () => {
  it('cancels all next-step, then all next-turn', () => {
    const inbox = inboxOf(['p1', 'p2'], ['s1'])
    const splices = planClear(inbox)
    expect(splices).toEqual([
      { target: 'next-step', start: 0, removedCount: 1, inserted: [], outcome: 'canceled' },
      { target: 'next-turn', start: 0, removedCount: 2, inserted: [], outcome: 'canceled' },
    ])
    for (const d of splices) applySplice(inbox, d)
    expect(inbox).toEqual(emptyInbox())
  })
  it('writes nothing for an empty list', () => {
    expect(planClear(emptyInbox())).toEqual([])
    expect(planClear(inboxOf(['p1'], []))).toEqual([{ target: 'next-turn', start: 0, removedCount: 1, inserted: [], outcome: 'canceled' }])
    expect(planClear(inboxOf([], ['s1', 's2']))).toEqual([{ target: 'next-step', start: 0, removedCount: 2, inserted: [], outcome: 'canceled' }])
  })
})

describe('planDelivery (SPEC §4.4 send, §5.4 latch, §18.4)', () => {
  const idle = { idle: true, maintenance: false, cancelling: false }
  const running = { idle: false, maintenance: false, cancelling: false }
  const maintenance = { idle: false, maintenance: true, cancelling: false }
  const cancelling = { idle: false, maintenance: false, cancelling: true }

  it.each([
    // route, view, target, flags
    ['followup', idle, 'next-turn', { runState: 'wanted' }],
    ['steer', idle, 'next-step', { runState: 'wanted' }],
    ['inject', idle, 'next-step', {}],
    ['followup', running, 'next-turn', {}],
    ['steer', running, 'next-step', {}],
    ['inject', running, 'next-step', {}],
    ['followup', maintenance, 'next-turn', { wakeLatched: true }],
    ['steer', maintenance, 'next-step', { wakeLatched: true }],
    ['inject', maintenance, 'next-step', {}],
    // waking input after a cancel request goes to next-turn, whatever was asked, and latches
    ['followup', cancelling, 'next-turn', { wakeLatched: true }],
    ['steer', cancelling, 'next-turn', { wakeLatched: true }],
    ['inject', cancelling, 'next-step', {}],
  ] as const)('%s while %o → %s, %o', (route, view, target, flags) => {
    const inbox = inboxOf(['t1'], ['s1'])
    const p = planDelivery(inbox, route, msg('new'), view)
    expect(p.target).toBe(target)
    expect(p.flags).toEqual(flags)
    // appended at the end of its list, nothing removed
    expect(p.splice).toEqual({ target, start: 1, inserted: [msg('new')] })
    // planning changes nothing
    expect(inbox).toEqual(inboxOf(['t1'], ['s1']))
  })

  it('a cancel pending while idle still latches rather than wanting a wake (the cancelled activity may be closing)', () => {
    expect(planDelivery(emptyInbox(), 'followup', msg('m'), { idle: true, maintenance: false, cancelling: true }).flags).toEqual({ wakeLatched: true })
  })

  it('reads only what the route needs: an inject never looks at the view', () => {
    const view = {
      get idle(): boolean {
        throw new Error('read idle')
      },
      get maintenance(): boolean {
        throw new Error('read maintenance')
      },
      get cancelling(): boolean {
        throw new Error('read cancelling')
      },
    }
    expect(planDelivery(emptyInbox(), 'inject', msg('m'), view)).toMatchObject({ target: 'next-step', flags: {} })
  })

  it('an id already pending in either list is an InboxError, before anything is planned', () => {
    const inbox = inboxOf(['a'], ['b'])
    expect(() => planDelivery(inbox, 'followup', msg('b'), idle)).toThrow(InboxError)
    expect(() => planDelivery(inbox, 'inject', msg('a'), idle)).toThrow(InboxError)
  })
})
