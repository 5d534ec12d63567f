// Side rows ride in the commit (DESIGN.md §3) on real PostgreSQL and PGlite: a side row exists exactly
// when its unit's events do — in the same statement on the fast path (appendConditional, conditioned on
// the row move) and in the same transaction on the locked path (writeEvents) — and through the
// driver's SessionLog on both of its paths, fenced by the lease like the events.

import crypto from 'node:crypto'
import pino from 'pino'
import { describe, expect, it } from 'vitest'
import { KeyedMutex, LeaseLostError, Publisher, SessionLog } from '../../src/agent/index.js'
import { LocalHub } from '../../src/bus/index.js'
import { createRoot } from '../../src/hooks/index.js'
import { SessionState, type Draft } from '../../src/session/index.js'
import { appendConditional, findIdempotency, insertSession, listPending, lockLean, NOW_MS, readEvents, stamp, writeEvents, type SideRow } from '../../src/store/index.js'
import { DB_KINDS, tenantDb } from '../helpers/db.js'

const note = (text: string): Draft => ({ type: 'test/note', data: { text } })
const pendingInsert = (callId: string, kind: 'client' | 'approval' = 'client'): SideRow => ({ kind: 'pending-insert', call: { callId, kind, name: 'tool', arguments: '{}' } })

describe.each(DB_KINDS)('side rows on %s', (kind) => {
  const env = tenantDb(kind, 'side-rows')

  let n = 0
  async function newSession(lease?: { owner: string; token: number }): Promise<{ key: string; id: string }> {
    const key = crypto.randomUUID()
    const id = `side-${++n}`
    await insertSession(env.db, { key, tenantId: env.tenantId, id, model: 'test/scripted', system: '', tools: [], metadata: {}, createHash: 'h', createdAt: 1_700_000_000_000 })
    if (lease) await env.db.query(`UPDATE sessions SET lease_owner = $2, lease_token = $3, lease_expires_at = ${NOW_MS} + 60000 WHERE key = $1`, [key, lease.owner, lease.token])
    return { key, id }
  }
  const pendingIds = async (key: string) => (await listPending(env.db, key, false)).map((p) => p.callId)
  const seqs = async (key: string) => (await readEvents(env.db, key)).map((e) => e.seq)
  /** The fast path's one statement: the row moves only if still at nextSeq. */
  const fast = (key: string, nextSeq: number, drafts: Draft[], side: SideRow[]) => appendConditional(env.db, key, { nextSeq }, stamp({ nextSeq, lastTime: 0 }, drafts, 1_700_000_000_001), {}, side)

  it('fast path: a pending row is inserted with the events that moved the row, and not at all when the row had moved', async () => {
    const { key } = await newSession()
    expect(await fast(key, 0, [note('call a')], [pendingInsert('a')])).not.toBeNull()
    expect(await seqs(key)).toEqual([0])
    expect(await listPending(env.db, key)).toEqual([{ callId: 'a', kind: 'client', name: 'tool', arguments: '{}', answered: false, answer: undefined }])
    // a stale position: no event, no side row
    expect(await fast(key, 0, [note('call b')], [pendingInsert('b')])).toBeNull()
    expect(await seqs(key)).toEqual([0])
    expect(await pendingIds(key)).toEqual(['a'])
  })

  it('fast path: a pending delete removes only its calls, only with the move; without callIds it removes all', async () => {
    const { key } = await newSession()
    await fast(key, 0, [note('calls')], [pendingInsert('a'), pendingInsert('b'), pendingInsert('c', 'approval')])
    expect(await pendingIds(key)).toEqual(['a', 'b', 'c'])
    expect(await fast(key, 0, [note('stale')], [{ kind: 'pending-delete', callIds: ['a'] }])).toBeNull()
    expect(await pendingIds(key)).toEqual(['a', 'b', 'c'])
    expect(await fast(key, 1, [note('result a')], [{ kind: 'pending-delete', callIds: ['a'] }])).not.toBeNull()
    expect(await pendingIds(key)).toEqual(['b', 'c'])
    expect(await fast(key, 2, [note('repair')], [{ kind: 'pending-delete' }])).not.toBeNull()
    expect(await pendingIds(key)).toEqual([])
    expect(await seqs(key)).toEqual([0, 1, 2])
  })

  it('fast path: a side row that breaks a constraint fails the whole statement — no event, no row move', async () => {
    const { key } = await newSession()
    const idem = (seq: number): SideRow => ({ kind: 'idempotency', messageId: 'm1', route: 'followup', bodyHash: 'h', seq })
    await fast(key, 0, [note('first')], [idem(0)])
    expect(await findIdempotency(env.db, key, 'm1')).toEqual({ messageId: 'm1', route: 'followup', bodyHash: 'h', seq: 0 })
    const err = await fast(key, 1, [note('again')], [idem(1)]).catch((e) => e)
    expect(err?.code).toBe('23505')
    expect(await seqs(key)).toEqual([0])
    expect((await lockLean(env.db, key, false))!.nextSeq).toBe(1)
    expect(await findIdempotency(env.db, key, 'm1')).toMatchObject({ seq: 0 })
  })

  it('locked path: side rows are written in the unit\'s transaction, and roll back with it', async () => {
    const { key } = await newSession()
    await env.db.transaction(async (tx) => {
      const row = (await lockLean(tx, key))!
      await writeEvents(tx, row, stamp(row, [note('call a')]), {}, [pendingInsert('a')])
    })
    expect(await pendingIds(key)).toEqual(['a'])
    await expect(
      env.db.transaction(async (tx) => {
        const row = (await lockLean(tx, key))!
        await writeEvents(tx, row, stamp(row, [note('result a, call b')]), {}, [{ kind: 'pending-delete', callIds: ['a'] }, pendingInsert('b')])
        throw new Error('rolled back')
      }),
    ).rejects.toThrow('rolled back')
    expect(await pendingIds(key)).toEqual(['a'])
    expect(await seqs(key)).toEqual([0])
    // side rows alone (no events) in a transaction: an approval opening after its tool/call
    await env.db.transaction(async (tx) => {
      const row = (await lockLean(tx, key))!
      await writeEvents(tx, row, [], {}, [pendingInsert('c', 'approval')])
    })
    expect(await pendingIds(key)).toEqual(['a', 'c'])
    expect(await seqs(key)).toEqual([0])
  })

  describe('through SessionLog', () => {
    const log = pino({ level: 'silent' })
    const publisher = new Publisher(new LocalHub(), createRoot(), log)
    const mutex = new KeyedMutex()
    const lease = { owner: 'a', token: 1 }
    const sessionLog = async () => {
      const { key, id } = await newSession(lease)
      return { key, sl: new SessionLog({ db: env.db, publisher, mutex, log }, key, id, new SessionState(), lease) }
    }

    it('on the fast path the side row commits with the unit; on the locked path (the row moved meanwhile) too', async () => {
      const { key, sl } = await sessionLog()
      await sl.commit((u) => {
        u.add(note('call a'))
        u.side(pendingInsert('a'))
      })
      expect(await pendingIds(key)).toEqual(['a'])
      // another writer moves the row: the fast path's statement finds next_seq changed, the locked path writes the unit
      await env.db.transaction(async (tx) => {
        const row = (await lockLean(tx, key))!
        await writeEvents(tx, row, stamp(row, [note('someone else')]))
      })
      const r = await sl.commit((u) => {
        u.add(note('result a, call b'))
        u.side({ kind: 'pending-delete', callIds: ['a'] })
        u.side(pendingInsert('b'))
      })
      expect(r.events.map((e) => e.seq)).toEqual([2])
      expect(await pendingIds(key)).toEqual(['b'])
      // side rows alone
      await sl.commit((u) => u.side(pendingInsert('c', 'approval')))
      expect(await pendingIds(key)).toEqual(['b', 'c'])
      expect(await seqs(key)).toEqual([0, 1, 2])
    })

    it('a unit fenced by a lost lease writes no side row, on either path', async () => {
      const { key, sl } = await sessionLog()
      await sl.commit((u) => void u.add(note('first')))
      await env.db.query("UPDATE sessions SET lease_owner = 'b', lease_token = 2 WHERE key = $1", [key])
      await expect(sl.commit((u) => {
        u.add(note('call a'))
        u.side(pendingInsert('a'))
      })).rejects.toBeInstanceOf(LeaseLostError)
      await expect(sl.commit((u) => u.side(pendingInsert('b')))).rejects.toBeInstanceOf(LeaseLostError)
      expect(await pendingIds(key)).toEqual([])
      expect(await seqs(key)).toEqual([0])
    })

    it('a build that throws after naming a side row writes nothing', async () => {
      const { key, sl } = await sessionLog()
      await expect(sl.commit((u) => {
        u.add(note('call a'))
        u.side(pendingInsert('a'))
        throw new Error('build failed')
      })).rejects.toThrow('build failed')
      expect(await pendingIds(key)).toEqual([])
      expect(await seqs(key)).toEqual([])
    })
  })
})
