// The budget check's read skipped for tenants with no token or cost limit (API.md §15, issue 16): a
// tenant read once without tokensPerDay and costUsdPerMonth is not read again before each attempt until
// its limits change. PATCH of the limits invalidates that knowledge in every process over the bus before
// it answers, and a dropped bus connection forgets it all; a tenant with a limit is still read before
// every attempt, on its settled usage.

import pino from 'pino'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { LocalHub, PgBus, type Bus } from '../../src/bus/index.js'
import type { Db } from '../../src/store/index.js'
import { periodsAt } from '../../src/tenancy/clock.js'
import { Tenancy } from '../../src/tenancy/index.js'
import { UNBUDGETED_TRUST_MS } from '../../src/tenancy/tenancy.js'
import { driverAndApi } from '../helpers/app.js'
import { countingDb, DB_KINDS, openTestDb, tenantDb, type TestDb } from '../helpers/db.js'
import { d, turnOf, type Ev } from '../helpers/events.js'
import { expectValidLog } from '../helpers/invariants.js'
import { until } from '../helpers/wait.js'

/** The parts of the bus Tenancy uses. */
const tenancyBus = (b: Bus) => ({ invalidations: b.invalidations, doorbells: b.doorbells })

const log = pino({ level: 'silent' })
/** the budget check's read (store/usage.ts budgetState) */
const BUDGET_READ = /FROM tenants t\s+LEFT JOIN usage_totals/

const spend = (db: Db, tenantId: string, tokens: number) =>
  db.query('INSERT INTO usage_totals (tenant_id, period, tokens, cost_usd) VALUES ($1, $2, $3, 0) ON CONFLICT (tenant_id, period) DO UPDATE SET tokens = EXCLUDED.tokens', [tenantId, periodsAt(Date.now()).day, tokens])

describe.each(DB_KINDS)('the budget check on %s', (kind) => {
  const env = tenantDb(kind, 'budget-cache')

  it('reads a tenant without token or cost limits once; after setLimits it reads before every check and refuses; null limits make it read-free again', async () => {
    const c = countingDb(env.db, BUDGET_READ)
    const tenancy = new Tenancy({ db: c.db, ...tenancyBus(new LocalHub()), log })
    await spend(env.db, env.tenantId, 50)
    expect(await tenancy.checkBudget(env.tenantId)).toBeNull()
    expect(await tenancy.checkBudget(env.tenantId)).toBeNull()
    expect(await tenancy.checkBudget(env.tenantId)).toBeNull()
    expect(c.n()).toBe(1)

    // a running limit alone cannot refuse an attempt: still no read per check
    await tenancy.setLimits(env.tenantId, { maxRunningSessions: 5 })
    expect(await tenancy.checkBudget(env.tenantId)).toBeNull()
    expect(await tenancy.checkBudget(env.tenantId)).toBeNull()
    expect(c.n()).toBe(2)

    await tenancy.setLimits(env.tenantId, { tokensPerDay: 10 })
    expect(await tenancy.checkBudget(env.tenantId)).toEqual({ code: 'BUDGET_EXCEEDED', message: expect.stringMatching(/50 of 10 tokens/) })
    expect(c.n()).toBe(3)
    // a tenant with a limit is read every time: its usage may have moved
    await spend(env.db, env.tenantId, 5)
    expect(await tenancy.checkBudget(env.tenantId)).toBeNull()
    expect(await tenancy.checkBudget(env.tenantId)).toBeNull()
    expect(c.n()).toBe(5)
    await spend(env.db, env.tenantId, 50)
    expect(await tenancy.checkBudget(env.tenantId)).toMatchObject({ code: 'BUDGET_EXCEEDED' })
    expect(c.n()).toBe(6)

    await tenancy.setLimits(env.tenantId, { tokensPerDay: null, maxRunningSessions: null })
    expect(await tenancy.checkBudget(env.tenantId)).toBeNull()
    expect(await tenancy.checkBudget(env.tenantId)).toBeNull()
    expect(c.n()).toBe(7)
  })
})

describe.each(DB_KINDS)('the budget check trusts "no budget" for a while (%s)', (kind) => {
  const env = tenantDb(kind, 'budget-trust')

  it(`reads again after UNBUDGETED_TRUST_MS, so an invalidation lost to a crash delays a new budget by that much at most`, async () => {
    let now = Date.now()
    const c = countingDb(env.db, BUDGET_READ)
    const tenancy = new Tenancy({ db: c.db, ...tenancyBus(new LocalHub()), log, clock: () => now })
    await tenancy.checkBudget(env.tenantId)
    now += UNBUDGETED_TRUST_MS - 1000
    await tenancy.checkBudget(env.tenantId)
    expect(c.n()).toBe(1)
    // a budget set behind this process's back (no invalidation reaches it) applies once the trust runs out
    await env.db.query('UPDATE tenants SET tokens_per_day = 1 WHERE id = $1', [env.tenantId])
    await spend(env.db, env.tenantId, 10)
    expect(await tenancy.checkBudget(env.tenantId)).toBeNull()
    now += 2000
    const period = periodsAt(now).day
    await env.db.query('INSERT INTO usage_totals (tenant_id, period, tokens, cost_usd) VALUES ($1, $2, 10, 0) ON CONFLICT (tenant_id, period) DO UPDATE SET tokens = 10', [env.tenantId, period])
    expect(await tenancy.checkBudget(env.tenantId)).toMatchObject({ code: 'BUDGET_EXCEEDED' })
    expect(c.n()).toBe(2)
  })
})

describe('the budget check across processes (pg)', () => {
  let testDb: TestDb
  beforeAll(async () => {
    testDb = await openTestDb('pg')
  })
  afterAll(async () => {
    await testDb?.drop()
  })

  it('a dropped bus connection forgets which tenants have no limits: the next check reads again', async () => {
    const { rows } = await testDb.db.query<{ id: string }>("INSERT INTO tenants (id, name, created_at) VALUES (gen_random_uuid(), 'drop', 0) RETURNING id")
    const tenantId = rows[0].id
    const c = countingDb(testDb.db, BUDGET_READ)
    const bus = new PgBus({ url: testDb.url!, db: testDb.db })
    await bus.start()
    try {
      const tenancy = new Tenancy({ db: c.db, ...tenancyBus(bus), log })
      await tenancy.checkBudget(tenantId)
      await tenancy.checkBudget(tenantId)
      expect(c.n()).toBe(1)
      const before = bus.generation
      bus.dropListener()
      await until('the listener is back', () => bus.generation > before, 10000)
      await tenancy.checkBudget(tenantId)
      await tenancy.checkBudget(tenantId)
      expect(c.n()).toBe(2)
    } finally {
      await bus.close()
    }
  })

  describe('two apps on one database', () => {
    const apps = driverAndApi()

    it('limits PATCHed on the other process apply to the next turn of the process that skips the read; removed, turns run again', async () => {
      const { driver, api } = apps
      const s = await driver.createSession()
      const turn = async (n: number, content: string): Promise<Ev[]> => {
        expect((await api.api('POST', `/v1/sessions/${s.id}/followup`, { content }, { key: driver.key })).status).toBe(202)
        return (await driver.waitForTurnEnd(s.id, n)) as Ev[]
      }
      const limits = async (l: Record<string, number | null>) => {
        const r = await api.api('PATCH', `/v1/admin/tenants/${driver.tenantId}`, { limits: l }, { key: api.adminToken })
        expect(r.status, r.text).toBe(200)
      }
      driver.models.script(s.id, { text: ['one'], usage: { input: 15, output: 10 } }, { text: ['two'] }, { text: ['four'] })
      // two turns without limits: the driver now knows the tenant has none
      expect(d(turnOf(await turn(1, 'first'), 1).at(-1)).reason).toEqual({ kind: 'completed' })
      expect(d(turnOf(await turn(2, 'second'), 2).at(-1)).reason).toEqual({ kind: 'completed' })
      await limits({ tokensPerDay: 20 })
      const third = await turn(3, 'third')
      expect(d(turnOf(third, 3).at(-1)).reason).toMatchObject({ kind: 'error', error: { code: 'BUDGET_EXCEEDED' } })
      expect(driver.models.requestsOf(s.id)).toHaveLength(2)
      await limits({ tokensPerDay: null })
      const fourth = await turn(4, 'fourth')
      expect(d(turnOf(fourth, 4).at(-1)).reason).toEqual({ kind: 'completed' })
      expect(driver.models.requestsOf(s.id)).toHaveLength(3)
      expectValidLog(fourth)
    })
  })
})
