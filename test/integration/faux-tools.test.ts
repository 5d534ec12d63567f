// `faux/tools` (docs/models.md, issue 34 item 10): agentd's built-in model for trying tools without a
// provider key. Over HTTP on one database (docs/testing.md): a `/call <tool> <JSON>` line in a user message makes it
// call the session's tool with those arguments; a client tool waits for its result, an approval for its
// decision; after the results it answers with them, one line each, `<tool>: <text>`.

import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { SessionEvent } from '../../src/session/index.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { APP_DB_KINDS } from '../helpers/db.js'
import { expectValidLog } from '../helpers/invariants.js'

const lookupOrder = (extra: Record<string, unknown> = {}) => ({
  name: 'lookup_order',
  description: 'Looks an order up by its number.',
  parameters: { type: 'object', properties: { id: { type: 'integer' } }, required: ['id'] },
  execution: { type: 'client' },
  ...extra,
})

const answers = (log: SessionEvent[]) =>
  log.filter((e) => e.type === 'assistant/message').map((e) => ((e.data as any).message.content as Array<{ type: string; text?: string }>).flatMap((b) => (b.type === 'text' ? [b.text] : [])).join(''))

describe.each(APP_DB_KINDS)('faux/tools on %s', (kind) => {
  let t: TestApp
  beforeAll(async () => {
    t = await startTestApp({ kind })
  })
  afterAll(() => t?.close())

  let n = 0
  const session = async (tools: unknown[]) => {
    const id = `ft-${++n}`
    const r = await t.api('POST', '/v1/sessions', { id, model: 'faux/tools', tools })
    expect(r.status).toBe(201)
    return id
  }
  const followup = async (id: string, content: string) => expect((await t.api('POST', `/v1/sessions/${id}/followup`, { content })).status).toBe(202)
  const pending = async (id: string, count: number, kind = 'client') => {
    for (let i = 0; i < 400; i++) {
      const calls = ((await t.api('GET', `/v1/sessions/${id}/pending`)).body.toolCalls as any[]).filter((c) => c.kind === kind)
      if (calls.length >= count) return calls
      await new Promise((r) => setTimeout(r, 25))
    }
    throw new Error(`${count} pending ${kind} calls never showed in ${id}`)
  }

  it('calls a client tool with the arguments of its /call line, then answers with the result', async () => {
    const id = await session([lookupOrder()])
    await followup(id, 'Where is my order?\n/call lookup_order {"id": 7}')
    const [call] = await pending(id, 1)
    expect(call).toMatchObject({ name: 'lookup_order', arguments: { id: 7 }, rawArguments: '{"id":7}', kind: 'client' })
    expect(call.callId).toMatch(/^call_[0-9a-f]{16}$/)
    expect((await t.api('POST', `/v1/sessions/${id}/tool-results`, { callId: call.callId, content: 'Order 7: shipped on 3 December.' })).status).toBe(202)
    const log = await t.waitIdle(id)
    expectValidLog(log)
    expect(answers(log)).toEqual(['', 'lookup_order: Order 7: shipped on 3 December.'])
    expect(log.find((e) => e.type === 'turn/end')!.data).toEqual({ turn: 1, reason: { kind: 'completed' } })
    // constant usage per call, like faux/echo
    expect((await t.api('GET', `/v1/sessions/${id}`)).body.usage).toMatchObject({ inputTokens: 24, outputTokens: 12 })
  })

  it('several /call lines call several tools in one step; the answer has a line per result, in call order', async () => {
    // parallel tools, so both calls wait for the client at once (the default, exclusive, runs them in turn)
    const id = await session([lookupOrder({ concurrency: 'parallel' }), lookupOrder({ name: 'cancel_order', description: 'Cancels an order.', concurrency: 'parallel' })])
    await followup(id, '/call lookup_order {"id": 8}\n/call cancel_order {"id": 8}')
    const calls = await pending(id, 2)
    expect(calls.map((c: any) => [c.name, c.arguments])).toEqual([
      ['lookup_order', { id: 8 }],
      ['cancel_order', { id: 8 }],
    ])
    // answered out of order: the answer still follows the calls
    expect((await t.api('POST', `/v1/sessions/${id}/tool-results`, { callId: calls[1].callId, content: 'too late to cancel', isError: true })).status).toBe(202)
    expect((await t.api('POST', `/v1/sessions/${id}/tool-results`, { callId: calls[0].callId, content: 'Order 8: awaiting payment.' })).status).toBe(202)
    const log = await t.waitIdle(id)
    expect(answers(log).at(-1)).toBe('lookup_order: Order 8: awaiting payment.\ncancel_order failed: too late to cancel')
  })

  it('a tool with approval "always" waits for the decision; a denial answers without asking the client', async () => {
    const id = await session([lookupOrder({ approval: 'always' })])
    await followup(id, '/call lookup_order {"id": 9}')
    const [call] = await pending(id, 1, 'approval')
    expect(call).toMatchObject({ name: 'lookup_order', arguments: { id: 9 }, kind: 'approval' })
    expect((await t.api('POST', `/v1/sessions/${id}/approvals/${call.callId}`, { decision: 'deny', reason: 'not today' })).status).toBe(202)
    const log = await t.waitIdle(id)
    expect(answers(log).at(-1)).toBe('lookup_order failed: Error: tool call denied: not today')
  })

  it('without /call it answers like faux/echo; a tool it does not have or bad arguments get a hint and no call', async () => {
    const id = await session([lookupOrder()])
    await followup(id, 'hello')
    await t.waitIdle(id)
    await followup(id, '/call refund_order {"id": 7}')
    await t.waitIdle(id)
    await followup(id, '/call lookup_order id=7')
    const log = await t.waitIdle(id)
    expect(log.filter((e) => e.type === 'tool/call')).toEqual([])
    expect(answers(log)).toEqual([
      'echo: hello',
      'faux/tools: this session has no tool named "refund_order" (its tools: lookup_order)',
      'faux/tools: the arguments of lookup_order must be a JSON object; write one line per call: /call <tool name> <arguments as a JSON object>, such as /call lookup_order {"id": 7}',
    ])
  })
})
