// Session leases in store/leases.ts on real PostgreSQL and PGlite (SPEC §2.2, §13.3a; DESIGN.md §3
// Ownership): claim and takeover with a new fencing token, renewal of what an owner still holds,
// release, the idle release, and which sessions the takeover scan finds.

import crypto from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { claimLease, getSessionByKey, insertSession, NOW_MS, releaseIfIdle, releaseLease, renewLeases, takeoverCandidates } from '../../src/store/index.js'
import { DB_KINDS, tenantDb } from '../helpers/db.js'

describe.each(DB_KINDS)('leases on %s', (kind) => {
  const env = tenantDb(kind, 'leases')

  let n = 0
  async function newSession(o: { owner?: string; token?: number; expiresInMs?: number; runState?: string; openTurn?: number } = {}): Promise<string> {
    const key = crypto.randomUUID()
    await insertSession(env.db, { key, tenantId: env.tenantId, id: `lease-${++n}`, model: 'test/scripted', system: '', tools: [], metadata: {}, createHash: 'h', createdAt: Date.now() })
    await env.db.query(`UPDATE sessions SET lease_owner = $2, lease_token = $3, lease_expires_at = CASE WHEN $2::text IS NULL THEN NULL ELSE ${NOW_MS} + $4::bigint END, run_state = $5, open_turn = $6 WHERE key = $1`, [
      key,
      o.owner ?? null,
      o.token ?? 0,
      o.expiresInMs ?? 60000,
      o.runState ?? 'idle',
      o.openTurn ?? null,
    ])
    return key
  }
  const lease = async (key: string) => {
    const r = (await getSessionByKey(env.db, key))!
    return { owner: r.leaseOwner, token: r.leaseToken, expiresAt: r.leaseExpiresAt }
  }
  const claim = (key: string, owner: string, o: { skipLocked?: boolean } = {}) => env.db.transaction((tx) => claimLease(tx, key, owner, 5000, o))

  it('claims a free lease with a new token; a live lease of another owner is refused; an expired one is taken over', async () => {
    const free = await newSession()
    const c = await claim(free, 'a')
    expect(c).toMatchObject({ takeover: false, row: { key: free, leaseOwner: 'a', leaseToken: 1 } })
    expect((await lease(free)).expiresAt).toBeGreaterThan(Date.now() - 1000)

    expect(await claim(free, 'b')).toBeNull()
    expect(await lease(free)).toMatchObject({ owner: 'a', token: 1 })

    const expired = await newSession({ owner: 'a', token: 4, expiresInMs: -1000 })
    expect(await claim(expired, 'b')).toMatchObject({ takeover: true, row: { leaseOwner: 'b', leaseToken: 5 } })
    expect(await claim(crypto.randomUUID(), 'b')).toBeNull()
  })

  it('an owner reclaiming its own lease gets a new token (a new loop instance), without a takeover', async () => {
    const key = await newSession({ owner: 'a', token: 7 })
    expect(await claim(key, 'a')).toMatchObject({ takeover: false, row: { leaseOwner: 'a', leaseToken: 8 } })
  })

  // PGlite has one connection: a second transaction waits for the first, so nothing is ever locked by another
  it.skipIf(kind === 'pglite')('SKIP LOCKED: a row locked by another transaction is passed over, not waited for', async () => {
    const key = await newSession()
    let release!: () => void
    const holding = new Promise<void>((r) => (release = r))
    let locked!: () => void
    const isLocked = new Promise<void>((r) => (locked = r))
    const holder = env.db.transaction(async (tx) => {
      await tx.query('SELECT 1 FROM sessions WHERE key = $1 FOR UPDATE', [key])
      locked()
      await holding
    })
    await isLocked
    expect(await claim(key, 'b', { skipLocked: true })).toBeNull()
    release()
    await holder
    expect(await claim(key, 'b', { skipLocked: true })).toMatchObject({ row: { leaseOwner: 'b' } })
  })

  it('renewal extends only what the owner still holds and answers their tokens', async () => {
    const mine = await newSession({ owner: 'a', token: 3, expiresInMs: 100 })
    const taken = await newSession({ owner: 'b', token: 9 })
    const before = (await lease(mine)).expiresAt!
    const held = await renewLeases(env.db, [mine, taken], 'a', 60000)
    expect([...held]).toEqual([[mine, 3]])
    expect((await lease(mine)).expiresAt!).toBeGreaterThan(before + 30000)
    expect(await lease(taken)).toMatchObject({ owner: 'b', token: 9 })
  })

  it('release: only by its owner, and only under its token when one is given', async () => {
    const key = await newSession({ owner: 'a', token: 2 })
    await releaseLease(env.db, key, 'b')
    await releaseLease(env.db, key, 'a', 1)
    expect(await lease(key)).toMatchObject({ owner: 'a', token: 2 })
    await releaseLease(env.db, key, 'a', 2)
    expect(await lease(key)).toEqual({ owner: null, token: 2, expiresAt: null })
    const other = await newSession({ owner: 'a', token: 5 })
    await releaseLease(env.db, other, 'a')
    expect((await lease(other)).owner).toBeNull()
  })

  it('the idle release lets go only of an idle row under the same lease, and only while the holder is idle too', async () => {
    const idle = await newSession({ owner: 'a', token: 1 })
    expect(await releaseIfIdle(env.db, idle, 'a', 1, () => false)).toBe(false)
    expect(await releaseIfIdle(env.db, idle, 'a', 2, () => true)).toBe(false)
    expect((await lease(idle)).owner).toBe('a')
    expect(await releaseIfIdle(env.db, idle, 'a', 1, () => true)).toBe(true)
    expect((await lease(idle)).owner).toBeNull()
    const wanted = await newSession({ owner: 'a', token: 1, runState: 'wanted' })
    expect(await releaseIfIdle(env.db, wanted, 'a', 1, () => true)).toBe(false)
    expect((await lease(wanted)).owner).toBe('a')
  })

  it('the takeover scan finds sessions with work or an open turn whose lease is free or expired', async () => {
    const wantedFree = await newSession({ runState: 'wanted' })
    const openExpired = await newSession({ owner: 'x', token: 1, expiresInMs: -1000, openTurn: 3 })
    const runningHeld = await newSession({ owner: 'x', token: 1, runState: 'running' })
    const idleFree = await newSession()
    const idleExpired = await newSession({ owner: 'x', token: 1, expiresInMs: -1000 })
    const found = await takeoverCandidates(env.db, 1000)
    expect(found).toEqual(expect.arrayContaining([wantedFree, openExpired]))
    for (const k of [runningHeld, idleFree, idleExpired]) expect(found).not.toContain(k)
  })
})
