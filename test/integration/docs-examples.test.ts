// What the documentation shows works on a real server, on one database (docs/testing.md): the example plugins of
// docs/examples do what docs/plugins.md says, every live frame a stream sends is one docs/api.md
// documents, GET /metrics serves exactly the agentd metrics docs/operations.md lists, and the webhook
// receiver example verifies what the server sends, as a module and run as its comment says.

import { spawn } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { renderApiDoc } from '../../scripts/docs.js'
import { openSse, startTestApp, type SseFrame, type TestApp } from '../helpers/app.js'
import { APP_DB_KINDS } from '../helpers/db.js'
import { until } from '../helpers/wait.js'
import { freePort } from '../e2e/helpers-processes.js'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const EXAMPLES = ['house-rules', 'calculator', 'alerts'].map((n) => path.join(ROOT, 'docs/examples', `${n}.mjs`))

/** A local webhook receiver for the alerts example. */
async function receiver(): Promise<{ url: string; bodies: any[]; close(): Promise<void> }> {
  const bodies: any[] = []
  const server = http.createServer(async (req, res) => {
    let raw = ''
    for await (const c of req) raw += c
    bodies.push(JSON.parse(raw))
    res.writeHead(204).end()
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/alerts`, bodies, close: () => new Promise((r) => server.close(() => r())) }
}

describe.each(APP_DB_KINDS)('the documentation on a real server (%s)', (kind) => {
  let t: TestApp
  let alerts: Awaited<ReturnType<typeof receiver>>
  const streams: Array<{ frames: SseFrame[]; close(): void }> = []
  const documentedFrames = renderApiDoc().frames

  beforeAll(async () => {
    alerts = await receiver()
    // the alerts example reads its URL from the environment when it is loaded
    process.env.ALERT_URL = alerts.url
    t = await startTestApp({ kind, env: { AGENTD_PLUGINS: EXAMPLES.join(',') } })
  })
  afterAll(async () => {
    for (const s of streams) s.close()
    await t?.close()
    await alerts?.close()
    delete process.env.ALERT_URL
  })

  const watch = async (id: string) => {
    const s = await openSse(`${t.url}/v1/sessions/${id}/stream`, { authorization: `Bearer ${t.key}` })
    expect(s.status).toBe(200)
    streams.push(s)
    await s.waitFor((f) => f.event === 'stream/ready')
    return s
  }
  const followup = async (id: string, content: string) => {
    const r = await t.api('POST', `/v1/sessions/${id}/followup`, { content })
    expect(r.status, r.text).toBe(202)
  }
  const turnEnd = async (id: string, turn: number) => (await t.waitForTurnEnd(id, turn)).find((e) => e.type === 'turn/end' && (e.data as any).turn === turn)!

  it('house-rules: adds its section to the system prompt and refuses a step that mentions a password', async () => {
    const s = await t.createSession({ system: 'Be brief.' })
    await watch(s.id)
    t.models.script(s.id, { text: ['hello'] })
    await followup(s.id, 'What is my PASSWORD?')
    expect((await turnEnd(s.id, 1)).data).toEqual({ turn: 1, reason: { kind: 'blocked' } })
    expect(t.models.requests.filter((r) => r.sessionId === s.id), 'the model was not called').toEqual([])
    await followup(s.id, 'hi')
    expect((await turnEnd(s.id, 2)).data).toEqual({ turn: 2, reason: { kind: 'completed' } })
    const events = await t.waitIdle(s.id)
    const prompt = events.find((e) => e.type === 'system/message')!.data as any
    expect(prompt.message.content).toEqual([{ type: 'text', text: 'Be brief.\n\nAnswer in English. Never ask for passwords.' }])
    expect(events.filter((e) => e.type === 'user/message').map((e) => (e.data as any).content[0].text)).toEqual(['hi'])
  })

  it('calculator: its tool adds, and its policy denies the shell tool with its reason', async () => {
    const s = await t.createSession({
      tools: [
        { name: 'add', execution: { type: 'builtin' } },
        { name: 'shell', description: 'Runs a command', parameters: { type: 'object', properties: { cmd: { type: 'string' } } }, execution: { type: 'client' } },
      ],
    })
    await watch(s.id)
    t.models.script(
      s.id,
      { toolCalls: [{ id: 'c1', name: 'add', arguments: { a: 2, b: 3 } }, { id: 'c2', name: 'shell', arguments: { cmd: 'ls' } }] },
      { text: ['2 + 3 = 5'] },
    )
    // an inject withdrawn before anything runs: inbox frames of both kinds
    expect((await t.api('POST', `/v1/sessions/${s.id}/inject`, { content: 'context', id: 'ctx-1' })).status).toBe(202)
    expect((await t.api('DELETE', `/v1/sessions/${s.id}/inbox/ctx-1`)).status).toBe(204)
    await followup(s.id, 'add 2 and 3, then list files')
    expect((await turnEnd(s.id, 1)).data).toEqual({ turn: 1, reason: { kind: 'completed' } })
    const results = (await t.events(s.id)).filter((e) => e.type === 'tool/result').map((e) => e.data as any)
    expect(results.map((r) => [r.message.source.callId, r.message.content[0].isError, r.message.content[0].content])).toEqual([
      ['c1', false, [{ type: 'text', text: '5' }]],
      ['c2', true, [{ type: 'text', text: 'Error: tool call denied: shell commands are not allowed here' }]],
    ])
    expect(results[1].error).toEqual({ name: 'ToolError', code: 'TOOL_DENIED' })
  })

  it('alerts: posts to ALERT_URL when a turn ends in an error, and only then', async () => {
    const s = await t.createSession()
    await watch(s.id)
    // AUTH is not retried: the turn ends in an error at once
    t.models.script(s.id, { error: '401 Incorrect API key provided' }, { text: ['fine'] })
    await followup(s.id, 'hello')
    const end = await turnEnd(s.id, 1)
    expect((end.data as any).reason.kind).toBe('error')
    const alert = await until('the alert', () => alerts.bodies.find((b) => b.sessionId === s.id))
    expect(alert).toEqual({ sessionId: s.id, turn: 1, seq: end.seq, error: (end.data as any).reason.error })
    expect(alert.error.code).toBe('AUTH')
    await followup(s.id, 'again')
    await turnEnd(s.id, 2)
    await t.waitIdle(s.id)
    expect(alerts.bodies.filter((b) => b.sessionId === s.id), 'a completed turn sends nothing').toHaveLength(1)
  })

  it('sent only live frames that docs/api.md documents', () => {
    const seen = new Set(streams.flatMap((s) => s.frames.map((f) => f.event).filter((e): e is string => !!e && e !== 'session/event')))
    // the sessions above exercised these, so the check below is not vacuous
    expect([...seen]).toEqual(expect.arrayContaining(['stream/ready', 'agent/status', 'agent/session-start', 'agent/inbox/inserted', 'agent/inbox/discarded', 'agent/inbox/claimed', 'agent/assistant-stream', 'agent/error']))
    const undocumented = [...seen].filter((e) => !documentedFrames.includes(e))
    expect(undocumented, 'frames docs/api.md does not document').toEqual([])
  })

  it('webhook-receiver: accepts a signed delivery of the server once, refuses a wrong signature', async () => {
    const { createReceiver, verify } = await import(path.join(ROOT, 'docs/webhook-receiver.mjs'))
    // the example's server is made with the secret, which exists only once the webhook does
    let handler: http.RequestListener = (_req, res) => void res.writeHead(503).end()
    const server = http.createServer((req, res) => handler(req, res))
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`
      const hook = await t.api('POST', '/v1/webhooks', { url, events: ['turn.completed'] })
      expect(hook.status).toBe(201)
      const got: any[] = []
      const example: http.Server = createReceiver(hook.body.secret, (p: any) => got.push(p))
      handler = (req, res) => void example.emit('request', req, res)
      const s = await t.createSession()
      t.models.script(s.id, { text: ['fine'] })
      await followup(s.id, 'hi')
      const end = await turnEnd(s.id, 1)
      await until('the example received the delivery', () => got.length === 1)
      expect(got[0]).toMatchObject({ type: 'turn.completed', data: { sessionId: s.id, turn: 1, seq: end.seq } })
      expect(verify(hook.body.secret, { 'webhook-id': 'x', 'webhook-timestamp': String(Math.floor(Date.now() / 1000)), 'webhook-signature': 'v1,AAAA' }, '{}')).toBeNull()
      await t.api('DELETE', `/v1/webhooks/${hook.body.id}`)
    } finally {
      await new Promise<void>((r) => server.close(() => r()))
    }
  })

  it('webhook-receiver, run as its comment says: listens on WEBHOOK_PORT and prints each delivery it verified', async () => {
    const port = await freePort()
    const hook = await t.api('POST', '/v1/webhooks', { url: `http://127.0.0.1:${port}/hook`, events: ['turn.completed'] })
    expect(hook.status).toBe(201)
    const child = spawn(process.execPath, [path.join(ROOT, 'docs/webhook-receiver.mjs')], { env: { PATH: process.env.PATH, WEBHOOK_SECRET: hook.body.secret, WEBHOOK_PORT: String(port) }, stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    child.stdout.on('data', (c) => (out += c))
    child.stderr.on('data', (c) => (out += c))
    try {
      await until('the receiver to listen', () => out.includes(`webhook-receiver: listening on http://127.0.0.1:${port}\n`))
      const s = await t.createSession()
      t.models.script(s.id, { text: ['fine'] })
      await followup(s.id, 'hi')
      const end = await turnEnd(s.id, 1)
      await until('the receiver to print the delivery', () => out.includes('turn.completed '))
      const printed = out.split('\n').find((l) => l.startsWith('turn.completed '))!
      expect(JSON.parse(printed.slice('turn.completed '.length))).toMatchObject({ sessionId: s.id, turn: 1, seq: end.seq })
    } finally {
      child.kill('SIGTERM')
      await t.api('DELETE', `/v1/webhooks/${hook.body.id}`)
    }
  })

  it('serves exactly the agentd metrics docs/operations.md lists', async () => {
    const res = await fetch(`${t.url}/metrics`)
    expect(res.status).toBe(200)
    const served = [...(await res.text()).matchAll(/^# TYPE (agentd_\w+) (\w+)$/gm)].map((m) => `${m[1]} ${m[2]}`)
    const md = fs.readFileSync(path.join(ROOT, 'docs/operations.md'), 'utf8')
    const documented = [...md.matchAll(/^\| `(agentd_\w+)` \| (\w+) \|/gm)].map((m) => `${m[1]} ${m[2]}`)
    expect(documented.length).toBeGreaterThan(5)
    expect([...served].sort()).toEqual([...documented].sort())
  })
})
