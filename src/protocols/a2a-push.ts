// A2A push-notification configs (API.md §17.4) are webhooks (API.md §14) filtered to one task: the
// webhook delivers the task's end — the first turn end or required action of its session from where its
// span starts — signed as every webhook is (Standard Webhooks), with the config's `token` as the signing
// secret: the client's own (a `whsec_` secret, or any text of 16 bytes or more as the HMAC key), or one
// made for it and answered once, as a webhook's secret is shown once.

import type { TaskPushNotificationConfig } from '@a2a-js/sdk'
import { PushNotificationNotSupportedError, RequestMalformedError } from '@a2a-js/sdk/errors'
import { readEvents, type Principal, type SessionRow, type WebhookRow } from '../store/index.js'
import type { WebhookService } from '../webhooks/index.js'
import type { Db } from '../store/index.js'
import { foldOptionsOf } from './outcome.js'
import { foldSpans } from './span.js'

export interface A2aPush {
  create(p: Principal, agentId: string, row: SessionRow, c: TaskPushNotificationConfig): Promise<TaskPushNotificationConfig>
  get(p: Principal, taskId: string, id: string): Promise<TaskPushNotificationConfig | undefined>
  list(p: Principal, taskId: string): Promise<TaskPushNotificationConfig[]>
  delete(p: Principal, taskId: string, id: string): Promise<boolean>
}

/** The shortest token accepted as a signing key. */
const MIN_TOKEN_BYTES = 16

/** A token as a Standard Webhooks secret: `whsec_<base64 key>` as given, else its bytes are the key. */
export function secretOfToken(token: string): string {
  if (token.startsWith('whsec_')) return token
  return 'whsec_' + Buffer.from(token, 'utf8').toString('base64')
}

const configOf = (w: WebhookRow, token = ''): TaskPushNotificationConfig => ({ tenant: '', id: w.id, taskId: w.task!.id, url: w.url, token, authentication: undefined })

export function a2aPush(db: Db, webhooks: WebhookService | undefined): A2aPush {
  const service = () => {
    if (!webhooks) throw new PushNotificationNotSupportedError({ message: 'this server delivers no webhooks' })
    return webhooks
  }
  return {
    async create(p, _agentId, row, c) {
      if (!c.url) throw new RequestMalformedError({ message: 'url is required' })
      if (c.token && !c.token.startsWith('whsec_') && Buffer.byteLength(c.token) < MIN_TOKEN_BYTES) throw new RequestMalformedError({ message: `token is the signing secret: give a whsec_ secret or at least ${MIN_TOKEN_BYTES} bytes, or none to get one` })
      const spanId = c.taskId.slice(c.taskId.lastIndexOf(':') + 1)
      // where the task starts: its span's first event and turn; a span not folded yet (an answer's,
      // before the answer took effect) starts after the wait it answers, in the same turn
      const fold = foldSpans(await readEvents(db, row.key), foldOptionsOf(row))
      const span = fold.get(spanId)
      const lastTurn = fold.spans.reduce((n, s) => Math.max(n, s.turn), 0)
      const fromSeq = span ? span.firstSeq : Number(spanId.slice(1)) + 1
      const minTurn = span && span.turn > 0 ? span.turn : spanId.startsWith('w') ? lastTurn : lastTurn + 1
      const w = await service().createForTask(p.tenantId, { url: c.url, secret: c.token ? secretOfToken(c.token) : undefined, task: { id: c.taskId, sessionKey: row.key, fromSeq, minTurn } })
      // the secret is answered once, when the server made it
      return configOf(w, c.token ? c.token : w.secret)
    },
    async get(p, taskId, id) {
      const w = (await service().listForTask(p.tenantId, taskId)).find((x) => x.id === id)
      return w ? configOf(w) : undefined
    },
    async list(p, taskId) {
      return (await service().listForTask(p.tenantId, taskId)).map((w) => configOf(w))
    },
    delete(p, taskId, id) {
      return service().deleteForTask(p.tenantId, taskId, id)
    },
  }
}
