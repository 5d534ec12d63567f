// The seam between the loop and model providers (SPEC §8.3, §8.9, §8.11, §10.5, §18.2).

import type { Json, LlmCallConfig, LlmFailure, Message, StreamChunk, ToolSchema } from '../session/index.js'

/** SPEC §10.5 / §18.2: a provider registration's retry policy. */
export interface RetryPolicy {
  mode: 'normal' | 'always'
  maxRetries: number
  initialDelayMs: number
  maxDelayMs: number
  jitterRatio: number
  /** retryable failure codes (normal mode) */
  codes: string[]
}

export const DEFAULT_RETRY_POLICY: RetryPolicy = Object.freeze({
  mode: 'normal',
  maxRetries: 5,
  initialDelayMs: 500,
  maxDelayMs: 10000,
  jitterRatio: 0.1,
  codes: Object.freeze(['EMPTY_RESPONSE', 'RATE_LIMIT', 'SERVER', 'TIMEOUT', 'TRANSPORT']) as unknown as string[],
}) as RetryPolicy

/**
 * A loop request (SPEC §8.9): the header's config spread at top level, the derived messages, the
 * header's tools, the live session id and the turn's signal. Frozen; it has no `system` field.
 */
export interface LlmRequest {
  provider: string
  model: string
  reasoningEffort?: string
  maxTokens?: number
  temperature?: number
  stop?: string[]
  messages: readonly Message[]
  tools?: readonly ToolSchema[]
  sessionId: string
  signal: AbortSignal
  /** 'compaction' for summary calls (SPEC §12.5); absent for loop requests */
  purpose?: string
  /** further scalar config fields of the header, spread at top level */
  [k: string]: unknown
}

/** What a model route is, for session validation and the compaction meter. */
export interface ModelInfo {
  provider: string
  model: string
  api: string
  contextWindow?: number
  maxTokens?: number
  reasoning: boolean
}

/** The result of prepareCall (SPEC §8.3). `stream` is one-shot and bound to this registration. */
export interface PreparedCall {
  readonly config: Readonly<LlmCallConfig>
  readonly adapterDefaults?: { reasoningEffort?: true; maxTokens?: true }
  readonly retryPolicy?: RetryPolicy
  readonly context: { contextWindow?: number }
  /** pi-ai routes never set it (SPEC §8.11) */
  readonly systemPromptUpdate?: 'in-history'
  /**
   * Dispatches the request. Provider failures do not throw: they end the iteration with a
   * `finish {kind:'error'|'aborted', failure}` chunk. Throws only on reuse or a request whose config
   * differs from `config`.
   */
  stream(request: LlmRequest): AsyncIterable<StreamChunk>
}

export class LlmError extends Error {
  constructor(readonly failure: LlmFailure) {
    super(failure.message)
    this.name = 'LlmError'
  }
}

/** A model setting that cannot work (a bad models file, a default model that does not resolve), naming its variable. */
export class ModelConfigError extends Error {
  constructor(readonly variable: 'AGENTD_MODELS' | 'AGENTD_DEFAULT_MODEL', message: string) {
    super(message)
    this.name = 'ModelConfigError'
  }
}

export interface LlmService {
  /** `provider/modelId` → the route, from the models file, then pi-ai's catalogue, then `faux/*`. */
  resolveModel(ref: string): ModelInfo | undefined
  /** The model of a session created without one (API.md §1 AGENTD_DEFAULT_MODEL). */
  readonly defaultModel: string
  /**
   * Resolves the registration and model metadata for a proposed config (SPEC §8.3). Throws
   * LlmError with code NO_ADAPTER when no registration serves the route; other throws are turn errors.
   */
  prepareCall(config: LlmCallConfig, signal: AbortSignal): Promise<PreparedCall>
  /** The context window of a route, or undefined (SPEC §12.2 step 3). */
  contextWindow(provider: string, model: string): number | undefined
  /** A session's Agent went away: forget whatever the model clients keep for it in this process. */
  endSession(sessionId: string): void
}

export type { Json }
