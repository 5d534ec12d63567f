// API.md §4 (sessions) and §9 (fork) on one database (docs/testing.md): the session object, idempotent create,
// patch, the list and its paging, delete, and fork boundaries, splices, usage and independence.

import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { expectValidLog } from '../helpers/invariants.js'
import { gate } from '../helpers/scripted.js'
import type { SessionEvent } from '../../src/session/index.js'

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/
const zeroUsage = { inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0, reasoningTokens: 0, costUsd: 0 }
const types = (evs: Array<{ type: string }>) => evs.map((e) => e.type)

/** Waits until Date.now() has moved past `ms`, so two writes get distinct times. */
async function nextMs(ms = Date.now()): Promise<void> {
  while (Date.now() <= ms) await new Promise((r) => setTimeout(r, 1))
}

describe.each(APP_DB_KINDS)('sessions and fork on %s', (kind) => {
  let t: TestApp
  beforeAll(async () => {
    t = await startTestApp({ kind })
  })
  afterAll(async () => {
    await t?.close()
  })

  /** A fresh tenant with its own key, so that list assertions see only this test's sessions. */
  const tenant = async () => {
    const r = await t.api('POST', '/v1/admin/tenants', { name: 'lister' }, { key: t.adminToken })
    expect(r.status).toBe(201)
    const key: string = r.body.apiKey
    return {
      key,
      tenantId: r.body.tenant.id as string,
      api: (m: string, p: string, b?: unknown) => t.api(m, p, b, { key }),
      create: async (body: Record<string, unknown> = {}) => {
        const c = await t.api('POST', '/v1/sessions', { model: t.models.ref(), ...body }, { key })
        expect(c.status, c.text).toBe(201)
        return c.body
      },
    }
  }

  /** Runs one completed turn for a session with the given usage; returns the log. */
  const runTurn = async (id: string, turn: number, text: string, usage: { input: number; output: number; reasoning?: number }, key?: string) => {
    t.models.script(id, { text: [text], usage })
    const r = await t.api('POST', `/v1/sessions/${id}/followup`, { content: `prompt ${turn}` }, key ? { key } : {})
    expect(r.status).toBe(202)
    if (!key) {
      await t.waitForTurnEnd(id, turn)
      return t.waitIdle(id)
    }
    // another tenant's session: poll with its key
    const deadline = Date.now() + 10000
    for (;;) {
      const evs = (await t.api('GET', `/v1/sessions/${id}/events?limit=5000`, undefined, { key })).body.events as SessionEvent[]
      const obj = (await t.api('GET', `/v1/sessions/${id}`, undefined, { key })).body
      if (obj.status === 'idle' && evs.some((e) => e.type === 'turn/end' && (e.data as any).turn === turn)) return evs
      if (Date.now() > deadline) throw new Error(`turn ${turn} of ${id} did not end: ${types(evs).join(' ')}`)
      await new Promise((res) => setTimeout(res, 25))
    }
  }

  it('create: the defaults of the session object', async () => {
    const r = await t.api('POST', '/v1/sessions', { model: t.models.ref() })
    expect(r.status).toBe(201)
    const s = r.body
    expect(Object.keys(s).sort()).toEqual(['agent', 'createdAt', 'headSeq', 'id', 'lastTurn', 'metadata', 'model', 'owner', 'settings', 'status', 'title', 'updatedAt', 'usage'])
    expect(typeof s.id).toBe('string')
    expect(s.id.length).toBeGreaterThan(0)
    expect(s.title).toBeNull()
    expect(s.model).toBe(t.models.ref())
    expect(s.status).toBe('idle')
    expect(s.headSeq).toBe(-1)
    expect(s.metadata).toEqual({})
    expect(s.usage).toEqual(zeroUsage)
    expect(s.lastTurn).toBeNull()
    // API.md §4: made inline, by a tenant key, with the settings it was given and the defaults; a
    // tenant key owns nothing: only a subject does (API.md §18)
    expect(s.agent).toBeNull()
    expect(s.owner).toBeNull()
    expect(s.settings).toEqual({ model: t.models.ref(), system: '', tools: [], mcpServers: [], maxTokens: null, reasoningEffort: null })
    expect(s.createdAt).toMatch(ISO)
    expect(s.updatedAt).toBe(s.createdAt)
    expect((await t.api('GET', `/v1/sessions/${s.id}`)).body).toEqual(s)
    expect(await t.events(s.id)).toEqual([])
    // no model: the default model
    const d = await t.api('POST', '/v1/sessions', {})
    expect(d.status).toBe(201)
    expect(d.body.model).toBe(t.models.ref())
    expect(d.body.id).not.toBe(s.id)
  })

  it('create with no body at all: every create field is optional (API.md §4, §10)', async () => {
    const e = await t.api('POST', '/v1/sessions', undefined)
    expect(e.status, e.text).toBe(201)
    expect(e.body.model).toBe(t.models.ref())
    expect(e.body.headSeq).toBe(-1)
  })

  it('idempotent create with a client id: same body 200 the same object, another body 409 session-conflict', async () => {
    const body = { id: 'client-id-1', model: t.models.ref(), system: 'S', maxTokens: 100, reasoningEffort: 'low', metadata: { a: 1, nested: { b: [1, 2] } } }
    const first = await t.api('POST', '/v1/sessions', body)
    expect(first.status).toBe(201)
    expect(first.body.id).toBe('client-id-1')
    expect(first.body.metadata).toEqual({ a: 1, nested: { b: [1, 2] } })
    const again = await t.api('POST', '/v1/sessions', body)
    expect(again.status).toBe(200)
    expect(again.body).toEqual(first.body)
    // the same body with its keys in another order is the same body
    const reordered = await t.api('POST', '/v1/sessions', { metadata: { nested: { b: [1, 2] }, a: 1 }, reasoningEffort: 'low', maxTokens: 100, system: 'S', model: t.models.ref(), id: 'client-id-1' })
    expect(reordered.status).toBe(200)
    expect(reordered.body).toEqual(first.body)
    for (const other of [
      { ...body, system: 'T' },
      { ...body, metadata: { a: 2 } },
      { ...body, maxTokens: 101 },
      { id: 'client-id-1', model: t.models.ref() },
    ]) {
      const c = await t.api('POST', '/v1/sessions', other)
      expect(c.status, JSON.stringify(other)).toBe(409)
      expect(c.body.error.code).toBe('session-conflict')
    }
    expect((await t.api('GET', '/v1/sessions/client-id-1')).body).toEqual(first.body)
    const rows = await t.app.db.query<{ n: number }>("SELECT count(*)::int AS n FROM sessions WHERE id = 'client-id-1'")
    expect(rows.rows[0].n).toBe(1)
    // two concurrent identical creates: one 201, one 200, one session
    const both = await Promise.all([0, 1].map(() => t.api('POST', '/v1/sessions', { id: 'client-id-2', model: t.models.ref() })))
    expect(both.map((r) => r.status).sort()).toEqual([200, 201])
    expect(both[0].body).toEqual(both[1].body)
  })

  it('get and patch: title and metadata; a patch writes no event and leaves updatedAt', async () => {
    const s = await t.createSession({ metadata: { v: 1, keep: 'x' } })
    const p1 = await t.api('PATCH', `/v1/sessions/${s.id}`, { title: 'My title' })
    expect(p1.status).toBe(200)
    expect(p1.body.title).toBe('My title')
    expect(p1.body.metadata).toEqual({ v: 1, keep: 'x' })
    const p2 = await t.api('PATCH', `/v1/sessions/${s.id}`, { metadata: { v: 2 } })
    expect(p2.body.title).toBe('My title')
    // metadata is replaced, not merged
    expect(p2.body.metadata).toEqual({ v: 2 })
    const p3 = await t.api('PATCH', `/v1/sessions/${s.id}`, { title: null, metadata: { list: [1, 'two', null, true, { x: 1.5 }] } })
    expect(p3.body.title).toBeNull()
    expect(p3.body.metadata).toEqual({ list: [1, 'two', null, true, { x: 1.5 }] })
    const p4 = await t.api('PATCH', `/v1/sessions/${s.id}`, {})
    expect(p4.status).toBe(200)
    expect(p4.body).toEqual(p3.body)
    const got = await t.api('GET', `/v1/sessions/${s.id}`)
    expect(got.body).toEqual(p3.body)
    for (const k of ['id', 'model', 'status', 'headSeq', 'createdAt', 'updatedAt', 'usage']) expect(got.body[k], k).toEqual(s[k])
    expect(await t.events(s.id)).toEqual([])
  })

  it('updatedAt is the time of the last durable event; the list is newest activity first', async () => {
    const ten = await tenant()
    const a = await ten.create()
    await nextMs()
    const b = await ten.create()
    await nextMs()
    const c = await ten.create()
    // empty logs: updatedAt = createdAt; the newest created comes first
    let list = (await ten.api('GET', '/v1/sessions')).body
    expect(list.sessions.map((x: any) => x.id)).toEqual([c.id, b.id, a.id])
    expect(list.nextCursor).toBeNull()
    for (const x of list.sessions) expect(x.updatedAt).toBe(x.createdAt)
    // activity on a moves it to the front; its updatedAt is its last event's time
    await nextMs(Date.parse(c.createdAt))
    const inj = await ten.api('POST', `/v1/sessions/${a.id}/inject`, { content: 'activity' })
    expect(inj.status).toBe(202)
    const evA = (await ten.api('GET', `/v1/sessions/${a.id}/events`)).body.events as SessionEvent[]
    list = (await ten.api('GET', '/v1/sessions')).body
    expect(list.sessions.map((x: any) => x.id)).toEqual([a.id, c.id, b.id])
    expect(list.sessions[0].updatedAt).toBe(new Date(evA.at(-1)!.time).toISOString())
    expect(list.sessions[0].headSeq).toBe(0)
    // a turn on b: b first, and its updatedAt is the time of its turn/end (the last durable event)
    await nextMs(evA.at(-1)!.time)
    const evB = await runTurn(b.id, 1, 'ok', { input: 3, output: 2, reasoning: 1 }, ten.key)
    list = (await ten.api('GET', '/v1/sessions')).body
    expect(list.sessions.map((x: any) => x.id)).toEqual([b.id, a.id, c.id])
    const bObj = list.sessions[0]
    expect(bObj.updatedAt).toBe(new Date(evB.at(-1)!.time).toISOString())
    expect(bObj.headSeq).toBe(evB.at(-1)!.seq)
    // reasoningTokens: the part of the output the model reported as reasoning (API.md §4)
    expect(bObj.usage).toEqual({ inputTokens: 3, outputTokens: 2, cacheReadTokens: 0, cacheWriteTokens: 0, reasoningTokens: 1, costUsd: 0 })
    expect((await ten.api('GET', `/v1/sessions/${b.id}`)).body).toEqual(bObj)
    // a patch is not activity
    await ten.api('PATCH', `/v1/sessions/${c.id}`, { title: 'renamed' })
    expect((await ten.api('GET', '/v1/sessions')).body.sessions.map((x: any) => x.id)).toEqual([b.id, a.id, c.id])
  })

  it('paging: limit and cursor walk the whole list once, nextCursor null on the last page; limit at most 200', async () => {
    const ten = await tenant()
    const ids: string[] = []
    for (let i = 0; i < 7; i++) {
      ids.push((await ten.create({ metadata: { i } })).id)
      // a few share a millisecond, most do not: the order must be total either way
      if (i % 2) await nextMs()
    }
    const full = (await ten.api('GET', '/v1/sessions?limit=200')).body
    expect(full.nextCursor).toBeNull()
    expect(full.sessions.length).toBe(7)
    expect(new Set(full.sessions.map((x: any) => x.id))).toEqual(new Set(ids))
    for (let i = 1; i < full.sessions.length; i++) expect(full.sessions[i - 1].updatedAt >= full.sessions[i].updatedAt).toBe(true)
    const walked: string[] = []
    let cursor: string | null = null
    const sizes: number[] = []
    for (let guard = 0; guard < 10; guard++) {
      const page: any = (await ten.api('GET', `/v1/sessions?limit=3${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`)).body
      sizes.push(page.sessions.length)
      walked.push(...page.sessions.map((x: any) => x.id))
      cursor = page.nextCursor
      if (cursor === null) break
      expect(typeof cursor).toBe('string')
    }
    expect(sizes).toEqual([3, 3, 1])
    expect(walked).toEqual(full.sessions.map((x: any) => x.id))
    // an exact multiple: the last full page may announce a cursor, which then gives an empty last page
    const two: any = (await ten.api('GET', '/v1/sessions?limit=7')).body
    expect(two.sessions.length).toBe(7)
    if (two.nextCursor !== null) {
      const rest = (await ten.api('GET', `/v1/sessions?limit=7&cursor=${encodeURIComponent(two.nextCursor)}`)).body
      expect(rest).toEqual({ sessions: [], nextCursor: null })
    }
    // the default limit is 50, the maximum 200
    expect((await ten.api('GET', '/v1/sessions')).body.sessions.length).toBe(7)
    const over = await ten.api('GET', '/v1/sessions?limit=201')
    expect(over.status).toBe(400)
    expect(over.body.error.code).toBe('bad-request')
  })

  it('delete: 204, then 404 on every route and no longer listed', async () => {
    const ten = await tenant()
    const keep = await ten.create()
    const s = await ten.create()
    await runTurn(s.id, 1, 'hi', { input: 1, output: 1 }, ten.key)
    await ten.api('POST', `/v1/sessions/${s.id}/inject`, { content: 'parked', id: 'm-1' })
    const sessionKey = (await t.app.db.query<{ key: string }>('SELECT key FROM sessions WHERE tenant_id = $1 AND id = $2', [ten.tenantId, s.id])).rows[0].key
    const rowsOf = async (tb: string) => (await t.app.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${tb} WHERE session_key = $1`, [sessionKey])).rows[0].n
    expect(await rowsOf('session_events')).toBeGreaterThan(0)
    expect(await rowsOf('idempotency')).toBe(1)
    const del = await ten.api('DELETE', `/v1/sessions/${s.id}`)
    expect(del.status).toBe(204)
    expect(del.text).toBe('')
    for (const [m, p, b] of [
      ['GET', `/v1/sessions/${s.id}`, undefined],
      ['PATCH', `/v1/sessions/${s.id}`, { title: 'x' }],
      ['DELETE', `/v1/sessions/${s.id}`, undefined],
      ['POST', `/v1/sessions/${s.id}/followup`, { content: 'x' }],
      ['POST', `/v1/sessions/${s.id}/inject`, { content: 'x' }],
      ['GET', `/v1/sessions/${s.id}/events`, undefined],
      ['GET', `/v1/sessions/${s.id}/messages`, undefined],
      ['GET', `/v1/sessions/${s.id}/inbox`, undefined],
      ['DELETE', `/v1/sessions/${s.id}/inbox/m-1`, undefined],
      ['POST', `/v1/sessions/${s.id}/cancel`, undefined],
      ['POST', `/v1/sessions/${s.id}/fork`, undefined],
      ['GET', `/v1/sessions/${s.id}/pending`, undefined],
      ['GET', `/v1/sessions/${s.id}/stream`, undefined],
    ] as Array<[string, string, unknown]>) {
      const r = await ten.api(m, p, b)
      expect(r.status, `${m} ${p}`).toBe(404)
      expect(r.body.error.code).toBe('session-not-found')
    }
    expect((await ten.api('GET', '/v1/sessions')).body.sessions.map((x: any) => x.id)).toEqual([keep.id])
    // its rows are gone
    for (const tb of ['session_events', 'idempotency']) expect(await rowsOf(tb), tb).toBe(0)
    expect((await t.app.db.query<{ n: number }>('SELECT count(*)::int AS n FROM sessions WHERE key = $1', [sessionKey])).rows[0].n).toBe(0)
    // the id can be used again: a new, empty session
    const again = await ten.api('POST', '/v1/sessions', { id: s.id, model: t.models.ref() })
    expect(again.status).toBe(201)
    expect(again.body.headSeq).toBe(-1)
  })

  it('delete of a running session: 204, the turn stops, the session is gone', async () => {
    const s = await t.createSession()
    t.models.script(s.id, { text: ['never'], hang: true })
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'go' })
    const req = await t.models.waitForRequest(s.id, 1)
    const del = await t.api('DELETE', `/v1/sessions/${s.id}`)
    expect(del.status).toBe(204)
    expect((await t.api('GET', `/v1/sessions/${s.id}`)).status).toBe(404)
    // the model call is aborted (deletion cancels the running turn)
    const deadline = Date.now() + 10000
    while (!req.aborted && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20))
    expect(req.aborted).toBe(true)
    expect((await t.app.db.query<{ n: number }>('SELECT count(*)::int AS n FROM sessions WHERE id = $1 AND tenant_id = $2', [s.id, t.tenantId])).rows[0].n).toBe(0)
  })

  describe('fork', () => {
    let src: { id: string }
    let log: SessionEvent[]
    let turn1End: SessionEvent
    beforeAll(async () => {
      src = await t.createSession({ system: 'fork me', metadata: { tag: 'src' }, maxTokens: 200 })
      await t.api('PATCH', `/v1/sessions/${src.id}`, { title: 'source title' })
      await runTurn(src.id, 1, 'one', { input: 7, output: 3, reasoning: 2 })
      log = await runTurn(src.id, 2, 'two', { input: 11, output: 5, reasoning: 4 })
      turn1End = log.find((e) => e.type === 'turn/end' && (e.data as any).turn === 1)!
      expectValidLog(log)
    })

    const childLog = async (id: string) => {
      const evs = await t.events(id)
      expectValidLog(evs)
      return evs
    }

    it('without atSeq: a verbatim copy of the whole log, then session/end-seed', async () => {
      const before = (await t.api('GET', `/v1/sessions/${src.id}`)).body
      const r = await t.api('POST', `/v1/sessions/${src.id}/fork`)
      expect(r.status).toBe(201)
      const child = r.body
      expect(child.id).not.toBe(src.id)
      expect(child.title).toBeNull()
      expect(child.model).toBe(before.model)
      // API.md §9: the source's current settings (and its agent: none here; the agents test forks one)
      expect(child.settings).toEqual({ model: before.model, system: 'fork me', tools: [], mcpServers: [], maxTokens: 200, reasoningEffort: null })
      expect(child.agent).toBeNull()
      expect(child.metadata).toEqual({ tag: 'src' })
      expect(child.status).toBe('idle')
      expect(child.createdAt).toMatch(ISO)
      const evs = await childLog(child.id)
      expect(evs.slice(0, log.length)).toEqual(log)
      expect(evs.length).toBe(log.length + 1)
      const seed = evs.at(-1)!
      expect(seed).toMatchObject({ seq: log.length, type: 'session/end-seed', data: {} })
      expect(seed.time).toBeGreaterThanOrEqual(log.at(-1)!.time)
      expect(child.headSeq).toBe(seed.seq)
      expect(child.updatedAt).toBe(new Date(seed.time).toISOString())
      // usage: the fold of the copied attempts, here all of them
      expect(child.usage).toEqual({ inputTokens: 18, outputTokens: 8, cacheReadTokens: 0, cacheWriteTokens: 0, reasoningTokens: 6, costUsd: 0 })
      expect(before.usage).toEqual(child.usage)
      // lastTurn: the copied log's latest turn/end, turn 2
      const end2 = log.filter((e) => e.type === 'turn/end').at(-1)!
      expect(child.lastTurn).toEqual({ turn: 2, reason: { kind: 'completed' }, endedAt: new Date(end2.time).toISOString() })
      expect(before.lastTurn).toEqual(child.lastTurn)
      // the same derived history
      expect((await t.api('GET', `/v1/sessions/${child.id}/messages`)).body).toEqual((await t.api('GET', `/v1/sessions/${src.id}/messages`)).body)
      expect((await t.api('GET', `/v1/sessions/${child.id}/inbox`)).body).toEqual({ nextTurn: [], nextStep: [] })
      // an empty body is the same as none
      const r2 = await t.api('POST', `/v1/sessions/${src.id}/fork`, {})
      expect(r2.status).toBe(201)
      expect((await t.events(r2.body.id)).slice(0, -1)).toEqual(log)
      // the source is unchanged
      expect(await t.events(src.id)).toEqual(log)
      expect((await t.api('GET', `/v1/sessions/${src.id}`)).body).toEqual(before)
    })

    it('atSeq inside an ended turn copies through its turn/end; usage is the fold of the copy', async () => {
      const inside = log.find((e) => e.type === 'assistant/message' && (e.data as any).turn === 1)!
      for (const atSeq of [inside.seq, log.find((e) => e.type === 'turn/start')!.seq, turn1End.seq - 1]) {
        const r = await t.api('POST', `/v1/sessions/${src.id}/fork`, { atSeq })
        expect(r.status).toBe(201)
        const evs = await childLog(r.body.id)
        expect(evs.slice(0, -1)).toEqual(log.filter((e) => e.seq <= turn1End.seq))
        expect(evs.at(-1)).toMatchObject({ seq: turn1End.seq + 1, type: 'session/end-seed', data: {} })
        expect(r.body.usage).toEqual({ inputTokens: 7, outputTokens: 3, cacheReadTokens: 0, cacheWriteTokens: 0, reasoningTokens: 2, costUsd: 0 })
        expect(r.body.headSeq).toBe(turn1End.seq + 1)
        expect(r.body.lastTurn).toEqual({ turn: 1, reason: { kind: 'completed' }, endedAt: new Date(turn1End.time).toISOString() })
      }
      // atSeq on the turn/end itself is between turns: the same copy
      const r = await t.api('POST', `/v1/sessions/${src.id}/fork`, { atSeq: turn1End.seq })
      expect((await t.events(r.body.id)).slice(0, -1)).toEqual(log.filter((e) => e.seq <= turn1End.seq))
      // before any turn ended, the copy has no last turn
      const early = await t.api('POST', `/v1/sessions/${src.id}/fork`, { atSeq: 0 })
      expect(early.status).toBe(201)
      expect(early.body.lastTurn).toBeNull()
    })

    it('atSeq between turns copies up to atSeq; pending input in the prefix gets cancelling splices in the child', async () => {
      // turn 2's followup splice sits between turn 1's end and turn 2's start: pending at that point
      const splice2 = log.find((e) => e.seq === turn1End.seq + 1)!
      expect(splice2.type).toBe('agent/inbox/spliced')
      const r = await t.api('POST', `/v1/sessions/${src.id}/fork`, { atSeq: splice2.seq })
      expect(r.status).toBe(201)
      const evs = await childLog(r.body.id)
      expect(evs.slice(0, splice2.seq + 1)).toEqual(log.slice(0, splice2.seq + 1))
      const pendingId = (splice2.data as any).inserted[0].id
      expect(evs.slice(splice2.seq + 1).map((e) => ({ type: e.type, data: e.data }))).toEqual([
        { type: 'agent/inbox/spliced', data: { target: 'next-turn', start: 0, removedCount: 1, inserted: [], outcome: 'canceled' } },
        { type: 'session/end-seed', data: {} },
      ])
      expect(pendingId).toBeTruthy()
      expect((await t.api('GET', `/v1/sessions/${r.body.id}/inbox`)).body).toEqual({ nextTurn: [], nextStep: [] })
      expect(r.body.usage).toEqual({ inputTokens: 7, outputTokens: 3, cacheReadTokens: 0, cacheWriteTokens: 0, reasoningTokens: 2, costUsd: 0 })
      // the child does not run the copied-then-cancelled prompt on its own
      expect(r.body.status).toBe('idle')
    })

    it('pending input in both lists: the child cancels next-step first, then next-turn', async () => {
      const s = await t.createSession()
      await runTurn(s.id, 1, 'one', { input: 1, output: 1 })
      // parked context while idle, then the prompt of turn 2
      await t.api('POST', `/v1/sessions/${s.id}/inject`, { content: 'context 1', id: 'c1' })
      await t.api('POST', `/v1/sessions/${s.id}/inject`, { content: 'context 2', id: 'c2' })
      t.models.script(s.id, { text: ['two'] })
      const f = await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'turn 2', id: 'f2' })
      await t.waitForTurnEnd(s.id, 2)
      const full = await t.waitIdle(s.id)
      expect(full[f.body.seq + 1].type).toBe('turn/start')
      // at the followup's splice all three are pending: two next-step items and one next-turn prompt
      const r = await t.api('POST', `/v1/sessions/${s.id}/fork`, { atSeq: f.body.seq })
      expect(r.status).toBe(201)
      const evs = await childLog(r.body.id)
      expect(evs.slice(0, f.body.seq + 1)).toEqual(full.slice(0, f.body.seq + 1))
      expect(evs.slice(f.body.seq + 1).map((e) => ({ type: e.type, data: e.data }))).toEqual([
        { type: 'agent/inbox/spliced', data: { target: 'next-step', start: 0, removedCount: 2, inserted: [], outcome: 'canceled' } },
        { type: 'agent/inbox/spliced', data: { target: 'next-turn', start: 0, removedCount: 1, inserted: [], outcome: 'canceled' } },
        { type: 'session/end-seed', data: {} },
      ])
      expect((await t.api('GET', `/v1/sessions/${r.body.id}/inbox`)).body).toEqual({ nextTurn: [], nextStep: [] })
      expect(r.body.status).toBe('idle')
      // the cancelled prompt does not run in the child: it has no wake request (idle), and its next
      // waking delivery opens the turn right after the seed, with only the new prompt and one model call
      const after = (await runTurn(r.body.id, 2, 'child', { input: 1, output: 1 })).slice(evs.length)
      expect(types(after).slice(0, 2)).toEqual(['agent/inbox/spliced', 'turn/start'])
      expect(after.filter((e) => e.type === 'user/message').map((e) => (e.data as any).content[0].text)).toEqual(['prompt 2'])
      expect(t.models.requestsOf(r.body.id)).toHaveLength(1)
    })

    it('a fork while a turn is open: 409 fork-unavailable for the whole log and for an atSeq inside the open turn', async () => {
      const count = async () => (await t.app.db.query<{ n: number }>('SELECT count(*)::int AS n FROM sessions')).rows[0].n
      const s = await t.createSession()
      await runTurn(s.id, 1, 'one', { input: 1, output: 1 })
      const g = gate()
      t.models.script(s.id, { text: ['held'], gate: g.promise })
      await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'turn 2' })
      await t.models.waitForRequest(s.id, 2)
      const mid = await t.events(s.id)
      const t1End = mid.find((e) => e.type === 'turn/end')!
      const t2Start = mid.find((e) => e.type === 'turn/start' && (e.data as any).turn === 2)!
      const before = await count()
      const busy = await t.api('POST', `/v1/sessions/${s.id}/fork`)
      expect(busy.status).toBe(409)
      expect(busy.body.error.code).toBe('fork-unavailable')
      for (const atSeq of [t2Start.seq, mid.at(-1)!.seq]) {
        const b = await t.api('POST', `/v1/sessions/${s.id}/fork`, { atSeq })
        expect(b.status, String(atSeq)).toBe(409)
        expect(b.body.error.code).toBe('fork-unavailable')
      }
      expect(await count()).toBe(before)
      // an atSeq in the ended turn 1 is fine meanwhile
      const ok = await t.api('POST', `/v1/sessions/${s.id}/fork`, { atSeq: t1End.seq })
      expect(ok.status).toBe(201)
      expect((await t.events(ok.body.id)).slice(0, -1)).toEqual(mid.slice(0, t1End.seq + 1))
      g.open()
      await t.waitForTurnEnd(s.id, 2)
      await t.waitIdle(s.id)
    })

    it('atSeq outside the log is 400 and creates nothing', async () => {
      const n = async () => (await t.app.db.query<{ n: number }>('SELECT count(*)::int AS n FROM sessions')).rows[0].n
      const before = await n()
      for (const atSeq of [log.length, log.length + 100, -1]) {
        const r = await t.api('POST', `/v1/sessions/${src.id}/fork`, { atSeq })
        expect(r.status, String(atSeq)).toBe(400)
        expect(r.body.error.code).toBe('bad-request')
      }
      // an empty log has no seq at all
      const empty = await t.createSession()
      const r = await t.api('POST', `/v1/sessions/${empty.id}/fork`, { atSeq: 0 })
      expect(r.status).toBe(400)
      expect(await n()).toBe(before + 1)
    })

    it('the child is independent: a followup to it runs a turn, the source is unchanged', async () => {
      const r = await t.api('POST', `/v1/sessions/${src.id}/fork`, { atSeq: turn1End.seq })
      const child = r.body
      const srcBefore = { events: await t.events(src.id), obj: (await t.api('GET', `/v1/sessions/${src.id}`)).body }
      const copied = await t.events(child.id)
      t.models.script(child.id, { text: ['child answer'], usage: { input: 2, output: 1 } })
      const f = await t.api('POST', `/v1/sessions/${child.id}/followup`, { content: 'child prompt' })
      expect(f.status).toBe(202)
      expect(f.body.seq).toBe(copied.length)
      const evs = await t.waitForTurnEnd(child.id, 2)
      await t.waitIdle(child.id)
      expectValidLog(evs)
      expect(evs.slice(0, copied.length)).toEqual(copied)
      const after = evs.slice(copied.length)
      expect(types(after).slice(0, 3)).toEqual(['agent/inbox/spliced', 'turn/start', 'agent/inbox/spliced'])
      expect((after[1].data as any).turn).toBe(2)
      // a new loop instance on a copied log: its first header is 'resume' (SPEC §13.4, §18.6)
      expect((after.find((e) => e.type === 'request/header')!.data as any).reason).toBe('resume')
      expect(after.find((e) => e.type === 'turn/end')!.data).toEqual({ turn: 2, reason: { kind: 'completed' } })
      // the model saw the copied history, then the new prompt
      const req = t.models.requestsOf(child.id)[0]
      expect(req.context.systemPrompt).toContain('fork me')
      expect(req.context.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'user'])
      const childObj = (await t.api('GET', `/v1/sessions/${child.id}`)).body
      expect(childObj.usage).toEqual({ inputTokens: 9, outputTokens: 4, cacheReadTokens: 0, cacheWriteTokens: 0, reasoningTokens: 2, costUsd: 0 })
      // the source did not move
      expect(await t.events(src.id)).toEqual(srcBefore.events)
      expect((await t.api('GET', `/v1/sessions/${src.id}`)).body).toEqual(srcBefore.obj)
      // deleting the source leaves the child
      const other = await t.api('POST', `/v1/sessions/${src.id}/fork`)
      expect((await t.api('DELETE', `/v1/sessions/${src.id}`)).status).toBe(204)
      expect((await t.api('GET', `/v1/sessions/${other.body.id}`)).status).toBe(200)
      expect((await t.events(other.body.id)).length).toBe(srcBefore.events.length + 1)
    })
  })
})
