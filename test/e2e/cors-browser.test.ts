// A page on another origin calls agentd from Debian's Chromium (API.md §18): with AGENTD_CORS_ORIGINS
// listing the page's origin, fetch with a token a backend minted succeeds (the browser's own preflight
// included), EventSource streams with ?access_token=, and without a token the page reads a 401; a page
// on an origin agentd does not list gets nothing at all (the browser blocks it).

import crypto from 'node:crypto'
import fs from 'node:fs'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { chromium, type Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startTestApp, type TestApp } from '../helpers/app.js'

const CHROMIUM = '/usr/bin/chromium'

/** What the page does: agentd's URL and the token come in its hash; the outcome lands in window.result. */
const PAGE = `<!doctype html><title>app</title>
<script type="module">
const [agentd, token] = decodeURIComponent(location.hash.slice(1)).split('|')
const attempt = async (f) => { try { return await f() } catch (e) { return { threw: e.name } } }
const json = async (r) => ({ status: r.status, body: await r.json() })
const auth = token ? { authorization: 'Bearer ' + token } : {}
const created = await attempt(async () => json(await fetch(agentd + '/v1/sessions', { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'faux/echo' }) })))
const listed = await attempt(async () => json(await fetch(agentd + '/v1/sessions', { headers: auth })))
const bare = await attempt(async () => json(await fetch(agentd + '/v1/sessions')))
let streamed = null
if (created.status === 201) {
  await fetch(agentd + '/v1/sessions/' + created.body.id + '/followup', { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ content: 'hello from another origin' }) })
  streamed = await new Promise((resolve) => {
    const es = new EventSource(agentd + '/v1/sessions/' + created.body.id + '/stream?access_token=' + encodeURIComponent(token))
    es.addEventListener('session/event', (e) => {
      const ev = JSON.parse(e.data)
      if (ev.type === 'turn/end') { es.close(); resolve(ev.data.reason.kind) }
    })
    es.onerror = () => { es.close(); resolve('error') }
  })
}
window.result = { created, listed, bare, streamed }
</script>`

async function pageServer(): Promise<{ origin: string; close(): Promise<void> }> {
  const server = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end(PAGE))
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((r) => {
        server.close(() => r())
        server.closeAllConnections()
      }),
  }
}

describe('a page on another origin, in Chromium', () => {
  let t: TestApp
  let browser: Browser
  let allowed: Awaited<ReturnType<typeof pageServer>>
  let refused: Awaited<ReturnType<typeof pageServer>>

  beforeAll(async () => {
    if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: install Debian's chromium package. This test never downloads a browser.`)
    allowed = await pageServer()
    refused = await pageServer()
    t = await startTestApp({ kind: 'pglite', env: { AGENTD_CORS_ORIGINS: allowed.origin, AGENTD_SECRET_KEY: crypto.randomBytes(32).toString('base64') } })
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'] })
  })
  afterAll(async () => {
    await browser?.close()
    await t?.close()
    await allowed?.close()
    await refused?.close()
  })

  /** Opens the page of `origin` and returns what it saw. */
  const visit = async (origin: string, token: string) => {
    const page = await (await browser.newContext()).newPage()
    await page.goto(`${origin}/#${encodeURIComponent(`${t.url}|${token}`)}`)
    await page.waitForFunction(() => (globalThis as unknown as { result?: unknown }).result !== undefined, undefined, { timeout: 20000 })
    const result = await page.evaluate(() => (globalThis as unknown as { result: any }).result)
    await page.context().close()
    return result
  }

  it('with a token from its backend the page creates a session, lists it and streams a turn; without one it reads a 401', async () => {
    // the backend's part: a token for the signed-in user
    const minted = await t.api('POST', '/v1/tokens', { scopes: ['read', 'write'], subject: 'page-user' })
    expect(minted.status).toBe(201)
    const r = await visit(allowed.origin, minted.body.token)
    expect(r.created.status, JSON.stringify(r.created)).toBe(201)
    expect(r.created.body.owner).toBe('page-user')
    expect(r.listed).toEqual({ status: 200, body: { sessions: [expect.objectContaining({ id: r.created.body.id, owner: 'page-user' })], nextCursor: null } })
    expect(r.streamed).toBe('completed')
    expect(r.bare.status).toBe(401)
    expect(r.bare.body.error.code).toBe('unauthorized')
    // without a token nothing else works either
    const none = await visit(allowed.origin, '')
    expect(none.created.status).toBe(401)
    expect(none.listed.status).toBe(401)
  })

  it('a page on an origin agentd does not list gets no answer at all, token or not', async () => {
    const minted = await t.api('POST', '/v1/tokens', { scopes: ['read', 'write'], subject: 'elsewhere' })
    const before = (await t.api('GET', '/v1/sessions?limit=200')).body.sessions.length
    const r = await visit(refused.origin, minted.body.token)
    expect(r.created).toEqual({ threw: 'TypeError' })
    expect(r.listed).toEqual({ threw: 'TypeError' })
    expect(r.bare).toEqual({ threw: 'TypeError' })
    expect((await t.api('GET', '/v1/sessions?limit=200')).body.sessions.length).toBe(before)
  })
})
