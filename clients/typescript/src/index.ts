// @agentd/client: the library's one door. Runs unchanged in Node 20 and in browsers (ESM, the
// platform's fetch, no other dependency); the terminal client lives apart in cli/.

export { AgentdClient, AdminApi, AgentsApi, SecretsApi, SessionsApi, newIdempotencyKey, type AgentdClientOptions, type CallOpts, type RequestOptions, type SendOptions, type SendRoute } from './client.js'
export { AgentdError, type AgentdErrorInit, type ErrorDetail } from './errors.js'
export type { MintedToken, Repeatable, RetryEvent, TokenProvider, TransportOptions } from './http.js'
export { backoffDelay, parseRetryAfter, type RetryOptions } from './retry.js'
export { SseParser, type SseEvent } from './sse.js'
export { chunkCount, type SessionStream, type StreamOptions } from './stream.js'
export { emptyTranscript, expandRecords, reduceTranscript, withPending, type PartialAnswer, type PartialToolCall, type ToolCallView, type TranscriptEntry, type TranscriptView, type Watch, type WatchOptions } from './watch.js'
export { messageOf, type ApprovalAnswer, type ApprovalHandler, type ClientToolAnswer, type ClientToolHandler, type RunOptions, type RunResult } from './run.js'
export { verifyWebhook, WebhookVerificationError, type VerifyOptions } from './webhooks.js'
export * from './types.js'
