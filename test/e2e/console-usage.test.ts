// The console's usage panel (API.md §15) in Debian's Chromium against an in-process server on PGlite:
// with a key, the sidebar shows what the tenant's settled model calls used this month, today's tokens
// and its limits, each beside what it bounds; a spent budget marks the panel; Refresh reads it again.

import fs from 'node:fs'
import { chromium, type Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startTestApp, type TestApp } from '../helpers/app.js'

const CHROMIUM = '/usr/bin/chromium'
const WAIT = { timeout: 20000, interval: 50 }

describe('the console shows the tenant’s usage for the month and its limits', () => {
  let t: TestApp
  let browser: Browser
  beforeAll(async () => {
    if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: install Debian's chromium package (apt-get install chromium). This test never downloads a browser.`)
    t = await startTestApp({ kind: 'pglite' })
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'] })
  })
  afterAll(async () => {
    await browser?.close()
    await t?.close()
  })

  it('usage and limits after a turn; a spent token budget marks the panel', async () => {
    expect((await t.api('PATCH', `/v1/admin/tenants/${t.tenantId}`, { limits: { maxRunningSessions: 3, tokensPerDay: 5000, requestsPerMin: 600 } }, { key: t.adminToken })).status).toBe(200)
    const s = await t.createSession()
    t.models.script(s.id, { text: ['counted'], usage: { input: 1200, output: 34, costUsd: 0.0125 } })
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'count me' })
    await t.waitForTurnEnd(s.id, 1)

    const page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage()
    const errors: string[] = []
    page.on('pageerror', (e) => errors.push(String(e)))
    await page.goto(`${t.url}/`)
    expect(await page.isVisible('#usage-panel')).toBe(false) // no key, nothing to show
    await page.fill('#api-key', t.key)
    await page.click('#save-key')
    await expect.poll(() => page.isVisible('#usage-panel'), WAIT).toBe(true)
    const shown = async () => Object.fromEntries(await page.$$eval('#usage dt', (dts) => dts.map((dt) => [dt.textContent, (dt as any).nextElementSibling.textContent])))
    await expect.poll(shown, WAIT).toEqual({
      tokens: (1234).toLocaleString('en-US'),
      today: `${(1234).toLocaleString('en-US')} of ${(5000).toLocaleString('en-US')}`,
      cost: '$0.0125',
      'model calls': '1',
      'running at once': 'at most 3',
      requests: '600 / min',
    })
    expect(await page.getAttribute('#usage-panel', 'data-spent')).toBe('false')

    // the budget is lowered below what today used: Refresh shows it spent
    await t.api('PATCH', `/v1/admin/tenants/${t.tenantId}`, { limits: { tokensPerDay: 1000, maxRunningSessions: null } }, { key: t.adminToken })
    await page.click('#usage-refresh')
    await expect.poll(() => page.getAttribute('#usage-panel', 'data-spent'), WAIT).toBe('true')
    expect((await shown())['running at once']).toBe('no limit')
    expect(errors).toEqual([])
  })
})
