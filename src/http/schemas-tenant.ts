// Route schemas of what a tenant administers (API.md §13–§15, §18; the rules of schemas.ts): tenants
// and their limits, identity providers and origins, usage, secrets, tokens and webhooks.

import { Type, type TSchema } from 'typebox'
import { WEBHOOK_EVENT_TYPES } from '../store/index.js'
import { AgentId, Id, literals, QueryLimit } from './schemas-fields.js'

export const TenantBody = Type.Object({ name: Type.String({ minLength: 1, maxLength: 200 }) }, { additionalProperties: false })
export const Tenant = Type.Object({ id: Type.String(), name: Type.String() })
export const TenantAnswer = Type.Object({ tenant: Tenant, apiKey: Type.String() })
export const KeyAnswer = Type.Object({ keyId: Type.String(), apiKey: Type.String() })

// API.md §15: limits are positive; the counts whole numbers
const Count = (max: number, description: string) => Type.Integer({ minimum: 1, maximum: max, description })
const LIMITS = {
  maxRunningSessions: Count(1_000_000, "at most this many of the tenant's sessions run a turn at once, across all processes"),
  tokensPerDay: Count(Number.MAX_SAFE_INTEGER, 'input + output + cache tokens per UTC day'),
  costUsdPerMonth: Type.Number({ exclusiveMinimum: 0, maximum: 1e12, description: 'USD per UTC month' }),
  requestsPerMin: Count(1_000_000_000, "requests per minute for all of the tenant's keys (replaces AGENTD_RATE_LIMIT_PER_MIN)"),
}
export const Limits = Type.Object(
  { maxRunningSessions: Type.Optional(LIMITS.maxRunningSessions), tokensPerDay: Type.Optional(LIMITS.tokensPerDay), costUsdPerMonth: Type.Optional(LIMITS.costUsdPerMonth), requestsPerMin: Type.Optional(LIMITS.requestsPerMin) },
  { additionalProperties: false, description: 'an absent limit is no limit' },
)
const orNull = (t: TSchema) => Type.Optional(Type.Union([t, Type.Null()]))
export const LimitsPatch = Type.Object(
  { maxRunningSessions: orNull(LIMITS.maxRunningSessions), tokensPerDay: orNull(LIMITS.tokensPerDay), costUsdPerMonth: orNull(LIMITS.costUsdPerMonth), requestsPerMin: orNull(LIMITS.requestsPerMin) },
  { additionalProperties: false, description: 'limits to set; null removes one, an absent one stays as it is' },
)
// API.md §18: a tenant's identity provider and origins
const Url = Type.String({ minLength: 1, maxLength: 2048 })
export const TenantAuthBody = Type.Object(
  {
    issuer: Type.String({ minLength: 1, maxLength: 2048, description: "the tokens' iss" }),
    audience: Type.String({ minLength: 1, maxLength: 2048, description: 'an aud the tokens carry' }),
    jwksUrl: { ...Url, description: "the provider's JSON Web Key Set; fetched through the address guard of http tools (AGENTD_TOOL_HOSTS)" },
    subjectClaim: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'the claim naming the end user (default sub)' })),
  },
  { additionalProperties: false, description: "the tenant's own identity provider, whose end-user tokens are accepted" },
)
export const TenantAuth = Type.Object({ issuer: Type.String(), audience: Type.String(), jwksUrl: Type.String(), subjectClaim: Type.String() })
export const TenantCors = Type.Object(
  { origins: Type.Array(Type.String({ minLength: 1, maxLength: 2048, description: 'an origin, e.g. https://app.example.com' }), { maxItems: 100 }) },
  { additionalProperties: false, description: 'origins whose browsers may call with this tenant\'s credentials; only those AGENTD_CORS_ORIGINS lists too get an answer to their preflights' },
)
export const PatchTenantBody = Type.Object(
  { limits: Type.Optional(LimitsPatch), auth: Type.Optional(Type.Union([TenantAuthBody, Type.Null()])), cors: Type.Optional(Type.Union([TenantCors, Type.Null()])) },
  { additionalProperties: false, minProperties: 1, description: 'null removes the identity provider or the origins' },
)
export const TenantWithLimits = Type.Object({
  id: Type.String(),
  name: Type.String(),
  limits: Limits,
  auth: Type.Union([TenantAuth, Type.Null()], { description: 'null: only agentd\'s own tokens and the tenant\'s keys' }),
  cors: Type.Union([TenantCors, Type.Null()], { description: 'null: the origins of AGENTD_CORS_ORIGINS' }),
})
export const TenantLimitsAnswer = Type.Object({ tenant: TenantWithLimits })
export const TenantParams = Type.Object({ tenantId: Type.String({ minLength: 1, maxLength: 200 }) })

export const UsageQuery = Type.Object(
  {
    from: Type.Optional(Type.String({ maxLength: 10, description: 'first UTC day, YYYY-MM-DD (default: the first day of the month of to)' })),
    to: Type.Optional(Type.String({ maxLength: 10, description: 'last UTC day, YYYY-MM-DD (default: the last day of the current month)' })),
    groupBy: Type.Optional(Type.Union([Type.Literal('day'), Type.Literal('model'), Type.Literal('session')])),
  },
  { additionalProperties: false },
)
export const UsageRow = Type.Object({
  day: Type.Optional(Type.String({ description: 'YYYY-MM-DD (groupBy=day)' })),
  model: Type.Optional(Type.String({ description: 'provider/modelId (groupBy=model)' })),
  sessionId: Type.Optional(Type.String({ description: 'groupBy=session' })),
  inputTokens: Type.Number(),
  outputTokens: Type.Number(),
  cacheReadTokens: Type.Number(),
  cacheWriteTokens: Type.Number(),
  costUsd: Type.Number(),
  attempts: Type.Integer({ description: 'settled model attempts' }),
})
export const UsageAnswer = Type.Object({ usage: Type.Array(UsageRow), limits: Limits })

// API.md §13: tenant secrets
export const SecretName = Type.String({ pattern: '^[A-Z0-9_]{1,64}$', description: "1 to 64 upper-case letters, digits and '_'" })
export const SecretParams = Type.Object({ name: SecretName })
export const PutSecretBody = Type.Object({ value: Type.String({ maxLength: 16384, description: 'at most 16 KiB; stored encrypted, never shown again' }) }, { additionalProperties: false })
export const SecretInfo = Type.Object({ name: Type.String(), createdAt: Type.String({ format: 'date-time' }), updatedAt: Type.String({ format: 'date-time' }) })
export const SecretList = Type.Object({ secrets: Type.Array(SecretInfo) })

// API.md §18: tokens
const SessionIdRef = Id
export const TokenBody = Type.Object(
  {
    subject: Type.Optional(Type.String({ minLength: 1, maxLength: 256, description: 'the end user: owns the sessions it creates and reaches only those' })),
    sessions: Type.Optional(Type.Array(SessionIdRef, { minItems: 1, maxItems: 100, description: 'the only sessions the token reaches (and may create)' })),
    agents: Type.Optional(Type.Array(AgentId, { minItems: 1, maxItems: 100, description: 'the only agents whose sessions the token reaches (and may create)' })),
    scopes: Type.Array(Type.Union([Type.Literal('read'), Type.Literal('write')]), { minItems: 1, maxItems: 2, uniqueItems: true, description: 'read: GET routes and streams; write: input, tool results, approvals, cancel, creating and changing sessions' }),
    ttlSeconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 86400, description: 'default 900' })),
  },
  { additionalProperties: false },
)
export const TokenAnswer = Type.Object({ token: Type.String({ description: 'a JWT signed with EdDSA; send it as Authorization: Bearer, or ?access_token= on streams' }), expiresAt: Type.String({ format: 'date-time', description: 'refused from this time on' }) })
export const Jwks = Type.Object({ keys: Type.Array(Type.Object({}, { additionalProperties: true, description: 'a public JWK: kty OKP, crv Ed25519, x, kid, alg EdDSA, use sig' })) })

// API.md §14 webhooks
const WebhookEventType = literals([...WEBHOOK_EVENT_TYPES])
export const CreateWebhookBody = Type.Object(
  {
    url: Type.String({ minLength: 1, maxLength: 2000, description: 'http or https; under the address guard of http tools (AGENTD_TOOL_HOSTS)' }),
    events: Type.Array(WebhookEventType, { minItems: 1, maxItems: 20 }),
    description: Type.Optional(Type.String({ maxLength: 1000 })),
  },
  { additionalProperties: false },
)
const webhookFields = {
  id: Type.String(),
  url: Type.String(),
  events: Type.Array(Type.String()),
  description: Type.Union([Type.String(), Type.Null()]),
}
export const Webhook = Type.Object({ ...webhookFields, createdAt: Type.String({ format: 'date-time' }) })
export const CreatedWebhook = Type.Object({ ...webhookFields, secret: Type.String({ description: 'whsec_ + base64 of the signing key; shown only in this answer' }), createdAt: Type.String({ format: 'date-time' }) })
export const WebhookList = Type.Object({ webhooks: Type.Array(Webhook) })
export const WebhookParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 200 }) })
export const DELIVERIES_LIMIT = { max: 100, dflt: 20 }
export const DeliveriesQuery = Type.Object({ limit: Type.Optional(QueryLimit(DELIVERIES_LIMIT.max, DELIVERIES_LIMIT.dflt)) }, { additionalProperties: false })
export const WebhookDelivery = Type.Object({
  id: Type.String({ description: 'also the webhook-id header, the same on every retry' }),
  type: Type.String(),
  sessionId: Type.Union([Type.String(), Type.Null()]),
  seq: Type.Union([Type.Integer(), Type.Null()]),
  status: Type.Union([Type.Literal('pending'), Type.Literal('delivered'), Type.Literal('failed')]),
  attempts: Type.Integer(),
  lastStatus: Type.Optional(Type.Integer()),
  lastError: Type.Optional(Type.String()),
  nextAttemptAt: Type.Optional(Type.String({ format: 'date-time' })),
  deliveredAt: Type.Optional(Type.String({ format: 'date-time' })),
})
export const DeliveryList = Type.Object({ deliveries: Type.Array(WebhookDelivery) })
export const PingAnswer = Type.Object({ deliveryId: Type.String() })

/** A body a client protocol checks itself, in its own error shape (API.md §17): any JSON object. */
