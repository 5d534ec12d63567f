// Verifying a webhook delivery on the receiving side (API.md §14, Standard Webhooks): the signature
// is v1,<base64 HMAC-SHA256(key, "id.timestamp.body")> with the key the base64 after `whsec_`. Uses
// the platform's WebCrypto, so it runs in Node 20 and in browsers alike.

import type { WebhookPayload } from './types.js'

export class WebhookVerificationError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'WebhookVerificationError'
  }
}

export interface VerifyOptions {
  /** how far webhook-timestamp may be from now, in seconds (default 300) */
  toleranceSeconds?: number
  /** now, in ms (tests) */
  now?: number
}

type HeaderBag = Record<string, string | string[] | undefined> | { get(name: string): string | null }

function header(h: HeaderBag, name: string): string | undefined {
  if (typeof (h as { get?: unknown }).get === 'function') return (h as { get(n: string): string | null }).get(name) ?? undefined
  const v = (h as Record<string, string | string[] | undefined>)[name]
  return Array.isArray(v) ? v[0] : v
}

function base64ToBytes(s: string): Uint8Array<ArrayBuffer> {
  const bin = atob(s)
  const out = new Uint8Array(new ArrayBuffer(bin.length))
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i)
  return out
}

function bytesToBase64(b: Uint8Array): string {
  let bin = ''
  for (const x of b) bin += String.fromCharCode(x)
  return btoa(bin)
}

/** Compares without an early exit, so the time taken says nothing about where they differ. */
function sameText(a: string, b: string): boolean {
  if (a.length !== b.length) return false
  let diff = 0
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i)
  return diff === 0
}

/**
 * Checks a delivery's `webhook-signature` against the webhook's secret and its raw body (exactly the
 * bytes received, before any JSON parsing) and that `webhook-timestamp` is recent; returns the parsed
 * payload, or throws WebhookVerificationError. Store `webhook-id` to drop repeats: delivery is at least once.
 */
export async function verifyWebhook(secret: string, headers: HeaderBag, rawBody: string, o: VerifyOptions = {}): Promise<WebhookPayload> {
  const id = header(headers, 'webhook-id')
  const ts = header(headers, 'webhook-timestamp')
  const sigs = header(headers, 'webhook-signature')
  if (!id || !ts || !sigs) throw new WebhookVerificationError('missing webhook-id, webhook-timestamp or webhook-signature')
  if (!/^\d+$/.test(ts)) throw new WebhookVerificationError('webhook-timestamp is not Unix seconds')
  const now = Math.floor((o.now ?? Date.now()) / 1000)
  if (Math.abs(now - Number(ts)) > (o.toleranceSeconds ?? 300)) throw new WebhookVerificationError('webhook-timestamp is too far from now')
  const keyBytes = base64ToBytes(secret.startsWith('whsec_') ? secret.slice(6) : secret)
  const key = await crypto.subtle.importKey('raw', keyBytes, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign'])
  const mac = new Uint8Array(await crypto.subtle.sign('HMAC', key, new TextEncoder().encode(`${id}.${ts}.${rawBody}`)))
  const want = bytesToBase64(mac)
  // several space-separated signatures may be sent (while a secret rotates); one v1 match suffices
  const ok = sigs.split(' ').some((s) => s.startsWith('v1,') && sameText(s.slice(3), want))
  if (!ok) throw new WebhookVerificationError('no matching signature')
  return JSON.parse(rawBody) as WebhookPayload
}
