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

/** The chain of messages of an error and its causes (SPEC §6.2 errorChain). */
export function errorChain(e: unknown): string {
  const parts: string[] = []
  let cur: unknown = e
  for (let i = 0; cur && i < 5; i++) {
    const err = cur as { message?: string; cause?: unknown; errors?: unknown[] }
    parts.push(err.message ?? String(cur))
    cur = err.cause
  }
  return parts.join(': ')
}
