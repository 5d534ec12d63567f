// The console's agents panel (API.md §16) in Debian's Chromium against an in-process server on PGlite,
// at a desk's and a phone's size: with a key, the sidebar lists the tenant's agents at their latest
// version; "New session" makes a session from one and opens it, and the session's header names the
// agent version it was made from; what the console sent is checked against the server.

import fs from 'node:fs'
import { chromium, type Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startTestApp, type TestApp } from '../helpers/app.js'

const CHROMIUM = '/usr/bin/chromium'
const WAIT = { timeout: 20000, interval: 50 }
const VIEWPORTS = [
  { name: 'desk', width: 1280, height: 900 },
  { name: 'phone', width: 390, height: 844 },
]

describe('the console lists the tenant’s agents and makes sessions from them', () => {
  let t: TestApp
  let browser: Browser
  beforeAll(async () => {
    if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: install Debian's chromium package (apt-get install chromium). This test never downloads a browser.`)
    t = await startTestApp({ kind: 'pglite' })
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'] })
    expect((await t.api('POST', '/v1/agents', { id: 'support', name: 'Support desk', model: t.models.ref(), system: 'You help.' })).status).toBe(201)
    expect((await t.api('PATCH', '/v1/agents/support', { system: 'You help kindly.' })).status).toBe(200)
    expect((await t.api('POST', '/v1/agents', { id: 'gone', name: 'Gone', model: t.models.ref() })).status).toBe(201)
    expect((await t.api('DELETE', '/v1/agents/gone')).status).toBe(204)
  })
  afterAll(async () => {
    await browser?.close()
    await t?.close()
  })

  it.each(VIEWPORTS)('at $width×$height: lists support@2 (not a deleted agent), New session makes a session from it and opens it', async (viewport) => {
    const page = await (await browser.newContext({ viewport })).newPage()
    const errors: string[] = []
    page.on('pageerror', (e) => errors.push(String(e)))
    await page.goto(`${t.url}/`)
    expect(await page.isHidden('#agents-panel')).toBe(true)
    if (!(await page.isVisible('#api-key'))) await page.click('#key-toggle')
    await page.fill('#api-key', t.key)
    await page.click('#save-key')
    // on a phone the sidebar is a drawer behind the Sessions toggle
    if (viewport.name === 'phone') await page.click('#sessions-toggle')
    await expect.poll(() => page.$eval('#sidebar', (e) => (e as any).getBoundingClientRect().left), WAIT).toBe(0)
    const item = '#agent-list li[data-id="support"]'
    await expect.poll(() => page.isVisible(item), WAIT).toBe(true)
    expect(await page.textContent(item)).toContain('Support desk')
    expect(await page.textContent(item)).toContain('support@2')
    expect(await page.textContent(item)).toContain(t.models.ref())
    expect(await page.locator('#agent-list li').count()).toBe(1)
    // the button is whole inside the sidebar at this size
    const box = (await page.locator(`${item} button`).boundingBox())!
    const side = (await page.locator('#sidebar').boundingBox())!
    expect(box.x + box.width).toBeLessThanOrEqual(side.x + side.width + 0.5)

    const before = new Set(((await t.api('GET', '/v1/sessions')).body.sessions as Array<{ id: string }>).map((s) => s.id))
    await page.click(`${item} button:has-text("New session")`)
    await expect.poll(() => page.isVisible('#session-view'), WAIT).toBe(true)
    // the drawer gets out of the way of the session it opened
    if (viewport.name === 'phone') await expect.poll(() => page.isVisible('#sidebar'), WAIT).toBe(false)
    await expect.poll(() => page.textContent('#session-agent-ref'), WAIT).toBe('support@2')
    expect(await page.isVisible('#session-agent')).toBe(true)
    const made = ((await t.api('GET', '/v1/sessions')).body.sessions as Array<{ id: string; agent: unknown; settings: { system: string } }>).filter((s) => !before.has(s.id))
    expect(made).toHaveLength(1)
    expect(made[0]).toMatchObject({ agent: { id: 'support', version: 2 }, settings: { system: 'You help kindly.' } })
    expect(await page.textContent('#session-id')).toBe(made[0].id)
    expect(new URL(page.url()).hash).toBe(`#session=${made[0].id}`)
    expect(errors).toEqual([])
    await page.context().close()
  })

  it('a session made inline shows no agent in its header', async () => {
    const s = await t.createSession()
    const page = await (await browser.newContext({ viewport: VIEWPORTS[0] })).newPage()
    await page.goto(`${t.url}/`)
    await page.fill('#api-key', t.key)
    await page.click('#save-key')
    await page.goto(`${t.url}/#session=${s.id}`)
    await expect.poll(() => page.textContent('#session-id'), WAIT).toBe(s.id)
    await expect.poll(() => page.textContent('#session-model'), WAIT).toBe(t.models.ref())
    expect(await page.isHidden('#session-agent')).toBe(true)
    await page.context().close()
  })
})
