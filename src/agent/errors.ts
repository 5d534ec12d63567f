// Errors of the loop.

import type { AgentCancelCause, LlmFailure } from '../session/index.js'

/** Thrown by checkAborted(); the turn ends {aborted, reason: cause}. */
export class AbortedError extends Error {
  constructor(readonly reason: AgentCancelCause) {
    super(`aborted (${reason.kind})`)
    this.name = 'AbortError'
  }
}

/** A model failure that ends the turn {error, error: failure} (SPEC §10.1). */
export class TurnLlmError extends Error {
  constructor(readonly failure: LlmFailure) {
    super(failure.message)
    this.name = 'LlmError'
  }
}
