// The web console (API.md §8 `GET /`) in a real browser: Debian's Chromium driven by playwright-core
// against an in-process server on PGlite with the scripted model, at a desk's and a phone's size. The
// console is driven only through its UI, as a new user would; what it sent is checked against the
// durable log, and every screenshot (kept in a temp dir) against layout facts.

import fs from 'node:fs'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { chromium, type Browser, type Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { leaveCrashedTurn } from '../helpers/crashed.js'
import { expectValidLog } from '../helpers/invariants.js'
import { gate } from '../helpers/scripted.js'
import { sdkBuild } from '../helpers/sdk-build.js'
import { SDK_DIR, WEB_DIR } from '../../src/http/ops.js'

const CHROMIUM = '/usr/bin/chromium'
const SHOTS = fs.mkdtempSync(path.join(os.tmpdir(), 'agentd-console-'))
const WAIT = { timeout: 20000, interval: 50 }
const VIEWPORTS = [
  { name: 'desk', width: 1280, height: 800 },
  { name: 'phone', width: 390, height: 844 },
]

/** a builtin tool that needs approval */
const addPlugin = (root: any) =>
  root.plugin({
    name: 'console-test-tools',
    apply(ctx: any) {
      ctx.tools.register({
        name: 'add',
        description: 'Adds two numbers',
        parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] },
        async execute(args: { a: number; b: number }) {
          return { content: String(args.a + args.b) }
        },
      })
    },
  })

afterAll(() => console.log(`console screenshots: ${SHOTS}`))

/** What the relay saw of a stream request of the console. */
interface StreamSeen {
  url: string
  lastEventId?: string
}
type StreamHandler = (n: number, req: http.IncomingMessage, res: http.ServerResponse, upstream: (headers: http.IncomingHttpHeaders) => Promise<http.IncomingMessage>) => void | Promise<void>

/**
 * A relay between the browser and the test server at `target`, streamed both ways, that sees the
 * console's own stream requests: the n-th of them (from 0) goes to `onStream`, which answers it itself
 * or through `upstream`.
 */
async function startRelay(target: string, onStream: StreamHandler) {
  const up = new URL(target)
  const streams: StreamSeen[] = []
  const upstream = (req: http.IncomingMessage, res: http.ServerResponse, headers: http.IncomingHttpHeaders) =>
    new Promise<http.IncomingMessage>((resolve) => {
      const r = http.request({ host: up.hostname, port: up.port, method: req.method, path: req.url, headers: { ...headers, host: up.host } }, resolve)
      r.on('error', () => res.destroy())
      res.on('close', () => r.destroy())
      req.pipe(r)
    })
  const server = http.createServer((req, res) => {
    if (/^\/v1\/sessions\/[^/]+\/stream/.test(req.url ?? '')) {
      const lastEventId = req.headers['last-event-id']
      streams.push({ url: req.url!, lastEventId: typeof lastEventId === 'string' ? lastEventId : undefined })
      return void onStream(streams.length - 1, req, res, (headers) => upstream(req, res, headers))
    }
    void upstream(req, res, req.headers).then((ur) => {
      res.writeHead(ur.statusCode ?? 502, ur.headers)
      ur.pipe(res)
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    streams,
    close: async () => {
      server.closeAllConnections()
      await new Promise((r) => server.close(r))
    },
  }
}

describe.each(VIEWPORTS)('web console in Chromium at $width×$height', (viewport) => {
  const isPhone = viewport.width < 760
  let t: TestApp
  let browser: Browser
  const pageErrors: string[] = []

  beforeAll(async () => {
    if (!fs.existsSync(CHROMIUM)) {
      throw new Error(`${CHROMIUM} is missing: install Debian's chromium package (apt-get install chromium). This test never downloads a browser.`)
    }
    t = await startTestApp({ kind: 'pglite', plugins: [(root) => addPlugin(root)] })
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'] })
  })
  afterAll(async () => {
    await browser?.close()
    await t?.close()
  })

  const newPage = async (): Promise<Page> => {
    // without motion the drawer and colours are where they end at once, for the checks and the pictures
    const ctx = await browser.newContext({ viewport: { width: viewport.width, height: viewport.height }, reducedMotion: 'reduce' })
    const page = await ctx.newPage()
    page.on('pageerror', (e) => pageErrors.push(String(e)))
    return page
  }

  /** on failure, prints what the page shows and what the log holds */
  const explainOnFailure = (page: Page, sessionId: () => string | undefined) =>
    onTestFailed(async () => {
      const id = sessionId()
      const shown = await page.innerText('body').catch((e) => `(page unavailable: ${e})`)
      const log = id ? await t.events(id).catch((e) => `(log unavailable: ${e})`) : '(no session)'
      console.error(`--- the page ---\n${shown}\n--- the log of ${id} ---\n${typeof log === 'string' ? log : log.map((e) => `${e.seq} ${e.type} ${JSON.stringify(e.data).slice(0, 160)}`).join('\n')}\n--- page errors ---\n${pageErrors.join('\n')}`)
    })

  /** opens the console; a new user sees the key field first, and saves the key through it */
  const openConsole = async (page: Page, base = t.url, key = t.key) => {
    const res = await page.goto(`${base}/`)
    expect(res?.status()).toBe(200)
    expect(res?.headers()['content-type']).toMatch(/^text\/html/)
    expect((await looksRight(page, 'first-visit')).keyWidth).toBeGreaterThanOrEqual(160)
    await saveKey(page, key)
  }

  /** saves `key` through the key field; the status it then shows: `status` */
  const saveKey = async (page: Page, key: string, status = key ? 'saved' : 'no key') => {
    if (await drawerOpen(page)) await hideSessions(page)
    if (!(await page.isVisible('#api-key'))) await page.click('#key-toggle') // folded away on a phone once a key works
    await page.fill('#api-key', key)
    await page.click('#save-key')
    await expect.poll(() => page.textContent('#key-status'), WAIT).toBe(status)
  }

  /**
   * Takes a screenshot (for the eye: see SHOTS) and checks the facts of a usable layout: nothing
   * wider than the screen; a key field that shows is wide enough to paste into; an open session
   * gives the transcript the top of the screen and at least `transcriptShare` of its height.
   */
  const looksRight = async (page: Page, name: string, { transcriptShare = 0.5, transcript = true } = {}) => {
    await page.screenshot({ path: path.join(SHOTS, `${viewport.name}-${name}.png`) })
    const f = await page.evaluate(() => {
      const w = globalThis as any
      const el = (id: string) => w.document.getElementById(id)
      const shown = (id: string) => el(id).getClientRects().length > 0 && w.getComputedStyle(el(id)).visibility !== 'hidden'
      const wrap = el('transcript-wrap')
      return {
        scrollWidth: w.document.documentElement.scrollWidth as number,
        width: w.innerWidth as number,
        height: w.innerHeight as number,
        keyWidth: shown('api-key') ? (el('api-key').getBoundingClientRect().width as number) : null,
        sessionOpen: shown('session-view'),
        transcript: { top: wrap.getBoundingClientRect().top as number, height: wrap.getBoundingClientRect().height as number, scrollWidth: wrap.scrollWidth as number, clientWidth: wrap.clientWidth as number },
      }
    })
    expect(f.scrollWidth, `${name}: horizontal overflow`).toBeLessThanOrEqual(f.width)
    if (f.keyWidth !== null) expect(f.keyWidth, `${name}: key field width`).toBeGreaterThanOrEqual(160)
    // (`transcript: false` where a rejected key leaves nothing for the transcript to show)
    if (f.sessionOpen && transcript) {
      expect(f.transcript.height, `${name}: transcript height`).toBeGreaterThan(transcriptShare * f.height)
      expect(f.transcript.top, `${name}: transcript top`).toBeLessThan(0.25 * f.height)
      expect(f.transcript.scrollWidth, `${name}: transcript overflow`).toBeLessThanOrEqual(f.transcript.clientWidth)
    }
    return f
  }

  /** the session list: always beside the transcript on a desk, behind the Sessions toggle on a phone */
  const showSessions = async (page: Page) => {
    if (isPhone && !(await drawerOpen(page))) await page.click('#sessions-toggle')
    await expect.poll(() => page.$eval('#sidebar', (e) => (e as any).getBoundingClientRect().left), WAIT).toBe(0)
  }
  const drawerOpen = (page: Page) => page.$eval('body', (b) => b.classList.contains('drawer-open'))
  const hideSessions = async (page: Page) => {
    await page.click('#drawer-close')
    await expect.poll(() => page.isVisible('#sidebar'), WAIT).toBe(false)
  }
  const newSessionForm = async (page: Page) => {
    await showSessions(page)
    if (!(await page.$eval('#new-session', (d) => (d as any).open))) await page.click('#new-session summary')
  }
  const pickSession = async (page: Page, sel: string) => {
    await showSessions(page)
    await page.click(`#session-list ${sel} button`)
    if (isPhone) await expect.poll(() => page.isVisible('#sidebar'), WAIT).toBe(false) // the drawer gets out of the way
  }
  const listedIds = (page: Page) => page.$$eval('#session-list .session-item', (els) => els.map((e) => (e as any).dataset.id))
  const keyStatus = (page: Page) => page.textContent('#key-status')
  /** a tenant of its own, so that a test sees only its own sessions */
  const newTenant = async (name: string) => {
    const r = await t.api('POST', '/v1/admin/tenants', { name: `${name}-${viewport.name}` }, { key: t.adminToken })
    expect(r.status).toBe(201)
    const key: string = r.body.apiKey
    return {
      key,
      createSession: async (title?: string) => {
        const s = await t.api('POST', '/v1/sessions', {}, { key })
        expect(s.status).toBe(201)
        if (title) expect((await t.api('PATCH', `/v1/sessions/${encodeURIComponent(s.body.id)}`, { title }, { key })).status).toBe(200)
        return s.body.id as string
      },
    }
  }

  it('without a key nothing is sent and nothing says "key rejected": the console asks for a key', async () => {
    const tenant = await newTenant('keyless')
    const s = { id: await tenant.createSession() }
    const page = await newPage()
    explainOnFailure(page, () => s.id)
    const requests: string[] = []
    page.on('request', (r) => {
      if (new URL(r.url()).pathname.startsWith('/v1/')) requests.push(r.url())
    })
    // a link to a session, opened by someone without a key
    await page.goto(`${t.url}/#session=${encodeURIComponent(s.id)}`)
    expect((await looksRight(page, 'no-key')).keyWidth).toBeGreaterThanOrEqual(160)
    expect(await page.isVisible('#welcome')).toBe(true)
    expect(await page.isVisible('#key-hint')).toBe(true)
    expect(await page.textContent('#conn-text')).toBe('no API key')
    await showSessions(page)
    expect(await page.textContent('#sessions-empty')).toBe('Enter your API key at the top to see your sessions.')
    await looksRight(page, 'no-key-sessions')

    // creating a session asks for the key instead
    await newSessionForm(page)
    await page.click('#create-session')
    await expect.poll(() => page.textContent('#new-error'), WAIT).toMatch(/^No API key yet/)
    expect(await keyStatus(page)).toBe('paste a key first')
    expect(await page.evaluate(() => (globalThis as any).document.activeElement?.id)).toBe('api-key')
    // so does saving an empty field
    await saveKey(page, '')
    expect(requests).toEqual([])
    expect(await page.textContent('body')).not.toContain('rejected')

    // with the key, the linked session opens, and the stale error is gone
    await saveKey(page, tenant.key)
    await expect.poll(() => page.textContent('#session-id'), WAIT).toBe(s.id)
    await expect.poll(() => page.textContent('#conn-text'), WAIT).toBe('live')
    expect(await page.isHidden('#new-error')).toBe(true)
    expect(await page.isHidden('#key-hint')).toBe(true)
    await expect.poll(() => page.isVisible('#sidebar'), WAIT).toBe(!isPhone) // the drawer closed to show the key field
    await expect.poll(() => page.isVisible('#api-key'), WAIT).toBe(!isPhone) // on a phone it folds away once the key works
    await looksRight(page, 'linked-session')
    expect(pageErrors).toEqual([])
    await page.context().close()
  }, 60000)

  it('a changed key replaces the old tenant\'s list and session at once; a rejected key says so and shows nothing', async () => {
    const first = await newTenant('first')
    const second = await newTenant('second')
    const mine = { id: await first.createSession('Mine') }
    const theirs = { id: await second.createSession('Theirs') }
    t.models.script(mine.id, { text: ['a secret of the first tenant'] })
    expect((await t.api('POST', `/v1/sessions/${encodeURIComponent(mine.id)}/followup`, { content: 'tell me' }, { key: first.key })).status).toBe(202)

    const page = await newPage()
    explainOnFailure(page, () => mine.id)
    await openConsole(page, t.url, first.key)
    await pickSession(page, `.session-item[data-id="${mine.id}"]`)
    await expect.poll(() => assistantTexts(page), WAIT).toEqual(['a secret of the first tenant'])
    await showSessions(page)
    expect(await listedIds(page)).toEqual([mine.id])

    // the other tenant's list is held back, to see what shows meanwhile: nothing of the first tenant
    let release!: () => void
    const held = new Promise<void>((r) => (release = r))
    await page.route('**/v1/sessions?*', async (route) => {
      if (route.request().headers().authorization === `Bearer ${second.key}`) await held
      await route.continue()
    })
    await saveKey(page, second.key)
    expect(await listedIds(page)).toEqual([])
    expect(await page.$$eval('#transcript .item', (els) => els.length)).toBe(0)
    expect(await page.textContent('body')).not.toContain('a secret of the first tenant')
    release()
    await expect.poll(() => listedIds(page), WAIT).toEqual([theirs.id])
    expect(await page.$$eval('#session-list .session-name', (els) => els.map((e) => e.textContent))).toEqual(['Theirs'])
    // the address still names the first tenant's session: it is not there for this key
    await expect.poll(() => page.textContent('#welcome-error'), WAIT).toContain('session-not-found')
    expect(await page.isHidden('#session-view')).toBe(true)
    expect(await page.textContent('body')).not.toContain('a secret of the first tenant')
    expect(new URL(page.url()).hash).toBe('')
    await looksRight(page, 'other-tenant')

    // a wrong key: rejected, and the list is empty; the key field stays out so it can be corrected
    await saveKey(page, 'agd_not_a_key', 'key rejected')
    await expect.poll(() => page.textContent('#key-error'), WAIT).toContain('unauthorized')
    expect(await listedIds(page)).toEqual([])
    expect(await page.isHidden('#welcome-error')).toBe(true)
    expect((await looksRight(page, 'key-rejected')).keyWidth).toBeGreaterThanOrEqual(160)

    // the right key again: its list, and no stale error
    await saveKey(page, first.key)
    await showSessions(page)
    await expect.poll(() => listedIds(page), WAIT).toEqual([mine.id])
    expect(await page.isHidden('#sessions-error')).toBe(true)
    expect(await keyStatus(page)).toBe('saved')
    if (isPhone) {
      // once the key works the field folds away on a phone; the Key button brings it back
      await hideSessions(page)
      expect(await page.isVisible('#api-key')).toBe(false)
      await page.click('#key-toggle')
      expect((await looksRight(page, 'key-reopened')).keyWidth).toBeGreaterThanOrEqual(160)
    }
    expect(pageErrors).toEqual([])
    await page.context().close()
  }, 60000)

  /** the error boxes on screen, as [id, text] */
  const shownErrors = (page: Page) =>
    page.$$eval('.error', (els) => els.filter((e) => e.getClientRects().length > 0 && (globalThis as any).getComputedStyle(e).visibility !== 'hidden').map((e) => [e.id, e.textContent]))

  it('a wrong key is said once, under the key field, not again by every panel that met it', async () => {
    const tenant = await newTenant('wrong-key')
    const id = await tenant.createSession('Open')
    const page = await newPage()
    explainOnFailure(page, () => id)
    await openConsole(page, t.url, tenant.key)
    await pickSession(page, `.session-item[data-id="${id}"]`)
    await expect.poll(() => page.textContent('#conn-text'), WAIT).toBe('live')
    const rejected = new Set<string>()
    page.on('response', (r) => {
      if (r.status() === 401) rejected.add(new URL(r.url()).pathname)
    })
    // the session stays in the address, so every read of the console meets the wrong key: the
    // sidebar's four panels and the open session's own
    await saveKey(page, 'agd_not_a_key', 'key rejected')
    const sid = `/v1/sessions/${encodeURIComponent(id)}`
    await expect.poll(() => [...rejected], WAIT).toEqual(expect.arrayContaining(['/v1/sessions', '/v1/usage', '/v1/secrets', '/v1/webhooks', sid, `${sid}/stream`]))
    await expect.poll(() => page.textContent('#conn-text'), WAIT).toBe('disconnected')
    const once = [['key-error', 'The server rejected this key (unauthorized: unknown or revoked API key). Paste a key of yours and Save.']]
    await expect.poll(() => shownErrors(page), WAIT).toEqual(once)
    await showSessions(page)
    expect(await shownErrors(page)).toEqual(once)
    // the panels that only mean something for a working key step aside
    for (const panel of ['#usage-panel', '#secrets-panel', '#webhooks-panel']) expect(await page.isVisible(panel), panel).toBe(false)
    // the list says why it is empty, without repeating the error
    expect(await page.textContent('#sessions-empty')).toBe('This key was rejected: correct it at the top to see your sessions.')
    await looksRight(page, 'key-rejected-once-sessions', { transcript: false })
    if (isPhone) await hideSessions(page)
    await looksRight(page, 'key-rejected-once', { transcript: false })

    // the right key again: the error goes, the panels come back
    await saveKey(page, tenant.key)
    await expect.poll(() => page.textContent('#conn-text'), WAIT).toBe('live')
    await showSessions(page)
    await expect.poll(() => listedIds(page), WAIT).toEqual([id])
    expect(await shownErrors(page)).toEqual([])
    for (const panel of ['#usage-panel', '#secrets-panel', '#webhooks-panel']) expect(await page.isVisible(panel), panel).toBe(true)
    expect(pageErrors).toEqual([])
    await page.context().close()
  }, 60000)

  /** what `sel` shows: its text, and whether it all fits (nothing cut by an ellipsis or clipped) */
  const fits = (page: Page, sel: string) => page.$eval(sel, (e) => ({ text: e.textContent, whole: e.scrollWidth <= e.clientWidth && e.scrollHeight <= e.clientHeight, box: e.getBoundingClientRect().toJSON() as { left: number; right: number; top: number; bottom: number } }))

  it('the top bar shows the connection state whole, on a small phone too', async () => {
    const page = await newPage()
    explainOnFailure(page, () => undefined)
    const widths = isPhone ? [viewport.width, 360, 320] : [viewport.width]
    /** at every width: the state's text all shows, inside the bar, beside the brand and the Key button */
    const whole = async (text: string, name: string) => {
      for (const width of widths) {
        await page.setViewportSize({ width, height: viewport.height })
        const conn = await fits(page, '#conn-text')
        expect(conn.text).toBe(text)
        expect(conn.whole, `"${text}" at ${width} px`).toBe(true)
        expect(conn.box.right).toBeLessThanOrEqual(width)
        expect(conn.box.left, `"${text}" over the brand at ${width} px`).toBeGreaterThanOrEqual((await fits(page, '.brand')).box.right)
        if (await page.isVisible('#key-toggle')) expect(conn.box.right, `"${text}" under the Key button at ${width} px`).toBeLessThanOrEqual((await fits(page, '#key-toggle')).box.left)
        await page.screenshot({ path: path.join(SHOTS, `${viewport.name}-conn-${name}-${width}.png`) })
      }
      await page.setViewportSize({ width: viewport.width, height: viewport.height })
    }
    const tenant = await newTenant('connection')
    const id = await tenant.createSession()
    await page.goto(`${t.url}/`)
    await whole('no API key', 'no-key')
    await saveKey(page, tenant.key)
    await expect.poll(() => page.isVisible('#api-key'), WAIT).toBe(!isPhone)
    await whole('not connected', 'not-connected')
    await pickSession(page, `.session-item[data-id="${id}"]`)
    await expect.poll(() => page.textContent('#conn-text'), WAIT).toBe('live')
    await whole('live', 'live')
    expect(pageErrors).toEqual([])
    await page.context().close()
  }, 60000)

  it('a long title leaves the status badge whole, in the list and in the header', async () => {
    const tenant = await newTenant('long-title')
    const title = 'The quarterly numbers of the northern region, compared with last year and explained for the board'
    const id = await tenant.createSession(title)
    const page = await newPage()
    explainOnFailure(page, () => id)
    await openConsole(page, t.url, tenant.key)
    await pickSession(page, `.session-item[data-id="${id}"]`)
    await expect.poll(() => page.inputValue('#session-title'), WAIT).toBe(title)
    expect(await fits(page, '#status-badge')).toMatchObject({ text: 'idle', whole: true })
    await looksRight(page, 'long-title')
    await showSessions(page)
    const item = `#session-list .session-item[data-id="${id}"]`
    // what stands beside the title shows whole; the title gives way, with the whole of it on hover
    expect(await fits(page, `${item} .badge`)).toMatchObject({ text: 'idle', whole: true })
    for (const sel of [`${item} .session-line:nth-child(2) > span:last-child`, `${item} .session-line:nth-child(3) > span:last-child`]) expect((await fits(page, sel)).whole, sel).toBe(true)
    expect(await fits(page, `${item} .session-name`)).toMatchObject({ text: title, whole: false })
    expect(await page.getAttribute(`${item} .session-name`, 'title')).toBe(title)
    await looksRight(page, 'long-title-list')
    expect(pageErrors).toEqual([])
    await page.context().close()
  }, 60000)

  const texts = (page: Page, sel: string) => page.$$eval(sel, (els) => els.map((e) => (e as any).innerText.trim()))
  const badge = (page: Page) => page.textContent('#status-badge')
  /** every transcript item appears once: no seq is rendered twice */
  const expectUniqueSeqs = async (page: Page) => {
    const seqs = await page.$$eval('#transcript .item', (els) => els.map((e) => (e as any).dataset.seq))
    expect(seqs.length).toBeGreaterThan(0)
    expect(new Set(seqs).size).toBe(seqs.length)
  }
  /** the seqs of the transcript's items, in order (each durable event is one item, except a tool/result, which fills its call's card) */
  const itemSeqs = (page: Page) => page.$$eval('#transcript .item', (els) => els.map((e) => Number((e as any).dataset.seq)))
  const assistantTexts = (page: Page) => texts(page, '#transcript .msg.assistant .bubble')
  const userTexts = (page: Page) => texts(page, '#transcript .msg.user .bubble')

  it('create a session with a title, Enter sends a followup, the reply streams in then settles once, a reload rebuilds the transcript, Cancel ends a hung turn aborted', async () => {
    const page = await newPage()
    let id: string | undefined
    explainOnFailure(page, () => id)
    await openConsole(page)
    await newSessionForm(page)
    await expect.poll(() => page.textContent('#sessions-empty'), WAIT).toBe('No sessions yet: create the first one above.')
    await looksRight(page, 'no-sessions')

    // an API error is shown inline, and goes once the next action succeeds
    await page.fill('#new-model', 'nope/missing-model')
    await page.click('#create-session')
    await expect.poll(() => page.textContent('#new-error'), WAIT).toContain('model-unavailable')
    await page.click('#refresh-sessions')
    await expect.poll(() => page.isHidden('#new-error'), WAIT).toBe(true)

    // create through the form, with a title
    await page.fill('#new-title', 'My first session')
    await page.fill('#new-model', t.models.ref())
    await page.fill('#new-system', 'You are the console test agent.')
    await page.click('#create-session')
    await expect.poll(() => new URL(page.url()).hash, WAIT).toMatch(/^#session=/)
    expect(await page.isHidden('#new-error')).toBe(true)
    id = decodeURIComponent(new URL(page.url()).hash.slice('#session='.length))
    expect(await page.textContent('#session-id')).toBe(id)
    const created = await t.api('GET', `/v1/sessions/${encodeURIComponent(id)}`)
    expect(created.status).toBe(200)
    expect(created.body.model).toBe(t.models.ref())
    expect(created.body.title).toBe('My first session')
    await expect.poll(() => listedIds(page), WAIT).toEqual([id])
    expect(await page.$$eval('#session-list .session-name', (els) => els.map((e) => e.textContent))).toEqual(['My first session'])
    expect(await page.inputValue('#session-title')).toBe('My first session')
    await expect.poll(() => page.textContent('#conn-text'), WAIT).toBe('live')
    expect(await badge(page)).toBe('idle')
    // a new session says what to do instead of showing a blank transcript
    await expect.poll(() => page.textContent('#transcript-empty'), WAIT).toMatch(/^No messages yet\./)
    expect(await page.isVisible('#transcript-empty')).toBe(true)
    expect(await page.$eval('#new-session', (d) => (d as any).open)).toBe(false)
    await looksRight(page, 'new-session')

    // sending nothing is said inline; the next send that succeeds clears it
    await page.click('#btn-followup')
    await expect.poll(() => page.textContent('#composer-error'), WAIT).toBe('Type a message first.')

    // a reply that holds after two deltas, so the transient bubble can be seen before it settles
    const g = gate()
    t.models.script(id, { text: ['Hello', ' from', ' the', ' model.'], holdAfter: 2, gate: g.promise, usage: { input: 12, output: 4 } })
    const prompt = 'What is <b>up</b> & <img src=x onerror="window.__pwned=1">?\nSecond line.'
    const input = page.locator('#composer-input')
    await input.click()
    await input.type('What is <b>up</b> & <img src=x onerror="window.__pwned=1">?')
    await input.press('Shift+Enter') // a newline, not a send
    await input.type('Second line.')
    expect(await input.inputValue()).toBe(prompt)
    expect((await t.events(id)).length).toBe(0)
    await input.press('Enter')
    await expect.poll(() => input.inputValue(), WAIT).toBe('')
    expect(await page.isHidden('#composer-error')).toBe(true)

    await expect.poll(() => texts(page, '#transient-slot .transient .bubble'), WAIT).toEqual(['Hello from'])
    expect(await badge(page)).toBe('running')
    expect(await assistantTexts(page)).toEqual([])
    expect(await page.isHidden('#transcript-empty')).toBe(true)
    await looksRight(page, 'streaming')
    g.open()
    await expect.poll(() => assistantTexts(page), WAIT).toEqual(['Hello from the model.'])
    await expect.poll(() => page.$$eval('#transient-slot > *', (els) => els.length), WAIT).toBe(0)
    await expect.poll(() => badge(page), WAIT).toBe('idle')
    await expect.poll(() => page.textContent('#session-usage'), WAIT).toContain('in 12 · out 4')
    expect(await userTexts(page)).toEqual([prompt])
    expect(await page.$$eval('#transcript .msg.user b, #transcript .msg.user img', (els) => els.length)).toBe(0)
    expect(await page.evaluate(() => (globalThis as any).__pwned)).toBeUndefined()
    expect(await texts(page, '#transcript .turn-end')).toEqual(['Turn 1 completed'])
    await expectUniqueSeqs(page)

    // what the console sent: a followup (next-turn) with the exact text, and the system prompt
    const log = await t.waitIdle(id)
    expectValidLog(log)
    const spliced = log.find((e) => e.type === 'agent/inbox/spliced' && (e.data as any).inserted?.length)!
    expect((spliced.data as any).target).toBe('next-turn')
    expect(log.filter((e) => e.type === 'user/message').map((e) => (e.data as any).content)).toEqual([[{ type: 'text', text: prompt }]])
    expect(t.models.requestsOf(id)[0].context.systemPrompt).toContain('You are the console test agent.')
    await expect.poll(() => page.textContent('#session-head'), WAIT).toBe(String(log.at(-1)!.seq))

    // reload: the same transcript, rebuilt from the log
    await page.reload()
    await expect.poll(() => assistantTexts(page), WAIT).toEqual(['Hello from the model.'])
    expect(await userTexts(page)).toEqual([prompt])
    expect(await texts(page, '#transcript .turn-end')).toEqual(['Turn 1 completed'])
    expect(await page.inputValue('#api-key')).toBe(t.key)
    expect(await page.textContent('#session-id')).toBe(id)
    await expect.poll(() => badge(page), WAIT).toBe('idle')
    expect(await itemSeqs(page)).toEqual(log.map((e) => e.seq))

    // a hung reply, cancelled with the button
    t.models.script(id, { text: ['Let me', ' think'], hang: true })
    await input.fill('Take your time')
    await input.press('Enter')
    await expect.poll(() => texts(page, '#transient-slot .transient .bubble'), WAIT).toEqual(['Let me think'])
    await expect.poll(() => badge(page), WAIT).toBe('running')
    await page.click('#btn-cancel')
    await expect.poll(() => page.$$eval('#transcript .turn-end[data-reason="aborted"]', (els) => els.map((e) => (e as any).innerText.trim())), WAIT).toEqual(['Turn 2 aborted (user)'])
    await expect.poll(() => badge(page), WAIT).toBe('idle')
    await expect.poll(() => assistantTexts(page), WAIT).toEqual(['Hello from the model.', 'Let me think'])
    expect(await texts(page, '#transcript .msg.assistant .tag')).toEqual(['interrupted'])
    expect(await page.$$eval('#transient-slot > *', (els) => els.length)).toBe(0)
    expect(await userTexts(page)).toEqual([prompt, 'Take your time'])
    expect(await page.isHidden('#composer-error')).toBe(true)
    const log2 = await t.waitIdle(id)
    expectValidLog(log2)
    expect(log2.filter((e) => e.type === 'turn/end').map((e) => e.data)).toEqual([
      { turn: 1, reason: { kind: 'completed' } },
      { turn: 2, reason: { kind: 'aborted', reason: { kind: 'user' } } },
    ])
    await expectUniqueSeqs(page)

    // Inject queues without waking; the inbox panel shows it and removes it
    await input.fill('a note for later')
    await page.click('#btn-inject')
    await expect.poll(() => texts(page, '#inbox .inbox-item .inbox-text'), WAIT).toEqual(['a note for later'])
    expect((await t.api('GET', `/v1/sessions/${encodeURIComponent(id)}/inbox`)).body.nextStep.map((m: any) => m.content)).toEqual([[{ type: 'text', text: 'a note for later' }]])
    expect(await badge(page)).toBe('idle')
    await page.click('#inbox .inbox-item button')
    await expect.poll(() => texts(page, '#inbox .inbox-item'), WAIT).toEqual([])
    expect((await t.api('GET', `/v1/sessions/${encodeURIComponent(id)}/inbox`)).body).toEqual({ nextTurn: [], nextStep: [] })

    // Cancel with nothing running is said so inline
    await page.click('#btn-cancel')
    await expect.poll(() => page.textContent('#composer-error'), WAIT).toBe('nothing was running')
    await looksRight(page, 'after-cancel')

    expect(pageErrors).toEqual([])
    await page.context().close()
  }, 60000)

  it('a failed turn shows in the header and the list with its error code, a cancelled one as aborted; a completed turn clears it', async () => {
    const tenant = await newTenant('failing')
    const id = await tenant.createSession('Failing')
    // a rate limit asking for longer than the retry policy waits: not retried, the turn fails
    t.models.script(id, { error: '429 Rate limit reached for requests. Please try again in 60s.' })
    const page = await newPage()
    explainOnFailure(page, () => id)
    await openConsole(page, t.url, tenant.key)
    await pickSession(page, `.session-item[data-id="${id}"]`)
    await expect.poll(() => page.textContent('#conn-text'), WAIT).toBe('live')
    expect(await page.$$eval('#last-turn .last-turn', (els) => els.length)).toBe(0)
    const input = page.locator('#composer-input')
    await input.fill('hello?')
    await input.press('Enter')
    const header = () => page.$$eval('#last-turn .last-turn', (els) => els.map((e) => `${(e as any).dataset.reason} ${e.textContent}`))
    const listed = () => page.$$eval(`#session-list .session-item[data-id="${id}"] .last-turn`, (els) => els.map((e) => `${(e as any).dataset.reason} ${e.textContent}`))
    await expect.poll(header, WAIT).toEqual(['error failed: RATE_LIMIT'])
    expect(await badge(page)).toBe('idle')
    const api = (await t.api('GET', `/v1/sessions/${encodeURIComponent(id)}`, undefined, { key: tenant.key })).body
    expect(api.lastTurn).toMatchObject({ turn: 1, reason: { kind: 'error', error: { code: 'RATE_LIMIT' } } })
    expect(await page.getAttribute('#last-turn .last-turn', 'title')).toContain('turn 1 error: RATE_LIMIT')
    await looksRight(page, 'failed-turn')
    await showSessions(page)
    await expect.poll(listed, WAIT).toEqual(['error failed: RATE_LIMIT'])
    await looksRight(page, 'failed-turn-list')
    if (isPhone) await hideSessions(page)

    // cancelled with the button: aborted
    t.models.script(id, { text: ['Let me'], hang: true })
    await input.fill('take your time')
    await input.press('Enter')
    await expect.poll(() => badge(page), WAIT).toBe('running')
    await expect.poll(() => texts(page, '#transient-slot .transient .bubble'), WAIT).toEqual(['Let me'])
    await page.click('#btn-cancel')
    await expect.poll(header, WAIT).toEqual(['aborted aborted'])
    await showSessions(page)
    await expect.poll(listed, WAIT).toEqual(['aborted aborted'])
    if (isPhone) await hideSessions(page)

    // a completed turn: nothing to point out any more
    t.models.script(id, { text: ['All good now.'] })
    await input.fill('and now?')
    await input.press('Enter')
    await expect.poll(() => assistantTexts(page), WAIT).toContain('All good now.')
    await expect.poll(header, WAIT).toEqual([])
    await showSessions(page)
    await expect.poll(listed, WAIT).toEqual([])
    const log = (await t.api('GET', `/v1/sessions/${encodeURIComponent(id)}/events?limit=5000`, undefined, { key: tenant.key })).body.events
    expectValidLog(log)
    expect(log.filter((e: any) => e.type === 'turn/end').map((e: any) => e.data.reason.kind)).toEqual(['error', 'aborted', 'completed'])
    expect(pageErrors).toEqual([])
    await page.context().close()
  }, 60000)

  it('a continuation turn after crash repair shows as continuing after an interruption (SPEC §19)', async () => {
    const tenant = await newTenant('continued')
    const id = await tenant.createSession('Continued')
    t.models.script(id, { text: ['Picking up where I was.'] })
    await leaveCrashedTurn(t.app.db, id, { cancel: false })
    await expect
      .poll(async () => (await t.api('GET', `/v1/sessions/${encodeURIComponent(id)}/events?limit=5000`, undefined, { key: tenant.key })).body.events.filter((e: any) => e.type === 'turn/end').length, { timeout: 15000 })
      .toBe(2)
    const page = await newPage()
    explainOnFailure(page, () => id)
    await openConsole(page, t.url, tenant.key)
    await pickSession(page, `.session-item[data-id="${id}"]`)
    await expect.poll(() => assistantTexts(page), WAIT).toEqual(['Picking up where I was.'])
    expect(await texts(page, '#transcript .turn-start.continuation .continuation-tag')).toEqual(['continuing after an interruption (turn 1)'])
    expect(await page.$$eval('#transcript .turn-start', (els) => els.map((e) => (e as any).dataset.continues ?? null))).toEqual([null, '1'])
    expect(await page.$$eval('#transcript .turn-end', (els) => els.map((e) => (e as any).dataset.reason))).toEqual(['interrupted', 'completed'])
    await looksRight(page, 'continuation')
    expect(pageErrors).toEqual([])
    await page.context().close()
  }, 60000)

  it('pending tool calls: Allow an approval and send a client tool result from the side panel', async () => {
    const s = await t.createSession({
      system: 'tools',
      tools: [
        { name: 'add', execution: { type: 'builtin' }, approval: 'always' },
        { name: 'ask_user', description: 'Asks the user', parameters: { type: 'object', properties: { question: { type: 'string' } } }, execution: { type: 'client' } },
      ],
    })
    await t.api('PATCH', `/v1/sessions/${encodeURIComponent(s.id)}`, { title: 'Tool <i>demo</i>' })
    t.models.script(
      s.id,
      { text: ['Let me add that.'], toolCalls: [{ id: 'call_add', name: 'add', arguments: { a: 2, b: 3 } }] },
      { toolCalls: [{ id: 'call_ask', name: 'ask_user', arguments: { question: 'Favourite colour?' } }] },
      { reasoning: ['The user said blue.'], text: ['2 + 3 = 5, and your favourite colour is blue.'] },
    )
    const page = await newPage()
    explainOnFailure(page, () => s.id)
    await openConsole(page)
    await pickSession(page, `.session-item[data-id="${s.id}"]`)
    await expect.poll(() => page.inputValue('#session-title'), WAIT).toBe('Tool <i>demo</i>')
    await expect.poll(() => page.textContent('#conn-text'), WAIT).toBe('live')
    await page.fill('#composer-input', 'Add 2 and 3, then ask me my favourite colour.')
    await page.click('#btn-followup')

    // the approval
    const approval = page.locator('#pending .pending-call[data-kind="approval"]')
    await approval.waitFor(WAIT)
    expect(await approval.locator('.tool-name').textContent()).toBe('add')
    // the pending calls take a share of a phone's screen above the composer; the transcript keeps the most
    await looksRight(page, 'approval', { transcriptShare: 0.4 })
    // what is to be allowed shows whole: the arguments are not clipped, and the card with its buttons
    // is inside the column that holds it
    const argsShown = await fits(page, '#pending .pending-call[data-kind="approval"] pre')
    expect(JSON.parse(argsShown.text!)).toEqual({ a: 2, b: 3 })
    expect(argsShown.whole, 'the arguments are clipped').toBe(true)
    const side = (await fits(page, '.side')).box
    const card = (await fits(page, '#pending .pending-call[data-kind="approval"]')).box
    expect(card.top).toBeGreaterThanOrEqual(side.top)
    expect(card.bottom, 'the approval card runs out of its column').toBeLessThanOrEqual(side.bottom)
    await approval.locator('button', { hasText: 'Allow' }).click()
    // the client call
    const client = page.locator('#pending .pending-call[data-kind="client"]')
    await client.waitFor(WAIT)
    expect(await client.locator('.tool-name').textContent()).toBe('ask_user')
    expect(await client.locator('pre').textContent()).toContain('Favourite colour?')
    expect((await fits(page, '#pending .pending-call[data-kind="client"] pre')).whole, 'the arguments are clipped').toBe(true)
    await client.locator('textarea').fill('blue')
    await client.locator('button', { hasText: 'Send result' }).click()

    await expect.poll(() => badge(page), WAIT).toBe('idle')
    await expect.poll(() => assistantTexts(page), WAIT).toEqual(['Let me add that.\n↳ calls add', '↳ calls ask_user', 'Reasoning\n2 + 3 = 5, and your favourite colour is blue.'])
    await expect.poll(() => texts(page, '#transcript .tool .tool-result'), WAIT).toEqual(['5', 'blue'])
    await expect.poll(() => page.$$eval('#pending .pending-call', (els) => els.length), WAIT).toBe(0)
    await expectUniqueSeqs(page)

    const log = await t.waitIdle(s.id)
    expectValidLog(log)
    const results = log.filter((e) => e.type === 'tool/result').map((e) => (e.data as any).message.content[0])
    expect(results.map((r) => [r.toolCallId, r.isError, r.content])).toEqual([
      ['call_add', false, [{ type: 'text', text: '5' }]],
      ['call_ask', false, [{ type: 'text', text: 'blue' }]],
    ])

    // a rich transcript, light and dark
    await looksRight(page, 'tools')
    await page.emulateMedia({ colorScheme: 'dark' })
    await looksRight(page, 'tools-dark')
    expect(pageErrors).toEqual([])
    await page.context().close()
  }, 60000)

  it("a client tool with approval 'always': Allow on its approval card, then the same call comes back as a client card that sends the result", async () => {
    const s = await t.createSession({
      system: 'tools',
      tools: [{ name: 'ask_user', description: 'Asks the user', parameters: { type: 'object', properties: { question: { type: 'string' } } }, execution: { type: 'client' }, approval: 'always' }],
    })
    t.models.script(s.id, { toolCalls: [{ id: 'call_ask', name: 'ask_user', arguments: { question: 'Favourite colour?' } }] }, { text: ['Your favourite colour is green.'] })
    const page = await newPage()
    explainOnFailure(page, () => s.id)
    await openConsole(page)
    await pickSession(page, `.session-item[data-id="${s.id}"]`)
    await expect.poll(() => page.textContent('#conn-text'), WAIT).toBe('live')
    await page.fill('#composer-input', 'Ask me my favourite colour.')
    await page.click('#btn-followup')

    const approval = page.locator('#pending .pending-call[data-kind="approval"][data-call-id="call_ask"]')
    await approval.waitFor(WAIT)
    expect(await page.$$eval('#pending .pending-call[data-kind="client"]', (els) => els.length)).toBe(0)
    await approval.locator('button', { hasText: 'Allow' }).click()
    const client = page.locator('#pending .pending-call[data-kind="client"][data-call-id="call_ask"]')
    await client.waitFor(WAIT)
    await expect.poll(() => page.$$eval('#pending .pending-call', (els) => els.map((el) => el.getAttribute('data-kind'))), WAIT).toEqual(['client'])
    expect(await client.locator('pre').textContent()).toContain('Favourite colour?')
    await client.locator('textarea').fill('green')
    await client.locator('button', { hasText: 'Send result' }).click()

    await expect.poll(() => badge(page), WAIT).toBe('idle')
    await expect.poll(() => texts(page, '#transcript .tool .tool-result'), WAIT).toEqual(['green'])
    await expect.poll(() => page.$$eval('#pending .pending-call', (els) => els.length), WAIT).toBe(0)
    const log = await t.waitIdle(s.id)
    expectValidLog(log)
    expect(log.filter((e) => e.type === 'tool/result').map((e) => (e.data as any).message.content[0].content)).toEqual([[{ type: 'text', text: 'green' }]])
    expect(pageErrors).toEqual([])
    await page.context().close()
  }, 60000)

  it('the session list pages with Load more; after a dropped stream the SDK resumes with Last-Event-ID and a replayed backlog shows nothing twice', async () => {
    for (let i = 0; i < 32; i++) await t.createSession({ metadata: { filler: i } })
    const s = await t.createSession()
    t.models.script(s.id, { text: ['first answer'] }, { text: ['second answer'] })
    await t.api('POST', `/v1/sessions/${encodeURIComponent(s.id)}/followup`, { content: 'first question' })
    const log = await t.waitIdle(s.id)
    const head = log.at(-1)!.seq
    const all = await t.api('GET', '/v1/sessions?limit=200')
    const total: number = all.body.sessions.length
    expect(total).toBeGreaterThan(30)
    expect(total).toBeLessThanOrEqual(60)

    // the console talks to the server through a relay that sees the browser's own stream requests:
    // the first stream answers the backlog and ends, so client.stream() reconnects by itself; the
    // reconnect is forwarded without its Last-Event-ID, so the server sends the whole log again,
    // which the console must not show twice
    const relay = await startRelay(t.url, async (n, req, res, upstream) => {
      if (n === 0) {
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
        res.end('retry: 150\n\n' + log.map((e) => `event: session/event\nid: ${e.seq}\ndata: ${JSON.stringify(e)}\n\n`).join(''))
        return
      }
      const { 'last-event-id': _dropped, ...headers } = req.headers
      const ur = await upstream(headers)
      res.writeHead(ur.statusCode ?? 502, ur.headers)
      ur.pipe(res)
    })
    const streams = relay.streams
    const proxyUrl = relay.url
    const page = await newPage()
    explainOnFailure(page, () => s.id)
    await openConsole(page, proxyUrl)

    // paging: 30 per page
    await showSessions(page)
    await expect.poll(() => page.$$eval('#session-list .session-item', (els) => els.length), WAIT).toBe(30)
    expect(await page.isVisible('#load-more')).toBe(true)
    expect(await page.getAttribute('#session-list .session-item:first-child', 'data-id')).toBe(s.id)
    await page.click('#load-more')
    await expect.poll(() => page.$$eval('#session-list .session-item', (els) => els.length), WAIT).toBe(total)
    expect(await page.isHidden('#load-more')).toBe(true)
    const ids = await page.$$eval('#session-list .session-item', (els) => els.map((e) => (e as any).dataset.id))
    expect(ids).toEqual(all.body.sessions.map((x: any) => x.id))

    await looksRight(page, 'long-list')
    await pickSession(page, '.session-item:first-child')
    await expect.poll(() => streams.length, WAIT).toBeGreaterThanOrEqual(2)
    expect(streams[0].lastEventId).toBeUndefined()
    expect(streams[1].lastEventId).toBe(String(head))
    await expect.poll(() => page.textContent('#conn-text'), WAIT).toBe('live')
    expect(await userTexts(page)).toEqual(['first question'])
    expect(await assistantTexts(page)).toEqual(['first answer'])
    expect(await texts(page, '#transcript .turn-end')).toEqual(['Turn 1 completed'])
    await expectUniqueSeqs(page)
    expect(await itemSeqs(page)).toEqual(log.map((e) => e.seq))

    // the resumed connection is live
    await page.fill('#composer-input', 'second question')
    await page.press('#composer-input', 'Enter')
    await expect.poll(() => assistantTexts(page), WAIT).toEqual(['first answer', 'second answer'])
    await expect.poll(() => badge(page), WAIT).toBe('idle')
    expect(await userTexts(page)).toEqual(['first question', 'second question'])
    expect(await texts(page, '#transcript .turn-end')).toEqual(['Turn 1 completed', 'Turn 2 completed'])
    await expectUniqueSeqs(page)
    expect(streams.length).toBe(2)
    expect(pageErrors).toEqual([])
    await page.context().close()
    await relay.close()
  }, 60000)

  it('runs on the SDK build: its modules come from /console/sdk/, every request is the SDK\'s fetch, and sends carry its idempotency keys', async () => {
    const s = await t.createSession()
    t.models.script(s.id, { text: ['answered through the SDK'] })
    const page = await newPage()
    explainOnFailure(page, () => s.id)
    // every fetch the page makes, with the frame that called it; any EventSource, XMLHttpRequest or WebSocket at all
    await page.addInitScript(() => {
      const w = globalThis as any
      w.__net = []
      const fetch0 = w.fetch
      w.fetch = function (input: unknown, init?: unknown) {
        w.__net.push({ kind: 'fetch', url: String((input as { url?: string })?.url ?? input), caller: String(new Error().stack).split('\n')[2] ?? '' })
        return fetch0.call(this, input, init)
      }
      for (const name of ['EventSource', 'XMLHttpRequest', 'WebSocket']) {
        const Original = w[name]
        w[name] = function (...args: unknown[]) {
          w.__net.push({ kind: name, url: String(args[0]) })
          return new Original(...args)
        }
      }
    })
    const modules: Array<{ path: string; status: number; type?: string }> = []
    const sends: Array<Record<string, string>> = []
    page.on('response', (r) => {
      const u = new URL(r.url())
      if (u.pathname.endsWith('.js')) modules.push({ path: u.pathname, status: r.status(), type: r.headers()['content-type'] })
    })
    page.on('request', (r) => {
      if (r.method() === 'POST' && /\/followup$/.test(new URL(r.url()).pathname)) sends.push(r.headers())
    })
    await openConsole(page)
    await pickSession(page, `.session-item[data-id="${s.id}"]`)
    await expect.poll(() => page.textContent('#conn-text'), WAIT).toBe('live')
    await page.fill('#composer-input', 'through the SDK, please')
    await page.press('#composer-input', 'Enter')
    await expect.poll(() => assistantTexts(page), WAIT).toEqual(['answered through the SDK'])
    await expect.poll(() => badge(page), WAIT).toBe('idle')

    // the console's api.js imports the library as agentd serves it, module by module
    const sdk = modules.filter((m) => m.path.startsWith('/console/sdk/')).map((m) => m.path)
    for (const file of ['index.js', 'client.js', 'http.js', 'stream.js', 'sse.js', 'retry.js', 'errors.js']) expect(sdk, file).toContain(`/console/sdk/${file}`)
    for (const m of modules) {
      expect(m.status, m.path).toBe(200)
      expect(m.type, m.path).toMatch(/^text\/javascript/)
    }
    // every request went out through the SDK's transport; nothing opened a connection of another kind
    const net: Array<{ kind: string; url: string; caller?: string }> = await page.evaluate(() => (globalThis as any).__net)
    expect(net.filter((n) => n.kind !== 'fetch')).toEqual([])
    const paths = net.map((n) => new URL(n.url).pathname)
    expect(paths).toContain(`/v1/sessions/${s.id}/stream`)
    expect(paths).toContain(`/v1/sessions/${s.id}/followup`)
    expect(paths).toContain('/v1/sessions')
    for (const n of net) expect(n.caller, `${n.url} was fetched by ${n.caller}`).toMatch(/\/console\/sdk\/[a-z.]+\.js:\d+:\d+\)?$/)
    // the send is a safe one: an idempotency key of the SDK's
    expect(sends).toHaveLength(1)
    expect(sends[0]['idempotency-key']).toMatch(/^sdk-[0-9a-f]{32}$/)
    const log = await t.waitIdle(s.id)
    expectValidLog(log)
    expect(log.filter((e) => e.type === 'user/message').map((e) => (e.data as any).content)).toEqual([[{ type: 'text', text: 'through the SDK, please' }]])
    expect(pageErrors).toEqual([])
    await page.context().close()
  }, 60000)

  it('a stream cut mid-answer resumes on the snapshot, and chunks the snapshot covered, sent again after it, show once', async () => {
    const s = await t.createSession()
    const g = gate()
    t.models.script(s.id, { text: ['Hello', ' from', ' the', ' model.'], holdAfter: 2, gate: g.promise })
    // the first stream is cut after the chunk " from"; the second one gets those chunks again right
    // after its snapshot, as a server may send a chunk the snapshot already covers (API.md §6)
    const chunks: string[] = []
    let replayed = false
    const relay = await startRelay(t.url, async (n, req, res, upstream) => {
      const ur = await upstream(req.headers)
      res.writeHead(ur.statusCode ?? 502, ur.headers)
      ur.setEncoding('utf8')
      let buf = ''
      ur.on('data', (text: string) => {
        buf += text
        for (let i = buf.indexOf('\n\n'); i >= 0; i = buf.indexOf('\n\n')) {
          const frame = buf.slice(0, i + 2)
          buf = buf.slice(i + 2)
          res.write(frame)
          if (n === 0 && frame.includes('"kind":"chunk"')) {
            chunks.push(frame)
            if (frame.includes('" from"')) return void (ur.destroy(), res.end())
          }
          if (n === 1 && !replayed && frame.includes('"kind":"snapshot"')) {
            replayed = true
            for (const c of chunks) res.write(c)
          }
        }
      })
      ur.on('end', () => res.end())
    })
    const page = await newPage()
    explainOnFailure(page, () => s.id)
    await openConsole(page, relay.url)
    await pickSession(page, `.session-item[data-id="${s.id}"]`)
    await expect.poll(() => page.textContent('#conn-text'), WAIT).toBe('live')
    // every text the streaming bubble shows, as it changes
    await page.evaluate(() => {
      const w = globalThis as any
      w.__bubble = []
      const slot = w.document.getElementById('transient-slot')
      new w.MutationObserver(() => {
        const b = slot.querySelector('.transient .bubble')
        if (b) w.__bubble.push(b.textContent)
      }).observe(slot, { subtree: true, childList: true, characterData: true })
    })
    await page.fill('#composer-input', 'say hello')
    await page.press('#composer-input', 'Enter')
    await expect.poll(() => replayed, WAIT).toBe(true)
    expect(relay.streams).toHaveLength(2)
    expect(relay.streams[1].lastEventId).toMatch(/^\d+$/)
    expect(chunks.length).toBeGreaterThanOrEqual(2)
    await expect.poll(() => texts(page, '#transient-slot .transient .bubble'), WAIT).toEqual(['Hello from'])
    await expect.poll(() => page.textContent('#conn-text'), WAIT).toBe('live')
    g.open()
    await expect.poll(() => assistantTexts(page), WAIT).toEqual(['Hello from the model.'])
    await expect.poll(() => page.$$eval('#transient-slot > *', (els) => els.length), WAIT).toBe(0)
    const shown: string[] = await page.evaluate(() => (globalThis as any).__bubble)
    expect(shown).toContain('Hello from')
    for (const text of shown) expect('Hello from the model.'.startsWith(text), `the bubble showed ${JSON.stringify(text)}`).toBe(true)
    await expectUniqueSeqs(page)
    expect(await itemSeqs(page)).toEqual((await t.waitIdle(s.id)).map((e) => e.seq))
    expect(pageErrors).toEqual([])
    await page.context().close()
    await relay.close()
  }, 60000)
})

describe('the console on the SDK build, at the source and at the route', () => {
  let t: TestApp
  let fresh: string
  beforeAll(async () => {
    t = await startTestApp({ kind: 'pglite' })
    // the library as its sources compile today (`tsc -p clients/typescript`), to compare with what agentd serves
    fresh = await sdkBuild()
  }, 120000)
  afterAll(async () => {
    await t?.close()
  })

  it('no console module but api.js reaches the network, and api.js does it only through the SDK it imports from /console/sdk/', () => {
    const files = fs.readdirSync(WEB_DIR).filter((f) => f.endsWith('.js'))
    expect(files).toContain('api.js')
    for (const f of files) {
      const code = fs.readFileSync(path.join(WEB_DIR, f), 'utf8').replace(/\/\/.*$/gm, '')
      expect(code, `web/${f} calls the network itself`).not.toMatch(/\bfetch\s*\(|\bEventSource\b|\bXMLHttpRequest\b|\bWebSocket\b|\bsendBeacon\b/)
      const imports = [...code.matchAll(/\bfrom\s+['"]([^'"]+)['"]|\bimport\s*\(\s*['"]([^'"]+)['"]/g)].map((m) => m[1] ?? m[2])
      for (const spec of imports) expect(spec, `web/${f} imports ${spec}`).toMatch(f === 'api.js' ? /^\.\/(sdk\/index|[a-z-]+)\.js$/ : /^\.\/[a-z-]+\.js$/)
      if (f !== 'api.js') expect(imports, `web/${f} imports the SDK itself`).not.toContain('./sdk/index.js')
    }
    expect(fs.readFileSync(path.join(WEB_DIR, 'api.js'), 'utf8')).toMatch(/import \{[^}]*\bAgentdClient\b[^}]*\} from '\.\/sdk\/index\.js'/)
  })

  it('GET /console/sdk/:file serves the library build as it compiles from its sources today, module by module, as the console files are', async () => {
    const served = async (file: string) => {
      const r = await fetch(`${t.url}/console/sdk/${file}`)
      return { status: r.status, type: r.headers.get('content-type'), cache: r.headers.get('cache-control'), text: await r.text() }
    }
    const own = await fetch(`${t.url}/console/api.js`)
    // the module graph from index.js: every module it reaches is served, and is what the sources compile to
    const seen = new Set<string>()
    const walk = async (file: string) => {
      if (seen.has(file)) return
      seen.add(file)
      const r = await served(file)
      expect(r.status, file).toBe(200)
      expect(r.type, file).toBe('text/javascript; charset=utf-8')
      expect(r.cache, file).toBe(own.headers.get('cache-control'))
      expect(r.text, `${file}: clients/typescript/dist is stale: run npm run build:client`).toBe(fs.readFileSync(path.join(fresh, file), 'utf8'))
      for (const m of r.text.matchAll(/\bfrom\s+['"]\.\/([^'"]+)['"]|\bimport\s*\(\s*['"]\.\/([^'"]+)['"]/g)) await walk(m[1] ?? m[2])
    }
    await walk('index.js')
    for (const file of ['client.js', 'http.js', 'stream.js', 'sse.js', 'watch.js', 'run.js']) expect(seen, file).toContain(file)
    // every module of the library build is there, not only those the graph reaches
    for (const f of fs.readdirSync(fresh).filter((x) => x.endsWith('.js'))) expect((await served(f)).status, f).toBe(200)
  })

  it('serves nothing else: not the terminal client, not type declarations or maps, nothing outside the build; each refusal is API.md §10', async () => {
    expect(fs.existsSync(path.join(SDK_DIR, 'cli', 'agentd-chat.js')), 'the full build has the terminal client, which the route must not serve').toBe(true)
    expect(fs.existsSync(path.join(SDK_DIR, 'index.d.ts'))).toBe(true)
    for (const file of ['cli%2Fagentd-chat.js', 'cli%2Frender.js', 'index.d.ts', 'index.js.map', 'nope.js', '..%2F..%2F..%2Fpackage.json', '..%2Fpackage.json', '%2E%2E%2Fsrc%2Findex.ts', '.', '..%2F..%2F..%2Fweb%2Fapi.js']) {
      const r = await fetch(`${t.url}/console/sdk/${file}`)
      expect(r.status, file).toBe(404)
      expect(((await r.json()) as any).error.code, file).toBe('not-found')
    }
    // a path of two segments is no route at all
    expect((await fetch(`${t.url}/console/sdk/cli/agentd-chat.js`)).status).toBe(404)
    const bad = await fetch(`${t.url}/console/sdk/a%00.js`)
    expect(bad.status).toBe(400)
    expect(((await bad.json()) as any).error.code).toBe('bad-request')
  })

  it('is a route of openapi.json with its own operation id', async () => {
    const doc = (await (await fetch(`${t.url}/openapi.json`)).json()) as any
    expect(doc.paths['/console/sdk/{file}'].get.operationId).toBe('consoleSdkModule')
  })
})
