// Route schemas (JSON Schema through typebox). They validate requests strictly (unknown fields are
// 400) and are the source of openapi/openapi.json, where the ones in COMPONENTS are named schemas. A
// violation's detail says what the field must be (errors.ts); a pattern cannot say it, so a schema with
// one has a description that completes "must be …" (test/integration/http-errors.test.ts holds to it).

import { Type, type TSchema } from 'typebox'
import { ERROR_CODES } from '../errors.js'
import { AgentId, Id, literals, QueryLimit } from './schemas-fields.js'
import { Jwks, KeyAnswer, Limits, LimitsPatch, PatchTenantBody, PutSecretBody, SecretInfo, SecretList, Tenant, TenantAnswer, TenantAuth, TenantAuthBody, TenantBody, TenantCors, TenantLimitsAnswer, TenantWithLimits, TokenAnswer, TokenBody, UsageAnswer, UsageRow } from './schemas-tenant.js'
export { AgentId, queryLimit } from './schemas-fields.js'
// what a tenant administers (schemas-tenant.ts), through this one module like the rest
export * from './schemas-tenant.js'

/** What a resume point must be (API.md §6); feed.ts parseAfter says the same for Last-Event-ID. */
export const AFTER_WORDS = 'an integer seq (-1, the default, reads from the start)'
const After = Type.String({ pattern: '^-?[0-9]{1,10}$', description: AFTER_WORDS })
export const Metadata = Type.Object({}, { additionalProperties: true, description: 'any JSON object' })

export const TextBlock = Type.Object({ type: Type.Literal('text'), text: Type.String() }, { additionalProperties: false })
export const ImageBlock = Type.Object(
  { type: Type.Literal('image'), mimeType: Type.Optional(Type.String()), data: Type.Optional(Type.String({ description: 'base64' })), url: Type.Optional(Type.String()) },
  { additionalProperties: false },
)
/** Blocks are checked in detail by the delivery code, which names the offending field. */
export const InputBlock = Type.Object({ type: Type.String() }, { additionalProperties: true, description: 'a text {type:"text", text} or image {type:"image", mimeType, data | url} block' })
export const Content = Type.Union([Type.String(), Type.Array(InputBlock)], { description: 'text, or content blocks' })

/** API.md §12–§13: header values are literals or `secret:NAME`; names and references are checked by the session code, which names the header */
export const Headers = Type.Object({}, { additionalProperties: Type.String({ maxLength: 8192 }), maxProperties: 64, description: 'header name → a literal value or secret:NAME (a tenant secret, resolved when a call is prepared)' })

export const ToolSpec = Type.Object(
  {
    name: Type.String({ pattern: '^[A-Za-z0-9_-]{1,64}$', description: "1 to 64 letters, digits, '_' and '-'" }),
    description: Type.Optional(Type.String({ maxLength: 10000 })),
    parameters: Type.Optional(Type.Object({}, { additionalProperties: true, description: 'JSON Schema of the arguments (an object schema)' })),
    execution: Type.Object(
      {
        type: Type.Union([Type.Literal('http'), Type.Literal('client'), Type.Literal('builtin')]),
        url: Type.Optional(Type.String({ maxLength: 2048 })),
        timeoutMs: Type.Optional(Type.Integer({ minimum: 1, maximum: 3600000 })),
        headers: Type.Optional(Headers),
      },
      { additionalProperties: false },
    ),
    concurrency: Type.Optional(Type.Union([Type.Literal('parallel'), Type.Literal('exclusive')])),
    approval: Type.Optional(Type.Union([Type.Literal('never'), Type.Literal('always')])),
  },
  { additionalProperties: false },
)

export const McpServer = Type.Object(
  {
    name: Type.String({ pattern: '^[A-Za-z0-9_-]{1,32}$', description: "1 to 32 letters, digits, '_' and '-', unique within the session (its tools are named <name>__<tool>)" }),
    url: Type.String({ maxLength: 2048, description: 'the streamable HTTP endpoint; under the address guard (AGENTD_TOOL_HOSTS)' }),
    headers: Type.Optional(Headers),
    tools: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 256 }), { maxItems: 512, description: "allow-list of the server's tool names" })),
    approval: Type.Optional(Type.Union([Type.Literal('never'), Type.Literal('always')], { description: 'applies to every tool of the server' })),
  },
  { additionalProperties: false },
)
const McpServers = Type.Array(McpServer, { maxItems: 16 })

export const ReasoningEffort = Type.Union(['minimal', 'low', 'medium', 'high', 'xhigh'].map((x) => Type.Literal(x)))

/** API.md §4: the session settings, as session create, agent create and their PATCHes take them */
const SETTINGS = {
  model: Type.String({ minLength: 3, maxLength: 300, description: 'provider/modelId' }),
  system: Type.String({ maxLength: 500000 }),
  tools: Type.Array(ToolSpec, { maxItems: 128 }),
  maxTokens: Type.Integer({ minimum: 1, maximum: 10000000 }),
  reasoningEffort: ReasoningEffort,
  mcpServers: McpServers,
}

/** API.md §16: an agent's id, unique within its tenant */
const AgentVersion = Type.Integer({ minimum: 1 })

export const CreateSessionBody = Type.Object(
  {
    id: Type.Optional(Id),
    agent: Type.Optional(Type.String({ pattern: '^[A-Za-z0-9_.-]{1,64}(@[1-9][0-9]{0,8})?$', description: "an agent id (1 to 64 letters, digits, '_', '.' and '-'), or id@version" })),
    model: Type.Optional(SETTINGS.model),
    system: Type.Optional(SETTINGS.system),
    tools: Type.Optional(SETTINGS.tools),
    maxTokens: Type.Optional(SETTINGS.maxTokens),
    reasoningEffort: Type.Optional(SETTINGS.reasoningEffort),
    metadata: Type.Optional(Metadata),
    mcpServers: Type.Optional(SETTINGS.mcpServers),
  },
  { additionalProperties: false },
)

export const PatchSessionBody = Type.Object(
  {
    title: Type.Optional(Type.Union([Type.String({ maxLength: 500 }), Type.Null()])),
    metadata: Type.Optional(Metadata),
    model: Type.Optional(SETTINGS.model),
    system: Type.Optional(SETTINGS.system),
    tools: Type.Optional(SETTINGS.tools),
    mcpServers: Type.Optional(SETTINGS.mcpServers),
    maxTokens: Type.Optional(SETTINGS.maxTokens),
    reasoningEffort: Type.Optional(SETTINGS.reasoningEffort),
  },
  { additionalProperties: false, description: 'each setting given replaces the current one from the next step that starts after the PATCH (API.md §4)' },
)

/** the settings as an answer shows them: every one present, null for an absent limit */
const SETTINGS_SHOWN = {
  model: Type.String(),
  system: Type.String(),
  tools: Type.Array(ToolSpec),
  mcpServers: Type.Array(McpServer),
  maxTokens: Type.Union([Type.Integer(), Type.Null()]),
  reasoningEffort: Type.Union([ReasoningEffort, Type.Null()]),
}
export const SessionSettings = Type.Object(SETTINGS_SHOWN, { description: "the session's settings as they stand now" })
export const AgentRef = Type.Object({ id: Type.String(), version: Type.Integer({ minimum: 1 }) }, { description: 'an agent version' })

const AGENT_TEXT = {
  name: Type.String({ minLength: 1, maxLength: 200 }),
  description: Type.String({ maxLength: 2000 }),
}
export const CreateAgentBody = Type.Object(
  {
    id: Type.Optional(AgentId),
    name: AGENT_TEXT.name,
    description: Type.Optional(AGENT_TEXT.description),
    model: SETTINGS.model,
    system: Type.Optional(SETTINGS.system),
    tools: Type.Optional(SETTINGS.tools),
    mcpServers: Type.Optional(SETTINGS.mcpServers),
    maxTokens: Type.Optional(SETTINGS.maxTokens),
    reasoningEffort: Type.Optional(SETTINGS.reasoningEffort),
    metadata: Type.Optional(Metadata),
  },
  { additionalProperties: false },
)
export const PatchAgentBody = Type.Object(
  {
    name: Type.Optional(AGENT_TEXT.name),
    description: Type.Optional(Type.Union([AGENT_TEXT.description, Type.Null()])),
    model: Type.Optional(SETTINGS.model),
    system: Type.Optional(SETTINGS.system),
    tools: Type.Optional(SETTINGS.tools),
    mcpServers: Type.Optional(SETTINGS.mcpServers),
    maxTokens: Type.Optional(Type.Union([SETTINGS.maxTokens, Type.Null()])),
    reasoningEffort: Type.Optional(Type.Union([SETTINGS.reasoningEffort, Type.Null()])),
    metadata: Type.Optional(Metadata),
  },
  { additionalProperties: false, description: 'the fields to change (null removes description, maxTokens or reasoningEffort); the others stay as the latest version has them' },
)
export const AgentObject = Type.Object({
  id: Type.String(),
  version: AgentVersion,
  name: Type.String(),
  description: Type.Union([Type.String(), Type.Null()]),
  ...SETTINGS_SHOWN,
  metadata: Metadata,
  createdAt: Type.String({ format: 'date-time', description: 'when the agent was created' }),
  updatedAt: Type.String({ format: 'date-time', description: 'when this version was made' }),
})
export const AgentList = Type.Object({ agents: Type.Array(AgentObject), nextCursor: Type.Union([Type.String(), Type.Null()]) })
export const AgentParams = Type.Object({ id: AgentId })
export const AgentVersionParams = Type.Object({ id: AgentId, version: Type.String({ pattern: '^[1-9][0-9]{0,8}$', description: 'a version number, from 1' }) })

export const Usage = Type.Object({ inputTokens: Type.Number(), outputTokens: Type.Number(), cacheReadTokens: Type.Number(), cacheWriteTokens: Type.Number(), reasoningTokens: Type.Number(), costUsd: Type.Number() })

export const LlmFailure = Type.Object(
  {
    message: Type.String(),
    code: Type.String({ description: 'a model error code: CONTEXT_WINDOW_EXCEEDED, RATE_LIMIT, AUTH, SERVER, TIMEOUT, TRANSPORT, EMPTY_RESPONSE, QUOTA, ABORTED, INVALID_REQUEST, NO_ADAPTER, UNKNOWN, or an adapter\'s own' }),
    status: Type.Optional(Type.Integer()),
    providerRetryAfterMs: Type.Optional(Type.Number()),
    requestId: Type.Optional(Type.String()),
  },
  { description: 'why a model call failed' },
)
export const AgentCancelCause = Type.Union([Type.Object({ kind: literals(['user', 'parent', 'disposed', 'legacy']) }), Type.Object({ kind: Type.Literal('hook'), reason: Type.String() })], { description: 'who cancelled a turn' })
export const TurnEndReason = Type.Union(
  [
    Type.Object({ kind: literals(['completed', 'blocked', 'max-tokens', 'interrupted']) }),
    Type.Object({ kind: Type.Literal('aborted'), reason: AgentCancelCause }),
    Type.Object({ kind: Type.Literal('error'), error: LlmFailure }),
  ],
  { description: 'how a turn ended (the reason of its turn/end event)' },
)
export const LastTurn = Type.Object(
  { turn: Type.Integer({ minimum: 1 }), reason: TurnEndReason, endedAt: Type.String({ format: 'date-time' }) },
  { description: 'the latest turn/end of the session: its turn number, reason and time' },
)

export const SessionObject = Type.Object({
  id: Type.String(),
  title: Type.Union([Type.String(), Type.Null()]),
  model: Type.String(),
  status: Type.Union([Type.Literal('idle'), Type.Literal('running')]),
  headSeq: Type.Integer(),
  createdAt: Type.String({ format: 'date-time' }),
  updatedAt: Type.String({ format: 'date-time' }),
  metadata: Metadata,
  usage: Usage,
  lastTurn: Type.Union([LastTurn, Type.Null()], { description: 'null before the first turn ends' }),
  agent: Type.Union([AgentRef, Type.Null()], { description: 'the agent version the session was made from (§16), null for a session made inline' }),
  owner: Type.Union([Type.String(), Type.Null()], { description: 'the subject that created it (a token\'s subject or an end user), null when a tenant key or a token without subject did' }),
  settings: SessionSettings,
})

export const SessionList = Type.Object({ sessions: Type.Array(SessionObject), nextCursor: Type.Union([Type.String(), Type.Null()]) })
export const LIST_LIMIT = { max: 200, dflt: 50 }
export const ListQuery = Type.Object({ limit: Type.Optional(QueryLimit(LIST_LIMIT.max, LIST_LIMIT.dflt)), cursor: Type.Optional(Type.String({ maxLength: 200 })) }, { additionalProperties: false })

export const DeliveryBody = Type.Object({ content: Content, id: Type.Optional(Id) }, { additionalProperties: false })
export const Accepted = Type.Object({ messageId: Type.String(), seq: Type.Integer() })

export const UserMessage = Type.Object({ id: Type.String(), role: Type.Literal('user'), content: Type.Array(Type.Object({}, { additionalProperties: true })), source: Type.Object({ kind: Type.String() }, { additionalProperties: true }) })
export const InboxObject = Type.Object({ nextTurn: Type.Array(UserMessage), nextStep: Type.Array(UserMessage) })

export const CancelBody = Type.Object({ keepInbox: Type.Optional(Type.Boolean()) }, { additionalProperties: false })
export const CancelAnswer = Type.Object({ cancelled: Type.Boolean() })
export const ForkBody = Type.Object({ atSeq: Type.Optional(Type.Integer({ minimum: 0 })) }, { additionalProperties: false })
export const CompactBody = Type.Object({}, { additionalProperties: false })
export const CompactAnswer = Type.Object({ compacted: Type.Boolean() })

export const SessionEvent = Type.Object(
  {
    seq: Type.Integer(),
    time: Type.Integer({ description: 'epoch milliseconds' }),
    type: Type.String(),
    data: Type.Unknown(),
    surfaceOp: Type.Optional(Type.Unknown()),
    sourceEventSeqs: Type.Optional(Type.Array(Type.Integer())),
  },
  { additionalProperties: false },
)
export const EVENTS_LIMIT = { max: 5000, dflt: 500 }
export const EventsQuery = Type.Object({ after: Type.Optional(After), limit: Type.Optional(QueryLimit(EVENTS_LIMIT.max, EVENTS_LIMIT.dflt)) }, { additionalProperties: false })
export const EventsPage = Type.Object({ events: Type.Array(SessionEvent), headSeq: Type.Integer() })
export const MessagesAnswer = Type.Object({ messages: Type.Array(Type.Object({}, { additionalProperties: true })) })
export const StreamQuery = Type.Object({ after: Type.Optional(After), access_token: Type.Optional(Type.String()) }, { additionalProperties: false })

export const PendingToolCall = Type.Object({ callId: Type.String(), name: Type.String(), arguments: Type.Unknown(), rawArguments: Type.String(), kind: Type.Union([Type.Literal('client'), Type.Literal('approval')]) })
export const PendingAnswer = Type.Object({ toolCalls: Type.Array(PendingToolCall) })
export const ToolResultBody = Type.Object({ callId: Type.String({ minLength: 1, maxLength: 200 }), content: Content, isError: Type.Optional(Type.Boolean()) }, { additionalProperties: false })
export const ApprovalBody = Type.Object({ decision: Type.Union([Type.Literal('allow'), Type.Literal('deny')]), reason: Type.Optional(Type.String({ maxLength: 2000 })) }, { additionalProperties: false })

export const ErrorCode = Type.Union(ERROR_CODES.map((c) => Type.Literal(c)), { description: 'API.md §10' })
export const ErrorDetail = Type.Object({ path: Type.String(), message: Type.String() })
export const ErrorBody = Type.Object({
  error: Type.Object({
    code: ErrorCode,
    message: Type.String(),
    details: Type.Optional(Type.Array(ErrorDetail)),
  }),
})

export const SessionParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 200 }) })

export const Ready = Type.Object({ ok: Type.Boolean() })

/** The named schemas of openapi.json (components.schemas), by the name generated clients give them. */
export const COMPONENTS: Record<string, TSchema> = {
  SessionObject,
  SessionList,
  Usage,
  LastTurn,
  TurnEndReason,
  AgentCancelCause,
  LlmFailure,
  Metadata,
  ToolSpec,
  Headers,
  McpServer,
  ReasoningEffort,
  CreateSessionBody,
  PatchSessionBody,
  SessionSettings,
  AgentRef,
  AgentObject,
  AgentList,
  CreateAgentBody,
  PatchAgentBody,
  Content,
  InputBlock,
  TextBlock,
  ImageBlock,
  DeliveryBody,
  Accepted,
  UserMessage,
  Inbox: InboxObject,
  CancelBody,
  CancelAnswer,
  ForkBody,
  CompactBody,
  CompactAnswer,
  SessionEvent,
  EventsPage,
  MessagesAnswer,
  PendingToolCall,
  PendingAnswer,
  ToolResultBody,
  ApprovalBody,
  Tenant,
  TenantBody,
  TenantAnswer,
  KeyAnswer,
  Limits,
  LimitsPatch,
  PatchTenantBody,
  TenantAuthBody,
  TenantAuth,
  TenantCors,
  TenantWithLimits,
  TokenBody,
  TokenAnswer,
  Jwks,
  TenantLimitsAnswer,
  UsageRow,
  UsageAnswer,
  PutSecretBody,
  SecretInfo,
  SecretList,
  ErrorCode,
  ErrorDetail,
  ErrorBody,
}

export type { TSchema }

export const EmptyBody = Type.Object({}, { additionalProperties: false })
export const OpenBody = Type.Object({}, { additionalProperties: true })
