// The usage ledger and slots as side rows of the units that write settlements and turn boundaries
// (API.md §15, DESIGN.md §3), on real PostgreSQL and PGlite, through the driver's SessionLog on both
// of its paths: a settlement's usage lands on the UTC day and month of its time (23:59:59.999 and
// 00:00 fall on different days), a failed attempt on its header's model; the budget check reads it
// with an injected clock; turn/start takes a slot and turn/end frees it.

import crypto from 'node:crypto'
import pino from 'pino'
import { describe, expect, it } from 'vitest'
import { KeyedMutex, Publisher, SessionLog } from '../../src/agent/index.js'
import { LocalHub, type Bus } from '../../src/bus/index.js'
import { createRoot } from '../../src/hooks/index.js'
import { SessionState, type Draft } from '../../src/session/index.js'
import { insertSession, lockLean, NOW_MS, stamp, writeEvents } from '../../src/store/index.js'
import { Tenancy } from '../../src/tenancy/index.js'
import { DB_KINDS, tenantDb } from '../helpers/db.js'

/** The parts of the bus Tenancy uses. */
const tenancyBus = (b: Bus) => ({ invalidations: b.invalidations, doorbells: b.doorbells })

describe.each(DB_KINDS)('the usage ledger on %s', (kind) => {
  const env = tenantDb(kind, 'ledger')
  const log = pino({ level: 'silent' })
  const publisher = new Publisher(new LocalHub(), createRoot(), log)
  const lease = { owner: 'a', token: 1 }

  it('settlements write ledger rows and period totals on both paths; the budget check reads them on the clock', async () => {
    const key = crypto.randomUUID()
    await insertSession(env.db, { key, tenantId: env.tenantId, id: 'ledger-1', model: 'p/m1', system: '', tools: [], metadata: {}, createHash: 'h', createdAt: 1 })
    await env.db.query(`UPDATE sessions SET lease_owner = 'a', lease_token = 1, lease_expires_at = ${NOW_MS} + 60000 WHERE key = $1`, [key])
    const sl = new SessionLog({ db: env.db, publisher, mutex: new KeyedMutex(), log }, key, 'ledger-1', new SessionState(), lease, env.tenantId)
    const jan31 = Date.UTC(2031, 0, 31, 23, 59, 59, 999)
    const feb1 = Date.UTC(2031, 1, 1)
    const at = (time: number, ...drafts: Draft[]) => sl.commit((u) => void drafts.forEach((dr) => u.add(dr, { time })))
    const slots = async () => (await env.db.query<{ n: number }>('SELECT count(*)::int AS n FROM running_slots WHERE session_key = $1', [key])).rows[0].n

    await at(jan31 - 1000, { type: 'turn/start', data: { turn: 1 } }, { type: 'step/start', data: { turn: 1, step: 1 } }, { type: 'request/header', data: { header: { config: { provider: 'p', model: 'm1' } }, reason: 'initial' } })
    expect(await slots()).toBe(1)
    // a failed attempt: no model of its own, the header's
    await at(jan31, { type: 'assistant/attempt', data: { turn: 1, step: 1, stream: [{ type: 'chunk', time: jan31, chunk: { type: 'usage', usage: { inputTokens: 3, outputTokens: 2 } } }] } })
    // another writer moves the row: the next unit takes the locked path
    await env.db.transaction(async (tx) => {
      const row = (await lockLean(tx, key))!
      await writeEvents(tx, row, stamp(row, [{ type: 'test/note', data: {} }], feb1))
    })
    await at(feb1, { type: 'assistant/message', data: { turn: 1, step: 1, message: { id: 'm', role: 'assistant', content: [], source: { kind: 'model', provider: 'p', model: 'm2' } }, stream: [], usage: { inputTokens: 10, outputTokens: 5, cacheReadTokens: 1, costUsd: 0.5 } }, surfaceOp: 'append' })
    await at(
      feb1,
      { type: 'compaction/summary', data: { compactionId: 'c', summary: 's', shadowedRange: { start: 0, end: 0 }, shadowedSeqs: [0], shadowedTokenCount: 1, provider: 'p', model: 'm2', usage: { inputTokens: 7, outputTokens: 1 } } },
      { type: 'step/end', data: { turn: 1, step: 1 } },
      { type: 'turn/end', data: { turn: 1, reason: { kind: 'completed' } } },
    )
    expect(await slots()).toBe(0)

    const ledger = await env.db.query(
      "SELECT to_char(day, 'YYYY-MM-DD') AS day, model, session_id, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, attempts FROM usage_ledger WHERE session_key = $1 ORDER BY day, model",
      [key],
    )
    expect(ledger.rows).toEqual([
      { day: '2031-01-31', model: 'p/m1', session_id: 'ledger-1', input_tokens: 3, output_tokens: 2, cache_read_tokens: 0, cache_write_tokens: 0, cost_usd: 0, attempts: 1 },
      { day: '2031-02-01', model: 'p/m2', session_id: 'ledger-1', input_tokens: 17, output_tokens: 6, cache_read_tokens: 1, cache_write_tokens: 0, cost_usd: 0.5, attempts: 2 },
    ])
    const totals = await env.db.query("SELECT period, tokens, cost_usd FROM usage_totals WHERE tenant_id = $1 AND period LIKE '2031%' ORDER BY period", [env.tenantId])
    expect(totals.rows).toEqual([
      { period: '2031-01', tokens: 5, cost_usd: 0 },
      { period: '2031-01-31', tokens: 5, cost_usd: 0 },
      { period: '2031-02', tokens: 24, cost_usd: 0.5 },
      { period: '2031-02-01', tokens: 24, cost_usd: 0.5 },
    ])
    // the session row's usage sums the same attempts
    const row = await env.db.query('SELECT input_tokens, output_tokens, cache_read_tokens, cost_usd FROM sessions WHERE key = $1', [key])
    expect(row.rows[0]).toEqual({ input_tokens: 20, output_tokens: 8, cache_read_tokens: 1, cost_usd: 0.5 })

    // the budget on the clock: the day's tokens and the month's cost, each in its own period
    let now = Date.UTC(2031, 0, 31, 12)
    const tenancy = new Tenancy({ db: env.db, ...tenancyBus(new LocalHub()), log, clock: () => now })
    await env.db.query('UPDATE tenants SET tokens_per_day = 20, cost_usd_per_month = 0.5 WHERE id = $1', [env.tenantId])
    expect(await tenancy.checkBudget(env.tenantId)).toBeNull()
    now = Date.UTC(2031, 1, 1, 0, 0, 0, 1)
    expect(await tenancy.checkBudget(env.tenantId)).toEqual({ code: 'BUDGET_EXCEEDED', message: expect.stringMatching(/2031-02-01.*24 of 20 tokens/) })
    now = Date.UTC(2031, 1, 2)
    expect(await tenancy.checkBudget(env.tenantId)).toEqual({ code: 'BUDGET_EXCEEDED', message: expect.stringMatching(/2031-02.*costUsdPerMonth/) })
    now = Date.UTC(2031, 2, 1)
    expect(await tenancy.checkBudget(env.tenantId)).toBeNull()
    await env.db.query('UPDATE tenants SET tokens_per_day = NULL, cost_usd_per_month = NULL WHERE id = $1', [env.tenantId])
    now = Date.UTC(2031, 1, 1, 0, 0, 0, 1)
    expect(await tenancy.checkBudget(env.tenantId)).toBeNull()
  })
})
