// Standard Webhooks signing (API.md §14) with node:crypto: the secret is `whsec_` + base64 of the
// HMAC key; each attempt is signed over "id.timestamp.body".

import crypto from 'node:crypto'

const PREFIX = 'whsec_'

/** A new signing secret: 24 random bytes, shown once at creation. */
export function newSecret(): string {
  return PREFIX + crypto.randomBytes(24).toString('base64')
}

/** The `webhook-signature` header value: `v1,<base64 HMAC-SHA256(key, "id.timestamp.body")>`. */
export function sign(secret: string, id: string, timestamp: number, body: string): string {
  const key = Buffer.from(secret.startsWith(PREFIX) ? secret.slice(PREFIX.length) : secret, 'base64')
  return 'v1,' + crypto.createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest('base64')
}
