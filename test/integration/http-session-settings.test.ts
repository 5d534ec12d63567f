// API.md §4: PATCH /v1/sessions/:id of the session's settings, on one database (docs/testing.md). A change made while
// a step runs leaves that step's request alone and reaches the next step's, recorded only through
// SPEC's own machinery (a system-node replacement for the text, request/header {reason:'change'} for
// tools, model and limits), with every request reconstructable from the log (SPEC §8.10). Bad input
// gets the error session create gives and writes nothing; a fork takes the current settings. On
// PostgreSQL, a PATCH answered by an api-role process has reached the driver in another process.

import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { expectValidLog, reconstructionCheck } from '../helpers/invariants.js'
import { gate, type Recorded } from '../helpers/scripted.js'
import type { SessionEvent } from '../../src/session/index.js'

const LOOKUP = { name: 'lookup_order', description: 'finds an order', parameters: { type: 'object', properties: { id: { type: 'string' } } }, execution: { type: 'client' } }
const REFUND = { name: 'refund', description: 'refunds an order', parameters: { type: 'object', properties: {} }, execution: { type: 'client' } }

/**
 * An http tool the server runs itself: the step after its call follows with no client action (a tool
 * result posted by a client would poke the session itself, and hide whether the PATCH's poke arrived).
 */
let toolServer: http.Server
let toolUrl = ''
beforeAll(async () => {
  toolServer = http.createServer((req, res) => {
    req.resume()
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ content: 'shipped' })))
  })
  await new Promise<void>((r) => toolServer.listen(0, '127.0.0.1', r))
  toolUrl = `http://127.0.0.1:${(toolServer.address() as AddressInfo).port}/order`
})
afterAll(async () => {
  await new Promise((r) => toolServer?.close(r))
})
const ORDER = () => ({ name: 'lookup_order', description: 'finds an order', parameters: { type: 'object', properties: { id: { type: 'string' } } }, execution: { type: 'http', url: toolUrl } })

const headers = (log: SessionEvent[]) => log.filter((e) => e.type === 'request/header') as Array<SessionEvent & { data: any }>
const stepOf = (log: SessionEvent[], seq: number) => (log.filter((e) => e.type === 'step/start' && e.seq < seq).at(-1)?.data as { step: number } | undefined)?.step

describe.each(APP_DB_KINDS)('session settings PATCH on %s', (kind) => {
  let t: TestApp
  const problems: string[] = []
  const seen = { n: 0 }
  beforeAll(async () => {
    t = await startTestApp({ kind, models: [{ id: 'scripted' }, { id: 'other' }], plugins: [(root, db) => reconstructionCheck(db, problems, seen)(root)] })
  })
  afterAll(async () => {
    await t?.close()
  })

  const create = (body: Record<string, unknown> = {}) => t.createSession({ system: 'First system.', tools: [LOOKUP], ...body })

  /**
   * Turn 1 of a fresh session in two steps: the first request (a call of the http tool lookup_order)
   * is held until `patch` has been answered; the server runs the tool and the second step asks again.
   */
  const patchDuringStep = async (patch: Record<string, unknown>) => {
    const s = await create({ tools: [ORDER()] })
    const held = gate()
    t.models.script(s.id, { toolCalls: [{ id: 'c1', name: 'lookup_order', arguments: { id: '7' } }], gate: held.promise }, { text: ['done'] })
    expect((await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'where is order 7?' })).status).toBe(202)
    await t.models.waitForRequest(s.id, 1)
    const r = await t.api('PATCH', `/v1/sessions/${s.id}`, patch)
    expect(r.status, r.text).toBe(200)
    held.open()
    const log = await t.waitForTurnEnd(s.id, 1)
    expect((log.find((e) => e.type === 'turn/end')!.data as any).reason).toEqual({ kind: 'completed' })
    const [r1, r2] = t.models.requestsOf(s.id)
    expect(t.models.requestsOf(s.id)).toHaveLength(2)
    expectValidLog(log)
    expect(problems).toEqual([])
    return { id: s.id, answer: r.body, log, r1, r2 } as { id: string; answer: any; log: SessionEvent[]; r1: Recorded; r2: Recorded }
  }

  it('tools changed while a step runs: that request keeps the old list, the next step carries the new one after a request/header change', async () => {
    const before = seen.n
    const { answer, log, r1, r2 } = await patchDuringStep({ tools: [ORDER(), REFUND] })
    expect(answer.settings.tools).toEqual([ORDER(), REFUND])
    expect(r1.context.tools?.map((x) => x.name)).toEqual(['lookup_order'])
    expect(r2.context.tools?.map((x) => x.name)).toEqual(['lookup_order', 'refund'])
    const h = headers(log)
    expect(h.map((e) => e.data.reason)).toEqual(['initial', 'change'])
    expect(h[1].data.header.tools.map((x: any) => x.name)).toEqual(['lookup_order', 'refund'])
    expect(h[1].data.startsSeries).toBe(true)
    // the change is admitted by step 2, after step 1's answer
    expect(stepOf(log, h[1].seq)).toBe(2)
    expect(h[1].seq).toBeGreaterThan(log.find((e) => e.type === 'assistant/message')!.seq)
    // the model, limits and system text did not move
    expect(h[1].data.header.config).toEqual(h[0].data.header.config)
    expect(log.filter((e) => e.type === 'system/message')).toHaveLength(1)
    expect(seen.n - before).toBe(2)
  })

  it('system text changed while a step runs: the next step replaces the system node and its request carries the new text', async () => {
    const { answer, log, r1, r2 } = await patchDuringStep({ system: 'Second system.' })
    expect(answer.settings.system).toBe('Second system.')
    expect(r1.context.systemPrompt).toBe('First system.')
    expect(r2.context.systemPrompt).toBe('Second system.')
    const sys = log.filter((e) => e.type === 'system/message') as Array<SessionEvent & { data: any }>
    expect(sys).toHaveLength(2)
    expect(sys[0].surfaceOp).toBe('append')
    expect(sys[1].surfaceOp).toEqual({ op: 'replace', start: sys[0].seq, end: sys[0].seq })
    expect(sys[1].data.message.content).toEqual([{ type: 'text', text: 'Second system.' }])
    expect(sys[1].data.step).toBe(2)
    // the config and tools are the same: no header change, only the series the replacement breaks
    expect(headers(log).map((e) => e.data.reason)).toEqual(['initial', 'series'])
  })

  it('model and maxTokens changed while a step runs: the next request goes to the new model with the new limit, after a request/header change', async () => {
    const { answer, log, r1, r2 } = await patchDuringStep({ model: t.models.ref('other'), maxTokens: 321, reasoningEffort: 'low' })
    expect(answer.model).toBe(t.models.ref('other'))
    expect(answer.settings).toMatchObject({ model: t.models.ref('other'), maxTokens: 321, reasoningEffort: 'low' })
    expect(r1.model).toBe('scripted')
    expect(r1.options?.maxTokens).toBe(1024) // the model's own limit, filled in by the adapter
    expect(r2.model).toBe('other')
    expect(r2.options?.maxTokens).toBe(321)
    const h = headers(log)
    expect(h.map((e) => e.data.reason)).toEqual(['initial', 'change'])
    expect(h[0].data.header.config).toMatchObject({ provider: 'test', model: 'scripted' })
    expect(h[1].data.header.config).toMatchObject({ provider: 'test', model: 'other', maxTokens: 321, reasoningEffort: 'low' })
    expect(stepOf(log, h[1].seq)).toBe(2)
    const ctx = log.filter((e) => e.type === 'request/context').map((e) => (e.data as any).model)
    expect(ctx).toEqual(['scripted', 'other'])
    const models = log.filter((e) => e.type === 'assistant/message').map((e) => (e.data as any).message.source.model)
    expect(models).toEqual(['scripted', 'other'])
  })

  it('a PATCH while idle applies to the next turn; the settings read back; a fork takes the current settings', async () => {
    const s = await create()
    t.models.script(s.id, { text: ['one'] })
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'first' })
    await t.waitIdle(s.id)
    const patched = await t.api('PATCH', `/v1/sessions/${s.id}`, { tools: [REFUND], system: 'Later system.', title: 'renamed' })
    expect(patched.status, patched.text).toBe(200)
    const want = { model: t.models.ref(), system: 'Later system.', tools: [REFUND], mcpServers: [], maxTokens: null, reasoningEffort: null }
    expect(patched.body.settings).toEqual(want)
    expect(patched.body.title).toBe('renamed')
    expect((await t.api('GET', `/v1/sessions/${s.id}`)).body.settings).toEqual(want)
    t.models.script(s.id, { text: ['two'] })
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'second' })
    const log = await t.waitForTurnEnd(s.id, 2)
    const r2 = t.models.requestsOf(s.id)[1]
    expect(r2.context.systemPrompt).toBe('Later system.')
    expect(r2.context.tools?.map((x) => x.name)).toEqual(['refund'])
    expect(headers(log).map((e) => e.data.reason)).toEqual(['initial', 'change'])
    await t.waitIdle(s.id)
    const fork = await t.api('POST', `/v1/sessions/${s.id}/fork`, {})
    expect(fork.status, fork.text).toBe(201)
    expect(fork.body.settings).toEqual(want)
    expect(problems).toEqual([])
  })

  describe('bad input: the error session create gives, nothing written', () => {
    /** the session as GET shows it and its row's settings columns, to compare before and after */
    const readBack = async (id: string) => {
      const r = await t.api('GET', `/v1/sessions/${id}`)
      const row = (await t.app.db.query('SELECT title, model, system, tools, mcp_servers, max_tokens, reasoning_effort, metadata, next_seq FROM sessions WHERE tenant_id = $1 AND id = $2', [t.tenantId, id])).rows[0]
      return { object: r.body, row }
    }

    const cases: Array<[string, () => Record<string, unknown>, number, string]> = [
      ['an unknown field', () => ({ title: 'x', temperature: 0.2 }), 400, 'bad-request'],
      ['a tool without a name', () => ({ tools: [{ description: 'nameless', execution: { type: 'client' } }] }), 400, 'bad-request'],
      ['a builtin tool nobody registered', () => ({ title: 'x', tools: [{ name: 'no_such_builtin', execution: { type: 'builtin' } }] }), 400, 'bad-request'],
      ['an http tool at a refused address', () => ({ tools: [{ name: 'far', execution: { type: 'http', url: 'http://10.1.2.3/tool' } }] }), 400, 'bad-request'],
      ['two tools of one name', () => ({ tools: [LOOKUP, LOOKUP] }), 400, 'bad-request'],
      ['an unknown model', () => ({ title: 'x', model: 'test/no-such-model' }), 422, 'model-unavailable'],
      ['a model that is not provider/model', () => ({ model: 'x' }), 400, 'bad-request'],
      ['a maxTokens of 0', () => ({ maxTokens: 0 }), 400, 'bad-request'],
      ['an unknown reasoningEffort', () => ({ reasoningEffort: 'extreme' }), 400, 'bad-request'],
    ]
    for (const [what, body, status, code] of cases) {
      it(`${what}: ${status} ${code}`, async () => {
        const s = await create({ metadata: { keep: true } })
        const before = await readBack(s.id)
        const r = await t.api('PATCH', `/v1/sessions/${s.id}`, body())
        expect(r.status, r.text).toBe(status)
        expect(r.body.error.code).toBe(code)
        expect(await readBack(s.id)).toEqual(before)
      })
    }

    it("another tenant's session: 404 session-not-found, and that session is unchanged", async () => {
      const s = await create()
      const before = await readBack(s.id)
      const other = await t.api('POST', '/v1/admin/tenants', { name: 'other' }, { key: t.adminToken })
      expect(other.status).toBe(201)
      const r = await t.api('PATCH', `/v1/sessions/${s.id}`, { tools: [REFUND], system: 'not yours' }, { key: other.body.apiKey })
      expect(r.status).toBe(404)
      expect(r.body.error.code).toBe('session-not-found')
      expect(await readBack(s.id)).toEqual(before)
    })
  })
})

describe('session settings PATCH across processes on pg', () => {
  let driver: TestApp
  let api: TestApp
  beforeAll(async () => {
    driver = await startTestApp({ kind: 'pg' })
    // a wide bus window: a poke the api process sent in it would wait seconds for the next flush
    api = await startTestApp({ kind: 'pg', testDb: driver.testDb, env: { AGENTD_ROLE: 'api' }, busWindowMs: 5000 })
  })
  afterAll(async () => {
    await api?.close({ keepDb: true })
    await driver?.close()
  })

  it('a PATCH answered by a process that does not drive the session has reached the driver in another before its next step', async () => {
    const s = await driver.createSession({ system: 'First system.', tools: [ORDER()] })
    const held = gate()
    driver.models.script(s.id, { toolCalls: [{ id: 'c1', name: 'lookup_order', arguments: {} }], gate: held.promise }, { text: ['done'] })
    expect((await driver.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })).status).toBe(202)
    await driver.models.waitForRequest(s.id, 1)
    // another session's PATCH makes the api process flush its window now, so a windowed poke of the
    // next PATCH would leave only when the window ends, after the step below started
    const other = await driver.createSession()
    expect((await api.api('PATCH', `/v1/sessions/${other.id}`, { system: 'Other.' }, { key: driver.key })).status).toBe(200)
    const r = await api.api('PATCH', `/v1/sessions/${s.id}`, { tools: [ORDER(), REFUND], system: 'Second system.' }, { key: driver.key })
    expect(r.status, r.text).toBe(200)
    expect(r.body.settings).toMatchObject({ system: 'Second system.', tools: [ORDER(), REFUND] })
    held.open()
    const log = await driver.waitForTurnEnd(s.id, 1)
    const [r1, r2] = driver.models.requestsOf(s.id)
    expect(r1.context.tools?.map((x) => x.name)).toEqual(['lookup_order'])
    expect(r1.context.systemPrompt).toBe('First system.')
    expect(r2.context.tools?.map((x) => x.name)).toEqual(['lookup_order', 'refund'])
    expect(r2.context.systemPrompt).toBe('Second system.')
    expect(headers(log).map((e) => e.data.reason)).toEqual(['initial', 'change'])
    expectValidLog(log)
  })
})
