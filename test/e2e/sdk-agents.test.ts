// @agentd/client for API.md §16 against a real agentd on one database (docs/testing.md): client.agents creates
// (idempotent with an id), reads the latest and a named version, updates (a new version), lists page by
// page and deletes; sessions.create({agent}) makes a session from it that keeps its version; errors are
// AgentdErrors with the documented codes. sessions.update changes a session's settings (API.md §4).

import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { AgentdClient, AgentdError, type Agent } from '../../clients/typescript/src/index.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { APP_DB_KINDS } from '../helpers/db.js'

describe.each(APP_DB_KINDS)('@agentd/client agents on %s', (kind) => {
  let t: TestApp
  let client: AgentdClient
  beforeAll(async () => {
    t = await startTestApp({ kind })
    client = new AgentdClient({ baseUrl: t.url, apiKey: t.key })
  })
  afterAll(async () => {
    await t?.close()
  })

  const codeOf = async (p: Promise<unknown>) => {
    const e = await p.catch((x) => x)
    expect(e).toBeInstanceOf(AgentdError)
    return { status: (e as AgentdError).status, code: (e as AgentdError).code }
  }

  it('agents.create, get, update, page, list and delete; sessions.create({agent}) keeps its version', async () => {
    const body = { id: 'helper', name: 'Helper', model: t.models.ref(), system: 'Be helpful.', metadata: { team: 'a' } }
    const v1 = await client.agents.create(body)
    expect(v1).toMatchObject({ id: 'helper', version: 1, system: 'Be helpful.', tools: [], maxTokens: null })
    expect(await client.agents.create(body)).toEqual(v1)
    expect(await codeOf(client.agents.create({ ...body, system: 'Other.' }))).toEqual({ status: 409, code: 'idempotency-conflict' })

    const s1 = await client.sessions.create({ agent: 'helper', metadata: { user: 'u1' } })
    expect(s1.agent).toEqual({ id: 'helper', version: 1 })
    expect(s1.metadata).toEqual({ team: 'a', user: 'u1' })

    const v2 = await client.agents.update('helper', { system: 'Be very helpful.', maxTokens: 300 })
    expect(v2).toMatchObject({ version: 2, system: 'Be very helpful.', maxTokens: 300 })
    expect(await client.agents.update('helper', { system: 'Be very helpful.' })).toEqual(v2)
    expect(await client.agents.get('helper')).toEqual(v2)
    expect(await client.agents.get('helper', { version: 1 })).toEqual(v1)
    expect((await client.sessions.get(s1.id)).settings.system).toBe('Be helpful.')
    const s2 = await client.sessions.create({ agent: 'helper' })
    expect(s2.agent).toEqual({ id: 'helper', version: 2 })
    expect(s2.settings).toMatchObject({ system: 'Be very helpful.', maxTokens: 300 })
    expect((await client.sessions.create({ agent: 'helper@1' })).settings.system).toBe('Be helpful.')

    await client.agents.create({ id: 'second', name: 'Second', model: t.models.ref() })
    const page = await client.agents.page({ limit: 1 })
    expect(page.agents.map((a) => a.id)).toEqual(['second'])
    expect(page.nextCursor).toEqual(expect.any(String))
    const all: Agent[] = []
    for await (const a of client.agents.list({ pageSize: 1 })) all.push(a)
    expect(all.map((a) => [a.id, a.version])).toEqual([['second', 1], ['helper', 2]])

    await client.agents.delete('helper')
    expect(await codeOf(client.agents.get('helper'))).toEqual({ status: 404, code: 'not-found' })
    expect(await codeOf(client.sessions.create({ agent: 'helper' }))).toEqual({ status: 404, code: 'not-found' })
    expect(await codeOf(client.agents.delete('helper'))).toEqual({ status: 404, code: 'not-found' })
    expect((await client.sessions.get(s1.id)).agent).toEqual({ id: 'helper', version: 1 })
    expect(await codeOf(client.agents.create({ id: 'bad id', name: 'x', model: t.models.ref() }))).toEqual({ status: 400, code: 'bad-request' })
    expect(await codeOf(client.agents.create({ name: 'x', model: 'nowhere/none' }))).toEqual({ status: 422, code: 'model-unavailable' })
  })

  it("sessions.update changes a session's settings; the next turn asks with them; a bad one is an AgentdError and changes nothing", async () => {
    const s = await client.sessions.create({ model: t.models.ref(), system: 'Before.' })
    const updated = await client.sessions.update(s.id, { system: 'After.', maxTokens: 200, tools: [{ name: 'lookup', description: 'looks up', parameters: { type: 'object', properties: {} }, execution: { type: 'client' } }] })
    expect(updated.settings).toMatchObject({ system: 'After.', maxTokens: 200, tools: [{ name: 'lookup' }] })
    expect((await client.sessions.get(s.id)).settings).toEqual(updated.settings)
    t.models.script(s.id, { text: ['ok'] })
    await client.followup(s.id, 'hello')
    const req = await t.models.waitForRequest(s.id, 1)
    expect(req.context.systemPrompt).toBe('After.')
    expect(req.context.tools?.map((x) => x.name)).toEqual(['lookup'])
    expect(req.options?.maxTokens).toBe(200)
    await t.waitIdle(s.id)
    expect(await codeOf(client.sessions.update(s.id, { model: 'nowhere/none' }))).toEqual({ status: 422, code: 'model-unavailable' })
    expect((await client.sessions.get(s.id)).settings).toEqual(updated.settings)
  })
})
