// API.md §17 intro "Resume beyond the anchors" for the AI SDK UI stream (§17.2) and AG-UI (§17.3), on
// one database (docs/testing.md), with the generated scripts of the Responses resume test (text, reasoning, server tool
// calls, retried attempts, a steer mid-turn): each span is read once live as it runs and once after it
// ended (the same message id, the same runId: nothing inserted) — the same bytes; and an AG-UI run is
// resumed with Last-Event-ID at every id N: exactly the frames after N, after RUN_STARTED and the
// starts of what the client was inside.

import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { gate } from '../helpers/scripted.js'
import { generateScript } from '../helpers/resume-scripts.js'

const blocks = (text: string) => text.split('\n\n').filter((f) => f !== '').map((f) => `${f}\n\n`)

describe.each(APP_DB_KINDS)('chat protocols resume on %s', (kind) => {
  let t: TestApp
  let toolServer: http.Server
  beforeAll(async () => {
    t = await startTestApp({ kind })
    toolServer = http.createServer((req, res) => {
      let body = ''
      req.on('data', (c) => (body += c))
      req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ content: `found ${JSON.parse(body).arguments.q}` })))
    })
    await new Promise<void>((r) => toolServer.listen(0, '127.0.0.1', r))
    const url = `http://127.0.0.1:${(toolServer.address() as AddressInfo).port}/`
    const r = await t.api('POST', '/v1/agents', { id: 'resumer', name: 'resumer', model: t.models.ref(), tools: [{ name: 'lookup', description: 'look up', parameters: { type: 'object', properties: { q: { type: 'string' } } }, execution: { type: 'http', url } }] })
    expect(r.status).toBe(201)
  })
  afterAll(async () => {
    await t?.close()
    toolServer?.close()
  })

  const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${t.url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${t.key}`, 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) })

  /** Runs a script through `start` (a POST answered with the span's stream), steering it mid-turn if the script says so. */
  const runScript = async (id: string, seed: number, start: () => Promise<Response>) => {
    const script = generateScript(seed)
    const g = gate()
    t.models.script(id, ...script.steps.map((st, i) => (i === 0 && script.steer ? { ...st, error: undefined, holdAfter: 1, gate: g.promise } : st)))
    const res = await start()
    expect(res.status).toBe(200)
    const live = res.text()
    if (script.steer) {
      await t.models.waitForRequest(id, 1)
      expect((await t.api('POST', `/v1/sessions/${id}/steer`, { content: 'steer it' })).status).toBe(202)
      g.open()
    }
    const text = await live
    await t.waitIdle(id)
    return { text, steer: script.steer }
  }

  it.each([1, 2, 3, 4, 5, 6])('AI SDK, script %i: the live stream and the one a resent message gets are the same bytes', async (seed) => {
    const id = `ui-${kind}-${seed}`
    const body = { id, trigger: 'submit-message', messages: [{ id: `m-${seed}`, role: 'user', parts: [{ type: 'text', text: `script ${seed}` }] }] }
    const { text, steer } = await runScript(id, seed, () => post('/v1/ui/resumer/chat', body))
    const parts = blocks(text)
    expect(parts.at(-1)).toBe('data: [DONE]\n\n')
    const chunks = parts.slice(0, -1).map((b) => JSON.parse(b.slice(6)))
    expect(chunks[0].type).toBe('start')
    expect(chunks.at(-1)).toEqual({ type: 'finish', finishReason: 'stop' })
    if (steer) expect(chunks.filter((c) => c.type === 'steering-message').map((c) => c.parts)).toEqual([[{ type: 'text', text: 'steer it' }]])
    const headSeq = (await t.api('GET', `/v1/sessions/${id}`)).body.headSeq
    expect(await (await post('/v1/ui/resumer/chat', body)).text()).toBe(text)
    expect((await t.api('GET', `/v1/sessions/${id}`)).body.headSeq).toBe(headSeq)
  })

  it.each([1, 2, 3, 4, 5, 6])('AG-UI, script %i: the live run, the later read and every Last-Event-ID resume agree', async (seed) => {
    const id = `agui-${kind}-${seed}`
    const body = { threadId: id, runId: `run-${seed}`, messages: [{ id: `u-${seed}`, role: 'user', content: `script ${seed}` }] }
    const { text } = await runScript(id, seed, () => post('/v1/ag-ui/resumer', body))
    const all = blocks(text)
    const events = all.map((b) => ({ id: Number(/^id: (\d+)/.exec(b)![1]), event: JSON.parse(b.slice(b.indexOf('data: ') + 6)) }))
    expect(events.map((e) => e.id)).toEqual(events.map((_, i) => i))
    expect(events.at(-1)!.event.type).toBe('RUN_FINISHED')
    expect(await (await post('/v1/ag-ui/resumer', body)).text()).toBe(text)
    for (let n = 0; n < events.length; n++) {
      const resumed = blocks(await (await post('/v1/ag-ui/resumer', body, { 'last-event-id': String(n) })).text())
      const reopened = resumed.length - (all.length - n - 1)
      expect(resumed.slice(reopened), `Last-Event-ID ${n}`).toEqual(all.slice(n + 1))
      // first RUN_STARTED, then only starts, all under the id resumed from
      const prefix = resumed.slice(0, reopened).map((b) => ({ id: Number(/^id: (\d+)/.exec(b)![1]), type: JSON.parse(b.slice(b.indexOf('data: ') + 6)).type as string }))
      expect(prefix[0]).toEqual({ id: n, type: 'RUN_STARTED' })
      for (const p of prefix) expect(p.id).toBe(n)
      for (const p of prefix.slice(1)) expect(p.type).toMatch(/_START$/)
    }
  })
})
