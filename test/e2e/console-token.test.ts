// The console with a token (API.md §18) in Debian's Chromium against an in-process server on PGlite:
// a token with only `read` shows a session live — its transcript as turns run — and offers nothing that
// writes (no composer, no new-session form, no approval buttons, a title it cannot edit); a token with
// a subject and `write` lists only its own sessions, creates one and talks to it. Neither sees the
// tenant's own panels (usage, secrets, webhooks), which take the key.

import crypto from 'node:crypto'
import fs from 'node:fs'
import { chromium, type Browser, type Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startTestApp, type TestApp } from '../helpers/app.js'

const CHROMIUM = '/usr/bin/chromium'
const WAIT = { timeout: 20000, interval: 50 }

describe('the console with a token', () => {
  let t: TestApp
  let browser: Browser
  beforeAll(async () => {
    if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: install Debian's chromium package (apt-get install chromium). This test never downloads a browser.`)
    t = await startTestApp({ kind: 'pglite', env: { AGENTD_SECRET_KEY: crypto.randomBytes(32).toString('base64') } })
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'] })
  })
  afterAll(async () => {
    await browser?.close()
    await t?.close()
  })

  const open = async (credential: string, hash = ''): Promise<{ page: Page; errors: string[] }> => {
    const page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage()
    const errors: string[] = []
    page.on('pageerror', (e) => errors.push(String(e)))
    await page.goto(`${t.url}/${hash}`)
    await page.fill('#api-key', credential)
    await page.click('#save-key')
    return { page, errors }
  }
  const mint = async (body: Record<string, unknown>) => (await t.api('POST', '/v1/tokens', body)).body.token as string
  const transcriptText = (page: Page) => page.textContent('#transcript')

  it('a read-only token watches a session live and is offered nothing that writes', async () => {
    // an http tool that waits for approval (denied below, so never called)
    const s = await t.createSession({ tools: [{ name: 'ask', execution: { type: 'http', url: 'http://127.0.0.1:9/never' }, approval: 'always' }] })
    t.models.script(s.id, { text: ['the first answer'] })
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'first question' })
    await t.waitForTurnEnd(s.id, 1)
    const token = await mint({ scopes: ['read'], sessions: [s.id] })
    const { page, errors } = await open(token, `#session=${encodeURIComponent(s.id)}`)
    await expect.poll(() => page.textContent('#key-status'), WAIT).toBe('token saved: read only')
    await expect.poll(() => transcriptText(page), WAIT).toContain('the first answer')
    // the session runs on, driven by someone who may write: the view follows it
    t.models.script(s.id, { toolCalls: [{ id: 'call-1', name: 'ask', arguments: {} }] }, { text: ['the second answer'] })
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'second question' })
    await expect.poll(() => page.isVisible('.pending-call[data-call-id="call-1"]'), WAIT).toBe(true)
    // nothing that writes is offered
    for (const sel of ['#composer', '#new-session', '.pending-call .pending-actions', '#usage-panel', '#secrets-panel', '#webhooks-panel']) expect(await page.isVisible(sel), sel).toBe(false)
    expect(await page.isVisible('#read-only-note')).toBe(true)
    expect(await page.getAttribute('#session-title', 'readonly')).not.toBeNull()
    // someone else decides the call; the view shows the turn end
    await t.api('POST', `/v1/sessions/${s.id}/approvals/call-1`, { decision: 'deny' })
    await expect.poll(() => transcriptText(page), WAIT).toContain('the second answer')
    expect(await page.isVisible('#key-error')).toBe(false)
    expect(errors).toEqual([])
  })

  it('a token with a subject lists only its own sessions, creates one and talks to it', async () => {
    const other = await t.createSession({ metadata: { note: 'not yours' } })
    await t.api('PATCH', `/v1/sessions/${other.id}`, { title: 'not yours' })
    const token = await mint({ scopes: ['read', 'write'], subject: 'console-user' })
    const { page, errors } = await open(token)
    await expect.poll(() => page.textContent('#key-status'), WAIT).toBe('token saved')
    await expect.poll(() => page.textContent('#sessions-empty'), WAIT).toBeTruthy()
    expect(await page.$$eval('#session-list li', (lis) => lis.length)).toBe(0)
    for (const sel of ['#usage-panel', '#secrets-panel', '#webhooks-panel']) expect(await page.isVisible(sel), sel).toBe(false)
    expect(await page.isVisible('#new-session')).toBe(true)
    await page.fill('#new-title', 'mine')
    await page.click('#create-session')
    await expect.poll(() => page.isVisible('#session-view'), WAIT).toBe(true)
    const id = (await page.textContent('#session-id'))!
    expect((await t.api('GET', `/v1/sessions/${id}`)).body.owner).toBe('console-user')
    t.models.script(id, { text: ['hello console user'] })
    await page.fill('#composer-input', 'hi there')
    await page.press('#composer-input', 'Enter')
    await expect.poll(() => transcriptText(page), WAIT).toContain('hello console user')
    expect(await page.$$eval('#session-list li', (lis) => lis.map((li) => li.textContent ?? ''))).not.toContainEqual(expect.stringContaining('not yours'))
    expect(other.owner).toBeNull()
    expect(errors).toEqual([])
  })
})
