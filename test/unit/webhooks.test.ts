// API.md §14's retry schedule and signature, without a database: the schedule of the defaults
// (5 s, 30 s, 2 min, 10 min, 30 min, 1 h, then every 2 h until 24 h after the first attempt), and our
// signature equal to the one the `standardwebhooks` package computes for the same secret and message.

import { Webhook } from 'standardwebhooks'
import { describe, expect, it } from 'vitest'
import { DEFAULT_DELIVERER, deliveryBody, newSecret, nextAttemptAt, sign } from '../../src/webhooks/index.js'

const S = 1000
const M = 60 * S
const H = 60 * M

describe('webhook retry schedule', () => {
  it('attempts after 5 s, 30 s, 2 min, 10 min, 30 min, 1 h, then every 2 h; failed past 24 h after the first', () => {
    const first = 1_000_000
    const starts = [first]
    let now = first
    for (let attempt = 1; ; attempt++) {
      const next = nextAttemptAt(DEFAULT_DELIVERER, attempt, first, now)
      if (next === null) break
      starts.push(next)
      now = next
    }
    const gaps = starts.slice(1).map((t, i) => t - starts[i])
    expect(gaps.slice(0, 6)).toEqual([5 * S, 30 * S, 2 * M, 10 * M, 30 * M, H])
    expect(gaps.slice(6).every((g) => g === 2 * H)).toBe(true)
    expect(starts.at(-1)! - first).toBeLessThanOrEqual(24 * H)
    expect(starts.at(-1)! + 2 * H - first).toBeGreaterThan(24 * H)
    expect(starts.length).toBe(7 + 11)
  })

  it('counts from the end of a slow attempt', () => {
    expect(nextAttemptAt(DEFAULT_DELIVERER, 1, 0, 10 * S)).toBe(15 * S)
  })
})

describe('webhook signature', () => {
  it('is the Standard Webhooks v1 signature of "id.timestamp.body"', () => {
    const secret = newSecret()
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]+=*$/)
    expect(Buffer.from(secret.slice(6), 'base64')).toHaveLength(24)
    const body = deliveryBody({ type: 'turn.completed', sessionId: 's1', turn: 2, seq: 17, extra: { reason: { kind: 'completed' } }, eventTime: Date.UTC(2026, 0, 2, 3, 4, 5) })
    expect(JSON.parse(body)).toEqual({ type: 'turn.completed', timestamp: '2026-01-02T03:04:05.000Z', data: { sessionId: 's1', turn: 2, seq: 17, reason: { kind: 'completed' } } })
    const ts = Math.floor(Date.now() / 1000)
    const theirs = new Webhook(secret).sign('msg_1', new Date(ts * 1000), body)
    expect(sign(secret, 'msg_1', ts, body)).toBe(theirs)
    expect(sign(newSecret(), 'msg_1', ts, body)).not.toBe(theirs)
  })
})
