// The example app (examples/chat) in Debian's Chromium: its React page with @ai-sdk/react's useChat
// against a real agentd (PGlite, a scripted model), through the example's own backend, which mints a
// token for the user. A typed message is answered with streamed text; a reload in the middle of the
// answer shows the part written so far and goes on with it (resume: true); an approval button lets the
// tool call run. No request of the page carries the tenant key.

import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { chromium, type Browser, type Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { gate } from '../helpers/scripted.js'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const CHROMIUM = '/usr/bin/chromium'
const CHAT = 'browser-chat-1'

interface Example {
  url: string
  close(): Promise<void>
}

describe('the chat example in a browser', () => {
  let t: TestApp
  let example: Example
  let browser: Browser
  let page: Page
  const requests: Array<{ url: string; authorization?: string }> = []

  beforeAll(async () => {
    if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: install Debian's chromium package. This test never downloads a browser.`)
    t = await startTestApp({ kind: 'pglite' })
    const mod = (await import(path.join(ROOT, 'examples/chat/server.mjs'))) as { startExample(o: Record<string, unknown>): Promise<Example>; agentBody(url: string, model: string): Record<string, unknown> }
    example = await mod.startExample({ agentd: t.url, apiKey: t.key, agentId: 'chat', port: 0 })
    const r = await t.api('POST', '/v1/agents', mod.agentBody(`${example.url}/tools/clean_up`, t.models.ref()))
    expect(r.status).toBe(201)
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'] })
    const ctx = await browser.newContext()
    // the conversation id the page keeps, so the scripted model knows the session
    await ctx.addInitScript((id) => localStorage.setItem('agentd-chat-id', id), CHAT)
    page = await ctx.newPage()
    page.on('request', (req) => requests.push({ url: req.url(), authorization: req.headers().authorization }))
  }, 120000)
  afterAll(async () => {
    await browser?.close()
    await example?.close()
    await t?.close()
  })

  const texts = () => page.locator('[data-role="assistant"] [data-testid="text"]').allInnerTexts()

  it('answers a typed message with streamed text, and a reload mid-answer shows it and goes on', async () => {
    const g = gate()
    t.models.script(CHAT, { text: ['Hello ', 'from ', 'agentd'], holdAfter: 2, gate: g.promise })
    await page.goto(example.url)
    await page.getByTestId('input').fill('hi there')
    await page.getByTestId('input').press('Enter')
    await page.waitForFunction(() => [...(globalThis as any).document.querySelectorAll('[data-role="assistant"] [data-testid="text"]')].some((e: any) => e.textContent === 'Hello from '), undefined, { timeout: 20000 })
    await page.reload()
    // the new page: the question and the partial answer, while the model still holds
    await page.waitForFunction(() => (globalThis as any).document.querySelector('[data-role="assistant"] [data-testid="text"]')?.textContent === 'Hello from ', undefined, { timeout: 20000 })
    expect(await page.locator('[data-role="user"]').allInnerTexts()).toEqual(['hi there'])
    g.open()
    await page.waitForFunction(() => (globalThis as any).document.querySelector('[data-role="assistant"] [data-testid="text"]')?.textContent === 'Hello from agentd', undefined, { timeout: 20000 })
    expect(await texts()).toEqual(['Hello from agentd'])
    expect(await page.locator('[data-role="assistant"]').count()).toBe(1)
  })

  it('an approval button lets the call run', async () => {
    t.models.script(CHAT, { toolCalls: [{ id: 'call-1', name: 'clean_up', arguments: { folder: 'tmp' } }] }, { text: ['All clean.'] })
    await page.getByTestId('input').fill('please clean tmp')
    await page.getByTestId('input').press('Enter')
    await page.getByTestId('allow').waitFor({ timeout: 20000 })
    expect(await page.getByTestId('tool').getAttribute('data-state')).toBe('approval-requested')
    expect((await t.api('GET', `/v1/sessions/${CHAT}/pending`)).body.toolCalls.map((c: { kind: string }) => c.kind)).toEqual(['approval'])
    await page.getByTestId('allow').click()
    await page.getByTestId('tool-output').waitFor({ timeout: 20000 })
    expect(await page.getByTestId('tool-output').innerText()).toBe('cleaned up tmp')
    await page.waitForFunction(() => [...(globalThis as any).document.querySelectorAll('[data-role="assistant"] [data-testid="text"]')].some((e: any) => e.textContent === 'All clean.'), undefined, { timeout: 20000 })
    const evs = await t.waitIdle(CHAT)
    expect(evs.filter((e) => e.type === 'turn/end').map((e) => (e.data as { reason: { kind: string } }).reason.kind)).toEqual(['completed', 'completed'])
    // the session belongs to the user the backend named, and is the agent's
    const s = await t.api('GET', `/v1/sessions/${CHAT}`)
    expect([s.body.owner, s.body.agent.id]).toEqual(['demo-user', 'chat'])
  })

  it('the page never held the tenant key: its agentd calls carry a token', async () => {
    const calls = requests.filter((r) => new URL(r.url).pathname.startsWith('/v1/'))
    expect(calls.length).toBeGreaterThan(3)
    for (const r of requests) {
      expect(r.url).not.toContain(t.key)
      expect(r.authorization ?? '').not.toContain(t.key)
    }
    for (const r of calls) expect(r.authorization).toMatch(/^Bearer eyJ/)
    expect(JSON.stringify(await page.evaluate(() => ({ ...localStorage })))).not.toContain(t.key)
  })
})
