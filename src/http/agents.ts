// Agent routes (API.md §16): create, list, read the latest or a named version, patch (a new
// version) and delete. Another tenant's agent is indistinguishable from a missing one. Defining agents
// takes a tenant key; a token (API.md §18) reads them, only those it is limited to when it is.

import type { FastifyInstance, FastifyRequest } from 'fastify'
import { agentObject, type CreateAgentBody, type PatchAgentBody } from '../agent/index.js'
import { agents as store } from '../store/index.js'
import type { HttpDeps } from './deps.js'
import { pageQuery } from './paging.js'
import * as S from './schemas.js'

const err = { 400: S.ErrorBody, 401: S.ErrorBody, 404: S.ErrorBody }
const json = (o: unknown) => JSON.stringify(o)
const tenant = (req: FastifyRequest) => req.principal!.tenantId
const idOf = (req: FastifyRequest) => (req.params as { id: string }).id

export async function agentRoutes(app: FastifyInstance, deps: HttpDeps): Promise<void> {
  app.post('/agents', { config: { keyOnly: true }, schema: { operationId: 'createAgent', summary: 'Create an agent (version 1); a client id makes it idempotent', body: S.CreateAgentBody, response: { 200: S.AgentObject, 201: S.AgentObject, 409: S.ErrorBody, 422: S.ErrorBody, ...err } } }, async (req, reply) => {
    const { agent, created } = await deps.agents.create(tenant(req), req.body as CreateAgentBody)
    return reply.code(created ? 201 : 200).type('application/json').send(json(agentObject(agent)))
  })

  app.get('/agents', { schema: { operationId: 'listAgents', summary: 'List agents at their latest version, newest first', querystring: S.ListQuery, response: { 200: S.AgentList, ...err } } }, async (req, reply) => {
    const { limit, cursor } = pageQuery(req.query, store.decodeAgentCursor)
    const page = await deps.agents.list(tenant(req), limit, cursor)
    const only = req.principal!.grant?.agents
    const shown = only ? page.agents.filter((a) => only.includes(a.id)) : page.agents
    return reply.type('application/json').send(json({ agents: shown.map(agentObject), nextCursor: page.nextCursor }))
  })

  app.get('/agents/:id', { config: { agent: 'id' }, schema: { operationId: 'getAgent', summary: "An agent's latest version", params: S.AgentParams, response: { 200: S.AgentObject, ...err } } }, async (req, reply) => {
    return reply.type('application/json').send(json(agentObject(await deps.agents.get(tenant(req), idOf(req)))))
  })

  app.get('/agents/:id/versions/:version', { config: { agent: 'id' }, schema: { operationId: 'getAgentVersion', summary: 'A version of an agent', params: S.AgentVersionParams, response: { 200: S.AgentObject, ...err } } }, async (req, reply) => {
    const version = Number((req.params as { version: string }).version)
    return reply.type('application/json').send(json(agentObject(await deps.agents.get(tenant(req), idOf(req), version))))
  })

  app.patch('/agents/:id', { config: { optionalBody: true, keyOnly: true }, schema: { operationId: 'updateAgent', summary: 'Make a new version of an agent with the given fields changed', params: S.AgentParams, body: S.PatchAgentBody, response: { 200: S.AgentObject, 422: S.ErrorBody, ...err } } }, async (req, reply) => {
    return reply.type('application/json').send(json(agentObject(await deps.agents.patch(tenant(req), idOf(req), req.body as PatchAgentBody))))
  })

  app.delete('/agents/:id', { config: { keyOnly: true }, schema: { operationId: 'deleteAgent', summary: 'Delete an agent: new sessions from it are refused, existing ones go on', params: S.AgentParams, response: { ...err } } }, async (req, reply) => {
    await deps.agents.delete(tenant(req), idOf(req))
    return reply.code(204).send()
  })
}
