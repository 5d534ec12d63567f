// POST /v1/mcp (API.md §17.5): the MCP streamable HTTP transport of @modelcontextprotocol/sdk in its
// stateless mode — a fresh transport and server per request, answers as plain JSON — so any process
// answers any request and nothing lives between them. GET (the server-initiated stream, which a
// stateless server has nothing to send on) and DELETE (no MCP session to end) are 405, as the MCP
// specification lets a server answer.

import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js'
import { jsonRpcErrorHandler, jsonRpcError } from './jsonrpc.js'
import { mcpServer } from './mcp-server.js'
import type { HttpDeps } from '../http/index.js'

/**
 * The body schema of a JSON-RPC endpoint: a JSON-RPC 2.0 request or notification object (a body that
 * is not one is -32600, jsonrpc.ts); its method and params are the protocol's own code's to judge.
 */
export const JsonRpcBody = {
  type: 'object',
  description: 'a JSON-RPC 2.0 request or notification',
  properties: {
    jsonrpc: { const: '2.0' },
    id: { anyOf: [{ type: 'string', maxLength: 200 }, { type: 'integer' }, { type: 'null' }] },
    method: { type: 'string', minLength: 1, maxLength: 200 },
    params: { type: 'object' },
  },
  required: ['jsonrpc', 'method'],
  additionalProperties: false,
} as const
const JsonRpcAnswer = { description: 'a JSON-RPC 2.0 response' }

/** A Fetch API Request of a fastify request whose body fastify has parsed already. */
export function webRequest(req: FastifyRequest): Request {
  const headers = new Headers()
  for (const [k, v] of Object.entries(req.headers)) {
    if (v === undefined) continue
    for (const one of Array.isArray(v) ? v : [v]) headers.append(k, one)
  }
  return new Request(`http://${req.headers.host ?? 'localhost'}${req.url}`, { method: req.method, headers })
}

async function sendResponse(reply: FastifyReply, res: Response): Promise<FastifyReply> {
  reply.code(res.status)
  res.headers.forEach((v, k) => {
    if (k !== 'content-length') reply.header(k, v)
  })
  return reply.send(res.body ? Buffer.from(await res.arrayBuffer()) : '')
}

export async function mcpRoutes(app: FastifyInstance, deps: HttpDeps): Promise<void> {
  app.setErrorHandler(jsonRpcErrorHandler)
  // reading is open to a read-only token; send_message and answer_pending check `write` themselves
  app.post('/mcp', { config: { access: 'read' }, schema: { operationId: 'mcp', summary: 'MCP server (streamable HTTP, stateless): list_agents, list_sessions, send_message, read_session, answer_pending', body: JsonRpcBody, response: { 200: JsonRpcAnswer } } }, async (req, reply) => {
    const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true })
    const server = mcpServer(deps, req.principal!)
    await server.connect(transport)
    // a client that leaves ends what its request waits for (send_message's wait)
    const gone = () => void server.close().catch(() => {})
    reply.raw.once('close', gone)
    try {
      const res = await transport.handleRequest(webRequest(req), { parsedBody: req.body })
      return await sendResponse(reply, res)
    } finally {
      reply.raw.off('close', gone)
      await server.close().catch(() => {})
    }
  })
  for (const method of ['GET', 'DELETE'] as const) {
    app.route({ method, url: '/mcp', config: { access: 'read' }, schema: { summary: `MCP server: ${method} is not offered by a stateless server (405)`, operationId: `mcp${method === 'GET' ? 'Stream' : 'End'}` }, handler: async (_req, reply) => reply.code(405).header('allow', 'POST').type('application/json').send(JSON.stringify(jsonRpcError(null, -32000, 'Method not allowed: this MCP server is stateless; POST requests only'))) })
  }
}
