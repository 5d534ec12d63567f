// agentd as an MCP server (API.md §17.5): the tools list_agents, list_sessions, send_message,
// read_session and answer_pending, on @modelcontextprotocol/sdk's Server — the SDK speaks the protocol,
// this module only says what each tool does, through the service code the native routes use. A server
// is made per request for the principal that sent it: nothing is kept between requests.

import { Server } from '@modelcontextprotocol/sdk/server/index.js'
import { CallToolRequestSchema, ErrorCode, ListToolsRequestSchema, McpError, type CallToolResult, type Tool } from '@modelcontextprotocol/sdk/types.js'
import { Compile } from 'typebox/compile'
import { Type, type Static, type TSchema } from 'typebox'
import { ApiError } from '../errors.js'
import { agentObject, sessionObject } from '../agent/index.js'
import { agents as agentStore, decodeCursor, listSessions, readEvents, type Principal } from '../store/index.js'
import { assertStorableText, JsonValueError, type SessionEvent } from '../session/index.js'
import { answerCall, mayUseAgent, reachableSession, requireWrite, sendFollowup, sessionFor } from './calls.js'
import { finalText, pendingOf, waitSpan } from './outcome.js'
import { SpanFold } from './span.js'
import type { Span } from './items.js'
import { VERSION, sessionFilter, toApiError, type HttpDeps } from '../http/index.js'

/** send_message waits this long by default, and at most MAX_WAIT_SECONDS (API.md §17.5). */
export const DEFAULT_WAIT_SECONDS = 30
export const MAX_WAIT_SECONDS = 300
const READ_LIMIT = 500

const Id = Type.String({ minLength: 1, maxLength: 200 })
const Page = { limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200, description: 'at most this many (default 50)' })), cursor: Type.Optional(Type.String({ description: 'nextCursor of the previous page' })) }

const INPUTS = {
  list_agents: Type.Object(Page, { additionalProperties: false }),
  list_sessions: Type.Object(Page, { additionalProperties: false }),
  send_message: Type.Object(
    {
      agent: Type.Optional(Type.String({ minLength: 1, maxLength: 80, description: 'the agent (id or id@version) whose session to create or use' })),
      session: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'the session to continue; with agent, created from it when it does not exist yet' })),
      text: Type.String({ minLength: 1, description: 'the message' }),
      idempotencyKey: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'makes the call safe to repeat: the same key and text send nothing twice' })),
      waitSeconds: Type.Optional(Type.Number({ minimum: 0, maximum: MAX_WAIT_SECONDS, description: `how long to wait for the answer (default ${DEFAULT_WAIT_SECONDS})` })),
    },
    { additionalProperties: false },
  ),
  read_session: Type.Object({ session: Id, after: Type.Optional(Type.Integer({ minimum: -1, description: 'only events after this seq (default -1: from the start)' })) }, { additionalProperties: false }),
  answer_pending: Type.Object(
    {
      session: Id,
      callId: Type.String({ minLength: 1 }),
      decision: Type.Optional(Type.Union([Type.Literal('allow'), Type.Literal('deny')], { description: 'for a call waiting for approval' })),
      reason: Type.Optional(Type.String({ description: 'why, with a decision' })),
      result: Type.Optional(Type.String({ description: 'the result of a client tool call' })),
      isError: Type.Optional(Type.Boolean({ description: 'the result is an error' })),
    },
    { additionalProperties: false },
  ),
} satisfies Record<string, TSchema>

type ToolName = keyof typeof INPUTS

const Status = Type.Union(['completed', 'in_progress', 'requires_action', 'failed'].map((s) => Type.Literal(s)))
const OUTPUTS: Partial<Record<ToolName, TSchema>> = {
  send_message: Type.Object({ status: Status, session: Type.String(), turn: Type.Union([Type.Integer(), Type.Null()]), text: Type.Optional(Type.String()), pending: Type.Optional(Type.Array(Type.Object({ callId: Type.String(), name: Type.String(), kind: Type.String(), arguments: Type.String() }))), error: Type.Optional(Type.Object({ code: Type.Optional(Type.String()), message: Type.Optional(Type.String()) })) }),
}

const DESCRIPTIONS: Record<ToolName, string> = {
  list_agents: 'Lists the agents this server offers (newest first), with their id, name and description.',
  list_sessions: 'Lists your sessions (conversations with agents), newest activity first.',
  send_message: 'Sends a message to an agent and waits for its answer. Give agent to start a conversation with it (or agent and session to name it), session to continue one. Answers the final text, or in_progress with the session and turn to read later, or requires_action with the calls to answer_pending.',
  read_session: "Reads a session's events (its log) after a seq, with a transcript of its messages.",
  answer_pending: 'Answers a call the agent waits on: an approval with decision allow or deny, or a client tool call with its result.',
}

const checkers = Object.fromEntries(Object.entries(INPUTS).map(([k, s]) => [k, Compile(s)])) as { [K in ToolName]: ReturnType<typeof Compile> }

/** The tool list (API.md §17.5), the same for every caller. */
export const MCP_TOOLS: Tool[] = (Object.keys(INPUTS) as ToolName[]).map((name) => ({
  name,
  description: DESCRIPTIONS[name],
  inputSchema: JSON.parse(JSON.stringify(INPUTS[name])) as Tool['inputSchema'],
  ...(OUTPUTS[name] ? { outputSchema: JSON.parse(JSON.stringify(OUTPUTS[name])) as Tool['outputSchema'] } : {}),
  annotations: { readOnlyHint: name.startsWith('list_') || name === 'read_session' },
}))

const toolError = (text: string): CallToolResult => ({ isError: true, content: [{ type: 'text', text }] })
const json = (v: Record<string, unknown>): CallToolResult => ({ content: [{ type: 'text', text: JSON.stringify(v) }], structuredContent: v })

/** API.md §17.5 status of a span: a wait is requires_action, a max-tokens end completes, a cancel fails. */
function statusOf(span: Span | undefined): 'completed' | 'in_progress' | 'requires_action' | 'failed' {
  if (!span?.ended) return 'in_progress'
  if (span.waits.length) return 'requires_action'
  return span.status === 'completed' || span.status === 'incomplete' ? 'completed' : 'failed'
}

/** One line per message-like event: what an MCP host's model can read at a glance. */
function transcript(events: readonly SessionEvent[]): string {
  const lines: string[] = []
  const text = (m: any) => ((m?.content ?? []) as any[]).map((b) => (b.type === 'text' ? b.text : b.type === 'tool-result' ? ((b.content ?? []) as any[]).map((c) => c.text ?? '').join('') : '')).join('')
  for (const e of events) {
    const d = e.data as any
    if (e.type === 'user/message' && d.source?.kind !== 'tool') lines.push(`[${e.seq}] user: ${text(d)}`)
    else if (e.type === 'assistant/message') {
      const t = text(d.message)
      if (t) lines.push(`[${e.seq}] assistant: ${t}`)
    } else if (e.type === 'tool/call') lines.push(`[${e.seq}] tool call ${d.callId} ${d.name}(${d.arguments})`)
    else if (e.type === 'tool/result') lines.push(`[${e.seq}] tool result ${d.message?.source?.callId}: ${text(d.message)}`)
    else if (e.type === 'turn/end') lines.push(`[${e.seq}] turn ${d.turn} ended: ${d.reason?.kind}`)
  }
  return lines.join('\n')
}

type Args<K extends ToolName> = Static<(typeof INPUTS)[K]>

/** What each tool does for a principal. */
function handlers(deps: HttpDeps, p: Principal, signal: AbortSignal): { [K in ToolName]: (a: Args<K>) => Promise<CallToolResult> } {
  return {
    async list_agents(a) {
      const cursor = a.cursor !== undefined ? agentStore.decodeAgentCursor(a.cursor) : undefined
      if (cursor === null) throw new ApiError('bad-request', 'cursor is not one this server gave')
      const page = await deps.agents.list(p.tenantId, a.limit ?? 50, cursor)
      const shown = page.agents.filter((x) => mayUseAgent(p, x.id)).map(agentObject)
      return json({ agents: shown.map((x) => ({ id: x.id, version: x.version, name: x.name, description: x.description })), nextCursor: page.nextCursor })
    },
    async list_sessions(a) {
      const cursor = a.cursor !== undefined ? decodeCursor(a.cursor) : undefined
      if (cursor === null) throw new ApiError('bad-request', 'cursor is not one this server gave')
      const filter = sessionFilter(p)
      const page = filter ? await listSessions(deps.db, p.tenantId, a.limit ?? 50, cursor, filter) : { sessions: [], nextCursor: null }
      return json({ sessions: page.sessions.map(sessionObject), nextCursor: page.nextCursor })
    },
    async send_message(a) {
      requireWrite(p)
      const row = await sessionFor(deps, p, { id: a.session, agent: a.agent })
      const accepted = await sendFollowup(deps, row, a.text, { idempotencyKey: a.idempotencyKey })
      const fold = await waitSpan(deps, row, SpanFold.inputId(accepted.seq), (a.waitSeconds ?? DEFAULT_WAIT_SECONDS) * 1000, signal)
      const span = fold.get(SpanFold.inputId(accepted.seq))
      const status = statusOf(span)
      const text = span ? finalText(span) : undefined
      const pending = status === 'requires_action' ? pendingOf(span!) : undefined
      const error = status === 'failed' ? (span!.error ?? { code: span!.status, message: `the turn ended ${span!.status}` }) : undefined
      const out = { status, session: row.id, turn: span?.turn || null, ...(text !== undefined ? { text } : {}), ...(pending ? { pending } : {}), ...(error ? { error } : {}) }
      const said =
        status === 'completed' ? (text ?? '')
        : status === 'requires_action' ? `The agent waits for: ${pending!.map((c) => `${c.kind === 'approval' ? 'approval of' : 'a result of'} ${c.name}(${c.arguments}) [callId ${c.callId}]`).join('; ')}. Answer with answer_pending.`
        : status === 'failed' ? `The turn failed: ${error!.code}: ${error!.message}`
        : `Still working: read session ${row.id} later (read_session).`
      return { content: [{ type: 'text', text: said }], structuredContent: out, ...(status === 'failed' ? { isError: true } : {}) }
    },
    async read_session(a) {
      const row = await reachableSession(deps, p, a.session)
      const events = await readEvents(deps.db, row.key, a.after ?? -1, READ_LIMIT)
      return { content: [{ type: 'text', text: transcript(events) || '(no messages)' }], structuredContent: { session: sessionObject(row), events, headSeq: row.nextSeq - 1 } }
    },
    async answer_pending(a) {
      requireWrite(p)
      if ((a.decision === undefined) === (a.result === undefined)) throw new ApiError('bad-request', 'give either decision (an approval) or result (a client tool call)')
      const row = await reachableSession(deps, p, a.session)
      const kind = await answerCall(deps, row, a.callId, a)
      return json({ status: 'accepted', session: row.id, callId: a.callId, kind })
    },
  }
}

/** An MCP server answering one request of principal `p`. */
export function mcpServer(deps: HttpDeps, p: Principal): Server {
  const server = new Server({ name: 'agentd', version: VERSION }, { capabilities: { tools: {} }, instructions: 'agentd runs agents. list_agents, then send_message to talk to one; read_session and answer_pending for the rest.' })
  const ac = new AbortController()
  server.onclose = () => ac.abort()
  const run = handlers(deps, p, ac.signal)
  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: MCP_TOOLS }))
  server.setRequestHandler(CallToolRequestSchema, async (req) => {
    const name = req.params.name as ToolName
    if (!Object.hasOwn(INPUTS, name)) throw new McpError(ErrorCode.InvalidParams, `no tool ${req.params.name}`)
    const args = req.params.arguments ?? {}
    const check = checkers[name]
    if (!check.Check(args)) {
      const first = [...check.Errors(args)].slice(0, 3).map((e) => `${e.instancePath || '(arguments)'} ${e.message}`)
      return toolError(`invalid arguments for ${name}: ${first.join('; ')}`)
    }
    try {
      assertStorableText(args, 'arguments')
      return await (run[name] as (a: unknown) => Promise<CallToolResult>)(args)
    } catch (e) {
      if (e instanceof JsonValueError) return toolError(`${e.path}: ${e.why}`)
      // API.md §10's codes, and nothing of an internal error's message
      const a = toApiError(e)
      if (a.code === 'internal') deps.log.error({ err: e, tool: name }, 'MCP tool failed')
      return toolError(`${a.code}: ${a.message}`)
    }
  })
  return server
}
