// The A2A routes (API.md §17.4): the agent card, and the JSON-RPC endpoint served by @a2a-js/sdk's
// transport handlers — the v1.0 one, and its v0.3 compatibility one for the v0.3 method names
// (`message/send`, `tasks/get`, …) — over the A2aView of the principal and the agent. Streaming methods
// answer Server-Sent Events, one JSON-RPC response per `data:` line, as the SDK's own server does.

import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { AgentCard } from '@a2a-js/sdk'
import { JsonRpcTransportHandler, ServerCallContext } from '@a2a-js/sdk/server'
import { LegacyJsonRpcTransportHandler } from '@a2a-js/sdk/compat/v0_3/server'
import { A2aView, agentCard, type A2aDeps } from './a2a.js'
import { INVALID_REQUEST, jsonRpcError, jsonRpcErrorHandler } from './jsonrpc.js'
import { JsonRpcBody } from './mcp-routes.js'
import { PING_MS, type HttpDeps } from '../http/index.js'

const AgentParams = { type: 'object', properties: { agentId: { type: 'string', pattern: '^[A-Za-z0-9_.-]{1,64}$', description: "1 to 64 letters, digits, '_', '.' and '-'" } }, required: ['agentId'] } as const
const Any = { description: 'a JSON object' }

/** The URL clients reach this server at, from the request (the card names its endpoint absolutely). */
const baseUrl = (req: FastifyRequest) => `${req.protocol}://${req.headers.host ?? 'localhost'}`

const validId = (b: { id?: unknown } | null | undefined) => {
  const id = b && typeof b === 'object' ? b.id : undefined
  return typeof id === 'string' || (typeof id === 'number' && Number.isInteger(id)) ? id : null
}

/** Why a body is not a JSON-RPC 2.0 request object, if it is not. */
function envelopeError(b: unknown): string | undefined {
  if (b === null || typeof b !== 'object' || Array.isArray(b)) return 'Invalid Request: the body must be one JSON-RPC request object (batches are not supported)'
  const r = b as { jsonrpc?: unknown; method?: unknown; id?: unknown; params?: unknown }
  if (r.jsonrpc !== '2.0') return 'Invalid Request: jsonrpc must be "2.0"'
  if (typeof r.method !== 'string' || !r.method) return 'Invalid Request: method must be a string'
  if ('id' in r && r.id !== null && validId(r) === null) return 'Invalid Request: id must be a string, an integer or null'
  return undefined
}

type RpcAnswer = { error?: { code: number } } & Record<string, unknown>
const isStream = (x: unknown): x is AsyncGenerator<RpcAnswer> => typeof (x as AsyncGenerator)?.[Symbol.asyncIterator] === 'function'

/** Writes one text to a raw response, waiting for the socket to drain when it is full. */
async function write(reply: FastifyReply, text: string): Promise<void> {
  if (!reply.raw.write(text)) await new Promise<void>((r) => {
    const done = () => {
      reply.raw.off('drain', done)
      reply.raw.off('close', done)
      r()
    }
    reply.raw.once('drain', done)
    reply.raw.once('close', done)
  })
}

export async function a2aRoutes(app: FastifyInstance, deps: A2aDeps | HttpDeps): Promise<void> {
  const d = deps as A2aDeps
  /** open streams, ended when the server closes */
  const open = new Set<AbortController>()
  app.addHook('preClose', async () => {
    for (const ac of open) ac.abort()
  })

  app.get('/a2a/:agentId/.well-known/agent-card.json', { config: { agent: 'agentId' }, schema: { operationId: 'a2aAgentCard', summary: "An agent's A2A agent card (v1.0)", params: AgentParams, response: { 200: Any } } }, async (req, reply) => {
    const agent = await d.agents.get(req.principal!.tenantId, (req.params as { agentId: string }).agentId)
    const card = agentCard(agent, baseUrl(req))
    // v0.3 clients read the endpoint from these fields; v1.0 clients from supportedInterfaces
    const legacy = { url: card.supportedInterfaces[0].url, preferredTransport: 'JSONRPC', protocolVersion: '0.3.0' }
    return reply.type('application/json').send(JSON.stringify({ ...(AgentCard.toJSON(card) as object), ...legacy }))
  })

  app.register(async (rpc) => {
    rpc.setErrorHandler(jsonRpcErrorHandler)
    // reading is open to a read-only token; sending, cancelling and push configs check `write` (a2a.ts)
    rpc.post('/a2a/:agentId', { config: { access: 'read', agent: 'agentId', unlimited: false }, schema: { operationId: 'a2a', summary: 'A2A JSON-RPC endpoint (v1.0 methods and their v0.3 names)', params: AgentParams, body: JsonRpcBody, response: { 200: Any, 500: Any } } }, async (req, reply) => {
      const agent = await d.agents.get(req.principal!.tenantId, (req.params as { agentId: string }).agentId)
      const body = req.body as { jsonrpc?: unknown; method?: unknown; id?: unknown }
      // JSON-RPC 2.0 §5.1: a body that is no request object is -32600 (the SDK would say -32602)
      const invalid = envelopeError(body)
      if (invalid) return reply.type('application/json').send(JSON.stringify(jsonRpcError(validId(body), INVALID_REQUEST, invalid)))
      const legacy = typeof body?.method === 'string' && body.method.includes('/')
      const ac = new AbortController()
      const gone = () => ac.abort()
      reply.raw.once('close', gone)
      open.add(ac)
      try {
        const view = new A2aView(d, req.principal!, agent, baseUrl(req), ac.signal)
        const context = new ServerCallContext({ requestedVersion: legacy ? '0.3' : '1.0' })
        const answer = legacy ? await new LegacyJsonRpcTransportHandler(view).handle(body as Record<string, unknown>, context) : await new JsonRpcTransportHandler(view).handle(body as Record<string, unknown>, context)
        if (!isStream(answer)) {
          const a = answer as RpcAnswer
          return reply.code(a.error?.code === -32603 ? 500 : 200).type('application/json').send(JSON.stringify(a))
        }
        // the first update (or the error that comes instead, such as an unknown task) decides the answer
        const first = await answer.next()
        if (!first.done && first.value.error) return reply.code(first.value.error.code === -32603 ? 500 : 200).type('application/json').send(JSON.stringify(first.value))
        // the headers hooks set (CORS, API.md §18) go out with the raw answer the stream writes itself
        const hooked = reply.getHeaders() as Record<string, string | number | string[]>
        reply.hijack()
        reply.raw.writeHead(200, { ...hooked, 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive', 'x-accel-buffering': 'no' })
        const ping = setInterval(() => reply.raw.write(': ping\n\n'), PING_MS)
        try {
          if (!first.done) await write(reply, `data: ${JSON.stringify(first.value)}\n\n`)
          for await (const frame of answer) {
            if (ac.signal.aborted) break
            await write(reply, `data: ${JSON.stringify(frame)}\n\n`)
          }
        } catch (e) {
          req.log.warn({ err: (e as Error).message }, 'A2A stream ended early')
        } finally {
          clearInterval(ping)
          if (!reply.raw.writableEnded) reply.raw.end()
        }
        return reply
      } finally {
        open.delete(ac)
        reply.raw.off('close', gone)
      }
    })
  })
}
