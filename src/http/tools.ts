// Tools that wait for someone (API.md §7): pending calls, client results and approvals.

import type { FastifyInstance } from 'fastify'
import { normalizeContent } from '../agent/index.js'
import { listPending } from '../store/index.js'
import { parseToolArguments } from '../tools/index.js'
import type { HttpDeps } from './deps.js'
import { sessionOf } from './session.js'
import * as S from './schemas.js'

const err = { 400: S.ErrorBody, 401: S.ErrorBody, 403: S.ErrorBody, 404: S.ErrorBody, 409: S.ErrorBody }

export async function toolRoutes(app: FastifyInstance, deps: HttpDeps): Promise<void> {
  app.get('/sessions/:id/pending', { config: { session: true }, schema: { operationId: 'listPending', summary: 'Tool calls waiting for a client or an approver', params: S.SessionParams, response: { 200: S.PendingAnswer, ...err } } }, async (req, reply) => {
    const rows = await listPending(deps.db, sessionOf(req).key)
    const toolCalls = rows.map((r) => ({ callId: r.callId, name: r.name, arguments: parseToolArguments(r.arguments), rawArguments: r.arguments, kind: r.kind }))
    return reply.type('application/json').send(JSON.stringify({ toolCalls }))
  })

  app.post('/sessions/:id/tool-results', { config: { session: true }, schema: { operationId: 'submitToolResult', summary: 'Answer a client tool call', params: S.SessionParams, body: S.ToolResultBody, response: { 202: S.EmptyBody, ...err } } }, async (req, reply) => {
    const body = req.body as { callId: string; content: unknown; isError?: boolean }
    const content = normalizeContent(body.content)
    await deps.intake.answer(sessionOf(req), body.callId, 'client', { content, isError: body.isError === true })
    return reply.code(202).type('application/json').send('{}')
  })

  app.post('/sessions/:id/approvals/:callId', { config: { session: true }, schema: { operationId: 'decideApproval', summary: 'Allow or deny a call waiting for approval', body: S.ApprovalBody, response: { 202: S.EmptyBody, ...err } } }, async (req, reply) => {
    const body = req.body as { decision: 'allow' | 'deny'; reason?: string }
    await deps.intake.answer(sessionOf(req), (req.params as { callId: string }).callId, 'approval', body)
    return reply.code(202).type('application/json').send('{}')
  })
}
