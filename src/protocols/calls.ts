// What the agent-facing protocols (MCP server, A2A) do to sessions, through the same service code the
// native routes use (API.md §4, §5, §7, §18): find or create the session a call names, deliver its text
// as a followup with an idempotency key, answer a pending call. Each protocol renders the answers and
// errors in its own shape.

import { ApiError, sessionNotFound } from '../errors.js'
import { bodyHash, idempotencyMessageId, normalizeContent, toUserMessage, type Accepted } from '../agent/index.js'
import { getPending, getSession, type Principal, type SessionRow } from '../store/index.js'
import type { ContentBlock } from '../session/index.js'
import { deliverInput, reaches, tokenRefusal, type HttpDeps } from '../http/index.js'

/** A token's refusal of an operation that needs `write` (API.md §18): a read-only token cannot send. */
export function requireWrite(p: Principal): void {
  const refusal = tokenRefusal(p.grant, { access: 'write' })
  if (refusal) throw refusal
}

/** A session the principal reaches (its tenant's; a token's own), else 404 as another tenant's. */
export async function reachableSession(deps: HttpDeps, p: Principal, id: string): Promise<SessionRow> {
  const row = await getSession(deps.db, p.tenantId, id)
  if (!row || (p.grant && !reaches(p.grant, row))) throw sessionNotFound(id)
  return row
}

/** Whether a token limited to agents may use this one (API.md §18); a missing agent reads the same. */
export function mayUseAgent(p: Principal, agentId: string): boolean {
  return !p.grant?.agents || p.grant.agents.includes(agentId)
}

/**
 * The session a protocol call names (API.md §17.4, §17.5): an existing one the principal reaches, or,
 * when `agent` is given, one created from it (with the id given, if any) as POST /v1/sessions would,
 * under the same token limits; with neither id nor agent, a new session with the server's defaults.
 */
export async function sessionFor(deps: HttpDeps, p: Principal, o: { id?: string; agent?: string }): Promise<SessionRow> {
  if (o.id !== undefined) {
    const row = await getSession(deps.db, p.tenantId, o.id)
    if (row) {
      if (p.grant && !reaches(p.grant, row)) throw sessionNotFound(o.id)
      if (o.agent !== undefined && row.agent?.id !== o.agent.split('@')[0]) throw new ApiError('session-conflict', `session ${o.id} is not a session of agent ${o.agent}`)
      return row
    }
    if (o.agent === undefined) throw sessionNotFound(o.id)
  }
  const g = p.grant
  if (g?.sessions && !(o.id !== undefined && g.sessions.includes(o.id))) throw new ApiError('forbidden', 'this token creates only the sessions it lists: give one of them as the session')
  if (o.agent !== undefined && !mayUseAgent(p, o.agent.split('@')[0])) throw new ApiError('not-found', `agent ${o.agent} not found`)
  if (g?.agents && o.agent === undefined) throw new ApiError('forbidden', 'this token creates only sessions of the agents it lists: give one of them as the agent')
  const body = { ...(o.id !== undefined ? { id: o.id } : {}), ...(o.agent !== undefined ? { agent: o.agent } : {}) }
  return (await deps.sessions.create(p.tenantId, body, g?.subject ?? null)).row
}

/**
 * A followup of `content` (API.md §5). With an idempotency key the message id is derived from it as
 * the native routes derive it from `Idempotency-Key`, and the body hash is the native followup's, so
 * a repeat — through this protocol or the native route — inserts nothing and answers the original.
 */
export async function sendFollowup(deps: HttpDeps, row: SessionRow, content: string | ContentBlock[], o: { idempotencyKey?: string; messageId?: string } = {}): Promise<Accepted & { replayed: boolean }> {
  const id = o.messageId ?? (o.idempotencyKey !== undefined ? idempotencyMessageId(o.idempotencyKey) : undefined)
  const message = toUserMessage({ content }, { kind: 'user' }, id)
  const idempotency = id !== undefined ? { bodyHash: bodyHash('followup', { content }) } : undefined
  return deliverInput(deps, undefined, { row, route: 'followup', message, ...(idempotency ? { idempotency } : {}) })
}

/** Answers a pending call (API.md §7): an approval by a decision, a `client` call by its result. */
export async function answerCall(deps: HttpDeps, row: SessionRow, callId: string, a: { decision?: 'allow' | 'deny'; reason?: string; result?: string | ContentBlock[]; isError?: boolean }): Promise<'client' | 'approval'> {
  const pending = await getPending(deps.db, row.key, callId)
  if (!pending || pending.answered) throw new ApiError('tool-call-not-pending', `no call ${callId} is pending`)
  if (pending.kind === 'approval') {
    if (a.decision === undefined) throw new ApiError('bad-request', `call ${callId} waits for an approval: give a decision (allow or deny)`)
    await deps.intake.answer(row, callId, 'approval', { decision: a.decision, ...(a.reason !== undefined ? { reason: a.reason } : {}) })
  } else {
    if (a.result === undefined) throw new ApiError('bad-request', `call ${callId} waits for a client result: give a result`)
    await deps.intake.answer(row, callId, 'client', { content: normalizeContent(a.result), isError: a.isError === true })
  }
  return pending.kind
}
