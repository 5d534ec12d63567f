// The message of a failure as a turn's end reason carries it (SPEC §6.2 `errorChain`).

/** The chain of messages of an error and its causes, outermost first. */
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
