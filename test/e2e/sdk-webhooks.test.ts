// @agentd/client for API.md §14 against a real agentd on one database (docs/testing.md): the webhook methods
// create, list, read, test, list deliveries and delete; verifyWebhook accepts what the server sent
// to a real receiver and refuses a wrong secret, a changed body and an old timestamp; bad input is an
// AgentdError and writes nothing.

import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { AgentdClient, AgentdError, verifyWebhook, WebhookVerificationError } from '../../clients/typescript/src/index.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startReceiver, type Receiver } from '../helpers/receiver.js'
import { until } from '../helpers/wait.js'

describe.each(APP_DB_KINDS)('@agentd/client webhooks on %s', (kind) => {
  let t: TestApp
  let rx: Receiver
  let client: AgentdClient
  beforeAll(async () => {
    rx = await startReceiver()
    t = await startTestApp({ kind, webhooks: { pollMs: 20 } })
    client = new AgentdClient({ baseUrl: t.url, apiKey: t.key })
  })
  afterAll(async () => {
    await t?.close()
    await rx?.close()
  })

  it('create, list, get, a turn delivered and verified, test (ping), deliveries, delete', async () => {
    const bad = await client.createWebhook({ url: 'http://192.168.1.1/x', events: ['turn.completed'] }).catch((e) => e)
    expect(bad).toBeInstanceOf(AgentdError)
    expect({ status: bad.status, code: bad.code }).toEqual({ status: 400, code: 'bad-request' })
    expect(await client.listWebhooks()).toEqual([])

    const hook = await client.createWebhook({ url: rx.url + '/sdk', events: ['turn.completed'], description: 'sdk' })
    expect(hook.secret).toMatch(/^whsec_/)
    const { secret, ...shown } = hook
    expect(await client.getWebhook(hook.id)).toEqual(shown)
    expect(await client.listWebhooks()).toEqual([shown])

    const s = await t.createSession()
    t.models.script(s.id, { text: ['done'] })
    await client.followup(s.id, 'hello')
    const [r] = await rx.waitFor(1)
    const payload = await verifyWebhook(secret, r.headers, r.raw)
    expect(payload).toMatchObject({ type: 'turn.completed', data: { sessionId: s.id, turn: 1, reason: { kind: 'completed' } } })
    // a Headers object works too
    expect(await verifyWebhook(secret, new Headers(r.headers as Record<string, string>), r.raw)).toEqual(payload)
    const refused = async (p: Promise<unknown>) => expect(await p.catch((e) => e)).toBeInstanceOf(WebhookVerificationError)
    await refused(verifyWebhook('whsec_' + btoa('some other secret'), r.headers, r.raw))
    await refused(verifyWebhook(secret, r.headers, r.raw.replace('done', 'nope').replace('"turn":1', '"turn":2')))
    await refused(verifyWebhook(secret, r.headers, r.raw, { now: Date.now() + 3600_000 }))
    await refused(verifyWebhook(secret, { ...r.headers, 'webhook-signature': undefined }, r.raw))

    const pingId = await client.testWebhook(hook.id)
    await until('ping delivered', async () => (await client.webhookDeliveries(hook.id)).find((d) => d.id === pingId)?.status === 'delivered')
    const list = await client.webhookDeliveries(hook.id, { limit: 10 })
    expect(list.map((d) => d.type)).toEqual(['ping', 'turn.completed'])
    expect(list[1]).toMatchObject({ sessionId: s.id, status: 'delivered', attempts: 1, lastStatus: 200 })

    await client.deleteWebhook(hook.id)
    const gone = await client.getWebhook(hook.id).catch((e) => e)
    expect({ status: gone.status, code: gone.code }).toEqual({ status: 404, code: 'not-found' })
  })
})
