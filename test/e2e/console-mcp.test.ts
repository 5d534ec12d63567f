// The console's secrets panel (API.md §13) and a session's MCP servers (API.md §12) in Debian's Chromium
// against an in-process server on PGlite: secret names (never values) are listed, set and deleted; the
// open session shows its MCP servers' tools from the latest request, and a server that could not be
// listed as unavailable — not as a failed turn.

import fs from 'node:fs'
import { chromium, type Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { TestMcpServer } from '../helpers/mcp-server.js'

const CHROMIUM = '/usr/bin/chromium'
const WAIT = { timeout: 20000, interval: 50 }

describe('the console shows secret names and a session’s MCP servers', () => {
  let t: TestApp
  let browser: Browser
  let mcp: TestMcpServer
  beforeAll(async () => {
    if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: install Debian's chromium package (apt-get install chromium). This test never downloads a browser.`)
    t = await startTestApp({ kind: 'pglite' })
    mcp = await new TestMcpServer([{ name: 'search', description: 'searches the docs', call: () => ({ content: [{ type: 'text', text: 'found' }] }) }]).start()
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'] })
  })
  afterAll(async () => {
    await browser?.close()
    await mcp?.stop()
    await t?.close()
  })

  it('lists, sets and deletes secrets without ever showing a value; shows MCP tools and an unavailable server', async () => {
    expect((await t.api('PUT', '/v1/secrets/EXISTING', { value: 'hidden-value-1' })).status).toBe(204)
    const s = await t.createSession({ mcpServers: [{ name: 'docs', url: mcp.url }, { name: 'down', url: 'http://127.0.0.1:9/mcp' }] })
    t.models.script(s.id, { text: ['ok'] })
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hello' })
    await t.waitForTurnEnd(s.id, 1)

    const page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage()
    const errors: string[] = []
    page.on('pageerror', (e) => errors.push(String(e)))
    await page.goto(`${t.url}/`)
    expect(await page.isVisible('#secrets-panel')).toBe(false)
    await page.fill('#api-key', t.key)
    await page.click('#save-key')
    const names = () => page.$$eval('#secret-list li', (lis) => lis.map((li) => (li as any).dataset.name))
    await expect.poll(names, WAIT).toEqual(['EXISTING'])
    await page.fill('#secret-name', 'NEW_TOKEN')
    await page.fill('#secret-value', 'hidden-value-2')
    await page.click('#secret-save')
    await expect.poll(names, WAIT).toEqual(['EXISTING', 'NEW_TOKEN'])
    expect(await page.inputValue('#secret-value')).toBe('')
    expect((await t.api('GET', '/v1/secrets')).body.secrets.map((x: any) => x.name)).toEqual(['EXISTING', 'NEW_TOKEN'])
    page.once('dialog', (d) => void d.accept())
    await page.click('#secret-list li[data-name="EXISTING"] button')
    await expect.poll(names, WAIT).toEqual(['NEW_TOKEN'])
    const html = await page.content()
    expect(html).not.toContain('hidden-value-1')
    expect(html).not.toContain('hidden-value-2')

    // the session: its MCP server's tools come from the logged request header
    await page.goto(`${t.url}/#session=${encodeURIComponent(s.id)}`)
    await expect.poll(() => page.$$eval('#mcp .mcp-server[data-server="docs"] li', (lis) => lis.map((li) => li.textContent)), WAIT).toEqual(['search'])
    // the outage frame is live only: a second turn makes a new step list again while the page watches
    t.models.script(s.id, { text: ['again'] })
    await t.api('PATCH', `/v1/sessions/${s.id}`, { mcpServers: [{ name: 'docs', url: mcp.url }, { name: 'later', url: 'http://127.0.0.1:9/mcp' }] })
    await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'again' })
    await t.waitForTurnEnd(s.id, 2)
    await expect.poll(() => page.getAttribute('#mcp .mcp-server[data-server="later"]', 'data-state'), WAIT).toBe('unavailable')
    expect(await page.isVisible('#view-error')).toBe(false)
    expect(errors).toEqual([])
  })
})
