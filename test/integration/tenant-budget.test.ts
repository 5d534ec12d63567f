// API.md §15 budgets: tokensPerDay and costUsdPerMonth are checked before every model attempt (loop
// requests, retries, compaction summaries) on the tenant's settled usage. Over a budget, the attempt
// is not made — the scripted provider sees no request — and the turn ends BUDGET_EXCEEDED with a
// balanced log; raising the limit, or the UTC day or month rolling over, lets the next turn run.

import { afterEach, describe, expect, it } from 'vitest'
import { SUMMARY_INSTRUCTION } from '../../src/plugins/compaction.js'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp, type TestAppOptions } from '../helpers/app.js'
import { d, ofType, turnOf, types, userTexts, type Ev } from '../helpers/events.js'
import { expectValidLog, reconstructionCheck } from '../helpers/invariants.js'
import type { Recorded } from '../helpers/scripted.js'

let t: TestApp | undefined
afterEach(async () => {
  await t?.close()
  t = undefined
})

const BUDGET = { kind: 'error', error: { code: 'BUDGET_EXCEEDED', message: expect.any(String) } }
const isSummaryCall = (r: Recorded) => JSON.stringify(r.context.messages.at(-1)).includes(SUMMARY_INSTRUCTION)

describe.each(APP_DB_KINDS)('budgets on %s', (kind) => {
  const start = async (o: Partial<TestAppOptions> = {}) => {
    const problems: string[] = []
    t = await startTestApp({ kind, ...o, plugins: [(root, db) => reconstructionCheck(db, problems)(root)] })
    return { t, problems }
  }
  const limits = async (l: Record<string, number | null>) => {
    const r = await t!.api('PATCH', `/v1/admin/tenants/${t!.tenantId}`, { limits: l }, { key: t!.adminToken })
    expect(r.status, r.text).toBe(200)
    return r.body.tenant.limits
  }
  const turn = async (id: string, n: number, content: string): Promise<Ev[]> => {
    expect((await t!.api('POST', `/v1/sessions/${id}/followup`, { content })).status).toBe(202)
    return (await t!.waitForTurnEnd(id, n)) as Ev[]
  }
  const reason = (evs: Ev[], n: number) => d(turnOf(evs, n).at(-1)).reason

  it('a token budget the first turn spends ends the second BUDGET_EXCEEDED without a model request; a raised limit lets the next run', async () => {
    const { t, problems } = await start()
    const s = await t.createSession()
    expect(await limits({ tokensPerDay: 20 })).toEqual({ tokensPerDay: 20 })
    t.models.script(s.id, { text: ['one'], usage: { input: 15, output: 10 } })
    expect(reason(await turn(s.id, 1, 'first'), 1)).toEqual({ kind: 'completed' })
    const evs = await turn(s.id, 2, 'second')
    expect(reason(evs, 2)).toEqual(BUDGET)
    expect(d(turnOf(evs, 2).at(-1)).reason.error.message).toMatch(/tokensPerDay/)
    expect(t.models.requestsOf(s.id)).toHaveLength(1)
    // admitted, never sent: the step closes balanced, with no settlement
    const t2 = turnOf(evs, 2)
    expect(types(t2).filter((x) => x !== 'agent/inbox/spliced' && x !== 'system/message' && x !== 'request/header' && x !== 'request/context')).toEqual(['turn/start', 'step/start', 'user/message', 'step/end', 'turn/end'])
    expect(userTexts(t2)).toEqual(['second'])
    expectValidLog(evs)
    // a turn after it ends the same way until the limit is raised
    expect(reason(await turn(s.id, 3, 'third'), 3)).toEqual(BUDGET)
    expect(await limits({ tokensPerDay: 1000 })).toEqual({ tokensPerDay: 1000 })
    t.models.script(s.id, { text: ['four'] })
    const after = await turn(s.id, 4, 'fourth')
    expect(reason(after, 4)).toEqual({ kind: 'completed' })
    expect(t.models.requestsOf(s.id)).toHaveLength(2)
    expectValidLog(after)
    expect(problems).toEqual([])
    // the refused turns count nothing; the session's usage is what was settled
    expect((await t.api('GET', `/v1/sessions/${s.id}`)).body.usage).toMatchObject({ inputTokens: 25, outputTokens: 15 })
    // metrics by tenant: a tenant with limits has a label of its own
    const metrics = await (await fetch(`${t.url}/metrics`)).text()
    expect(metrics).toContain(`agentd_tenant_budget_refusals_total{tenant="${t.tenantId}",limit="tokensPerDay"} 2`)
    expect(metrics).toContain(`agentd_tenant_tokens_total{tenant="${t.tenantId}"} 40`)
  })

  it('metrics of a tenant without limits count under `other`; a running turn shows in the running-sessions gauge', async () => {
    const { t } = await start()
    const s = await t.createSession()
    let release!: () => void
    const held = new Promise<void>((r) => (release = r))
    t.models.script(s.id, async () => (await held, { text: ['done'], usage: { input: 3, output: 4 } }))
    expect((await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'go' })).status).toBe(202)
    await t.models.waitForRequest(s.id)
    const during = await (await fetch(`${t.url}/metrics`)).text()
    expect(during).toContain('agentd_tenant_running_sessions{tenant="other"} 1')
    release()
    await t.waitForTurnEnd(s.id, 1)
    const after = await (await fetch(`${t.url}/metrics`)).text()
    expect(after).toContain('agentd_tenant_tokens_total{tenant="other"} 7')
    expect(after).not.toContain(`tenant="${t.tenantId}"`)
    expect(after).not.toMatch(/agentd_tenant_running_sessions\{tenant="other"\} 1/)
  })

  it('a cost budget for the month likewise; removing it (null) lets turns run', async () => {
    const { t } = await start()
    const s = await t.createSession()
    await limits({ costUsdPerMonth: 0.5 })
    t.models.script(s.id, { text: ['pricey'], usage: { input: 10, output: 10, costUsd: 0.75 } })
    expect(reason(await turn(s.id, 1, 'first'), 1)).toEqual({ kind: 'completed' })
    const evs = await turn(s.id, 2, 'second')
    expect(reason(evs, 2)).toEqual(BUDGET)
    expect(reason(evs, 2).error.message).toMatch(/costUsdPerMonth/)
    expect(t.models.requestsOf(s.id)).toHaveLength(1)
    expectValidLog(evs)
    expect(await limits({ costUsdPerMonth: null })).toEqual({})
    t.models.script(s.id, { text: ['free again'] })
    expect(reason(await turn(s.id, 3, 'third'), 3)).toEqual({ kind: 'completed' })
  })

  it("a retry is an attempt: a failed attempt's usage counts, and the retry over budget is not made", async () => {
    const { t } = await start()
    const s = await t.createSession()
    await limits({ tokensPerDay: 20 })
    // an empty answer is EMPTY_RESPONSE (retryable) and settles with its usage
    t.models.script(s.id, { usage: { input: 30, output: 0 } }, { text: ['never asked for'] })
    const evs = await turn(s.id, 1, 'first')
    expect(reason(evs, 1)).toEqual(BUDGET)
    expect(t.models.requestsOf(s.id)).toHaveLength(1)
    expect(types(turnOf(evs, 1)).filter((x) => /^(assistant|llm|step|turn)\//.test(x))).toEqual(['turn/start', 'step/start', 'assistant/attempt', 'llm/retry', 'llm/retry-started', 'step/end', 'turn/end'])
    expectValidLog(evs)
    expect((await t.api('GET', '/v1/usage')).body.usage).toEqual([{ inputTokens: 30, outputTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0, costUsd: 0, attempts: 1 }])
  })

  it("a compaction summary is an attempt: its usage counts, so the step after it is refused", async () => {
    const { t, problems } = await start({ models: [{ id: 'small', contextWindow: 2048, maxTokens: 256 }] })
    const s = await t.createSession({ model: 'test/small', system: 'You are terse.' })
    // two big turns (900 + 1700 tokens); the second's usage puts the next step above 0.8 · 2048
    t.models.script(s.id, { text: ['a'.repeat(1600)], usage: { input: 500, output: 400 } }, { text: ['b'.repeat(1600)], usage: { input: 1300, output: 400 } })
    await turn(s.id, 1, 'q'.repeat(1600))
    await turn(s.id, 2, 'r'.repeat(1600))
    await limits({ tokensPerDay: 3000 })
    t.models.fallback(s.id, (r) => (isSummaryCall(r) ? { text: ['long texts, long answers'], usage: { input: 1000, output: 50 } } : { text: ['not to be asked'] }))
    const evs = await turn(s.id, 3, 'third')
    // the summary ran (2600 < 3000 before it), and its 1050 tokens spent the budget for the step
    expect(ofType(turnOf(evs, 3), 'compaction/summary')).toHaveLength(1)
    expect(reason(evs, 3)).toEqual(BUDGET)
    const calls = t.models.requestsOf(s.id)
    expect(calls.map(isSummaryCall)).toEqual([false, false, true])
    expectValidLog(evs)
    expect(problems).toEqual([])
    // over budget, the next turn's pressure compaction makes no summary call either
    expect(reason(await turn(s.id, 4, 'fourth'), 4)).toEqual(BUDGET)
    expect(t.models.requestsOf(s.id)).toHaveLength(3)
    const usage = (await t.api('GET', '/v1/usage')).body.usage[0]
    expect(usage).toMatchObject({ inputTokens: 2800, outputTokens: 850, attempts: 3 })
  })

  it('the UTC day and month roll over on the injected clock: a spent day budget frees at midnight, a spent month budget on the 1st', async () => {
    let offset = 0
    const { t } = await start({ clock: () => Date.now() + offset })
    const s = await t.createSession()
    await limits({ tokensPerDay: 20, costUsdPerMonth: 100 })
    t.models.script(s.id, { text: ['one'], usage: { input: 30, output: 0, costUsd: 150 } })
    await turn(s.id, 1, 'first')
    expect(reason(await turn(s.id, 2, 'second'), 2).error.message).toMatch(/tokensPerDay/)
    // the next UTC day: the day's tokens start over, the month's cost does not
    const now = new Date()
    const tomorrow = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1))
    offset = tomorrow.getTime() - Date.now() + 1000
    if (tomorrow.getUTCMonth() === now.getUTCMonth()) expect(reason(await turn(s.id, 3, 'third'), 3).error.message).toMatch(/costUsdPerMonth/)
    else {
      // today is the month's last day: tomorrow starts the month's budget over too
      t.models.script(s.id, { text: ['tomorrow'] })
      expect(reason(await turn(s.id, 3, 'third'), 3)).toEqual({ kind: 'completed' })
    }
    // the first day of the next UTC month: both start over
    offset = Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1) - Date.now() + 1000
    t.models.script(s.id, { text: ['new month'] })
    expect(reason(await turn(s.id, 4, 'fourth'), 4)).toEqual({ kind: 'completed' })
    expect(t.models.requestsOf(s.id).length).toBeGreaterThanOrEqual(2)
  })
})
