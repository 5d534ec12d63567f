// A real MCP server for tests: the SDK's own server side (Server + StreamableHTTPServerTransport,
// stateful: one MCP session per client connection) on 127.0.0.1. Tools are plain JSON-schema
// definitions; every request, its headers and every cancellation are recorded. It can be stopped and
// started again on the same port (a restart forgets its MCP sessions, as a real one would).

import crypto from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { Server } from '@modelcontextprotocol/sdk/server/index.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import { CallToolRequestSchema, ListToolsRequestSchema, isInitializeRequest } from '@modelcontextprotocol/sdk/types.js'

export interface TestMcpTool {
  name: string
  description?: string
  inputSchema?: Record<string, unknown>
  annotations?: Record<string, unknown>
  call(args: Record<string, unknown>, extra: { signal: AbortSignal }): Promise<Record<string, unknown>> | Record<string, unknown>
}

export interface McpRecord {
  method: string
  params?: any
  headers: http.IncomingHttpHeaders
  sessionId?: string
}

export class TestMcpServer {
  readonly records: McpRecord[] = []
  /** calls whose request the client cancelled (notifications/cancelled reached the handler) */
  readonly cancelled: string[] = []
  private tools: TestMcpTool[]
  private http?: http.Server
  private sessions = new Map<string, { transport: StreamableHTTPServerTransport; server: Server }>()
  port = 0

  constructor(tools: TestMcpTool[]) {
    this.tools = [...tools]
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}/mcp`
  }

  methods(): string[] {
    return this.records.map((r) => r.method)
  }

  calls(name?: string): McpRecord[] {
    return this.records.filter((r) => r.method === 'tools/call' && (name === undefined || r.params?.name === name))
  }

  async start(port = this.port): Promise<this> {
    this.http = http.createServer((req, res) => void this.handle(req, res))
    await new Promise<void>((resolve) => this.http!.listen(port, '127.0.0.1', resolve))
    this.port = (this.http.address() as AddressInfo).port
    return this
  }

  /** Stops listening and forgets every MCP session. */
  async stop(): Promise<void> {
    const sessions = [...this.sessions.values()]
    this.sessions.clear()
    for (const s of sessions) await s.server.close().catch(() => {})
    if (!this.http) return
    this.http.closeAllConnections()
    await new Promise((r) => this.http!.close(r))
    this.http = undefined
  }

  /** Replaces the tool list and tells every connected client (notifications/tools/list_changed). */
  async setTools(tools: TestMcpTool[]): Promise<void> {
    this.tools = [...tools]
    for (const s of this.sessions.values()) await s.server.sendToolListChanged().catch(() => {})
  }

  private newServer(): Server {
    const server = new Server({ name: 'agentd-test-mcp', version: '1.0.0' }, { capabilities: { tools: { listChanged: true } } })
    server.setRequestHandler(ListToolsRequestSchema, async () => ({
      tools: this.tools.map((t) => ({ name: t.name, description: t.description, inputSchema: t.inputSchema ?? { type: 'object', properties: {} }, ...(t.annotations ? { annotations: t.annotations } : {}) })),
    }))
    server.setRequestHandler(CallToolRequestSchema, async (req, extra) => {
      const tool = this.tools.find((t) => t.name === req.params.name)
      if (!tool) throw new Error(`unknown tool ${req.params.name}`)
      extra.signal.addEventListener('abort', () => this.cancelled.push(req.params.name), { once: true })
      return (await tool.call((req.params.arguments ?? {}) as Record<string, unknown>, { signal: extra.signal })) as never
    })
    return server
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    let raw = ''
    for await (const c of req) raw += c
    let body: any
    try {
      body = raw ? JSON.parse(raw) : undefined
    } catch {
      body = undefined
    }
    const sid = req.headers['mcp-session-id'] as string | undefined
    for (const m of Array.isArray(body) ? body : body ? [body] : []) this.records.push({ method: m.method ?? 'response', params: m.params, headers: { ...req.headers }, sessionId: sid })
    if (req.method === 'GET' || req.method === 'DELETE') this.records.push({ method: req.method, headers: { ...req.headers }, sessionId: sid })
    const known = sid ? this.sessions.get(sid) : undefined
    if (known) return known.transport.handleRequest(req, res, body)
    if (!sid && req.method === 'POST' && isInitializeRequest(body)) {
      const server = this.newServer()
      const transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => crypto.randomUUID(),
        onsessioninitialized: (id) => void this.sessions.set(id, { transport, server }),
      })
      transport.onclose = () => {
        if (transport.sessionId) this.sessions.delete(transport.sessionId)
      }
      await server.connect(transport)
      return transport.handleRequest(req, res, body)
    }
    // MCP: a session id the server does not know (it restarted, or ended the session) is 404
    res.writeHead(sid ? 404 : 400, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32001, message: sid ? 'Session not found' : 'Bad Request: no session id' } }))
  }
}
