// Group commit of fast-path appends (store/unit.ts UnitCommitter) on real PostgreSQL and PGlite: units of different
// sessions that are ready together share one statement, and each keeps its own conditions and its
// own outcome — a stale seq, a lost lease or a failing insert in one unit changes nothing for the
// others, and two units of one session are never in one statement.

import crypto from 'node:crypto'
import { describe, expect, it } from 'vitest'
import type { Draft } from '../../src/session/index.js'
import { appendConditional, budgetState, insertSession, lockLean, webhooks, writeEvents, NOW_MS, openPg, readEvents, readInbox, stamp, statementName, type Db, type RowPatch, type SideRow } from '../../src/store/index.js'
import { DB_KINDS, openTestDb, tenantDb } from '../helpers/db.js'

const note = (text: string): Draft => ({ type: 'test/note', data: { text } })

/** The same database, counting the statements it is sent. */
function counting(db: Db): { db: Db; statements: () => number; texts: string[] } {
  let n = 0
  const texts: string[] = []
  const wrapped: Db = {
    kind: db.kind,
    query: (sql, params) => {
      n++
      texts.push(sql)
      return db.query(sql, params)
    },
    transaction: (fn) => db.transaction(fn),
    exec: (sql) => db.exec(sql),
    withConnection: (fn) => db.withConnection(fn),
    close: () => db.close(),
  }
  return { db: wrapped, statements: () => n, texts }
}

describe.each(DB_KINDS)('group commit on %s', (kind) => {
  const env = tenantDb(kind, 'group-commit')
  let n = 0
  async function newSession(lease?: { owner: string; token: number }): Promise<string> {
    const key = crypto.randomUUID()
    await insertSession(env.db, { key, tenantId: env.tenantId, id: `group-${++n}`, model: 'test/scripted', system: '', tools: [], metadata: {}, createHash: 'h', createdAt: 1_700_000_000_000 })
    if (lease) await env.db.query(`UPDATE sessions SET lease_owner = $2, lease_token = $3, lease_expires_at = ${NOW_MS} + 60000 WHERE key = $1`, [key, lease.owner, lease.token])
    return key
  }
  const append = (db: Db, key: string, nextSeq: number, text: string, lease?: { owner: string; token: number }) =>
    appendConditional(db, key, { nextSeq, lease }, stamp({ nextSeq, lastTime: 0 }, [note(text)], 1_700_000_000_001), { runState: 'running' })
  const texts = async (key: string) => (await readEvents(env.db, key)).map((e) => [e.seq, (e.data as { text: string }).text])

  it('units of many sessions ready together share statements, and each is written exactly as alone', async () => {
    const keys = await Promise.all(Array.from({ length: 30 }, () => newSession()))
    const c = counting(env.db)
    const out = await Promise.all(keys.map((k, i) => append(c.db, k, 0, `unit ${i}`)))
    expect(out.every((r) => r !== null && r.runState === 'running' && r.events.length === 1)).toBe(true)
    // grouped: far fewer statements than units
    expect(c.statements()).toBeLessThan(keys.length / 2)
    for (const [i, k] of keys.entries()) {
      expect(await texts(k)).toEqual([[0, `unit ${i}`]])
      const row = await lockLean(env.db, k, false)
      expect(row).toMatchObject({ nextSeq: 1, runState: 'running', lastTime: 1_700_000_000_001 })
    }
    // a second round continues every log
    await Promise.all(keys.map((k, i) => append(c.db, k, 1, `again ${i}`)))
    expect(await texts(keys[7])).toEqual([
      [0, 'unit 7'],
      [1, 'again 7'],
    ])
  })

  it("a stale seq or a lost lease fails only its own unit; the group's others commit", async () => {
    const lease = { owner: 'me', token: 3 }
    const keys = await Promise.all(Array.from({ length: 12 }, () => newSession(lease)))
    const out = await Promise.all(
      keys.map((k, i) => (i % 3 === 0 ? append(env.db, k, 5, 'stale', lease) : i % 3 === 1 ? append(env.db, k, 0, 'fenced', { owner: 'me', token: 2 }) : append(env.db, k, 0, 'ok', lease))),
    )
    for (const [i, k] of keys.entries()) {
      if (i % 3 === 2) {
        expect(out[i]).not.toBeNull()
        expect(await texts(k)).toEqual([[0, 'ok']])
      } else {
        expect(out[i]).toBeNull()
        expect(await texts(k)).toEqual([])
        expect((await lockLean(env.db, k, false))!.nextSeq).toBe(0)
      }
    }
  })

  it('two units of one session at the same seq: exactly one wins, never both in one statement', async () => {
    const keys = await Promise.all(Array.from({ length: 5 }, () => newSession()))
    const out = await Promise.all(keys.flatMap((k) => [append(env.db, k, 0, 'first'), append(env.db, k, 0, 'second')]))
    for (const [i, k] of keys.entries()) {
      const [a, b] = [out[2 * i], out[2 * i + 1]]
      expect([a, b].filter((r) => r !== null)).toHaveLength(1)
      expect(await texts(k)).toEqual([[0, a ? 'first' : 'second']])
    }
  })

  it('a unit whose insert fails fails alone: the others of its group are retried one by one and commit', async () => {
    const keys = await Promise.all(Array.from({ length: 8 }, () => newSession()))
    await append(env.db, keys[3], 0, 'already there')
    // the row claims seq 0 again while the log holds it: this unit's insert breaks the primary key
    await env.db.query('UPDATE sessions SET next_seq = 0 WHERE key = $1', [keys[3]])
    const out = await Promise.allSettled(keys.map((k, i) => append(env.db, k, 0, `unit ${i}`)))
    expect(out[3].status).toBe('rejected')
    expect(await texts(keys[3])).toEqual([[0, 'already there']])
    for (const [i, k] of keys.entries()) {
      if (i === 3) continue
      expect(out[i].status).toBe('fulfilled')
      expect(await texts(k)).toEqual([[0, `unit ${i}`]])
    }
  })

  it("units with side rows group too: each unit's pending call, idempotency record, slot and deliveries exist exactly when its row moved", async () => {
    const hook = crypto.randomUUID()
    await webhooks.insertWebhook(env.db, { id: hook, tenantId: env.tenantId, url: 'https://hooks.example/x', events: ['turn.completed'], description: null, secret: 's', createdAt: Date.now() })
    // a tenant with a slot limit: its slot-taking unit's guard fails, so the unit must take the locked path
    const limited = crypto.randomUUID()
    await env.db.query('INSERT INTO tenants (id, name, created_at, max_running_sessions) VALUES ($1, $2, $3, 5)', [limited, 'limited', Date.now()])
    const limitedKey = crypto.randomUUID()
    await insertSession(env.db, { key: limitedKey, tenantId: limited, id: `group-limited-${++n}`, model: 'test/scripted', system: '', tools: [], metadata: {}, createHash: 'h', createdAt: 1_700_000_000_000 })
    const keys = await Promise.all(Array.from({ length: 16 }, () => newSession()))
    const sides = (i: number, key: string): SideRow[] => {
      if (i % 4 === 0) return [{ kind: 'slot-take' }, { kind: 'webhook', event: { type: 'turn.completed', turn: 1, seq: 0, time: 1, extra: { reason: { kind: 'completed' } } } }]
      if (i % 4 === 1) return [{ kind: 'pending-insert', call: { callId: `call-${key}`, kind: 'client', name: 'c', arguments: '{}' } }, { kind: 'idempotency', messageId: `m-${key}`, route: 'followup', bodyHash: 'b', seq: 0 }]
      if (i % 4 === 2) return [{ kind: 'slot-free' }]
      return [{ kind: 'slot-take' }, { kind: 'pending-insert', call: { callId: `call-${key}`, kind: 'client', name: 'c', arguments: '{}' } }]
    }
    // every fourth unit (i % 4 === 3) is stale: nothing of it may be written
    const put = (db: Db, key: string, i: number, side: SideRow[]) => appendConditional(db, key, { nextSeq: i % 4 === 3 ? 7 : 0 }, stamp({ nextSeq: i % 4 === 3 ? 7 : 0, lastTime: 0 }, [note(`side ${i}`)], 1_700_000_000_001), {}, side)
    for (const k of keys.filter((_, i) => i % 4 === 2)) await env.db.query('INSERT INTO running_slots (session_key, tenant_id, taken_at) VALUES ($1, $2, 1)', [k, env.tenantId])
    const c = counting(env.db)
    const [limitedOut, ...out] = await Promise.all([put(c.db, limitedKey, 0, [{ kind: 'slot-take' }]), ...keys.map((k, i) => put(c.db, k, i, sides(i, k)))])
    expect(c.statements()).toBeLessThan(keys.length / 2)
    expect(limitedOut).toBeNull()
    expect(await texts(limitedKey)).toEqual([])
    const count = async (sql: string, key: string) => Number((await env.db.query<{ n: number }>(sql, [key])).rows[0].n)
    for (const [i, k] of keys.entries()) {
      const moved = i % 4 !== 3
      expect(out[i] !== null).toBe(moved)
      expect(await texts(k)).toEqual(moved ? [[0, `side ${i}`]] : [])
      const slots = await count('SELECT count(*)::int AS n FROM running_slots WHERE session_key = $1', k)
      const pending = await count('SELECT count(*)::int AS n FROM pending_calls WHERE session_key = $1', k)
      const idem = await count('SELECT count(*)::int AS n FROM idempotency WHERE session_key = $1', k)
      const hooks = await count('SELECT count(*)::int AS n FROM webhook_deliveries d JOIN sessions s ON s.id = d.session_id WHERE s.key = $1', k)
      expect({ i, slots, pending, idem, hooks }).toEqual({ i, slots: i % 4 === 0 ? 1 : 0, pending: i % 4 === 1 ? 1 : 0, idem: i % 4 === 1 ? 1 : 0, hooks: i % 4 === 0 ? 1 : 0 })
    }
  })

  it('every row patch a unit can carry is written in a group exactly as by the unit alone', async () => {
    const inbox = { nextTurn: [], nextStep: [{ id: 'm1', role: 'user' as const, content: [{ type: 'text' as const, text: 'x' }], source: { kind: 'user' as const } }] }
    const patches: RowPatch[] = [
      { runState: 'running', openTurn: 3 },
      { runState: 'wanted', openTurn: null, cancelPending: true },
      { runState: 'idle', openTurn: null, wakeLatched: true, lastTurn: { turn: 2, reason: { kind: 'completed' }, time: 1_700_000_000_002 } },
      { inbox: inbox as never, continueTurn: 4 },
      { continueTurn: null, usage: { inputTokens: 7, outputTokens: 3, cacheReadTokens: 2, cacheWriteTokens: 1, reasoningTokens: 2, costUsd: 0.25 } },
      {},
    ]
    const row = (key: string) =>
      env.db.query<Record<string, unknown>>(
        `SELECT next_seq, last_time, updated_at, inbox, open_turn, run_state, cancel_pending, wake_latched, last_turn, continue_turn,
           input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, cost_usd, wake_seq IS NOT NULL AS has_wake_seq FROM sessions WHERE key = $1`,
        [key],
      )
    const put = (db: Db, key: string, p: RowPatch) => appendConditional(db, key, { nextSeq: 0 }, stamp({ nextSeq: 0, lastTime: 0 }, [note('p'), note('q')], 1_700_000_000_001), p)
    // alone: one at a time, so no two units share a statement
    // the first starts idle: leaving idle draws a place in the wake order (wake_seq)
    const prepare = (k: string, i: number) => env.db.query('UPDATE sessions SET open_turn = 9, continue_turn = 8, run_state = $2 WHERE key = $1', [k, i === 0 ? 'idle' : 'running'])
    const alone: string[] = []
    for (const [i, p] of patches.entries()) {
      const k = await newSession()
      await prepare(k, i)
      await put(env.db, k, p)
      alone.push(k)
    }
    const grouped = await Promise.all(patches.map(() => newSession()))
    for (const [i, k] of grouped.entries()) await prepare(k, i)
    const c = counting(env.db)
    await Promise.all(grouped.map((k, i) => put(c.db, k, patches[i])))
    expect(c.statements()).toBeLessThan(patches.length)
    for (const [i, p] of patches.entries()) {
      const [a, g] = [(await row(alone[i])).rows[0], (await row(grouped[i])).rows[0]]
      expect({ i, ...g }).toEqual({ i, ...a })
      expect(g).toMatchObject({ next_seq: 2, open_turn: p.openTurn === undefined ? 9 : p.openTurn, continue_turn: p.continueTurn === undefined ? 8 : p.continueTurn })
      expect(await texts(grouped[i])).toEqual([
        [0, 'p'],
        [1, 'q'],
      ])
    }
  })

  it('bodies and inboxes reach the database as one joined text, yet every character JSON carries comes back verbatim: grouped, alone and in a transaction', async () => {
    // the characters that matter: the join's separator U+0001 (JSON writes it escaped), quotes and
    // backslashes (a text[] member would be escaped), and non-ASCII
    const tricky = ['a\u0001b', '"quoted" \\ back\\slash', '\u0001', 'ünï €', '{,}', 'NULL', '']
    const inbox = (text: string) => ({ nextTurn: [{ id: `m-${text.length}`, role: 'user' as const, content: [{ type: 'text' as const, text }], source: { kind: 'user' as const } }], nextStep: [] })
    const keys = await Promise.all(tricky.map(() => newSession()))
    const c = counting(env.db)
    // units with and without an inbox patch, first and last among them, in one group
    await Promise.all(
      keys.map((k, i) => appendConditional(c.db, k, { nextSeq: 0 }, stamp({ nextSeq: 0, lastTime: 0 }, [note(tricky[i]), note(`${tricky[i]}|${i}`)], 1_700_000_000_001), i % 2 === 0 ? { inbox: inbox(tricky[i]) as never } : {})),
    )
    expect(c.statements()).toBeLessThan(keys.length)
    for (const [i, k] of keys.entries()) {
      expect(await texts(k)).toEqual([
        [0, tricky[i]],
        [1, `${tricky[i]}|${i}`],
      ])
      expect(await readInbox(env.db, k)).toEqual(i % 2 === 0 ? inbox(tricky[i]) : { nextTurn: [], nextStep: [] })
    }
    // alone (one unit in its statement), then in a transaction (writeEvents)
    const alone = await newSession()
    await appendConditional(env.db, alone, { nextSeq: 0 }, stamp({ nextSeq: 0, lastTime: 0 }, tricky.map(note), 1_700_000_000_001), {})
    await env.db.transaction(async (tx) => {
      const row = (await lockLean(tx, alone))!
      await writeEvents(tx, row, stamp(row, tricky.map(note), 1_700_000_000_002))
    })
    expect(await texts(alone)).toEqual([...tricky, ...tricky].map((t, i) => [i, t]))
  })

  it('a group is one fixed statement text per set of side-row kinds, so PostgreSQL prepares each once; a group carries only the side CTEs its units need', async () => {
    const run = async (side: (i: number, key: string) => SideRow[]) => {
      const keys = await Promise.all(Array.from({ length: 6 }, () => newSession()))
      const { db, texts } = counting(env.db)
      const out = await Promise.all(keys.map((k, i) => appendConditional(db, k, { nextSeq: 0 }, stamp({ nextSeq: 0, lastTime: 0 }, [note(`u ${i} ${k}`)], 1_700_000_000_001), { runState: 'running' }, side(i, k))))
      expect(out.every((r) => r !== null)).toBe(true)
      expect(texts).toHaveLength(1)
      return { text: texts[0], keys }
    }
    const sideTables = /usage_ledger|usage_totals|running_slots|webhook_deliveries|pending_calls|idempotency/
    const plain = await run(() => [])
    expect(plain.text).not.toMatch(sideTables)
    expect((await run(() => [])).text).toBe(plain.text)

    const mixedSides = (i: number, k: string): SideRow[] => (i % 2 ? [{ kind: 'slot-take' }, { kind: 'pending-insert', call: { callId: `c-${k}`, kind: 'client', name: 'c', arguments: '{}' } }] : [{ kind: 'idempotency', messageId: `m-${k}`, route: 'steer', bodyHash: 'b', seq: 0 }])
    const mixed = await run(mixedSides)
    // other units, other values, the same kinds: the same text
    expect((await run((i, k) => mixedSides(i + 1, k))).text).toBe(mixed.text)
    expect(mixed.text).toMatch(/INSERT INTO running_slots/)
    expect(mixed.text).toMatch(/INSERT INTO pending_calls/)
    expect(mixed.text).toMatch(/INSERT INTO idempotency/)
    expect(mixed.text).not.toMatch(/usage_ledger|usage_totals|webhook_deliveries|DELETE FROM running_slots|DELETE FROM pending_calls/)
    // a unit alone has a text of its own per set of kinds and of row-move rules that apply to it: no
    // records to read, only the columns it changes set, only the conditions it has checked
    const alone = async (i: number) => {
      const k = await newSession()
      const one = counting(env.db)
      await appendConditional(one.db, k, { nextSeq: 0 }, stamp({ nextSeq: 0, lastTime: 0 }, [note(`lone ${i}`)], 1_700_000_000_001 + i), { runState: 'running' }, mixedSides(1, k))
      expect(one.texts).toHaveLength(1)
      expect(await texts(k)).toEqual([[0, `lone ${i}`]])
      return one.texts[0]
    }
    const lone = await alone(1)
    expect(await alone(2)).toBe(lone)
    const [mask, rules] = statementName(lone)!.split('_').slice(1)
    expect(statementName(lone)).toMatch(/^unit1_\d+_\d+$/)
    expect(statementName((await run((_i, k) => mixedSides(1, k))).text)).toBe(`unit_${mask}`)
    expect(Number(rules)).toBeGreaterThan(0)
    expect(lone).not.toMatch(/jsonb_to_recordset\(\$\d+::jsonb -> 'u'\)|ANY\(ARRAY|GROUP BY session_key|inbox =|lease_owner =|cancel_pending =/)
    expect(lone).toMatch(/run_state = \$\d+::text/)
    expect(lone).toMatch(/INSERT INTO running_slots/)
    // and what the text holds was written, for the units that carry it
    for (const [i, k] of mixed.keys.entries()) {
      const n = async (sql: string) => Number((await env.db.query<{ n: number }>(sql, [k])).rows[0].n)
      expect(await n('SELECT count(*)::int AS n FROM running_slots WHERE session_key = $1')).toBe(i % 2)
      expect(await n('SELECT count(*)::int AS n FROM pending_calls WHERE session_key = $1')).toBe(i % 2)
      expect(await n('SELECT count(*)::int AS n FROM idempotency WHERE session_key = $1')).toBe(1 - (i % 2))
    }
  })

  it("a unit's pending deletes by call id remove only its own session's rows", async () => {
    const keys = await Promise.all(Array.from({ length: 4 }, () => newSession()))
    for (const k of keys) for (const id of ['a', 'b']) await env.db.query("INSERT INTO pending_calls (session_key, call_id, kind, name, arguments, created_at) VALUES ($1, $2, 'client', 'c', '{}', 1)", [k, id])
    const out = await Promise.all(keys.map((k, i) => appendConditional(env.db, k, { nextSeq: 0 }, stamp({ nextSeq: 0, lastTime: 0 }, [note(`d ${i}`)], 1_700_000_000_001), {}, i === 3 ? [] : [{ kind: 'pending-delete', callIds: i === 0 ? ['a'] : ['a', 'b'] }])))
    expect(out.every((r) => r !== null)).toBe(true)
    const left = async (k: string) => (await env.db.query<{ call_id: string }>('SELECT call_id FROM pending_calls WHERE session_key = $1 ORDER BY call_id', [k])).rows.map((r) => r.call_id)
    expect(await Promise.all(keys.map(left))).toEqual([['b'], [], [], ['a', 'b']])
  })

  it("crash repair's delete of every pending call groups like any other side row, and removes only its own session's rows", async () => {
    const keys = await Promise.all(Array.from({ length: 6 }, () => newSession()))
    for (const k of [keys[2], keys[3]]) for (const id of ['a', 'b']) await env.db.query("INSERT INTO pending_calls (session_key, call_id, kind, name, arguments, created_at) VALUES ($1, $2, 'client', 'c', '{}', 1)", [k, id])
    const c = counting(env.db)
    const out = await Promise.all(keys.map((k, i) => appendConditional(c.db, k, { nextSeq: 0 }, stamp({ nextSeq: 0, lastTime: 0 }, [note(`r ${i}`)], 1_700_000_000_001), {}, i === 2 ? [{ kind: 'pending-delete' }] : [])))
    expect(out.every((r) => r !== null)).toBe(true)
    expect(c.statements()).toBe(1)
    for (const [i, k] of keys.entries()) expect(await texts(k)).toEqual([[0, `r ${i}`]])
    expect((await env.db.query('SELECT 1 FROM pending_calls WHERE session_key = $1', [keys[2]])).rowCount).toBe(0)
    expect((await env.db.query('SELECT 1 FROM pending_calls WHERE session_key = $1', [keys[3]])).rows).toHaveLength(2)
  })

  it("settlements of one tenant's sessions group too: each session's ledger rows, and the period totals summed once over the units that moved", async () => {
    const keys = await Promise.all(Array.from({ length: 10 }, () => newSession()))
    const day = '2031-05-06'
    const usage = (i: number): SideRow => ({ kind: 'usage', entries: [{ day, model: 'test/m', usage: { inputTokens: 10 + i, outputTokens: 1, cacheReadTokens: 0, cacheWriteTokens: 0, reasoningTokens: 0, costUsd: 0.5 }, attempts: 1 }] })
    const settle = (db: Db, key: string, nextSeq: number, i: number) => appendConditional(db, key, { nextSeq }, stamp({ nextSeq, lastTime: 0 }, [note(`settle ${i}`)], 1_700_000_000_001), {}, [usage(i)])
    const c = counting(env.db)
    // unit 4 is stale: it moves nothing and adds nothing to the ledger or the totals
    const out = await Promise.all(keys.map((k, i) => settle(c.db, k, i === 4 ? 9 : 0, i)))
    expect(c.statements()).toBeLessThan(keys.length / 2)
    expect(out.map((r) => r !== null)).toEqual(keys.map((_, i) => i !== 4))
    const { rows } = await env.db.query<{ session_key: string; input_tokens: number; attempts: number }>('SELECT session_key, input_tokens, attempts FROM usage_ledger WHERE tenant_id = $1 AND day = $2::date', [env.tenantId, day])
    const byKey = new Map(rows.map((r) => [r.session_key, r]))
    for (const [i, k] of keys.entries()) {
      if (i === 4) expect(byKey.has(k)).toBe(false)
      else expect(byKey.get(k)).toMatchObject({ input_tokens: 10 + i, attempts: 1 })
    }
    const tokens = keys.reduce((a, _, i) => (i === 4 ? a : a + 11 + i), 0)
    const s = await budgetState(env.db, env.tenantId, day, day.slice(0, 7))
    expect(s).toMatchObject({ dayTokens: tokens, monthCostUsd: 0.5 * 9 })
    // a second round adds to the same rows
    await Promise.all(keys.map((k, i) => (i === 4 ? Promise.resolve() : settle(env.db, k, 1, i))))
    expect((await budgetState(env.db, env.tenantId, day, day.slice(0, 7)))!.dayTokens).toBe(2 * tokens)
  })
})

// Several processes settle sessions of one tenant at once, each with its own pool and group
// committer, so single-unit and grouped statements upsert the same day and month totals rows
// concurrently. They must lock those rows in one order: in opposite orders they deadlock (seen in CI
// as a turn ended `error` "deadlock detected" in test/e2e/processes.test.ts).
describe('group commit across pools (PostgreSQL)', () => {
  it("three pools settling one tenant's sessions concurrently: no deadlock, and the totals are the sum", async () => {
    const t = await openTestDb('pg')
    const tenantId = crypto.randomUUID()
    await t.db.query('INSERT INTO tenants (id, name, created_at) VALUES ($1, $2, $3)', [tenantId, 'pools', Date.now()])
    const pools: Db[] = [t.db, openPg(t.url!, 10), openPg(t.url!, 10)]
    const day = '2031-05-06'
    const usage: SideRow = { kind: 'usage', entries: [{ day, model: 'test/m', usage: { inputTokens: 10, outputTokens: 1, cacheReadTokens: 0, cacheWriteTokens: 0, reasoningTokens: 0, costUsd: 0.5 }, attempts: 1 }] }
    const SESSIONS = 12
    const ROUNDS = 30
    const errors: string[] = []
    try {
      await Promise.all(
        pools.map(async (db, p) => {
          const keys = Array.from({ length: SESSIONS }, () => crypto.randomUUID())
          for (const [i, key] of keys.entries()) await insertSession(db, { key, tenantId, id: `pool-${p}-${i}`, model: 'test/scripted', system: '', tools: [], metadata: {}, createHash: 'h', createdAt: 1_700_000_000_000 })
          await Promise.all(
            keys.map(async (key) => {
              for (let s = 0; s < ROUNDS; s++) {
                // jitter: some units go alone, others join groups
                await new Promise((r) => setTimeout(r, Math.random() * 3))
                await appendConditional(db, key, { nextSeq: s }, stamp({ nextSeq: s, lastTime: 0 }, [note(`settle ${s}`)], 1_700_000_000_001), {}, [usage]).catch((e) => errors.push(String((e as Error).message)))
              }
            }),
          )
        }),
      )
      expect(errors).toEqual([])
      const s = await budgetState(t.db, tenantId, day, day.slice(0, 7))
      expect(s).toMatchObject({ dayTokens: 3 * SESSIONS * ROUNDS * 11, monthCostUsd: 3 * SESSIONS * ROUNDS * 0.5 })
    } finally {
      for (const p of pools.slice(1)) await p.close()
      await t.drop()
    }
  }, 120_000)
})
