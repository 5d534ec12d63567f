// The deliverer (API.md §14): in every worker process, claims due deliveries (SKIP LOCKED, one
// attempt of a delivery at a time across processes), POSTs each signed, records the attempt and
// schedules the next by the retry schedule. At least once: a claim that never reports (a crash)
// comes due again after its lease, under the next attempt number.

import type { Logger } from 'pino'
import type { Metrics } from '../metrics.js'
import { webhooks as store, type ClaimedDelivery, type Db } from '../store/index.js'
import type { HostPolicy, Resolver } from '../tools/index.js'
import { postWebhook, type PostResult } from './post.js'
import { SpanKind, TRACE_ATTRIBUTES as A, traceHeaders, traceSpan } from '../tracing/index.js'
import { sign } from './sign.js'

const SECOND = 1000
const MINUTE = 60 * SECOND
const HOUR = 60 * MINUTE
/** wake-ups closer together than this share one look at the outbox */
const WAKE_GAP_MS = 50

export interface DelivererOptions {
  /** delays after the 1st, 2nd, … failed attempt (API.md §14: 5 s, 30 s, 2 min, 10 min, 30 min, 1 h) */
  schedule: number[]
  /** the delay once the schedule is used up (2 h) */
  repeatMs: number
  /** no attempt starts later than this after the first one; the delivery is `failed` instead (24 h) */
  giveUpMs: number
  /** a 2xx must come within this (10 s) */
  timeoutMs: number
  /** how long a claim holds a delivery; past it another process may attempt again (timeout + 20 s) */
  leaseMs: number
  /** how often the outbox is looked at without a wake-up */
  pollMs: number
  /** attempts in flight in this process at most */
  maxInFlight: number
  /** delivered rows older than this are pruned (7 days) */
  keepDeliveredMs: number
}

export const DEFAULT_DELIVERER: DelivererOptions = {
  schedule: [5 * SECOND, 30 * SECOND, 2 * MINUTE, 10 * MINUTE, 30 * MINUTE, HOUR],
  repeatMs: 2 * HOUR,
  giveUpMs: 24 * HOUR,
  timeoutMs: 10 * SECOND,
  leaseMs: 30 * SECOND,
  pollMs: 1000,
  maxInFlight: 16,
  keepDeliveredMs: 7 * 24 * HOUR,
}

/** The body of a delivery, composed the same way on every attempt. */
export function deliveryBody(d: Pick<ClaimedDelivery, 'type' | 'sessionId' | 'turn' | 'seq' | 'extra' | 'eventTime'>): string {
  const data = d.type === 'ping' ? {} : { sessionId: d.sessionId, turn: d.turn, seq: d.seq, ...d.extra }
  return JSON.stringify({ type: d.type, timestamp: new Date(d.eventTime).toISOString(), data })
}

/** When the attempt after failed attempt `attempt` is due, or null: the delivery has failed. */
export function nextAttemptAt(o: Pick<DelivererOptions, 'schedule' | 'repeatMs' | 'giveUpMs'>, attempt: number, firstAttemptAt: number, now: number): number | null {
  const next = now + (o.schedule[attempt - 1] ?? o.repeatMs)
  return next > firstAttemptAt + o.giveUpMs ? null : next
}

export interface DelivererDeps {
  db: Db
  log: Logger
  metrics: Metrics
  policy: HostPolicy
  resolve?: Resolver
  options?: Partial<DelivererOptions>
}

export class Deliverer {
  readonly options: DelivererOptions
  private readonly inFlight = new Set<Promise<void>>()
  private readonly abort = new AbortController()
  private timer: NodeJS.Timeout | undefined
  private ticking = false
  private again = false
  private started = false
  private failing = false
  private lastTick = 0
  private nextAt = Infinity
  private lastGauge = 0
  private gauge = { pending: 0, oldestMs: 0 }
  private lastPrune = 0
  private readonly deliveries
  private readonly attempts

  constructor(private readonly d: DelivererDeps) {
    this.options = { ...DEFAULT_DELIVERER, ...(d.options ?? {}) }
    const m = d.metrics
    this.deliveries = m.counter('agentd_webhook_deliveries_total', 'Webhook deliveries finished by this process, by type and outcome (delivered, failed)', ['type', 'outcome'])
    this.attempts = m.counter('agentd_webhook_attempts_total', 'Webhook attempts by this process, by outcome (ok, status, timeout, refused, error)', ['outcome'])
    m.gauge('agentd_webhook_queue_depth', 'Webhook deliveries pending (all processes), as last read by this process', () => this.gauge.pending)
    m.gauge('agentd_webhook_oldest_pending_seconds', 'Age of the oldest pending webhook delivery (all processes), as last read by this process', () => this.gauge.oldestMs / 1000)
  }

  start(): void {
    if (this.started) return
    this.started = true
    this.schedule(0)
  }

  /**
   * Something may have become due (a commit in this process, a ping, a finished attempt): look soon.
   * Wake-ups are coalesced, one look per WAKE_GAP_MS at most, so busy commits do not become a query each.
   */
  wake(): void {
    if (!this.started || this.abort.signal.aborted) return
    if (this.ticking) {
      this.again = true
      return
    }
    const now = Date.now()
    const at = Math.max(now, this.lastTick + WAKE_GAP_MS)
    if (this.nextAt <= at) return
    this.schedule(at - now)
  }

  /** Stops claiming and ends attempts in flight (they come due again after their lease). */
  async stop(): Promise<void> {
    this.abort.abort()
    clearTimeout(this.timer)
    await Promise.allSettled([...this.inFlight])
  }

  private schedule(ms: number): void {
    clearTimeout(this.timer)
    this.nextAt = Date.now() + ms
    this.timer = setTimeout(() => void this.tick(), ms)
    this.timer.unref?.()
  }

  private async tick(): Promise<void> {
    if (this.abort.signal.aborted) return
    this.ticking = true
    this.again = false
    this.lastTick = Date.now()
    this.nextAt = Infinity
    let full = false
    try {
      const room = this.options.maxInFlight - this.inFlight.size
      if (room > 0) {
        const claimed = await store.claimDeliveries(this.d.db, Date.now(), room, this.options.leaseMs)
        for (const c of claimed) this.launch(c)
        // more may be due at once: look again as soon as attempts finish (they wake this)
        full = claimed.length === room
      }
      await this.housekeeping()
      this.failing = false
    } catch (err) {
      // said once per outage, not at every poll
      if (!this.failing) this.d.log.warn({ err }, 'webhook deliverer: claiming failed; retrying at every poll')
      this.failing = true
    } finally {
      this.ticking = false
      if (!this.abort.signal.aborted) this.schedule(this.again || full ? Math.min(WAKE_GAP_MS, this.options.pollMs) : this.options.pollMs)
    }
  }

  private launch(c: ClaimedDelivery): void {
    const p = this.attempt(c)
      .catch((err) => this.d.log.warn({ err, deliveryId: c.id }, 'webhook deliverer: recording an attempt failed'))
      .finally(() => {
        this.inFlight.delete(p)
        this.wake()
      })
    this.inFlight.add(p)
  }

  private async attempt(c: ClaimedDelivery): Promise<void> {
    const body = deliveryBody(c)
    const startedAt = Date.now()
    const ts = Math.floor(startedAt / 1000)
    // API.md §19: each attempt is a span of its own, and the POST carries its traceparent; not its URL,
    // which may hold credentials
    const post = () =>
      postWebhook({
        url: c.url,
        body,
        headers: { ...traceHeaders(), 'webhook-id': c.id, 'webhook-timestamp': String(ts), 'webhook-signature': sign(c.secret, c.id, ts, body), ...taskHeaders(c) },
        timeoutMs: this.options.timeoutMs,
        policy: this.d.policy,
        resolve: this.d.resolve,
        signal: this.abort.signal,
      })
    const r: PostResult = await traceSpan(`${A.SPAN_WEBHOOK} ${c.type}`, { [A.AGENTD_WEBHOOK_EVENT]: c.type }, post, { root: true, kind: SpanKind.CLIENT, failed: (x) => (x.kind === 'ok' ? undefined : x.kind) })
    this.attempts.inc({ outcome: r.kind })
    const now = Date.now()
    const delivered = r.kind === 'ok'
    // a shutdown's abort is no answer: the delivery is due again at once, for another process or the next start
    const shutdown = this.abort.signal.aborted && !delivered
    const next = delivered ? null : shutdown ? now : nextAttemptAt(this.options, c.attempts, c.firstAttemptAt ?? startedAt, now)
    const recorded = await store.recordAttempt(this.d.db, c.id, c.attempts, { startedAt, durationMs: now - startedAt, status: r.status, error: r.error, delivered, nextAttemptAt: next })
    if (!recorded) return
    if (delivered) this.deliveries.inc({ type: c.type, outcome: 'delivered' })
    else if (next === null) {
      this.deliveries.inc({ type: c.type, outcome: 'failed' })
      this.d.log.warn({ deliveryId: c.id, webhookId: c.webhookId, attempts: c.attempts, error: r.error }, 'webhook delivery failed for good')
    }
  }

  /** The gauges' reading (every 5 s at most) and the hourly pruning of old delivered rows. */
  private async housekeeping(): Promise<void> {
    const now = Date.now()
    if (now - this.lastGauge >= 5000) {
      this.lastGauge = now
      this.gauge = await store.outboxState(this.d.db, now)
    }
    if (now - this.lastPrune >= HOUR) {
      this.lastPrune = now
      await store.pruneDeliveries(this.d.db, now, this.options.keepDeliveredMs)
    }
  }
}

/** An A2A push notification (API.md §17.4) names its task. */
function taskHeaders(c: ClaimedDelivery): Record<string, string> {
  return c.task ? { 'x-a2a-task-id': c.task.id } : {}
}
