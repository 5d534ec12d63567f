// The error shape of the JSON-RPC endpoints (MCP, A2A; API.md §17): what the HTTP layer refuses
// before a protocol sees the request — a body that is not JSON, too large, of another media type, a
// missing credential, a rate limit — leaves as a JSON-RPC error object with the HTTP status API.md §10
// gives, so a JSON-RPC client reads it as an error of its protocol.

import type { FastifyReply, FastifyRequest } from 'fastify'
import { toApiError } from '../http/index.js'

export const PARSE_ERROR = -32700
export const INVALID_REQUEST = -32600
export const METHOD_NOT_FOUND = -32601
export const INVALID_PARAMS = -32602
export const INTERNAL_ERROR = -32603
/** JSON-RPC's range for implementation-defined server errors: here, refusals of API.md §10 (data.code says which) */
export const SERVER_ERROR = -32000

export interface JsonRpcErrorBody {
  jsonrpc: '2.0'
  id: string | number | null
  error: { code: number; message: string; data?: unknown }
}

export const jsonRpcError = (id: string | number | null, code: number, message: string, data?: unknown): JsonRpcErrorBody => ({ jsonrpc: '2.0', id, error: { code, message, ...(data !== undefined ? { data } : {}) } })

/** The body parser's refusals of text that is not JSON (src/http/input.ts). */
const NOT_JSON = new Set(['malformed JSON', 'not UTF-8'])

export function jsonRpcErrorHandler(err: unknown, req: FastifyRequest, reply: FastifyReply): FastifyReply {
  const e = toApiError(err, req)
  if (e.code === 'internal') req.log.error({ err }, 'internal error')
  const detail = e.details?.[0]?.message ?? ''
  const code = e.code === 'bad-request' ? (NOT_JSON.has(detail) || detail.startsWith('nested deeper') ? PARSE_ERROR : INVALID_REQUEST) : e.code === 'payload-too-large' || e.code === 'unsupported-media-type' ? INVALID_REQUEST : e.code === 'internal' ? INTERNAL_ERROR : SERVER_ERROR
  if (e.headers) for (const [k, v] of Object.entries(e.headers)) reply.header(k, v)
  return reply.code(e.status).type('application/json; charset=utf-8').send(JSON.stringify(jsonRpcError(null, code, e.message, { code: e.code, ...(e.details ? { details: e.details } : {}) })))
}
