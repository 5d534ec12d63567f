// API.md §4: a settings PATCH is durable at its answer. A real agentd process on PostgreSQL and on
// PGlite is SIGKILLed right after a PATCH answered 200 and started again on the same port and data;
// the next request the model gets (a new turn when the session was idle, the crash continuation of
// SPEC §19 when a turn was running) carries the new model, system text, tools and limit, and the log
// shows them as the new loop instance's header and system-node reconciliation.

import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import { expectValidLog } from '../helpers/invariants.js'
import { sleep } from '../helpers/wait.js'
import { startAgentdProcess, type AgentdProcess } from './helpers-sdk.js'

const never = new Promise<void>(() => {})
const tool = (name: string) => ({ name, description: `the ${name} tool`, parameters: { type: 'object', properties: {} }, execution: { type: 'client' } })

describe.each(APP_DB_KINDS)('settings PATCH then kill -9 on %s', (kind) => {
  let a: AgentdProcess
  let markers = 0

  const call = async (method: string, p: string, body?: unknown) => {
    const res = await fetch(a.url + p, { method, headers: { authorization: `Bearer ${a.key}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) }, body: body === undefined ? undefined : JSON.stringify(body) })
    const text = await res.text()
    return { status: res.status, body: text ? JSON.parse(text) : undefined, text }
  }
  const events = async (id: string): Promise<any[]> => (await call('GET', `/v1/sessions/${id}/events?limit=5000`)).body?.events ?? []
  const waitForTurnEnd = async (id: string, turn: number) => {
    const deadline = Date.now() + 30000
    for (;;) {
      const log = await events(id).catch(() => [] as any[])
      if (log.some((e) => e.type === 'turn/end' && e.data.turn === turn)) return log
      if (Date.now() > deadline) throw new Error(`turn ${turn} of ${id} did not end; log: ${log.map((e) => e.type).join(' ')}`)
      await sleep(50)
    }
  }
  const create = async () => {
    const marker = `[[m:settings-${process.pid}-${++markers}-${Date.now()}]]`
    const r = await call('POST', '/v1/sessions', { model: 'mock/scripted', system: `First system ${marker}`, tools: [tool('lookup_order')] })
    expect(r.status, r.text).toBe(201)
    return { id: r.body.id as string, marker }
  }
  /** the PATCH, answered 200, then SIGKILL at once and a start on the same port and data */
  const patchAndKill = async (id: string, marker: string) => {
    const r = await call('PATCH', `/v1/sessions/${id}`, { model: 'mock/other', system: `Second system ${marker}`, tools: [tool('lookup_order'), tool('refund')], maxTokens: 321 })
    expect(r.status, r.text).toBe(200)
    await a.kill9()
    expect(r.body.settings).toMatchObject({ model: 'mock/other', system: `Second system ${marker}`, maxTokens: 321 })
    await a.start()
  }
  /** what the mock model was asked: the model, the system text, the tool names and the limit */
  const asked = (body: any) => ({
    model: body.model,
    system: body.messages.filter((m: any) => m.role === 'system' || m.role === 'developer').map((m: any) => (typeof m.content === 'string' ? m.content : m.content.map((p: any) => p.text).join(''))),
    tools: (body.tools ?? []).map((t: any) => t.function.name),
    maxTokens: body.max_completion_tokens ?? body.max_tokens,
  })
  const expectNewSettings = async (id: string, marker: string, body: any) => {
    expect(asked(body)).toEqual({ model: 'other', system: [`Second system ${marker}`], tools: ['lookup_order', 'refund'], maxTokens: 321 })
    const s = (await call('GET', `/v1/sessions/${id}`)).body
    expect(s.settings).toMatchObject({ model: 'mock/other', system: `Second system ${marker}`, maxTokens: 321 })
    expect(s.settings.tools.map((t: any) => t.name)).toEqual(['lookup_order', 'refund'])
  }

  beforeAll(async () => {
    a = await startAgentdProcess({ kind, models: ['other'], env: { AGENTD_LEASE_TTL_MS: '1500' } })
  }, 90000)
  beforeEach(async () => {
    if (!a.alive) await a.start()
  }, 60000)
  afterAll(async () => {
    await a?.close()
  }, 60000)

  it('idle session: the first turn after the restart asks the new model with the new system text, tools and limit', async () => {
    const s = await create()
    a.llm.script(s.marker, { chunks: ['one'] }, { chunks: ['two'] })
    expect((await call('POST', `/v1/sessions/${s.id}/followup`, { content: 'first' })).status).toBe(202)
    await waitForTurnEnd(s.id, 1)
    expect(asked(a.llm.requests(s.marker)[0].body)).toEqual({ model: 'scripted', system: [`First system ${s.marker}`], tools: ['lookup_order'], maxTokens: 1024 })
    await patchAndKill(s.id, s.marker)
    expect((await call('POST', `/v1/sessions/${s.id}/followup`, { content: 'second' })).status).toBe(202)
    const log = await waitForTurnEnd(s.id, 2)
    expect(a.llm.requests(s.marker)).toHaveLength(2)
    await expectNewSettings(s.id, s.marker, a.llm.requests(s.marker)[1].body)
    // the new instance's first header, with the new config and tools; the head system node replaced
    const h = log.filter((e) => e.type === 'request/header')
    expect(h.map((e) => e.data.reason)).toEqual(['initial', 'resume'])
    expect(h[1].data.header.config).toMatchObject({ provider: 'mock', model: 'other', maxTokens: 321 })
    const sys = log.filter((e) => e.type === 'system/message')
    expect(sys.map((e) => e.surfaceOp)).toEqual(['append', { op: 'replace', start: sys[0].seq, end: sys[0].seq }])
    expect(log.find((e) => e.type === 'turn/end' && e.data.turn === 2).data.reason).toEqual({ kind: 'completed' })
    expectValidLog(log)
  }, 120000)

  it('a turn running: its crash continuation after the restart asks with the new settings', async () => {
    const s = await create()
    a.llm.script(s.marker, { chunks: ['Hel', 'lo'], holdAfter: 1, gate: never }, { chunks: ['continued'] })
    expect((await call('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })).status).toBe(202)
    await a.llm.waitForRequest(s.marker, 1)
    await patchAndKill(s.id, s.marker)
    const log = await waitForTurnEnd(s.id, 2)
    expect(log.filter((e) => e.type === 'turn/start').map((e) => e.data)).toEqual([{ turn: 1 }, { turn: 2, continues: 1 }])
    expect(asked(a.llm.requests(s.marker)[0].body)).toMatchObject({ model: 'scripted', tools: ['lookup_order'] })
    await expectNewSettings(s.id, s.marker, a.llm.requests(s.marker)[1].body)
    expect(log.find((e) => e.type === 'turn/end' && e.data.turn === 2).data.reason).toEqual({ kind: 'completed' })
    expectValidLog(log)
  }, 120000)
})
