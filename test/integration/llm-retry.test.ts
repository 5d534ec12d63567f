// SPEC §10.5 / §18.2 the llm-retry plugin: policyKey() and backoff() as units, then the plugin in the
// real loop on one database (docs/testing.md). Models-file providers carry their own retry policies (tiny delays), so
// budgets run fast; the scripted model serves both the catalogue-style route `test/scripted` (the
// default policy) and the models-file routes (their `api` is the scripted pi-ai API).

import fs from 'node:fs'
import path from 'node:path'
import pino from 'pino'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS, openTestDb, type DbKind, type TestDb } from '../helpers/db.js'
import { ADMIN_TOKEN } from '../helpers/app.js'
import { ScriptedModels } from '../helpers/scripted.js'
import { expectValidLog, reconstructionCheck } from '../helpers/invariants.js'
import { loadConfig } from '../../src/config.js'
import { startApp, type App } from '../../src/app.js'
import { backoff, policyKey } from '../../src/plugins/llm-retry.js'
import { DEFAULT_RETRY_POLICY, type RetryPolicy } from '../../src/llm/types.js'
import type { SessionEvent } from '../../src/session/index.js'

const types = (evs: Array<{ type: string }>) => evs.map((e) => e.type)
const ofType = (evs: SessionEvent[], type: string) => evs.filter((e) => e.type === type)
const d = (e: SessionEvent | undefined) => e?.data as any
const turnEnd = (evs: SessionEvent[], turn: number) => evs.find((e) => e.type === 'turn/end' && d(e).turn === turn)

const policy = (p: Partial<RetryPolicy>): RetryPolicy => ({ ...DEFAULT_RETRY_POLICY, codes: [...DEFAULT_RETRY_POLICY.codes], ...p })

describe('policyKey() and backoff() (SPEC §10.5, §18.2)', () => {
  it('policyKey is the canonical JSON of the behaviour fields, keys and codes sorted', () => {
    expect(policyKey(DEFAULT_RETRY_POLICY)).toBe(
      '{"codes":["EMPTY_RESPONSE","RATE_LIMIT","SERVER","TIMEOUT","TRANSPORT"],"initialDelayMs":500,"jitterRatio":0.1,"maxDelayMs":10000,"maxRetries":5,"mode":"normal"}',
    )
    expect(policyKey(policy({ codes: ['TRANSPORT', 'SERVER', 'RATE_LIMIT', 'EMPTY_RESPONSE', 'TIMEOUT'] }))).toBe(policyKey(DEFAULT_RETRY_POLICY))
    const variants: Partial<RetryPolicy>[] = [{ mode: 'always' }, { maxRetries: 4 }, { initialDelayMs: 501 }, { maxDelayMs: 9999 }, { jitterRatio: 0.2 }, { codes: ['SERVER'] }]
    const keys = variants.map((v) => policyKey(policy(v)))
    for (const k of keys) expect(k).not.toBe(policyKey(DEFAULT_RETRY_POLICY))
    expect(new Set(keys).size).toBe(keys.length)
  })

  it('backoff follows min(initial · 2^(r−1) · (1 − j + 2j·rand), max)', () => {
    const p = DEFAULT_RETRY_POLICY
    expect([1, 2, 3, 4, 5, 6].map((r) => backoff(p, r, 0.5))).toEqual([500, 1000, 2000, 4000, 8000, 10000])
    expect([1, 2, 3, 4, 5].map((r) => backoff(p, r, 0))).toEqual([450, 900, 1800, 3600, 7200])
    expect([1, 2, 3, 4].map((r) => backoff(p, r, 1))).toEqual([550, 1100, 2200, 4400])
    expect(backoff(p, 5, 1)).toBe(8800)
    expect(backoff(p, 6, 0)).toBe(10000)
    // the cap applies after the jitter
    const tight = policy({ initialDelayMs: 1000, maxDelayMs: 1050, jitterRatio: 0.1 })
    expect([0, 0.5, 0.75, 1].map((x) => backoff(tight, 1, x))).toEqual([900, 1000, 1050, 1050])
    expect(backoff(policy({ jitterRatio: 0, initialDelayMs: 10, maxDelayMs: 40 }), 3, 0.99)).toBe(40)
  })

  it('jitter stays within ±jitterRatio of the base, and the cap is never exceeded', () => {
    const p = DEFAULT_RETRY_POLICY
    for (let r = 1; r <= 7; r++) {
      const base = p.initialDelayMs * 2 ** (r - 1)
      const lo = Math.min(base * (1 - p.jitterRatio), p.maxDelayMs)
      const hi = Math.min(base * (1 + p.jitterRatio), p.maxDelayMs)
      const seen = new Set<number>()
      for (let i = 0; i < 500; i++) {
        const v = backoff(p, r)
        expect(v).toBeGreaterThanOrEqual(Math.floor(lo))
        expect(v).toBeLessThanOrEqual(Math.ceil(hi))
        seen.add(v)
      }
      // it is jittered, not constant (below the cap)
      if (hi < p.maxDelayMs) expect(seen.size).toBeGreaterThan(1)
    }
  })
})

/** An app like test/helpers/app.ts, but with models-file providers next to the scripted model. */
interface RetryApp {
  app: App
  models: ScriptedModels
  testDb: TestDb
  api(method: string, p: string, body?: unknown): Promise<{ status: number; body: any; text: string }>
  createSession(body?: Record<string, unknown>): Promise<{ id: string }>
  events(id: string): Promise<SessionEvent[]>
  waitFor(id: string, pred: (e: SessionEvent) => boolean, timeoutMs?: number): Promise<SessionEvent[]>
  waitForTurnEnd(id: string, turn: number, timeoutMs?: number): Promise<SessionEvent[]>
  close(): Promise<void>
}

const FAST = { initialDelayMs: 10, maxDelayMs: 40, jitterRatio: 0 }

async function startRetryApp(kind: DbKind, problems: string[]): Promise<RetryApp> {
  const testDb = await openTestDb(kind)
  const models = new ScriptedModels()
  const provider = (retry: Record<string, unknown>) => ({ api: models.api, baseUrl: 'http://127.0.0.1:9/v1', apiKey: 'unused-key', retry, models: [{ id: 'm', contextWindow: 8192, maxTokens: 1024 }] })
  const env: Record<string, string> = {
    PORT: '0',
    HOST: '127.0.0.1',
    AGENTD_ADMIN_TOKEN: ADMIN_TOKEN,
    AGENTD_DATA_DIR: testDb.dataDir ?? fs.mkdtempSync(path.join(process.env.TMPDIR ?? '/tmp', 'agentd-retry-')),
    AGENTD_RATE_LIMIT_PER_MIN: '1000000',
    LOG_LEVEL: 'silent',
    ...(testDb.url ? { DATABASE_URL: testDb.url } : {}),
  }
  const app = await startApp(loadConfig(env), {
    db: testDb.db,
    log: pino({ level: 'silent' }),
    llm: {
      extraProviders: [models.provider],
      extraApis: { [models.api]: models.streams },
      defaultModel: models.ref(),
      models: { providers: { fast: provider(FAST), always: provider({ ...FAST, mode: 'always' }) } },
    },
    plugins: [(root) => reconstructionCheck(testDb.db, problems)(root)],
  })
  let key = ''
  const api = async (method: string, p: string, body?: unknown, auth?: string) => {
    const headers: Record<string, string> = { authorization: `Bearer ${auth ?? key}` }
    if (body !== undefined) headers['content-type'] = 'application/json'
    const res = await fetch(app.url + p, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
    const text = await res.text()
    return { status: res.status, body: text ? JSON.parse(text) : undefined, text }
  }
  const admin = await api('POST', '/v1/admin/tenants', { name: 'retry' }, ADMIN_TOKEN)
  if (admin.status !== 201) throw new Error(`tenant: ${admin.status} ${admin.text}`)
  key = admin.body.apiKey
  const events = async (id: string) => {
    const out: SessionEvent[] = []
    let after = -1
    for (;;) {
      const r = await api('GET', `/v1/sessions/${id}/events?after=${after}&limit=5000`)
      out.push(...r.body.events)
      if (!r.body.events.length || r.body.events.at(-1).seq >= r.body.headSeq) return out
      after = r.body.events.at(-1).seq
    }
  }
  const waitFor = async (id: string, pred: (e: SessionEvent) => boolean, timeoutMs = 10000) => {
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const evs = await events(id)
      if (evs.some(pred)) return evs
      if (Date.now() > deadline) throw new Error(`timed out in ${id}: ${types(evs).join(' ')}`)
      await new Promise((r) => setTimeout(r, 15))
    }
  }
  return {
    app,
    models,
    testDb,
    api,
    async createSession(body = {}) {
      const r = await api('POST', '/v1/sessions', { model: models.ref(), ...body })
      if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`)
      return r.body
    },
    events,
    waitFor,
    waitForTurnEnd: (id, turn, timeoutMs) => waitFor(id, (e) => e.type === 'turn/end' && d(e).turn === turn, timeoutMs),
    async close() {
      await app.close()
      models.close()
      await testDb.drop()
    },
  }
}

describe.each(APP_DB_KINDS)('the llm-retry plugin in the loop on %s', (kind) => {
  let t: RetryApp
  const problems: string[] = []
  beforeAll(async () => {
    t = await startRetryApp(kind, problems)
  })
  afterAll(async () => {
    await t?.close()
  })
  const post = (id: string, route: string, body?: unknown) => t.api('POST', `/v1/sessions/${id}/${route}`, body)
  const fastPolicy = policy(FAST)

  it('llm/retry is durable before the delay and llm/retry-started follows it; the step keeps its shape (SPEC §10.6)', async () => {
    const s = await t.createSession({ system: 'P' })
    t.models.script(s.id, { error: '500 upstream exploded' }, { text: ['recovered'] })
    await post(s.id, 'followup', { content: 'hi' })
    const atRetry = await t.waitFor(s.id, (e) => e.type === 'llm/retry')
    // logged before the wait: the second attempt has not been dispatched yet (the delay is ≥ 450 ms)
    expect(t.models.requestsOf(s.id)).toHaveLength(1)
    expect(ofType(atRetry, 'llm/retry-started')).toEqual([])
    const evs = await t.waitForTurnEnd(s.id, 1)
    expect(types(evs)).toEqual([
      'agent/inbox/spliced', 'turn/start', 'agent/inbox/spliced', 'step/start', 'system/message', 'user/message', 'request/header', 'request/context',
      'assistant/attempt', 'llm/retry', 'llm/retry-started', 'assistant/message', 'step/end', 'turn/end',
    ])
    const [retry] = ofType(evs, 'llm/retry')
    const [started] = ofType(evs, 'llm/retry-started')
    expect(d(retry)).toMatchObject({ turn: 1, step: 1, provider: 'test', mode: 'normal', policyKey: policyKey(DEFAULT_RETRY_POLICY), retry: 1, maxRetries: 5, failure: { code: 'SERVER', status: 500 } })
    expect(d(retry).failure.message).toContain('upstream exploded')
    expect(typeof d(retry).retryId).toBe('string')
    expect(d(retry).delayMs).toBeGreaterThanOrEqual(450)
    expect(d(retry).delayMs).toBeLessThanOrEqual(550)
    expect(d(started)).toEqual({ retryId: d(retry).retryId, turn: 1, step: 1, retry: 1 })
    expect(t.models.requestsOf(s.id)[1].at).toBeGreaterThanOrEqual(started.time)
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'completed' })
    expectValidLog(evs)
    expect(problems).toEqual([])
  })

  it('EMPTY_RESPONSE (a stop without content) is retried', async () => {
    const s = await t.createSession({ system: 'P', model: 'fast/m' })
    t.models.script(s.id, {}, { text: ['now with content'] })
    await post(s.id, 'followup', { content: 'hi' })
    const evs = await t.waitForTurnEnd(s.id, 1)
    expect(ofType(evs, 'assistant/attempt')).toHaveLength(1)
    const [retry] = ofType(evs, 'llm/retry')
    expect(d(retry)).toMatchObject({ provider: 'fast', mode: 'normal', policyKey: policyKey(fastPolicy), retry: 1, maxRetries: 5, delayMs: 10, failure: { code: 'EMPTY_RESPONSE' } })
    expect(ofType(evs, 'assistant/message').map((e) => d(e).message.content[0].text)).toEqual(['now with content'])
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'completed' })
    expectValidLog(evs)
    expect(problems).toEqual([])
  })

  it('the budget: maxRetries 5 allows five retries of one sequence (one retryId), the sixth failure ends the turn; a new step starts a new sequence', async () => {
    const s = await t.createSession({ system: 'P', model: 'fast/m' })
    const fail = { error: '503 service unavailable' }
    t.models.script(s.id, fail, fail, fail, fail, fail, fail, fail, { text: ['ok'] })
    await post(s.id, 'followup', { content: 'hi' })
    let evs = await t.waitForTurnEnd(s.id, 1)
    const retries = ofType(evs, 'llm/retry')
    expect(retries.map((e) => d(e).retry)).toEqual([1, 2, 3, 4, 5])
    expect(retries.map((e) => d(e).delayMs)).toEqual([10, 20, 40, 40, 40])
    expect(new Set(retries.map((e) => d(e).retryId)).size).toBe(1)
    for (const r of retries) expect(d(r)).toMatchObject({ turn: 1, step: 1, provider: 'fast', mode: 'normal', maxRetries: 5, policyKey: policyKey(fastPolicy) })
    expect(ofType(evs, 'llm/retry-started').map((e) => [d(e).retry, d(e).retryId])).toEqual(retries.map((e) => [d(e).retry, d(e).retryId]))
    expect(ofType(evs, 'assistant/attempt')).toHaveLength(6)
    expect(ofType(evs, 'step/start')).toHaveLength(1)
    expect(t.models.requestsOf(s.id)).toHaveLength(6)
    expect(d(turnEnd(evs, 1)).reason).toMatchObject({ kind: 'error', error: { code: 'SERVER', status: 503 } })
    expectValidLog(evs)
    // the next turn's step counts afresh, under a new retryId
    await post(s.id, 'followup', { content: 'again' })
    evs = await t.waitForTurnEnd(s.id, 2)
    const second = ofType(evs, 'llm/retry').slice(5)
    expect(second.map((e) => d(e).retry)).toEqual([1])
    expect(d(second[0]).turn).toBe(2)
    expect(d(second[0]).retryId).not.toBe(d(retries[0]).retryId)
    expect(d(turnEnd(evs, 2)).reason).toEqual({ kind: 'completed' })
    expectValidLog(evs)
    expect(problems).toEqual([])
  })

  it('a provider Retry-After up to maxDelayMs is used exactly, without jitter', async () => {
    const s = await t.createSession({ system: 'P' })
    t.models.script(s.id, { error: '429 rate limited, try again in 0.2s' }, { text: ['ok'] })
    await post(s.id, 'followup', { content: 'hi' })
    const evs = await t.waitForTurnEnd(s.id, 1)
    const [retry] = ofType(evs, 'llm/retry')
    expect(d(retry).delayMs).toBe(200)
    expect(d(retry).failure).toMatchObject({ code: 'RATE_LIMIT', status: 429, providerRetryAfterMs: 200 })
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'completed' })
    expectValidLog(evs)
  })

  it('a Retry-After above maxDelayMs makes normal mode delegate: the turn ends with the failure', async () => {
    const s = await t.createSession({ system: 'P', model: 'fast/m' })
    t.models.script(s.id, { error: '429 rate limited, try again in 2s' }, { text: ['never'] })
    await post(s.id, 'followup', { content: 'hi' })
    const evs = await t.waitForTurnEnd(s.id, 1)
    expect(ofType(evs, 'llm/retry')).toEqual([])
    expect(d(turnEnd(evs, 1)).reason).toMatchObject({ kind: 'error', error: { code: 'RATE_LIMIT', providerRetryAfterMs: 2000 } })
    expect(t.models.requestsOf(s.id)).toHaveLength(1)
    expectValidLog(evs)
  })

  it('non-transient codes delegate: 401 → AUTH and 400 → INVALID_REQUEST end the turn without llm/retry', async () => {
    for (const [error, code] of [['401 invalid api key', 'AUTH'], ['400 bad request: unknown parameter', 'INVALID_REQUEST']] as const) {
      const s = await t.createSession({ system: 'P' })
      t.models.script(s.id, { error }, { text: ['never'] })
      await post(s.id, 'followup', { content: 'hi' })
      const evs = await t.waitForTurnEnd(s.id, 1)
      expect(ofType(evs, 'llm/retry')).toEqual([])
      expect(d(turnEnd(evs, 1)).reason).toMatchObject({ kind: 'error', error: { code } })
      expect(t.models.requestsOf(s.id)).toHaveLength(1)
      expectValidLog(evs)
    }
  })

  it('always mode retries even a non-transient failure, without maxRetries in the event', async () => {
    const s = await t.createSession({ system: 'P', model: 'always/m' })
    t.models.script(s.id, { error: '401 invalid api key' }, { text: ['ok'] })
    await post(s.id, 'followup', { content: 'hi' })
    const evs = await t.waitForTurnEnd(s.id, 1)
    const [retry] = ofType(evs, 'llm/retry')
    expect(d(retry)).toMatchObject({ provider: 'always', mode: 'always', retry: 1, failure: { code: 'AUTH' } })
    expect('maxRetries' in d(retry)).toBe(false)
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'completed' })
    expectValidLog(evs)
  })

  it('no llm/retry-started after a cancellation in the backoff, and no second attempt', async () => {
    const s = await t.createSession({ system: 'P' })
    t.models.script(s.id, { error: '500 upstream exploded' }, { text: ['never'] })
    await post(s.id, 'followup', { content: 'hi' })
    await t.waitFor(s.id, (e) => e.type === 'llm/retry')
    expect((await post(s.id, 'cancel', {})).body).toEqual({ cancelled: true })
    const evs = await t.waitForTurnEnd(s.id, 1)
    expect(ofType(evs, 'llm/retry-started')).toEqual([])
    expect(types(evs).slice(-3)).toEqual(['llm/retry', 'step/end', 'turn/end'])
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'aborted', reason: { kind: 'user' } })
    expect(t.models.requestsOf(s.id)).toHaveLength(1)
    expectValidLog(evs)
  })

  it('no llm/retry-started after a disposal in the backoff', async () => {
    const s = await t.createSession({ system: 'P' })
    t.models.script(s.id, { error: '500 upstream exploded' }, { text: ['never'] })
    await post(s.id, 'followup', { content: 'hi' })
    await t.waitFor(s.id, (e) => e.type === 'llm/retry')
    const key = (await t.app.db.query<{ key: string }>('SELECT key FROM sessions WHERE id = $1', [s.id])).rows[0].key
    await t.app.host!.drop(key, { release: true })
    const evs = await t.waitForTurnEnd(s.id, 1)
    expect(ofType(evs, 'llm/retry-started')).toEqual([])
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'aborted', reason: { kind: 'disposed' } })
    expect(t.models.requestsOf(s.id)).toHaveLength(1)
    expectValidLog(evs)
  })
})
