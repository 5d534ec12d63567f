// The in-process bus by concern (src/bus/local.ts): live frames reach a session's subscribers and the
// taps, doorbells ring subscribers (pokes) and wake handlers, invalidations reach every handler (null
// on a reset), commands run where a handler serves them. And manual compaction (agent/compact.ts)
// answers a busy Agent with session-busy from the typed AgentBusyError, any other failure as internal.

import { describe, expect, it } from 'vitest'
import { AgentBusyError, ManualCompaction, type Agent, type Compactor, type SessionHolder } from '../../src/agent/index.js'
import { LocalHub } from '../../src/bus/index.js'
import { ApiError } from '../../src/errors.js'
import type { SessionRow, StoredEvent } from '../../src/store/index.js'

describe('the local bus parts', () => {
  it('live frames and commits reach the session subscribers and the taps; a poke reaches them too; a reset re-reads and drops caches', async () => {
    const hub = new LocalHub()
    const seen: string[] = []
    const off = hub.live.subscribe('k', {
      commit: (n) => seen.push(`commit ${n.seq}`),
      live: (f) => seen.push(`live ${f.event}`),
      poke: () => seen.push('poke'),
      reset: () => seen.push('reset'),
    })
    hub.live.subscribe('other', { commit: () => seen.push('wrong session') })
    hub.live.tap((key, f) => seen.push(`tap ${key} ${f.event}`))
    hub.invalidations.on((t) => seen.push(`invalidated ${t}`))
    hub.live.publishCommit('k', [{ seq: 3 } as StoredEvent, { seq: 4 } as StoredEvent])
    hub.live.publishCommit('k', [])
    hub.live.publishLive('k', { event: 'x', data: 1 })
    hub.doorbells.poke('k')
    await hub.doorbells.pokeNow('k')
    await hub.invalidations.invalidate('t')
    hub.resetAll()
    off()
    hub.live.publishLive('k', { event: 'y', data: 1 })
    expect(seen).toEqual(['commit 4', 'tap k x', 'live x', 'poke', 'poke', 'invalidated t', 'reset', 'invalidated null', 'tap k y'])
    await hub.close()
  })

  it('a wake is taken by a handler that answers true; commands run where served, else no-holder; a failure keeps its code', async () => {
    const hub = new LocalHub()
    expect(hub.doorbells.wake('k')).toBe(false)
    const offWake = hub.doorbells.onWake((k) => k === 'k')
    expect(hub.doorbells.wake('k')).toBe(true)
    expect(hub.doorbells.wake('j')).toBe(false)
    offWake()
    expect(hub.doorbells.wake('k')).toBe(false)

    expect(await hub.commands.run({ id: '1', kind: 'x', sessionKey: 'k' })).toEqual({ ok: false, reason: 'no-holder' })
    hub.commands.serve((c) => (c.sessionKey === 'k' ? Promise.resolve(c.kind) : c.sessionKey === 'bad' ? Promise.reject(new ApiError('session-busy', 'busy')) : undefined))
    expect(await hub.commands.run({ id: '2', kind: 'x', sessionKey: 'k' })).toEqual({ ok: true, result: 'x' })
    expect(await hub.commands.run({ id: '3', kind: 'x', sessionKey: 'bad' })).toEqual({ ok: false, reason: 'error', error: { code: 'session-busy', message: 'busy' } })
    await hub.close()
  })
})

describe('manual compaction', () => {
  const row = { key: 'k' } as SessionRow
  const idle = { busy: false, state: { openCompaction: null } } as unknown as Agent
  const setup = (compactor: Compactor | undefined, o: { held?: Agent; claimed?: Agent | null; transient?: boolean } = {}) => {
    const hub = new LocalHub()
    const dropped: string[] = []
    const holder: SessionHolder = {
      agent: (key) => (key === 'k' ? o.held : undefined),
      claim: async () => (o.claimed === undefined ? idle : o.claimed),
      drop: async (key) => void dropped.push(key),
    }
    const m = new ManualCompaction({ holder, commands: hub.commands, compactor: () => compactor, transient: o.transient ?? false })
    m.serve()
    return { m, dropped }
  }
  const code = (p: Promise<unknown>) => p.then(() => 'none', (e: ApiError) => e.code)

  it('the holder compacts; a busy Agent (AgentBusyError) is session-busy, any other failure internal; without the plugin nothing is compacted', async () => {
    expect(await setup(async () => true, { held: idle }).m.compact(row)).toEqual({ compacted: true })
    expect(await setup(undefined, { held: idle }).m.compact(row)).toEqual({ compacted: false })
    expect(await code(setup(async () => Promise.reject(new AgentBusyError()), { held: idle }).m.compact(row))).toBe('session-busy')
    expect(await code(setup(async () => Promise.reject(new Error('maintenance needs an idle Agent, said the model')), { held: idle }).m.compact(row))).toBe('internal')
    const running = { busy: true, state: { openCompaction: null } } as unknown as Agent
    expect(await code(setup(async () => true, { held: running }).m.compact(row))).toBe('session-busy')
  })

  it('nobody holds the session: this process takes it, and an api process hands it back; taken elsewhere meanwhile is session-busy', async () => {
    const kept = setup(async () => true)
    expect(await kept.m.compact(row)).toEqual({ compacted: true })
    expect(kept.dropped).toEqual([])
    const handedBack = setup(async () => true, { transient: true })
    expect(await handedBack.m.compact(row)).toEqual({ compacted: true })
    expect(handedBack.dropped).toEqual(['k'])
    expect(await code(setup(async () => true, { claimed: null }).m.compact(row))).toBe('session-busy')
  })
})
