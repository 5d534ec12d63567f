// API.md §17 intro "Resume beyond the anchors" for Responses (§17.1), on one database (docs/testing.md): for
// generated scripts (text, reasoning, server tool calls, retried attempts, a steer mid-turn) each
// response is read once live as it runs, once after it ended, and then resumed at every
// sequence_number N: the live read and the later one are the same bytes, and every resumed read is
// exactly the frames after N.

import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { gate } from '../helpers/scripted.js'
import { generateScript } from '../helpers/resume-scripts.js'

const frames = (text: string) => text.split('\n\n').filter((f) => f !== '').map((f) => `${f}\n\n`)

describe.each(APP_DB_KINDS)('Responses resume on %s', (kind) => {
  let t: TestApp
  let toolServer: http.Server
  let toolUrl = ''
  beforeAll(async () => {
    t = await startTestApp({ kind })
    toolServer = http.createServer((req, res) => {
      let body = ''
      req.on('data', (c) => (body += c))
      req.on('end', () => {
        res.setHeader('content-type', 'application/json')
        res.end(JSON.stringify({ content: `found ${JSON.parse(body).arguments.q}` }))
      })
    })
    await new Promise<void>((res) => toolServer.listen(0, '127.0.0.1', res))
    toolUrl = `http://127.0.0.1:${(toolServer.address() as AddressInfo).port}/`
  })
  afterAll(async () => {
    await t?.close()
    toolServer?.close()
  })

  const post = (body: unknown) => fetch(`${t.url}/v1/responses`, { method: 'POST', headers: { authorization: `Bearer ${t.key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) })
  const replay = async (id: string, after?: number) => {
    const r = await fetch(`${t.url}/v1/responses/${id}?stream=true${after === undefined ? '' : `&starting_after=${after}`}`, { headers: { authorization: `Bearer ${t.key}` } })
    expect(r.status).toBe(200)
    return r.text()
  }

  /** the id of the response of the session's first input (its delivery splice) */
  const events0 = (sessionId: string) => `resp_${Buffer.from(sessionId).toString('base64url')}_i${firstDelivery.get(sessionId)}`
  const firstDelivery = new Map<string, number>()

  it.each([1, 2, 3, 4, 5, 6])('script %i: the live read, the later read and every resumed read agree', async (seed) => {
    const script = generateScript(seed)
    const s = await t.createSession({ tools: [{ name: 'lookup', description: 'look up', parameters: { type: 'object', properties: { q: { type: 'string' } } }, execution: { type: 'http', url: toolUrl } }] })
    const g = gate()
    const steps = script.steps.map((st, i) => (i === 0 && script.steer ? { ...st, error: undefined, holdAfter: 1, gate: g.promise } : st))
    t.models.script(s.id, ...steps)
    firstDelivery.set(s.id, (await t.events(s.id)).length)
    const res = await post({ model: t.models.ref(), conversation: s.id, input: `script ${seed}`, stream: true })
    expect(res.status).toBe(200)
    const live = res.text()
    let resumedLive: Promise<string> | undefined
    if (script.steer) {
      await t.models.waitForRequest(s.id, 1)
      // a resume while the response runs (its first attempt streaming): live, then from the log
      resumedLive = replay(events0(s.id), 2)
      await new Promise((r) => setTimeout(r, 30))
      expect((await t.api('POST', `/v1/sessions/${s.id}/steer`, { content: 'steer it' })).status).toBe(202)
      g.open()
    }
    const liveText = await live
    const all = frames(liveText)
    expect(all.at(-1)).toBe('data: [DONE]\n\n')
    const events = all.slice(0, -1).map((f) => JSON.parse(f.slice(f.indexOf('data: ') + 6)))
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i))
    expect(['response.completed']).toContain(events.at(-1).type)
    const id = events[0].response.id
    // the same bytes, read from the log after the end
    expect(await replay(id)).toBe(liveText)
    if (resumedLive) expect(await resumedLive).toBe(all.slice(3).join(''))
    for (let n = -1; n < events.length; n++) expect(await replay(id, n), `starting_after=${n}`).toBe(all.slice(n + 1).join(''))
    // the steer was admitted into the response (its input), which went on after it
    if (script.steer) {
      const items = (await t.api('GET', `/v1/responses/${id}/input_items`)).body.data
      expect(items.map((i: any) => i.content[0].text)).toEqual([`script ${seed}`, 'steer it'])
    }
  })
})
