// The tenant's webhooks (API.md §14): create (the URL under the http tools' address guard, the
// secret shown once), list, read, delete (pending deliveries dropped), the deliveries and a ping.

import crypto from 'node:crypto'
import { ApiError, badRequest, mustBeOneOf } from '../errors.js'
import { webhooks as store, WEBHOOK_EVENT_TYPES, type Db, type DeliveryRow, type WebhookEventType, type WebhookRow, type WebhookTask } from '../store/index.js'
import { checkToolUrl, type HostPolicy, type Resolver } from '../tools/index.js'
import { newSecret } from './sign.js'

export interface WebhookObject {
  id: string
  url: string
  events: WebhookEventType[]
  description: string | null
  createdAt: string
}

export interface DeliveryObject {
  id: string
  type: string
  sessionId: string | null
  seq: number | null
  status: string
  attempts: number
  lastStatus?: number
  lastError?: string
  nextAttemptAt?: string
  deliveredAt?: string
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
const notFound = (id: string) => new ApiError('not-found', `webhook ${id} not found`)
const iso = (ms: number) => new Date(ms).toISOString()

const toObject = (w: WebhookRow): WebhookObject => ({ id: w.id, url: w.url, events: w.events, description: w.description, createdAt: iso(w.createdAt) })

function toDelivery(d: DeliveryRow): DeliveryObject {
  return {
    id: d.id,
    type: d.type,
    sessionId: d.sessionId,
    seq: d.seq,
    status: d.status,
    attempts: d.attempts,
    ...(d.lastStatus !== null ? { lastStatus: d.lastStatus } : {}),
    ...(d.lastError !== null ? { lastError: d.lastError } : {}),
    ...(d.status === 'pending' && d.nextAttemptAt !== null ? { nextAttemptAt: iso(d.nextAttemptAt) } : {}),
    ...(d.deliveredAt !== null ? { deliveredAt: iso(d.deliveredAt) } : {}),
  }
}

export interface WebhookServiceDeps {
  db: Db
  policy: HostPolicy
  resolve?: Resolver
  /** a delivery became due in this process (a ping): the local deliverer looks now */
  wake?: () => void
}

export class WebhookService {
  constructor(private readonly d: WebhookServiceDeps) {}

  async create(tenantId: string, body: { url: string; events: string[]; description?: string }): Promise<WebhookObject & { secret: string }> {
    const unknown = body.events.flatMap((e, i) => ((WEBHOOK_EVENT_TYPES as readonly string[]).includes(e) ? [] : [{ path: `body.events[${i}]`, message: mustBeOneOf(WEBHOOK_EVENT_TYPES) }]))
    if (unknown.length) throw badRequest(`unknown event type: ${unknown.map((d) => d.path).join(', ')} ${mustBeOneOf(WEBHOOK_EVENT_TYPES)}`, unknown)
    const why = await checkToolUrl(body.url, this.d.policy, this.d.resolve)
    if (why !== null) throw badRequest(`webhook url refused: ${why}`, [{ path: 'body.url', message: why }])
    const row: WebhookRow = {
      id: crypto.randomUUID(),
      tenantId,
      url: body.url,
      events: [...new Set(body.events)] as WebhookEventType[],
      description: body.description ?? null,
      secret: newSecret(),
      createdAt: Date.now(),
    }
    await store.insertWebhook(this.d.db, row)
    return { ...toObject(row), secret: row.secret }
  }

  /**
   * An A2A push-notification config (API.md §17.4): a webhook of every event that ends or interrupts a
   * task, filtered to one task; `secret` is the config's token (the client's, else a new one).
   */
  async createForTask(tenantId: string, body: { url: string; secret?: string; task: WebhookTask }): Promise<WebhookRow> {
    const why = await checkToolUrl(body.url, this.d.policy, this.d.resolve)
    if (why !== null) throw badRequest(`push notification url refused: ${why}`, [{ path: 'url', message: why }])
    const row: WebhookRow = {
      id: crypto.randomUUID(),
      tenantId,
      url: body.url,
      events: ['turn.completed', 'turn.failed', 'turn.cancelled', 'session.requires_action'],
      description: `A2A push notifications of task ${body.task.id}`,
      secret: body.secret ?? newSecret(),
      createdAt: Date.now(),
      task: body.task,
    }
    await store.insertWebhook(this.d.db, row)
    return row
  }

  listForTask(tenantId: string, taskId: string): Promise<WebhookRow[]> {
    return store.listTaskWebhooks(this.d.db, tenantId, taskId)
  }

  deleteForTask(tenantId: string, taskId: string, id: string): Promise<boolean> {
    return store.deleteTaskWebhook(this.d.db, tenantId, taskId, id)
  }

  async list(tenantId: string): Promise<WebhookObject[]> {
    return (await store.listWebhooks(this.d.db, tenantId)).map(toObject)
  }

  private async row(tenantId: string, id: string): Promise<WebhookRow> {
    const w = UUID.test(id) ? await store.getWebhook(this.d.db, tenantId, id) : undefined
    if (!w) throw notFound(id)
    return w
  }

  async get(tenantId: string, id: string): Promise<WebhookObject> {
    return toObject(await this.row(tenantId, id))
  }

  async delete(tenantId: string, id: string): Promise<void> {
    if (!UUID.test(id) || !(await store.deleteWebhook(this.d.db, tenantId, id))) throw notFound(id)
  }

  async deliveries(tenantId: string, id: string, limit: number): Promise<DeliveryObject[]> {
    await this.row(tenantId, id)
    return (await store.listDeliveries(this.d.db, id, limit)).map(toDelivery)
  }

  async ping(tenantId: string, id: string): Promise<{ deliveryId: string }> {
    const deliveryId = UUID.test(id) ? await store.insertPing(this.d.db, tenantId, id) : undefined
    if (!deliveryId) throw notFound(id)
    this.d.wake?.()
    return { deliveryId }
  }
}
