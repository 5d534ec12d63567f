// @agentd/client for API.md §12–§13 against a real agentd on one database (docs/testing.md): client.secrets puts,
// lists (names only) and deletes; errors are AgentdErrors; a session created through the SDK with an MCP
// server whose header is a secret reference uses it.

import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { AgentdClient, AgentdError, type McpServer } from '../../clients/typescript/src/index.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { APP_DB_KINDS } from '../helpers/db.js'
import { TestMcpServer } from '../helpers/mcp-server.js'

describe.each(APP_DB_KINDS)('@agentd/client secrets and MCP servers on %s', (kind) => {
  let t: TestApp
  let client: AgentdClient
  let mcp: TestMcpServer
  beforeAll(async () => {
    t = await startTestApp({ kind, env: { AGENTD_SECRET_KEY: Buffer.alloc(32, 3).toString('base64') } })
    client = new AgentdClient({ baseUrl: t.url, apiKey: t.key })
    mcp = await new TestMcpServer([{ name: 'ping', call: () => ({ content: [{ type: 'text', text: 'pong' }] }) }]).start()
  })
  afterAll(async () => {
    await mcp?.stop()
    await t?.close()
  })

  it('secrets.put, list and delete; a bad name and a missing secret are AgentdErrors', async () => {
    await client.secrets.put('SDK_TOKEN', 'sdk-secret-value')
    await client.secrets.put('SDK_TOKEN', 'sdk-secret-value-2')
    const list = await client.secrets.list()
    expect(list).toEqual([{ name: 'SDK_TOKEN', createdAt: expect.any(String), updatedAt: expect.any(String) }])
    const bad = await client.secrets.put('lower', 'x').catch((e) => e)
    expect(bad).toBeInstanceOf(AgentdError)
    expect({ status: bad.status, code: bad.code }).toEqual({ status: 400, code: 'bad-request' })

    const servers: McpServer[] = [{ name: 'pinger', url: mcp.url, headers: { authorization: 'secret:SDK_TOKEN' } }]
    const s = await client.sessions.create({ model: t.models.ref(), mcpServers: servers })
    t.models.script(s.id, { toolCalls: [{ id: 'p1', name: 'pinger__ping', arguments: {} }] }, { text: ['pong it is'] })
    await client.followup(s.id, 'ping')
    await t.waitForTurnEnd(s.id, 1)
    expect(mcp.calls('ping')[0]?.headers.authorization).toBe('sdk-secret-value-2')

    await client.secrets.delete('SDK_TOKEN')
    expect(await client.secrets.list()).toEqual([])
    const gone = await client.secrets.delete('SDK_TOKEN').catch((e) => e)
    expect({ status: gone.status, code: gone.code }).toEqual({ status: 404, code: 'not-found' })
  })
})
