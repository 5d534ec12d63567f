// Idempotency keys the client makes itself, in a module of their own so that run.ts and client.ts
// both use them without importing each other.

/** A fresh idempotency key: 128 random bits (getRandomValues works in insecure browser contexts too). */
export function newIdempotencyKey(): string {
  const b = new Uint8Array(16)
  globalThis.crypto.getRandomValues(b)
  return `sdk-${Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('')}`
}
