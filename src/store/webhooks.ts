// Webhooks (API.md §14): subscriptions, the delivery outbox and its attempts. Deliveries of session
// events are side rows (unit-kinds.ts) written in the statement of the event they report; the deliverer
// (webhooks/) claims due rows with SKIP LOCKED, so any number of processes share the work.

import { statement, type Queryable } from './db.js'

export const WEBHOOK_EVENT_TYPES = ['turn.completed', 'turn.failed', 'turn.cancelled', 'turn.interrupted', 'session.requires_action'] as const
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number]
export type DeliveryType = WebhookEventType | 'ping'
export type DeliveryStatus = 'pending' | 'delivered' | 'failed'

export interface WebhookRow {
  id: string
  tenantId: string
  url: string
  events: WebhookEventType[]
  description: string | null
  secret: string
  createdAt: number
  /** an A2A push-notification config (API.md §17.4): the one task it reports */
  task?: WebhookTask
}

/** Where an A2A task starts (migrations/0010_a2a_push.sql): its webhook delivers the first end after it, once. */
export interface WebhookTask {
  id: string
  sessionKey: string
  fromSeq: number
  minTurn: number
}

/** What a side row of kind `webhook` reports: the event at `seq` of the unit's session. */
export interface WebhookEvent {
  type: WebhookEventType
  turn: number
  seq: number
  time: number
  /** the rest of the body's data: `reason` of a turn end, `pending` of a required action */
  extra: Record<string, unknown>
}

export interface DeliveryRow {
  id: string
  webhookId: string
  type: DeliveryType
  sessionId: string | null
  turn: number | null
  seq: number | null
  extra: Record<string, unknown>
  eventTime: number
  createdAt: number
  status: DeliveryStatus
  attempts: number
  firstAttemptAt: number | null
  nextAttemptAt: number | null
  lastStatus: number | null
  lastError: string | null
  deliveredAt: number | null
}

/** A claimed attempt: the delivery with its webhook's address and secret. */
export interface ClaimedDelivery extends DeliveryRow {
  url: string
  secret: string
  /** an A2A push-notification config's task (API.md §17.4) */
  task?: { id: string }
}

// The columns named, not `*`: a prepared statement whose `*` a migration widened fails once ("cached plan
// must not change result type"); a list of columns keeps its shape whatever is added after it.
const HOOK_COLUMNS = 'id, tenant_id, url, events, description, secret, created_at, task_id, task_session_key, task_from_seq, task_min_turn'
type RawHook = { id: string; tenant_id: string; url: string; events: WebhookEventType[]; description: string | null; secret: string; created_at: number; task_id: string | null; task_session_key: string | null; task_from_seq: number | null; task_min_turn: number | null }
const toHook = (r: RawHook): WebhookRow => ({
  id: r.id,
  tenantId: r.tenant_id,
  url: r.url,
  events: r.events,
  description: r.description,
  secret: r.secret,
  createdAt: Number(r.created_at),
  ...(r.task_id !== null ? { task: { id: r.task_id, sessionKey: r.task_session_key!, fromSeq: r.task_from_seq!, minTurn: r.task_min_turn! } } : {}),
})

/**
 * The condition a webhook `w` puts on a delivery of session `key`'s event at `seq` of `turn`: none for
 * a tenant's webhook; for a task's (an A2A push config), the session, from the task's start, and no
 * delivery before — so only the task's end is reported (migrations/0010_a2a_push.sql).
 */
export const taskFilterSql = (key: string, seq: string, turn: string) =>
  `(w.task_session_key IS NULL OR (w.task_session_key = ${key} AND ${seq} >= w.task_from_seq AND ${turn} >= w.task_min_turn AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.webhook_id = w.id)))`

const DELIVERY_COLUMNS = 'id, webhook_id, type, session_id, turn, seq, extra, event_time, created_at, status, attempts, first_attempt_at, next_attempt_at, last_status, last_error, delivered_at'
type RawDelivery = {
  id: string
  webhook_id: string
  type: DeliveryType
  session_id: string | null
  turn: number | null
  seq: number | null
  extra: string
  event_time: number
  created_at: number
  status: DeliveryStatus
  attempts: number
  first_attempt_at: number | null
  next_attempt_at: number | null
  last_status: number | null
  last_error: string | null
  delivered_at: number | null
}
const num = (v: number | null) => (v === null ? null : Number(v))
const toDelivery = (r: RawDelivery): DeliveryRow => ({
  id: r.id,
  webhookId: r.webhook_id,
  type: r.type,
  sessionId: r.session_id,
  turn: r.turn,
  seq: r.seq,
  extra: JSON.parse(r.extra) as Record<string, unknown>,
  eventTime: Number(r.event_time),
  createdAt: Number(r.created_at),
  status: r.status,
  attempts: r.attempts,
  firstAttemptAt: num(r.first_attempt_at),
  nextAttemptAt: num(r.next_attempt_at),
  lastStatus: r.last_status,
  lastError: r.last_error,
  deliveredAt: num(r.delivered_at),
})

/** A delivery id, made by the database (here and in unit-kinds.ts): also the `webhook-id` header, the same on every retry. */
export const DELIVERY_ID_SQL = `'msg_' || replace(gen_random_uuid()::text, '-', '')`

const INSERT_WEBHOOK = statement('webhook_insert', `INSERT INTO webhooks (${HOOK_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`)
const LIST_TASK_WEBHOOKS = statement('webhook_list_task', `SELECT ${HOOK_COLUMNS} FROM webhooks WHERE tenant_id = $1 AND task_id = $2 ORDER BY created_at, id`)
const LIST_WEBHOOKS = statement('webhook_list', `SELECT ${HOOK_COLUMNS} FROM webhooks WHERE tenant_id = $1 ORDER BY created_at DESC, id DESC`)
const GET_WEBHOOK = statement('webhook_get', `SELECT ${HOOK_COLUMNS} FROM webhooks WHERE tenant_id = $1 AND id = $2`)
const DELETE_TASK_WEBHOOK = statement('webhook_delete_task', 'DELETE FROM webhooks WHERE tenant_id = $1 AND task_id = $2 AND id::text = $3')
const DELETE_WEBHOOK = statement('webhook_delete', 'DELETE FROM webhooks WHERE tenant_id = $1 AND id = $2')
const INSERT_PING = statement(
  'webhook_ping',
  `INSERT INTO webhook_deliveries (id, webhook_id, type, event_time, created_at, next_attempt_at)
     SELECT ${DELIVERY_ID_SQL}, w.id, 'ping', $3, $3, $3 FROM webhooks w WHERE w.tenant_id = $1 AND w.id = $2 RETURNING id`,
)
const LIST_DELIVERIES = statement('webhook_delivery_list', `SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries WHERE webhook_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2`)

export async function insertWebhook(db: Queryable, w: WebhookRow): Promise<void> {
  const t = w.task
  await db.query(INSERT_WEBHOOK, [w.id, w.tenantId, w.url, w.events, w.description, w.secret, w.createdAt, t?.id ?? null, t?.sessionKey ?? null, t?.fromSeq ?? null, t?.minTurn ?? null])
}

/** The webhooks of an A2A task (its push-notification configs), oldest first. */
export async function listTaskWebhooks(db: Queryable, tenantId: string, taskId: string): Promise<WebhookRow[]> {
  const { rows } = await db.query<RawHook>(LIST_TASK_WEBHOOKS, [tenantId, taskId])
  return rows.map(toHook)
}

export async function listWebhooks(db: Queryable, tenantId: string): Promise<WebhookRow[]> {
  const { rows } = await db.query<RawHook>(LIST_WEBHOOKS, [tenantId])
  return rows.map(toHook)
}

export async function getWebhook(db: Queryable, tenantId: string, id: string): Promise<WebhookRow | undefined> {
  const { rows } = await db.query<RawHook>(GET_WEBHOOK, [tenantId, id])
  return rows[0] ? toHook(rows[0]) : undefined
}

/** Deletes a task's webhook (an A2A push-notification config); false when the task has no such one. */
export async function deleteTaskWebhook(db: Queryable, tenantId: string, taskId: string, id: string): Promise<boolean> {
  const r = await db.query(DELETE_TASK_WEBHOOK, [tenantId, taskId, id])
  return r.rowCount > 0
}

/** Deletes the webhook and, by cascade, its deliveries; false when the tenant has no such webhook. */
export async function deleteWebhook(db: Queryable, tenantId: string, id: string): Promise<boolean> {
  const r = await db.query(DELETE_WEBHOOK, [tenantId, id])
  return r.rowCount > 0
}

/** A `ping` delivery (POST …/test), due now; undefined when the tenant has no such webhook. */
export async function insertPing(db: Queryable, tenantId: string, webhookId: string): Promise<string | undefined> {
  const now = Date.now()
  const { rows } = await db.query<{ id: string }>(INSERT_PING, [tenantId, webhookId, now])
  return rows[0]?.id
}

/** The webhook's deliveries, newest first. */
export async function listDeliveries(db: Queryable, webhookId: string, limit: number): Promise<DeliveryRow[]> {
  const { rows } = await db.query<RawDelivery>(LIST_DELIVERIES, [webhookId, limit])
  return rows.map(toDelivery)
}

// the delivery's columns named (DELIVERY_COLUMNS), so a migration cannot change the prepared statement's shape
const CLAIM = statement(
  'webhook_claim',
  `WITH due AS (
       SELECT id FROM webhook_deliveries WHERE status = 'pending' AND next_attempt_at <= $1
       ORDER BY next_attempt_at, id LIMIT $2 FOR UPDATE SKIP LOCKED
     )
     UPDATE webhook_deliveries d SET attempts = d.attempts + 1, next_attempt_at = $1 + $3, first_attempt_at = coalesce(d.first_attempt_at, $1)
     FROM due, webhooks w WHERE d.id = due.id AND w.id = d.webhook_id
     RETURNING ${DELIVERY_COLUMNS.split(', ').map((c) => `d.${c}`).join(', ')}, w.url, w.secret, w.task_id`,
)

/**
 * Claims up to `limit` due deliveries for one attempt each: the attempt number is taken and the due
 * time moved `leaseMs` ahead, so another process claims the row again only if this attempt never
 * reports (a crash). SKIP LOCKED lets processes claim side by side without waiting on each other.
 */
export async function claimDeliveries(db: Queryable, now: number, limit: number, leaseMs: number): Promise<ClaimedDelivery[]> {
  const { rows } = await db.query<RawDelivery & { url: string; secret: string; task_id: string | null }>(CLAIM, [now, limit, leaseMs])
  return rows.map((r) => ({ ...toDelivery(r), url: r.url, secret: r.secret, ...(r.task_id !== null ? { task: { id: r.task_id } } : {}) }))
}

export interface AttemptOutcome {
  startedAt: number
  durationMs: number
  status: number | null
  error: string | null
  /** delivered (2xx), else the next due time, or null: failed for good */
  delivered: boolean
  nextAttemptAt: number | null
}

const RECORD_ATTEMPT = statement(
  'webhook_record_attempt',
  `WITH moved AS (
       UPDATE webhook_deliveries SET status = $3, last_status = $4, last_error = $5, next_attempt_at = $6, delivered_at = $7
       WHERE id = $1 AND attempts = $2 AND status = 'pending' RETURNING id
     ), logged AS (
       INSERT INTO webhook_attempts (delivery_id, attempt, started_at, duration_ms, status, error)
       SELECT id, $2, $8, $9, $4, $5 FROM moved RETURNING delivery_id
     )
     SELECT delivery_id AS id FROM logged`,
)

/**
 * Records attempt `attempt` of a delivery and its consequence, fenced by the attempt number: an
 * attempt whose claim another process took over since (or whose webhook is gone) writes nothing.
 * Returns whether it was recorded.
 */
export async function recordAttempt(db: Queryable, id: string, attempt: number, o: AttemptOutcome): Promise<boolean> {
  const now = o.startedAt + o.durationMs
  const status: DeliveryStatus = o.delivered ? 'delivered' : o.nextAttemptAt === null ? 'failed' : 'pending'
  const { rows } = await db.query<{ id: string }>(RECORD_ATTEMPT, [id, attempt, status, o.status, o.error, status === 'pending' ? o.nextAttemptAt : null, o.delivered ? now : null, o.startedAt, Math.round(o.durationMs)])
  return rows.length > 0
}

export interface AttemptRow {
  attempt: number
  startedAt: number
  durationMs: number
  status: number | null
  error: string | null
}

const LIST_ATTEMPTS = statement('webhook_attempt_list', 'SELECT attempt, started_at, duration_ms, status, error FROM webhook_attempts WHERE delivery_id = $1 ORDER BY attempt')

export async function listAttempts(db: Queryable, deliveryId: string): Promise<AttemptRow[]> {
  const { rows } = await db.query<{ attempt: number; started_at: number; duration_ms: number; status: number | null; error: string | null }>(LIST_ATTEMPTS, [deliveryId])
  return rows.map((r) => ({ attempt: r.attempt, startedAt: Number(r.started_at), durationMs: r.duration_ms, status: r.status, error: r.error }))
}

const OUTBOX_STATE = statement('webhook_outbox', "SELECT count(*)::int AS n, min(created_at) AS oldest FROM webhook_deliveries WHERE status = 'pending'")

/** The outbox's depth and the age of its oldest pending delivery (metrics). */
export async function outboxState(db: Queryable, now: number): Promise<{ pending: number; oldestMs: number }> {
  const { rows } = await db.query<{ n: number; oldest: number | null }>(OUTBOX_STATE, [])
  const r = rows[0]
  return { pending: r?.n ?? 0, oldestMs: r?.oldest === null || r?.oldest === undefined ? 0 : Math.max(0, now - Number(r.oldest)) }
}

const PRUNE_DELIVERIES = statement(
  'webhook_prune',
  "DELETE FROM webhook_deliveries d WHERE d.status = 'delivered' AND d.delivered_at < $1 AND NOT EXISTS (SELECT 1 FROM webhooks w WHERE w.id = d.webhook_id AND w.task_session_key IS NOT NULL)",
)

/**
 * Deletes delivered rows older than `maxAgeMs` (their attempts go with them). A task's webhook keeps
 * its one delivery: that row is what closes it to any later event (taskFilterSql), so while the
 * webhook exists its delivery does.
 */
export async function pruneDeliveries(db: Queryable, now: number, maxAgeMs: number): Promise<number> {
  const r = await db.query(PRUNE_DELIVERIES, [now - maxAgeMs])
  return r.rowCount
}
