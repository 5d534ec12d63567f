// The library's ESM output runs in a browser as it is, without a bundler (issue 12): compiled with the
// package's own tsconfig, loaded by Debian's Chromium with `import()`, talking to a real server on
// PGlite through a same-origin page server (a plain HTTP relay, so no CORS is needed). It creates a
// session, runs a faux/echo turn while streaming, folds a transcript, and reports a typed error.

import fs from 'node:fs'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { chromium, type Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { sdkBuild } from '../helpers/sdk-build.js'

const CHROMIUM = '/usr/bin/chromium'

/** The page: imports the built library and leaves what it saw in `window.result`. */
const PAGE = `<!doctype html><title>sdk</title>
<script type="module">
import { AgentdClient, AgentdError } from '/sdk/index.js'
const text = (msg) => msg.content.map((b) => b.text ?? '').join('')
try {
  const c = new AgentdClient({ baseUrl: location.origin, apiKey: location.hash.slice(1) })
  const s = await c.sessions.create({ model: 'faux/echo' })
  const frames = []
  const run = await c.run(s.id, 'hello from a browser', { onFrame: (f) => frames.push(f.event === 'agent/assistant-stream' ? 'stream:' + f.data.kind : f.event) })
  const w = c.watch(s.id)
  const view = await w.ready
  w.close()
  let error
  try {
    await c.sessions.get('no-such-session')
  } catch (e) {
    error = { isAgentdError: e instanceof AgentdError, status: e.status, code: e.code }
  }
  window.result = { reason: run.reason, answer: text(run.messages.at(-1)), frames, watched: view.messages.map((e) => e.role), lastTurn: view.lastTurn, error }
} catch (e) {
  window.result = { failure: String(e && e.stack || e) }
}
</script>`

describe('@agentd/client in a browser', () => {
  let t: TestApp
  let browser: Browser
  let out: string
  let page: http.Server
  let origin: string

  beforeAll(async () => {
    if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: install Debian's chromium package. This test never downloads a browser.`)
    // the library alone, as `tsc -p clients/typescript` builds it (once per run, for this file and the console's)
    out = await sdkBuild()
    t = await startTestApp({ kind: 'pglite' })
    const api = new URL(t.url)
    page = http.createServer((req, res) => {
      const url = req.url ?? '/'
      if (url === '/') return void res.writeHead(200, { 'content-type': 'text/html' }).end(PAGE)
      if (url.startsWith('/sdk/')) {
        const file = path.join(out, url.slice(5).split('?')[0]!)
        if (!file.startsWith(out) || !fs.existsSync(file)) return void res.writeHead(404).end()
        return void res.writeHead(200, { 'content-type': file.endsWith('.js') ? 'text/javascript' : 'application/octet-stream' }).end(fs.readFileSync(file))
      }
      // everything else goes to agentd, streamed both ways
      const up = http.request({ host: api.hostname, port: api.port, method: req.method, path: url, headers: req.headers }, (r) => {
        res.writeHead(r.statusCode ?? 502, r.headers)
        r.pipe(res)
      })
      up.on('error', () => res.destroy())
      res.on('close', () => up.destroy())
      req.pipe(up)
    })
    await new Promise<void>((r) => page.listen(0, '127.0.0.1', r))
    origin = `http://127.0.0.1:${(page.address() as AddressInfo).port}`
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'] })
  }, 120000)
  afterAll(async () => {
    await browser?.close()
    page?.closeAllConnections()
    page?.close()
    await t?.close()
  })

  it('imports no Node module', () => {
    const js = fs.readdirSync(out).filter((f) => f.endsWith('.js'))
    expect(js).toContain('index.js')
    for (const f of js) expect(fs.readFileSync(path.join(out, f), 'utf8'), f).not.toMatch(/from\s+['"](node:|fs|path|http|crypto|readline)['"]|import\(\s*['"]node:|\brequire\(/)
    expect(fs.existsSync(path.join(out, 'cli')), 'the terminal client is not part of the library build').toBe(false)
  })

  it('loads as an ES module in a page and runs a turn, streams, watches, and throws typed errors', async () => {
    const ctx = await browser.newContext()
    const p = await ctx.newPage()
    const errors: string[] = []
    p.on('pageerror', (e) => errors.push(String(e)))
    // the page's own module script does the work: no test code is transformed into the page
    await p.goto(`${origin}/#${t.key}`)
    await p.waitForFunction(() => (globalThis as { result?: unknown }).result !== undefined, undefined, { timeout: 20000 })
    const r = await p.evaluate(() => (globalThis as { result?: any }).result)
    expect(r.failure).toBeUndefined()
    expect(errors).toEqual([])
    expect(r.reason).toEqual({ kind: 'completed' })
    expect(r.answer).toBe('echo: hello from a browser')
    expect(r.frames).toContain('stream:chunk')
    expect(r.frames).toContain('stream/ready')
    expect(r.watched).toEqual(['system', 'user', 'assistant'])
    expect(r.lastTurn).toEqual({ turn: 1, reason: { kind: 'completed' } })
    expect(r.error).toEqual({ isAgentdError: true, status: 404, code: 'session-not-found' })
    await ctx.close()
  })
})
