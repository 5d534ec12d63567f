// API.md §16 (agents) and §4 (sessions made from them) on one database (docs/testing.md): the agent object, idempotent
// create, immutable versions, the list and its paging, delete; a session from `id` or `id@version`
// with body settings overriding the version's, its `agent` and `settings`, fork; and bad input, which
// gets the documented error and writes nothing.

import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { DEFAULT_AGENT, ensureDefaultAgent } from '../../src/embedded-tenant.js'

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/
const CLIENT_TOOL = { name: 'lookup_order', description: 'finds an order', parameters: { type: 'object', properties: { id: { type: 'string' } } }, execution: { type: 'client' } }
const OTHER_TOOL = { name: 'refund', description: 'refunds an order', parameters: { type: 'object', properties: {} }, execution: { type: 'client' } }

describe.each(APP_DB_KINDS)('agents on %s', (kind) => {
  let t: TestApp
  beforeAll(async () => {
    t = await startTestApp({ kind, models: [{ id: 'scripted' }, { id: 'other' }] })
  })
  afterAll(async () => {
    await t?.close()
  })

  /** A fresh tenant with its own key, so that lists and counts see only this test's rows. */
  const tenant = async () => {
    const r = await t.api('POST', '/v1/admin/tenants', { name: 'agents' }, { key: t.adminToken })
    expect(r.status).toBe(201)
    const key: string = r.body.apiKey
    const tenantId: string = r.body.tenant.id
    const api = (m: string, p: string, b?: unknown) => t.api(m, p, b, { key })
    const count = async (table: 'agents' | 'agent_versions' | 'sessions') => (await t.app.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table} WHERE tenant_id = $1`, [tenantId])).rows[0].n
    /** every row the tenant has in the three tables, to show that a refused request wrote nothing */
    const snapshot = async () => ({ agents: await count('agents'), versions: await count('agent_versions'), sessions: await count('sessions'), rows: (await t.app.db.query('SELECT id, version, deleted_at, create_hash FROM agents WHERE tenant_id = $1 ORDER BY id', [tenantId])).rows })
    return { key, tenantId, api, snapshot }
  }

  const support = () => ({ id: 'support', name: 'Support', description: 'answers customers', model: t.models.ref(), system: 'You are support.', tools: [CLIENT_TOOL], maxTokens: 500, metadata: { team: 'care', tier: 1 } })

  /** Runs one completed turn and returns the model request it made. */
  const runTurn = async (ten: { api: (m: string, p: string, b?: unknown) => Promise<any> }, id: string, turn: number) => {
    t.models.script(id, { text: [`answer ${turn}`] })
    const before = t.models.requestsOf(id).length
    expect((await ten.api('POST', `/v1/sessions/${id}/followup`, { content: `question ${turn}` })).status).toBe(202)
    const req = await t.models.waitForRequest(id, before + 1)
    const deadline = Date.now() + 10000
    for (;;) {
      const evs = (await ten.api('GET', `/v1/sessions/${id}/events?limit=5000`)).body.events as Array<{ type: string; data: any }>
      if (evs.some((e) => e.type === 'turn/end' && e.data.turn === turn) && (await ten.api('GET', `/v1/sessions/${id}`)).body.status === 'idle') return req
      if (Date.now() > deadline) throw new Error(`turn ${turn} of ${id} did not end`)
      await new Promise((r) => setTimeout(r, 25))
    }
  }

  it('create: 201 version 1 with every field of the agent object; GET latest and GET the version answer it', async () => {
    const ten = await tenant()
    const r = await ten.api('POST', '/v1/agents', support())
    expect(r.status, r.text).toBe(201)
    const a = r.body
    expect(Object.keys(a).sort()).toEqual(['createdAt', 'description', 'id', 'maxTokens', 'mcpServers', 'metadata', 'model', 'name', 'reasoningEffort', 'system', 'tools', 'updatedAt', 'version'])
    expect(a).toMatchObject({ id: 'support', version: 1, name: 'Support', description: 'answers customers', model: t.models.ref(), system: 'You are support.', tools: [CLIENT_TOOL], mcpServers: [], maxTokens: 500, reasoningEffort: null, metadata: { team: 'care', tier: 1 } })
    expect(a.createdAt).toMatch(ISO)
    expect(a.updatedAt).toBe(a.createdAt)
    expect((await ten.api('GET', '/v1/agents/support')).body).toEqual(a)
    expect((await ten.api('GET', '/v1/agents/support/versions/1')).body).toEqual(a)
    // the least an agent needs: a name and a model; no id gives one
    const least = await ten.api('POST', '/v1/agents', { name: 'Bare', model: t.models.ref() })
    expect(least.status, least.text).toBe(201)
    expect(least.body.id).toMatch(/^agt_[A-Za-z0-9_-]+$/)
    expect(least.body).toMatchObject({ version: 1, description: null, system: '', tools: [], mcpServers: [], maxTokens: null, reasoningEffort: null, metadata: {} })
    for (const missing of [{ name: 'No model' }, { model: t.models.ref() }]) {
      const m = await ten.api('POST', '/v1/agents', missing)
      expect(m.status).toBe(400)
      expect(m.body.error.code).toBe('bad-request')
    }
  })

  it('idempotent create with a client id: the same body 200 the same agent, another body 409 idempotency-conflict and nothing written', async () => {
    const ten = await tenant()
    const first = await ten.api('POST', '/v1/agents', support())
    expect(first.status).toBe(201)
    const again = await ten.api('POST', '/v1/agents', support())
    expect(again.status).toBe(200)
    expect(again.body).toEqual(first.body)
    // the same body with its keys in another order is the same body
    const { metadata, ...rest } = support()
    const reordered = await ten.api('POST', '/v1/agents', { metadata: { tier: 1, team: 'care' }, ...Object.fromEntries(Object.entries(rest).reverse()) })
    expect(reordered.status).toBe(200)
    expect(reordered.body).toEqual(first.body)
    const before = await ten.snapshot()
    for (const other of [{ ...support(), system: 'Other.' }, { ...support(), metadata: { team: 'care' } }, { id: 'support', name: 'Support', model: t.models.ref() }]) {
      const c = await ten.api('POST', '/v1/agents', other)
      expect(c.status, JSON.stringify(other)).toBe(409)
      expect(c.body.error.code).toBe('idempotency-conflict')
    }
    expect(await ten.snapshot()).toEqual(before)
    expect((await ten.api('GET', '/v1/agents/support')).body).toEqual(first.body)
  })

  it('PATCH makes a new version with the given fields changed; version 1 never changes; a PATCH that changes nothing makes none; null removes', async () => {
    const ten = await tenant()
    const v1 = (await ten.api('POST', '/v1/agents', support())).body
    await new Promise((r) => setTimeout(r, 2))
    const p = await ten.api('PATCH', '/v1/agents/support', { system: 'You are patient support.', tools: [OTHER_TOOL] })
    expect(p.status, p.text).toBe(200)
    const v2 = p.body
    expect(v2).toEqual({ ...v1, version: 2, system: 'You are patient support.', tools: [OTHER_TOOL], updatedAt: v2.updatedAt })
    expect(v2.createdAt).toBe(v1.createdAt)
    expect(Date.parse(v2.updatedAt)).toBeGreaterThan(Date.parse(v1.updatedAt))
    expect((await ten.api('GET', '/v1/agents/support')).body).toEqual(v2)
    expect((await ten.api('GET', '/v1/agents/support/versions/1')).body).toEqual(v1)
    expect((await ten.api('GET', '/v1/agents/support/versions/2')).body).toEqual(v2)
    // the same PATCH again, or none at all: no new version
    const before = await ten.snapshot()
    for (const body of [{ system: 'You are patient support.', tools: [OTHER_TOOL] }, {}, undefined]) {
      const same = await ten.api('PATCH', '/v1/agents/support', body)
      expect(same.status, same.text).toBe(200)
      expect(same.body).toEqual(v2)
    }
    expect(await ten.snapshot()).toEqual(before)
    // null removes an optional field; metadata is replaced whole, as a session PATCH replaces it
    const v3 = (await ten.api('PATCH', '/v1/agents/support', { maxTokens: null, description: null, reasoningEffort: 'low', metadata: { team: 'sales' } })).body
    expect(v3).toMatchObject({ version: 3, maxTokens: null, description: null, reasoningEffort: 'low', metadata: { team: 'sales' }, system: 'You are patient support.' })
    expect((await ten.api('GET', '/v1/agents/support/versions/4')).status).toBe(404)
    expect((await ten.api('GET', '/v1/agents/support/versions/4')).body.error.code).toBe('not-found')
  })

  it('a session from agent@1 keeps version 1 after a PATCH made version 2; a new session gets version 2; its turns run on its version', async () => {
    const ten = await tenant()
    expect((await ten.api('POST', '/v1/agents', support())).status).toBe(201)
    const s1 = await ten.api('POST', '/v1/sessions', { agent: 'support' })
    expect(s1.status, s1.text).toBe(201)
    expect(s1.body.agent).toEqual({ id: 'support', version: 1 })
    expect(s1.body.owner).toBeNull()
    expect(s1.body.model).toBe(t.models.ref())
    expect(s1.body.settings).toEqual({ model: t.models.ref(), system: 'You are support.', tools: [CLIENT_TOOL], mcpServers: [], maxTokens: 500, reasoningEffort: null })
    expect(s1.body.metadata).toEqual({ team: 'care', tier: 1 })
    const pinned = await ten.api('POST', '/v1/sessions', { agent: 'support@1' })
    expect(pinned.body.agent).toEqual({ id: 'support', version: 1 })

    expect((await ten.api('PATCH', '/v1/agents/support', { system: 'Version two.', tools: [OTHER_TOOL], model: t.models.ref('other') })).body.version).toBe(2)
    // the existing sessions keep version 1
    for (const s of [s1.body, pinned.body]) expect((await ten.api('GET', `/v1/sessions/${s.id}`)).body).toMatchObject({ agent: { id: 'support', version: 1 }, settings: s1.body.settings })
    const r1 = await runTurn(ten, s1.body.id, 1)
    expect(r1.model).toBe('scripted')
    expect(r1.context.systemPrompt).toContain('You are support.')
    expect(r1.context.tools?.map((x) => x.name)).toEqual(['lookup_order'])
    expect(r1.options?.maxTokens).toBe(500)
    // a new session gets the latest version; agent@1 still names version 1
    const s2 = await ten.api('POST', '/v1/sessions', { agent: 'support' })
    expect(s2.body).toMatchObject({ agent: { id: 'support', version: 2 }, model: t.models.ref('other'), settings: { system: 'Version two.', tools: [OTHER_TOOL] } })
    const r2 = await runTurn(ten, s2.body.id, 1)
    expect(r2.model).toBe('other')
    expect(r2.context.systemPrompt).toContain('Version two.')
    expect(r2.context.systemPrompt).not.toContain('You are support.')
    expect(r2.context.tools?.map((x) => x.name)).toEqual(['refund'])
    expect((await ten.api('POST', '/v1/sessions', { agent: 'support@1' })).body.settings).toEqual(s1.body.settings)
  })

  it('body settings override the version: tools replace, metadata merges, model, system and limits replace', async () => {
    const ten = await tenant()
    await ten.api('POST', '/v1/agents', support())
    const r = await ten.api('POST', '/v1/sessions', { agent: 'support', tools: [OTHER_TOOL], metadata: { tier: 2, user: 'u-7' }, model: t.models.ref('other'), system: 'Just for you.', reasoningEffort: 'high' })
    expect(r.status, r.text).toBe(201)
    expect(r.body.agent).toEqual({ id: 'support', version: 1 })
    expect(r.body.settings).toEqual({ model: t.models.ref('other'), system: 'Just for you.', tools: [OTHER_TOOL], mcpServers: [], maxTokens: 500, reasoningEffort: 'high' })
    expect(r.body.metadata).toEqual({ team: 'care', tier: 2, user: 'u-7' })
    // an empty tool list replaces the agent's tools too
    const none = await ten.api('POST', '/v1/sessions', { agent: 'support', tools: [] })
    expect(none.body.settings.tools).toEqual([])
    const req = await runTurn(ten, none.body.id, 1)
    expect(req.context.tools ?? []).toEqual([])
    expect(req.context.systemPrompt).toContain('You are support.')
    // the agent itself is unchanged
    expect((await ten.api('GET', '/v1/agents/support')).body).toMatchObject({ version: 1, tools: [CLIENT_TOOL], metadata: { team: 'care', tier: 1 } })
  })

  it('an unknown agent or version, a deleted agent and another tenant\'s agent are 404 not-found for a new session, and nothing is written', async () => {
    const ten = await tenant()
    const other = await tenant()
    await ten.api('POST', '/v1/agents', support())
    await other.api('POST', '/v1/agents', { id: 'theirs', name: 'Theirs', model: t.models.ref() })
    await ten.api('POST', '/v1/agents', { id: 'gone', name: 'Gone', model: t.models.ref() })
    expect((await ten.api('DELETE', '/v1/agents/gone')).status).toBe(204)
    const before = await ten.snapshot()
    for (const [agent, message] of [
      ['nobody', 'agent nobody not found'],
      ['support@2', 'agent support has no version 2'],
      ['gone', 'agent gone not found'],
      ['gone@1', 'agent gone has no version 1'],
      ['theirs', 'agent theirs not found'],
      ['theirs@1', 'agent theirs has no version 1'],
    ]) {
      const r = await ten.api('POST', '/v1/sessions', { agent, id: `s-${agent.replace('@', '-')}` })
      expect(r.status, agent).toBe(404)
      expect(r.body.error).toEqual({ code: 'not-found', message })
    }
    expect(await ten.snapshot()).toEqual(before)
  })

  it('delete: 204; the agent is gone from every agent route and the list, refuses new sessions, and its sessions go on; the id can be created again at the next version', async () => {
    const ten = await tenant()
    await ten.api('POST', '/v1/agents', support())
    await ten.api('PATCH', '/v1/agents/support', { system: 'Two.' })
    const s = (await ten.api('POST', '/v1/sessions', { agent: 'support@1', id: 'from-support' })).body
    await runTurn(ten, s.id, 1)
    const del = await ten.api('DELETE', '/v1/agents/support')
    expect(del.status).toBe(204)
    expect(del.text).toBe('')
    for (const [m, p, b] of [
      ['GET', '/v1/agents/support', undefined],
      ['GET', '/v1/agents/support/versions/1', undefined],
      ['PATCH', '/v1/agents/support', { name: 'x' }],
      ['DELETE', '/v1/agents/support', undefined],
      ['POST', '/v1/sessions', { agent: 'support' }],
    ] as Array<[string, string, unknown]>) {
      const r = await ten.api(m, p, b)
      expect(r.status, `${m} ${p}`).toBe(404)
      expect(r.body.error.code).toBe('not-found')
    }
    expect((await ten.api('GET', '/v1/agents')).body.agents).toEqual([])
    // its session goes on, on its version, and a repeat of the create that made it still answers it
    const req = await runTurn(ten, s.id, 2)
    expect(req.context.systemPrompt).toContain('You are support.')
    expect((await ten.api('GET', `/v1/sessions/${s.id}`)).body.agent).toEqual({ id: 'support', version: 1 })
    const repeat = await ten.api('POST', '/v1/sessions', { agent: 'support@1', id: 'from-support' })
    expect(repeat.status).toBe(200)
    expect(repeat.body.id).toBe(s.id)
    // created again: version numbers go on, so support@1 still names the settings its session has
    const again = await ten.api('POST', '/v1/agents', { id: 'support', name: 'Support again', model: t.models.ref() })
    expect(again.status, again.text).toBe(201)
    expect(again.body.version).toBe(3)
    expect((await ten.api('GET', '/v1/agents/support/versions/1')).status).toBe(404)
    expect((await ten.api('POST', '/v1/sessions', { agent: 'support' })).body.agent).toEqual({ id: 'support', version: 3 })
  })

  it('a repeated create of a session from an agent answers the session it made, after the agent gained a version; another body is 409 session-conflict', async () => {
    const ten = await tenant()
    await ten.api('POST', '/v1/agents', support())
    const body = { id: 'idem-1', agent: 'support', metadata: { user: 'u-1' } }
    const first = await ten.api('POST', '/v1/sessions', body)
    expect(first.status).toBe(201)
    await ten.api('PATCH', '/v1/agents/support', { system: 'Two.' })
    const again = await ten.api('POST', '/v1/sessions', body)
    expect(again.status).toBe(200)
    expect(again.body).toEqual(first.body)
    expect(again.body.agent).toEqual({ id: 'support', version: 1 })
    for (const other of [{ ...body, agent: 'support@1' }, { ...body, agent: 'support@2' }, { id: 'idem-1', agent: 'support' }]) {
      const c = await ten.api('POST', '/v1/sessions', other)
      expect(c.status, JSON.stringify(other)).toBe(409)
      expect(c.body.error.code).toBe('session-conflict')
    }
  })

  it('fork copies the agent and the current settings', async () => {
    const ten = await tenant()
    await ten.api('POST', '/v1/agents', support())
    const s = (await ten.api('POST', '/v1/sessions', { agent: 'support', system: 'Mine.' })).body
    await runTurn(ten, s.id, 1)
    const f = await ten.api('POST', `/v1/sessions/${s.id}/fork`)
    expect(f.status, f.text).toBe(201)
    expect(f.body.agent).toEqual({ id: 'support', version: 1 })
    expect(f.body.settings).toEqual(s.settings)
    expect(f.body.metadata).toEqual(s.metadata)
  })

  it('list: live agents at their latest version, newest first, paged by cursor', async () => {
    const ten = await tenant()
    const ids = ['a-1', 'a-2', 'a-3', 'a-4', 'a-5']
    for (const id of ids) {
      expect((await ten.api('POST', '/v1/agents', { id, name: id, model: t.models.ref() })).status).toBe(201)
      await new Promise((r) => setTimeout(r, 2))
    }
    await ten.api('PATCH', '/v1/agents/a-2', { name: 'second' })
    await ten.api('DELETE', '/v1/agents/a-4')
    const all = await ten.api('GET', '/v1/agents')
    expect(all.status).toBe(200)
    expect(all.body.nextCursor).toBeNull()
    expect(all.body.agents.map((a: any) => a.id)).toEqual(['a-5', 'a-3', 'a-2', 'a-1'])
    expect(all.body.agents[2]).toMatchObject({ id: 'a-2', version: 2, name: 'second' })
    const seen: string[] = []
    let cursor: string | null = null
    do {
      const page: any = await ten.api('GET', `/v1/agents?limit=3${cursor ? `&cursor=${cursor}` : ''}`)
      expect(page.status).toBe(200)
      expect(page.body.agents.length).toBeLessThanOrEqual(3)
      seen.push(...page.body.agents.map((a: any) => a.id))
      cursor = page.body.nextCursor
    } while (cursor)
    expect(seen).toEqual(['a-5', 'a-3', 'a-2', 'a-1'])
    for (const q of ['limit=0', 'limit=201', 'cursor=bm9wZQ', 'limit=x', 'other=1']) {
      const r = await ten.api('GET', `/v1/agents?${q}`)
      expect(r.status, q).toBe(400)
      expect(r.body.error.code).toBe('bad-request')
    }
  })

  it('bad input: unknown fields, invalid tools, an unknown model, ids breaking the pattern and another tenant\'s agent get the documented errors and write nothing', async () => {
    const ten = await tenant()
    const other = await tenant()
    await ten.api('POST', '/v1/agents', support())
    await other.api('POST', '/v1/agents', { id: 'theirs', name: 'Theirs', model: t.models.ref() })
    const before = await ten.snapshot()
    const theirsBefore = await other.snapshot()
    const badTools = [
      [{ name: 'x', execution: { type: 'builtin' } }],
      [{ name: 'x', execution: { type: 'http', url: 'http://10.1.2.3/tool' } }],
      [{ name: 'x', parameters: { type: 'string' }, execution: { type: 'client' } }],
      [CLIENT_TOOL, CLIENT_TOOL],
      [{ name: 'bad name!', execution: { type: 'client' } }],
    ]
    const cases: Array<[string, string, unknown, number, string]> = [
      ['POST', '/v1/agents', { ...support(), id: 'new', colour: 'red' }, 400, 'bad-request'],
      ['POST', '/v1/agents', { ...support(), id: 'new', model: 'nowhere/none' }, 422, 'model-unavailable'],
      ['POST', '/v1/agents', { ...support(), id: 'has space' }, 400, 'bad-request'],
      ['POST', '/v1/agents', { ...support(), id: 'x'.repeat(65) }, 400, 'bad-request'],
      ['POST', '/v1/agents', { ...support(), id: 'a@1' }, 400, 'bad-request'],
      ['POST', '/v1/agents', { ...support(), id: '' }, 400, 'bad-request'],
      ['POST', '/v1/agents', { ...support(), id: 'new', name: '' }, 400, 'bad-request'],
      ['POST', '/v1/agents', { ...support(), id: 'new', maxTokens: 0 }, 400, 'bad-request'],
      ['PATCH', '/v1/agents/support', { colour: 'red' }, 400, 'bad-request'],
      ['PATCH', '/v1/agents/support', { id: 'renamed' }, 400, 'bad-request'],
      ['PATCH', '/v1/agents/support', { model: 'nowhere/none' }, 422, 'model-unavailable'],
      ['PATCH', '/v1/agents/support', { name: null }, 400, 'bad-request'],
      ['PATCH', '/v1/agents/support', { model: null }, 400, 'bad-request'],
      ['GET', '/v1/agents/has%20space', undefined, 400, 'bad-request'],
      ['GET', `/v1/agents/${'x'.repeat(65)}`, undefined, 400, 'bad-request'],
      ['GET', '/v1/agents/support/versions/0', undefined, 400, 'bad-request'],
      ['GET', '/v1/agents/support/versions/one', undefined, 400, 'bad-request'],
      ['PATCH', '/v1/agents/has%20space', { name: 'x' }, 400, 'bad-request'],
      ['DELETE', '/v1/agents/has%20space', undefined, 400, 'bad-request'],
      ['GET', '/v1/agents/theirs', undefined, 404, 'not-found'],
      ['GET', '/v1/agents/theirs/versions/1', undefined, 404, 'not-found'],
      ['PATCH', '/v1/agents/theirs', { name: 'mine now' }, 404, 'not-found'],
      ['DELETE', '/v1/agents/theirs', undefined, 404, 'not-found'],
      ['POST', '/v1/sessions', { agent: 'support@0' }, 400, 'bad-request'],
      ['POST', '/v1/sessions', { agent: 'support@' }, 400, 'bad-request'],
      ['POST', '/v1/sessions', { agent: 'sup port' }, 400, 'bad-request'],
      ['POST', '/v1/sessions', { agent: 'support', model: 'nowhere/none' }, 422, 'model-unavailable'],
      ['POST', '/v1/sessions', { agent: 'support', colour: 'red' }, 400, 'bad-request'],
      ...badTools.flatMap((tools): Array<[string, string, unknown, number, string]> => [
        ['POST', '/v1/agents', { ...support(), id: 'new', tools }, 400, 'bad-request'],
        ['PATCH', '/v1/agents/support', { tools }, 400, 'bad-request'],
        ['POST', '/v1/sessions', { agent: 'support', tools }, 400, 'bad-request'],
      ]),
    ]
    for (const [m, p, b, status, code] of cases) {
      const r = await ten.api(m, p, b)
      expect(r.status, `${m} ${p} ${JSON.stringify(b)}: ${r.text}`).toBe(status)
      expect(r.body.error.code, `${m} ${p}`).toBe(code)
      expect(r.body.error.message.length).toBeGreaterThan(0)
    }
    expect(await ten.snapshot()).toEqual(before)
    expect(await other.snapshot()).toEqual(theirsBefore)
    expect((await ten.api('GET', '/v1/agents/support')).body.version).toBe(1)
  })

  it('settings are validated by session create\'s own code: the same bad settings get the same error from both', async () => {
    const ten = await tenant()
    await ten.api('POST', '/v1/agents', support())
    for (const bad of [
      { tools: [{ name: 'x', execution: { type: 'http', url: 'http://10.1.2.3/tool' } }] },
      { tools: [CLIENT_TOOL, CLIENT_TOOL] },
      { mcpServers: [{ name: 'm', url: 'http://10.1.2.3/mcp' }] },
      { model: 'nowhere/none' },
    ]) {
      const inline = await ten.api('POST', '/v1/sessions', { model: t.models.ref(), ...bad })
      const agent = await ten.api('POST', '/v1/agents', { name: 'n', model: t.models.ref(), ...bad })
      const patch = await ten.api('PATCH', '/v1/agents/support', bad)
      const fromAgent = await ten.api('POST', '/v1/sessions', { agent: 'support', ...bad })
      expect(inline.status).toBeGreaterThanOrEqual(400)
      for (const r of [agent, patch, fromAgent]) {
        expect(r.status, JSON.stringify(bad)).toBe(inline.status)
        expect(r.body).toEqual(inline.body)
      }
    }
  })

  it('agent default of the embedded database: made in tenant "default" as its POST would make it, once; a deleted one stays deleted', async () => {
    // the embedded start runs this after making tenant "default" (a data directory from before agents too)
    const r = await t.api('POST', '/v1/admin/tenants', { name: 'default' }, { key: t.adminToken })
    const key: string = r.body.apiKey
    const api = (m: string, p: string, b?: unknown) => t.api(m, p, b, { key })
    await ensureDefaultAgent(t.app.db, t.app.agents)
    const made = await api('GET', '/v1/agents/default')
    expect(made.status).toBe(200)
    expect(made.body).toMatchObject({ id: 'default', version: 1, model: 'faux/echo', tools: [], mcpServers: [], system: '' })
    // the same body POSTed is the same agent
    const post = await api('POST', '/v1/agents', DEFAULT_AGENT)
    expect(post.status).toBe(200)
    expect(post.body).toEqual(made.body)
    // it answers with faux/echo out of the box
    const s = await api('POST', '/v1/sessions', { agent: 'default' })
    expect(s.body.settings.model).toBe('faux/echo')
    await ensureDefaultAgent(t.app.db, t.app.agents)
    expect((await api('GET', '/v1/agents')).body.agents.map((a: any) => [a.id, a.version])).toEqual([['default', 1]])
    expect((await api('DELETE', '/v1/agents/default')).status).toBe(204)
    await ensureDefaultAgent(t.app.db, t.app.agents)
    expect((await api('GET', '/v1/agents/default')).status).toBe(404)
    // another tenant never gets one
    expect((await t.api('GET', '/v1/agents/default')).status).toBe(404)
  })
})
