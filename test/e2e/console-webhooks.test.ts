// The console's webhooks panel (API.md §14) in Debian's Chromium against an in-process server on PGlite:
// with a key, the sidebar lists the tenant's webhooks with their recent deliveries; the form adds one and
// shows its secret once; Test sends a ping that shows as delivered; Delete removes the webhook.

import fs from 'node:fs'
import { chromium, type Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { startReceiver, type Receiver } from '../helpers/receiver.js'

const CHROMIUM = '/usr/bin/chromium'
const WAIT = { timeout: 20000, interval: 50 }

describe('the console shows and manages the tenant’s webhooks', () => {
  let t: TestApp
  let rx: Receiver
  let browser: Browser
  beforeAll(async () => {
    if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: install Debian's chromium package (apt-get install chromium). This test never downloads a browser.`)
    rx = await startReceiver()
    t = await startTestApp({ kind: 'pglite', webhooks: { pollMs: 20 } })
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'] })
  })
  afterAll(async () => {
    await browser?.close()
    await t?.close()
    await rx?.close()
  })

  it('lists a webhook with its delivered turn, adds one with its secret shown once, pings and deletes', async () => {
    const first = await t.api('POST', '/v1/webhooks', { url: rx.url + '/one', events: ['turn.completed'] })
    const s = await t.createSession()
    t.models.script(s.id, { text: ['done'] })
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })
    await rx.waitFor(1)

    const page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage()
    const errors: string[] = []
    page.on('pageerror', (e) => errors.push(String(e)))
    await page.goto(`${t.url}/`)
    expect(await page.isVisible('#webhooks-panel')).toBe(false)
    await page.fill('#api-key', t.key)
    await page.click('#save-key')
    await expect.poll(() => page.isVisible('#webhooks-panel'), WAIT).toBe(true)
    const item = `#webhook-list li[data-id="${first.body.id}"]`
    await expect.poll(() => page.textContent(item).catch(() => ''), WAIT).toContain(rx.url + '/one')
    await expect.poll(() => page.textContent(`${item} .delivery[data-status="delivered"]`).catch(() => ''), WAIT).toContain('turn.completed')
    expect(await page.textContent(`${item} .delivery`)).toContain(`${s.id}#`)

    // add a second one: its secret is shown once, and it is listed
    await page.click('#webhooks-panel summary')
    await page.fill('#webhook-url', rx.url + '/two')
    await page.check('#webhook-event-session\\.requires_action')
    await page.click('#create-webhook')
    await expect.poll(() => page.textContent('#webhook-secret').catch(() => ''), WAIT).toMatch(/whsec_/)
    const listed = (await t.api('GET', '/v1/webhooks')).body.webhooks
    expect(listed).toHaveLength(2)
    const second = listed.find((w: any) => w.url === rx.url + '/two')
    expect(second.events).toEqual(['turn.completed', 'session.requires_action'])

    // ping it from the console: the delivery shows as delivered
    const two = `#webhook-list li[data-id="${second.id}"]`
    await expect.poll(() => page.isVisible(two), WAIT).toBe(true)
    await page.click(`${two} button:has-text("Test")`)
    await rx.waitFor(1, 10000, (r) => r.path === '/two')
    await page.click(`${two} button:has-text("Deliveries")`)
    await expect.poll(async () => {
      await page.click(`${two} button:has-text("Deliveries")`)
      return page.textContent(`${two} .deliveries`)
    }, WAIT).toMatch(/delivered\s*ping/)

    // delete the first one
    page.once('dialog', (d) => void d.accept())
    await page.click(`${item} button:has-text("Delete")`)
    await expect.poll(() => page.isVisible(item), WAIT).toBe(false)
    expect((await t.api('GET', `/v1/webhooks/${first.body.id}`)).status).toBe(404)
    expect(errors).toEqual([])
  })
})
