// Waiting in tests: poll a condition until it holds, and a plain delay.

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/**
 * Polls `fn` every `pollMs` until it returns a truthy value, which it resolves with; throws
 * `timed out waiting for <what>` once `timeoutMs` has passed.
 */
export async function until<T>(what: string, fn: () => T | undefined | false | Promise<T | undefined | false>, timeoutMs = 10000, pollMs = 10): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const v = await fn()
    if (v) return v
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(pollMs)
  }
}
