// The durable log on real PostgreSQL and PGlite: dense seqs allocated under the row lock (SPEC §2.3,
// §3.1.2), atomic units (SPEC §3.1.4), the row mirroring the log, paging, the wire form of an event
// (API.md §6), and lossless-JSON rejection before anything is written (SPEC §3.1.3).

import crypto from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { JsonValueError, SessionState, SurfaceError, type Draft, type Json, type SessionEvent, type Undo } from '../../src/session/index.js'
import {
  eventJson,
  getSessionByKey,
  insertSession,
  lockLean,
  lockSession,
  readEvents,
  readEventTexts,
  readSurfaceEvents,
  stamp,
  writeEvents,
  type Db,
  type Queryable,
  type StoredEvent,
} from '../../src/store/index.js'
import { DB_KINDS, openTestDb, type TestDb } from '../helpers/db.js'

describe.each(DB_KINDS)('session log store on %s', (kind) => {
  let t: TestDb
  let db: Db
  const tenantId = crypto.randomUUID()

  beforeAll(async () => {
    t = await openTestDb(kind)
    db = t.db
    await db.query('INSERT INTO tenants (id, name, created_at) VALUES ($1, $2, $3)', [tenantId, 'store-test', Date.now()])
  })
  afterAll(async () => {
    await t?.drop()
  })

  let n = 0
  async function newSession(createdAt = 1_700_000_000_000): Promise<string> {
    const key = crypto.randomUUID()
    const row = await insertSession(db, {
      key,
      tenantId,
      id: `s-${++n}`,
      model: 'test/scripted',
      system: '',
      tools: [],
      metadata: {},
      createHash: 'h',
      createdAt,
    })
    expect(row).not.toBeNull()
    return key
  }

  /** One append unit: lock the row, stamp, write — the shape of every session-mutating transaction. */
  async function append(key: string, drafts: Draft[], time?: number, lean = false): Promise<StoredEvent[]> {
    return db.transaction(async (tx) => {
      const row = lean ? await lockLean(tx, key) : await lockSession(tx, key)
      if (!row) throw new Error('no row')
      return writeEvents(tx, row, stamp(row, drafts, time))
    })
  }

  const count = async (key: string) => (await db.query<{ n: number }>('SELECT count(*)::int AS n FROM session_events WHERE session_key = $1', [key])).rows[0].n
  const rowOf = async (key: string) => (await getSessionByKey(db, key))!

  it('50 concurrent appends to one session get seqs 0..49 with no gap or duplicate, time non-decreasing by seq', async () => {
    const key = await newSession()
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) => append(key, [{ type: 'test/append', data: { n: i } }], undefined, i % 2 === 1)),
    )
    const seqs = results.map((r) => r[0].seq).sort((a, b) => a - b)
    expect(seqs).toEqual([...Array(50).keys()])
    const events = await readEvents(db, key)
    expect(events.map((e) => e.seq)).toEqual([...Array(50).keys()])
    // each append's event is stored at the seq it was given
    for (const [i, r] of results.entries()) {
      expect(r).toHaveLength(1)
      expect(events[r[0].seq].data).toEqual({ n: i })
      expect(events[r[0].seq].time).toBe(r[0].time)
    }
    for (let i = 1; i < events.length; i++) expect(events[i].time).toBeGreaterThanOrEqual(events[i - 1].time)
    const row = await rowOf(key)
    expect(row.nextSeq).toBe(50)
    expect(row.lastTime).toBe(events[49].time)
    expect(row.updatedAt).toBe(events[49].time)
  })

  it('concurrent multi-event units on one session stay contiguous blocks', async () => {
    const key = await newSession()
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, u) => append(key, [0, 1, 2].map((j) => ({ type: 'test/unit', data: { u, j } })))),
    )
    const events = await readEvents(db, key)
    expect(events.map((e) => e.seq)).toEqual([...Array(36).keys()])
    for (const [u, r] of results.entries()) {
      const s0 = r[0].seq
      expect(r.map((e) => e.seq)).toEqual([s0, s0 + 1, s0 + 2])
      expect(events.slice(s0, s0 + 3).map((e) => e.data)).toEqual([0, 1, 2].map((j) => ({ u, j })))
    }
  })

  it('appends to different sessions each number from 0', async () => {
    const a = await newSession()
    const b = await newSession()
    await Promise.all([append(a, [{ type: 'x', data: 1 }]), append(b, [{ type: 'x', data: 2 }]), append(a, [{ type: 'x', data: 3 }])])
    expect((await readEvents(db, a)).map((e) => e.seq)).toEqual([0, 1])
    expect((await readEvents(db, b)).map((e) => [e.seq, e.data])).toEqual([[0, 2]])
  })

  it('a transaction that throws after writeEvents leaves no event, no seq hole, and the row unmoved', async () => {
    const key = await newSession()
    await append(key, [{ type: 'a', data: 0 }, { type: 'a', data: 1 }], 1_700_000_001_000)
    const before = await rowOf(key)
    await expect(
      db.transaction(async (tx) => {
        const row = (await lockSession(tx, key))!
        const evs = await writeEvents(tx, row, stamp(row, [{ type: 'doomed', data: 'x' }, { type: 'doomed', data: 'y' }], 1_700_000_002_000), { openTurn: 7 })
        expect(evs.map((e) => e.seq)).toEqual([2, 3])
        // visible inside the transaction
        expect((await readEvents(tx, key)).length).toBe(4)
        throw new Error('boom after write')
      }),
    ).rejects.toThrow('boom after write')
    expect(await count(key)).toBe(2)
    expect(await rowOf(key)).toEqual(before)
    const [next] = await append(key, [{ type: 'b', data: 2 }], 1_700_000_003_000)
    expect(next.seq).toBe(2)
    expect((await readEvents(db, key)).map((e) => [e.seq, e.type])).toEqual([[0, 'a'], [1, 'a'], [2, 'b']])
  })

  it('writeEvents refuses events that do not continue the row', async () => {
    const key = await newSession()
    await append(key, [{ type: 'a', data: 0 }])
    await expect(
      db.transaction(async (tx) => {
        const row = (await lockSession(tx, key))!
        const stale = { ...row, nextSeq: 0 }
        await writeEvents(tx, row, stamp(stale, [{ type: 'dup', data: 0 }]))
      }),
    ).rejects.toThrow()
    await expect(
      db.transaction(async (tx) => {
        const row = (await lockSession(tx, key))!
        await writeEvents(tx, row, stamp({ nextSeq: 5, lastTime: row.lastTime }, [{ type: 'gap', data: 0 }]))
      }),
    ).rejects.toThrow()
    expect((await readEvents(db, key)).map((e) => e.type)).toEqual(['a'])
    expect((await rowOf(key)).nextSeq).toBe(1)
  })

  it('next_seq, last_time and updated_at move with the log; a patch moves in the same transaction', async () => {
    const createdAt = 1_700_000_000_000
    const key = await newSession(createdAt)
    let row = await rowOf(key)
    expect([row.nextSeq, row.lastTime, row.updatedAt, row.openTurn]).toEqual([0, 0, createdAt, null])
    await append(key, [{ type: 'a', data: null }], createdAt + 1000)
    row = await rowOf(key)
    expect([row.nextSeq, row.lastTime, row.updatedAt]).toEqual([1, createdAt + 1000, createdAt + 1000])
    await append(key, [1, 2, 3].map((i) => ({ type: 'b', data: i })), createdAt + 5000)
    row = await rowOf(key)
    expect([row.nextSeq, row.lastTime, row.updatedAt]).toEqual([4, createdAt + 5000, createdAt + 5000])
    const inbox = { nextTurn: [{ id: 'm1', role: 'user' as const, content: [{ type: 'text' as const, text: 'q' }], source: { kind: 'user' as const } }], nextStep: [] }
    await db.transaction(async (tx) => {
      const r = (await lockSession(tx, key))!
      await writeEvents(tx, r, stamp(r, [{ type: 'turn/start', data: { turn: 1 } }], createdAt + 6000), { openTurn: 1, inbox, runState: 'running' })
    })
    row = await rowOf(key)
    expect([row.nextSeq, row.lastTime, row.openTurn, row.runState]).toEqual([5, createdAt + 6000, 1, 'running'])
    expect(JSON.parse((await db.query<{ inbox: string }>('SELECT inbox FROM sessions WHERE key = $1', [key])).rows[0].inbox)).toEqual(inbox)
    // a patch without events leaves the log position alone
    await db.transaction(async (tx) => {
      const r = (await lockSession(tx, key))!
      await writeEvents(tx, r, [], { openTurn: null, runState: 'idle' })
    })
    row = await rowOf(key)
    expect([row.nextSeq, row.lastTime, row.updatedAt, row.openTurn, row.runState]).toEqual([5, createdAt + 6000, createdAt + 6000, null, 'idle'])
  })

  it('stamp never lets time go back: a row whose last time is ahead of the clock keeps that time (SPEC §3.1.2)', async () => {
    const key = await newSession()
    const future = Date.now() + 365 * 24 * 3600 * 1000
    await append(key, [{ type: 'a', data: 0 }], future)
    const [e] = await append(key, [{ type: 'b', data: 1 }])
    expect(e.time).toBe(future)
    expect((await rowOf(key)).lastTime).toBe(future)
  })

  it('readEvents / readEventTexts page by after, limit and upTo', async () => {
    const key = await newSession()
    const other = await newSession()
    await append(other, [{ type: 'noise', data: 0 }])
    for (let i = 0; i < 4; i++) await append(key, Array.from({ length: 5 }, (_, j) => ({ type: 'p', data: { i: i * 5 + j } })))
    await append(other, [{ type: 'noise', data: 1 }])
    const seqsOf = (rows: Array<{ seq: number }>) => rows.map((r) => r.seq)
    expect(seqsOf(await readEvents(db, key))).toEqual([...Array(20).keys()])
    expect(seqsOf(await readEvents(db, key, 9))).toEqual([10, 11, 12, 13, 14, 15, 16, 17, 18, 19])
    expect(seqsOf(await readEvents(db, key, 9, 5))).toEqual([10, 11, 12, 13, 14])
    expect(seqsOf(await readEvents(db, key, 19))).toEqual([])
    expect(seqsOf(await readEventTexts(db, key, -1, 100, 4))).toEqual([0, 1, 2, 3, 4])
    expect(seqsOf(await readEventTexts(db, key, 5, 3, 100))).toEqual([6, 7, 8])
    expect(seqsOf(await readEventTexts(db, key, 5, 100, 8))).toEqual([6, 7, 8])
    expect(seqsOf(await readEventTexts(db, key, 15, 100, 12))).toEqual([])
    // paging by `after` through the whole log gives each event once
    const paged: number[] = []
    for (let after = -1; ; ) {
      const page = await readEventTexts(db, key, after, 7)
      if (!page.length) break
      paged.push(...seqsOf(page))
      after = page[page.length - 1].seq
    }
    expect(paged).toEqual([...Array(20).keys()])
    // texts are the parsed events' wire form
    const texts = await readEventTexts(db, key, -1, 100)
    const events = await readEvents(db, key)
    for (const [i, e] of events.entries()) {
      expect(texts[i].body).toBe(eventJson(e))
      expect(e.json).toBe(texts[i].body)
      expect((e.data as { i: number }).i).toBe(i)
    }
    expect(seqsOf(await readEvents(db, other))).toEqual([0, 1])
  })

  it('the wire JSON of an event has exactly {seq,time,type,data,surfaceOp?,sourceEventSeqs?} (API.md §6)', async () => {
    const key = await newSession()
    const user = { id: 'u1', role: 'user', content: [{ type: 'text', text: 'hi' }], source: { kind: 'user' } }
    const drafts = [
      { type: 'turn/start', data: { turn: 1 } },
      { type: 'user/message', data: user, surfaceOp: 'append' },
      { type: 'user/message', data: { ...user, id: 'cp' }, surfaceOp: { op: 'replace', start: 1, end: 1 }, sourceEventSeqs: [1] },
      // members a draft must not smuggle onto the wire
      { type: 'my/event', data: { a: 1 }, surfaceOp: undefined, sourceEventSeqs: undefined, ignorable: true, json: 'x', extra: 1 },
    ] as unknown as Draft[]
    const written = await append(key, drafts, 1_700_000_000_500)
    const stored = await readEvents(db, key)
    const expectedKeys = [
      ['seq', 'time', 'type', 'data'],
      ['seq', 'time', 'type', 'data', 'surfaceOp'],
      ['seq', 'time', 'type', 'data', 'surfaceOp', 'sourceEventSeqs'],
      ['seq', 'time', 'type', 'data'],
    ]
    const bodies = (await readEventTexts(db, key, -1, 10)).map((r) => r.body)
    for (let i = 0; i < 4; i++) {
      const wire = JSON.parse(bodies[i])
      expect(Object.keys(wire)).toEqual(expectedKeys[i])
      expect(JSON.parse(eventJson(written[i]))).toEqual(wire)
      expect(Object.keys(JSON.parse(JSON.stringify(stored[i])))).toEqual(expectedKeys[i])
      expect(Object.keys(stored[i])).toEqual(expectedKeys[i])
    }
    expect(JSON.parse(bodies[2])).toEqual({ seq: 2, time: 1_700_000_000_500, type: 'user/message', data: { ...user, id: 'cp' }, surfaceOp: { op: 'replace', start: 1, end: 1 }, sourceEventSeqs: [1] })
    expect(JSON.parse(bodies[3]).data).toEqual({ a: 1 })
    // the surface read sees only surface types
    expect((await readSurfaceEvents(db, key)).map((e) => e.seq)).toEqual([1, 2])
  })

  it('lossless JSON survives the store exactly', async () => {
    const key = await newSession()
    const data = {
      text: 'é 🙂 \u2028 \u0000 "quoted" \\ \ud800',
      numbers: [0, 1, -1, 0.1, 1e-7, 5e-324, 2 ** 53 - 1, -(2 ** 53 - 1), 1.7976931348623157e308],
      nested: { a: [[], {}, [null, true, false]], b: '' },
      nullProto: Object.assign(Object.create(null), { k: 'v' }) as Json,
    }
    await append(key, [{ type: 'my/lossless', data }])
    const [e] = await readEvents(db, key)
    expect(e.data).toEqual(JSON.parse(JSON.stringify(data)))
    expect((e.data as any).text).toBe(data.text)
    expect((e.data as any).numbers).toEqual(data.numbers)
  })

  describe('lossless-JSON rejection writes nothing (SPEC §3.1.3)', () => {
    class Point {
      constructor(readonly x = 1) {}
    }
    const cyclic = (): Json => {
      const o: Record<string, unknown> = { a: 1 }
      o.self = o
      return o as Json
    }
    // eslint-disable-next-line no-sparse-arrays
    const sparse = (): Json => [1, , 3] as Json
    const bad: Array<[string, () => unknown]> = [
      ['undefined', () => ({ v: undefined })],
      ['undefined in an array', () => [1, undefined]],
      ['a function', () => ({ f: () => 1 })],
      ['a BigInt', () => ({ n: 10n })],
      ['a symbol', () => ({ s: Symbol('s') })],
      ['-0', () => ({ z: -0 })],
      ['NaN', () => ({ x: NaN })],
      ['Infinity', () => ({ x: Infinity })],
      ['-Infinity', () => ({ x: [-Infinity] })],
      ['a sparse array', sparse],
      ['a cycle', cyclic],
      ['a Date', () => ({ d: new Date(0) })],
      ['a Map', () => ({ m: new Map([[1, 2]]) })],
      ['a class instance', () => ({ p: new Point() })],
    ]

    /**
     * The append path: lock, fold the log, stamp, validate every draft by folding it (undoing the
     * unit on a throw), and write only if all of it folded.
     */
    async function validatedAppend(key: string, drafts: Draft[]): Promise<void> {
      await db.transaction(async (tx: Queryable) => {
        const row = (await lockSession(tx, key))!
        const state = SessionState.fromEvents(await readEvents(tx, key))
        const events: SessionEvent[] = stamp(row, drafts)
        const undos: Undo[] = []
        try {
          for (const e of events) undos.push(state.apply(e))
        } catch (err) {
          for (let i = undos.length - 1; i >= 0; i--) undos[i]()
          throw err
        }
        await writeEvents(tx, row, events)
      })
    }

    const allRows = async () => (await db.query('SELECT session_key, seq, time, type, body FROM session_events ORDER BY session_key, seq')).rows

    async function expectNothingWritten(key: string, drafts: Draft[], cls: new (...a: never[]) => Error) {
      const rowBefore = await rowOf(key)
      const tableBefore = await allRows()
      await expect(validatedAppend(key, drafts)).rejects.toBeInstanceOf(cls)
      expect(await allRows()).toEqual(tableBefore)
      expect(await rowOf(key)).toEqual(rowBefore)
    }

    it.each(bad)('%s in data is rejected and the table is unchanged', async (_name, make) => {
      const key = await newSession()
      await append(key, [{ type: 'ok', data: { fine: true } }])
      await expectNothingWritten(key, [{ type: 'my/event', data: make() as Json }], JsonValueError)
      // a multi-event unit with one bad event is discarded whole, and the folded state is as before
      const drafts: Draft[] = [
        { type: 'agent/inbox/spliced', data: { target: 'next-turn', start: 0, inserted: [{ id: 'm1', role: 'user', content: [{ type: 'text', text: 'q' }], source: { kind: 'user' } }] } },
        { type: 'my/event', data: { nested: [make()] } as Json },
      ]
      await expectNothingWritten(key, drafts, JsonValueError)
      expect(await count(key)).toBe(1)
      // and a good unit still appends at the next seq
      const [e] = await append(key, [{ type: 'ok', data: 2 }])
      expect(e.seq).toBe(1)
    })

    it('the folded state is unchanged after a rejected unit', async () => {
      const key = await newSession()
      await append(key, [{ type: 'ok', data: 1 }])
      const probeState: { s?: SessionState; before?: unknown } = {}
      await expect(
        db.transaction(async (tx) => {
          const row = (await lockSession(tx, key))!
          const state = SessionState.fromEvents(await readEvents(tx, key))
          probeState.s = state
          probeState.before = structuredClone({ nextSeq: state.nextSeq, lastTime: state.lastTime, inbox: state.inbox, nodes: state.nodes.length })
          const events = stamp(row, [
            { type: 'agent/inbox/spliced', data: { target: 'next-step', start: 0, inserted: [{ id: 'm1', role: 'user', content: [{ type: 'text', text: 'q' }], source: { kind: 'user' } }] } },
            { type: 'my/event', data: { bad: NaN } },
          ])
          const undos: Undo[] = []
          try {
            for (const e of events) undos.push(state.apply(e))
          } catch (err) {
            for (let i = undos.length - 1; i >= 0; i--) undos[i]()
            throw err
          }
          await writeEvents(tx, row, events)
        }),
      ).rejects.toThrow(JsonValueError)
      const s = probeState.s!
      expect(structuredClone({ nextSeq: s.nextSeq, lastTime: s.lastTime, inbox: s.inbox, nodes: s.nodes.length })).toEqual(probeState.before)
      expect(s.inbox).toEqual({ nextTurn: [], nextStep: [] })
      expect(await count(key)).toBe(1)
    })

    it('a surface-rule violation is rejected the same way before anything is written', async () => {
      const key = await newSession()
      await append(key, [{ type: 'ok', data: 1 }])
      await expectNothingWritten(key, [{ type: 'user/message', data: { id: 'u', role: 'user', content: [], source: { kind: 'user' } } }], SurfaceError)
      await expectNothingWritten(key, [{ type: 'turn/start', data: { turn: 1 }, surfaceOp: 'append' }], SurfaceError)
      expect(await count(key)).toBe(1)
    })
  })
})
