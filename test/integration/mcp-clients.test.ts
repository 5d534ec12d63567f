// The MCP client layer on its own (src/tools/mcp.ts) against a real MCP server of the SDK: the address
// guard on every connection (a name that re-resolves to a refused address after the URL check is
// refused at the socket), tool naming past 64 characters, argument checks, and a server that is gone.

import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { McpClients, mcpToolName } from '../../src/tools/index.js'
import { parseToolHosts } from '../../src/tools/hosts.js'
import { TestMcpServer } from '../helpers/mcp-server.js'

const never = new AbortController().signal

describe('MCP clients (tools/mcp.ts)', () => {
  let m: TestMcpServer
  beforeAll(async () => {
    m = await new TestMcpServer([{ name: 'echo', description: 'echoes', call: (a) => ({ content: [{ type: 'text', text: JSON.stringify(a) }] }) }]).start()
  })
  afterAll(() => m.stop())

  it('checks the address of every connection: a name that resolves to a refused address at connect time is refused before any request', async () => {
    // the URL check sees loopback (allowed); the socket's lookup then sees a private address (DNS rebinding)
    const answers = [['127.0.0.1'], ['10.20.30.40']]
    let lookups = 0
    const resolve = async () => answers[Math.min(lookups++, answers.length - 1)]!
    const before = m.records.length
    const c = new McpClients({ policy: parseToolHosts('127.0.0.1'), resolve }, [{ name: 'rebind', url: `http://rebind.test:${m.port}/mcp` }])
    const listed = await c.listTools(never)
    expect(listed.tools).toEqual([])
    expect(listed.outages).toHaveLength(1)
    expect(listed.outages[0]!.message).toMatch(/10\.20\.30\.40/)
    expect(lookups).toBeGreaterThanOrEqual(2)
    expect(m.records.length).toBe(before)
    await c.close()
  })

  it('a name resolving to an allowed address connects through the guard and lists', async () => {
    const c = new McpClients({ policy: parseToolHosts('127.0.0.1'), resolve: async () => ['127.0.0.1'] }, [{ name: 'named', url: `http://named.test:${m.port}/mcp` }])
    const listed = await c.listTools(never)
    expect(listed.tools.map((t) => t.name)).toEqual(['named__echo'])
    expect(await c.call('named', 'echo', { x: 1 }, never)).toEqual({ content: [{ type: 'text', text: '{"x":1}' }], isError: false })
    expect(await c.call('named', 'echo', ['not', 'an', 'object'], never)).toMatchObject({ isError: true, error: { code: 'TOOL_INVALID_ARGUMENTS' } })
    expect(await c.call('other', 'echo', {}, never)).toMatchObject({ isError: true, error: { code: 'UNKNOWN_TOOL' } })
    await c.close()
  })

  it('a server that is gone: listing reports one outage, a call is a TOOL_ERROR', async () => {
    const c = new McpClients({ policy: parseToolHosts('127.0.0.1') }, [{ name: 'gone', url: 'http://127.0.0.1:9/mcp' }])
    const first = await c.listTools(never)
    expect(first.outages.map((o) => o.server)).toEqual(['gone'])
    expect((await c.listTools(never)).outages).toEqual([])
    const r = await c.call('gone', 'echo', {}, never)
    expect(r).toMatchObject({ isError: true, error: { name: 'ToolError', code: 'TOOL_ERROR' } })
    expect((r.content[0] as { text: string }).text).toMatch(/^Error: MCP server gone: /)
    await c.close()
  })

  it('names tools <server>__<tool>, cut to 64 characters with a hash suffix when longer or not a plain name', () => {
    expect(mcpToolName('docs', 'search')).toBe('docs__search')
    const long = mcpToolName('s'.repeat(32), 't'.repeat(40))
    expect(long).toHaveLength(64)
    expect(long).toMatch(/^s{32}__t+_[0-9a-f]{8}$/)
    expect(mcpToolName('s'.repeat(32), 't'.repeat(41))).not.toBe(long)
    expect(mcpToolName('docs', 'get.page')).toMatch(/^docs__get_page_[0-9a-f]{8}$/)
  })
})
