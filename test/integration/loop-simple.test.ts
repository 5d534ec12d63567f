// SPEC §17 C1 and C8 through the real loop on one database (docs/testing.md), checked against SPEC §15 and the
// reconstruction property.

import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { expectValidLog, reconstructionCheck } from '../helpers/invariants.js'

const types = (evs: Array<{ type: string }>) => evs.map((e) => e.type)

describe.each(APP_DB_KINDS)('simple turn and tool round trip on %s', (kind) => {
  let t: TestApp
  const problems: string[] = []
  const seen = { n: 0 }
  beforeAll(async () => {
    t = await startTestApp({ kind, plugins: [(root, db) => reconstructionCheck(db, problems, seen)(root)] })
  })
  afterAll(async () => {
    await t?.close()
  })

  it('C1: followup "hi" runs one turn in the order SPEC §17 gives', async () => {
    const s = await t.createSession({ system: 'P' })
    t.models.script(s.id, { text: ['Hel', 'lo'], usage: { input: 21, output: 3 } })
    const r = await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })
    expect(r.status).toBe(202)
    const evs = await t.waitForTurnEnd(s.id, 1)
    expect(types(evs)).toEqual([
      'agent/inbox/spliced', 'turn/start', 'agent/inbox/spliced', 'step/start', 'system/message', 'user/message',
      'request/header', 'request/context', 'assistant/message', 'step/end', 'turn/end',
    ])
    expect((evs[10].data as any).reason).toEqual({ kind: 'completed' })
    expect((evs[8].data as any).usage).toEqual({ inputTokens: 21, outputTokens: 3 })
    const msgs = (await t.api('GET', `/v1/sessions/${s.id}/messages`)).body.messages
    expect(msgs.map((m: any) => m.role)).toEqual(['system', 'user', 'assistant'])
    expectValidLog(evs)
    expect(problems).toEqual([])
    expect(seen.n).toBeGreaterThan(0)
  })

  it('C8: a builtin-free client of an http tool: call, result, step 2 with the result', async () => {
    const srv = await import('node:http')
    const server = srv.createServer((req, res) => {
      let body = ''
      req.on('data', (c) => (body += c))
      req.on('end', () => {
        const b = JSON.parse(body)
        res.setHeader('content-type', 'application/json')
        res.end(JSON.stringify({ content: `echo ${b.arguments.text}` }))
      })
    })
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
    const port = (server.address() as { port: number }).port
    try {
      const s = await t.createSession({ tools: [{ name: 'echo', description: 'echo', parameters: { type: 'object', properties: { text: { type: 'string' } } }, execution: { type: 'http', url: `http://127.0.0.1:${port}/` } }] })
      t.models.script(s.id, { toolCalls: [{ id: 'c1', name: 'echo', arguments: { text: 'ping' } }] }, { text: ['done'] })
      await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'call it' })
      const evs = await t.waitForTurnEnd(s.id, 1)
      expect(types(evs).slice(3)).toEqual([
        'step/start', 'system/message', 'user/message', 'request/header', 'request/context', 'assistant/message', 'tool/call', 'tool/result', 'step/end',
        'step/start', 'assistant/message', 'step/end', 'turn/end',
      ])
      const tc = evs.find((e) => e.type === 'tool/call')!
      const tr = evs.find((e) => e.type === 'tool/result')!
      expect(tr.sourceEventSeqs).toEqual([tc.seq])
      expect((tr.data as any).message.content[0].content).toEqual([{ type: 'text', text: 'echo ping' }])
      const req2 = t.models.requestsOf(s.id)[1]
      expect(req2.context.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'toolResult'])
      expectValidLog(evs)
      expect(problems).toEqual([])
    } finally {
      server.close()
    }
  })
})
