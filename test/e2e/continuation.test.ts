// Crash-transparent turns (SPEC §19) across a real kill -9: a real agentd process on PostgreSQL and on
// PGlite, SIGKILLed at each point the issue names and started again on the same port and data; the
// new loop instance repairs the turn (SPEC §13.1) and, without new input, continues it. Cases that need
// a second process (a cancel accepted by a process that does not drive the session, just before the
// kill) run on a PostgreSQL cluster. The continuation's own logic, and AGENTD_CONTINUE_AFTER_CRASH=0, run on
// one database (docs/testing.md).

import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { APP_DB_KINDS, DB_KINDS } from '../helpers/db.js'
import { openSse } from '../helpers/app.js'
import { expectValidLog } from '../helpers/invariants.js'
import { sleep } from '../helpers/wait.js'
import { startAgentdProcess, type AgentdProcess } from './helpers-sdk.js'
import { httpTool, startCluster, startToolServer, type Cluster, type ToolServer } from './helpers-processes.js'

const LEASE_TTL_MS = 1500
const PLUGIN = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures/continuation-plugin.mjs')
const never = new Promise<void>(() => {})

const userMessages = (log: any[]) => log.filter((e) => e.type === 'user/message')
const textOf = (e: any) => e.data.message.content.map((b: any) => b.text ?? '').join('')
const turnStarts = (log: any[]) => log.filter((e) => e.type === 'turn/start').map((e) => e.data)
const turnEndOf = (log: any[], turn: number) => log.find((e) => e.type === 'turn/end' && e.data.turn === turn)
const inTurn = (log: any[], turn: number) => {
  const a = log.findIndex((e) => e.type === 'turn/start' && e.data.turn === turn)
  const b = log.findIndex((e) => e.type === 'turn/end' && e.data.turn === turn)
  return a < 0 ? [] : log.slice(a, b < 0 ? undefined : b + 1)
}
const brief = (log: any[]) => log.map((e) => `${e.seq}:${e.type}${e.type === 'turn/end' ? JSON.stringify(e.data.reason) : e.type === 'turn/start' ? JSON.stringify(e.data) : ''}`).join(' ')

/** HTTP against one agentd process. */
function client(url: () => string, key: () => string) {
  const call = async (method: string, p: string, body?: unknown) => {
    const res = await fetch(url() + p, { method, headers: { authorization: `Bearer ${key()}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) }, body: body === undefined ? undefined : JSON.stringify(body) })
    const text = await res.text()
    return { status: res.status, body: text ? JSON.parse(text) : undefined, text }
  }
  let markers = 0
  const c = {
    call,
    async create(body: Record<string, unknown> = {}) {
      const marker = `[[m:cont-${process.pid}-${++markers}-${Date.now()}]]`
      const r = await call('POST', '/v1/sessions', { model: 'mock/scripted', system: `You are a test agent ${marker}`, ...body })
      if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`)
      return { id: r.body.id as string, marker }
    },
    async followup(id: string, content: string) {
      const r = await call('POST', `/v1/sessions/${id}/followup`, { content })
      expect(r.status, r.text).toBe(202)
      return r.body as { messageId: string; seq: number }
    },
    async events(id: string): Promise<any[]> {
      const r = await call('GET', `/v1/sessions/${id}/events?limit=5000`)
      if (r.status !== 200) throw new Error(`events: ${r.status} ${r.text}`)
      return r.body.events
    },
    async waitFor(id: string, pred: (log: any[]) => boolean, what: string, timeoutMs = 30000): Promise<any[]> {
      const deadline = Date.now() + timeoutMs
      for (;;) {
        const log = await c.events(id).catch(() => [] as any[])
        if (pred(log)) return log
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; log: ${brief(log)}`)
        await sleep(50)
      }
    },
    waitForTurnEnd(id: string, turn: number, timeoutMs?: number) {
      return c.waitFor(id, (log) => !!turnEndOf(log, turn), `turn/end{${turn}}`, timeoutMs)
    },
    async metric(name: string, labels: string): Promise<number> {
      const res = await fetch(`${url()}/metrics`)
      const line = (await res.text()).split('\n').find((l) => l.startsWith(`${name}{${labels}}`))
      return line ? Number(line.split(' ').at(-1)) : 0
    },
  }
  return c
}

describe.each(DB_KINDS)('SPEC §19 crash continuation across kill -9 on %s', (kind) => {
  let a: AgentdProcess
  let tools: ToolServer
  let c: ReturnType<typeof client>
  /** SIGKILL, then start again on the same port and data */
  const crash = async () => {
    await a.kill9()
    await a.start()
  }

  // Every case kills the process while the store holds some part of a turn, and runs on both databases
  // (docs/testing.md), except those whose subject is the continuation's own logic after the repair — its
  // backoff, a plugin's veto, a call through several crashes, the crash-loop limit — which is the same
  // code on both: they run on the one database of the tests above the store.
  const logicIt = (APP_DB_KINDS.includes(kind) ? it : () => {}) as typeof it

  beforeAll(async () => {
    tools = await startToolServer()
    a = await startAgentdProcess({ kind, env: { AGENTD_LEASE_TTL_MS: String(LEASE_TTL_MS), AGENTD_TOOL_HOSTS: '127.0.0.1', AGENTD_PLUGINS: PLUGIN, CONT_TOOL_URL: tools.url } })
    c = client(() => a.url, () => a.key)
  }, 90000)
  beforeEach(async () => {
    if (!a.alive) await a.start()
  }, 60000)
  afterAll(async () => {
    await a?.close()
    await tools?.close()
  }, 60000)

  it('kill during a model stream: the continuation asks the model again and its answer lands; the prompt is admitted once', async () => {
    const s = await c.create()
    a.llm.script(s.marker, { chunks: ['Hel', 'lo'], holdAfter: 1, gate: never }, { chunks: ['continued ', 'answer'] })
    const { messageId } = await c.followup(s.id, 'hi')
    await a.llm.waitForRequest(s.marker, 1)
    await crash()
    const log = await c.waitForTurnEnd(s.id, 2)
    expect(turnEndOf(log, 1).data.reason).toEqual({ kind: 'interrupted' })
    expect(turnStarts(log)).toEqual([{ turn: 1 }, { turn: 2, continues: 1 }])
    expect(turnEndOf(log, 2).data.reason).toEqual({ kind: 'completed' })
    const am = inTurn(log, 2).filter((e) => e.type === 'assistant/message')
    expect(am.map(textOf)).toEqual(['continued answer'])
    expect(userMessages(log).map((e) => e.data.id)).toEqual([messageId])
    // the continuation's request: the prompt (admitted by turn 1), no new user input
    const req2 = a.llm.requests(s.marker)[1].body.messages
    expect(req2.map((m: any) => m.role)).toEqual(['system', 'user'])
    expectValidLog(log)
  }, 120000)

  logicIt('the first continuation opens right after session/end-seed, with no wait; only the second in a row waits for the backoff', async () => {
    const s = await c.create()
    const hang = { chunks: ['partial'], hang: true }
    a.llm.script(s.marker, hang, hang, { chunks: ['answered at last'] })
    await c.followup(s.id, 'this work crashes the server twice')
    await a.llm.waitForRequest(s.marker, 1, 30000)
    await crash()
    await a.llm.waitForRequest(s.marker, 2, 30000)
    await crash()
    const log = await c.waitForTurnEnd(s.id, 3)
    expect(turnStarts(log)).toEqual([{ turn: 1 }, { turn: 2, continues: 1 }, { turn: 3, continues: 2 }])
    expect(turnEndOf(log, 3).data.reason).toEqual({ kind: 'completed' })
    // in the log, each continuation's turn/start is the event right after its repair's session/end-seed
    const gaps = [1, 2].map((t) => {
      const end = log.indexOf(turnEndOf(log, t))
      expect(log.slice(end, end + 3).map((e) => [e.type, e.data])).toEqual([
        ['turn/end', { turn: t, reason: { kind: 'interrupted' } }],
        ['session/end-seed', {}],
        ['turn/start', { turn: t + 1, continues: t }],
      ])
      return log[end + 2].time - log[end + 1].time
    })
    // the second continuation of the chain waits the backoff (1 s, the first one's wait before); the
    // first does not wait: its gap is a small fraction of the second's, measured in this same run
    expect(gaps[0] * 3, `end-seed to turn/start: ${gaps.join(' ms, ')} ms`).toBeLessThan(gaps[1])
    expectValidLog(log)
  }, 120000)

  it('kill during an http tool: TOOL_OUTCOME_UNKNOWN, then the continuation; the server does not run the tool again', async () => {
    const key = `cont-tool-${kind}-${Date.now()}`
    const s = await c.create({ tools: [httpTool(tools, 'slow', 'hold', key)] })
    a.llm.script(s.marker, { toolCalls: [{ id: 'call_t1', name: 'slow', arguments: {} }] }, { chunks: ['I checked: it may have run'] })
    await c.followup(s.id, 'run the slow tool')
    await tools.waitForCalls('hold', 1, key)
    await c.waitFor(s.id, (log) => log.some((e) => e.type === 'tool/call'), 'tool/call')
    await a.kill9()
    tools.release(key)
    await a.start()
    const log = await c.waitForTurnEnd(s.id, 2)
    const tr = inTurn(log, 1).find((e) => e.type === 'tool/result')
    expect(tr.data.error).toEqual({ name: 'ToolError', code: 'TOOL_OUTCOME_UNKNOWN' })
    expect(turnStarts(log).at(-1)).toEqual({ turn: 2, continues: 1 })
    expect(turnEndOf(log, 2).data.reason).toEqual({ kind: 'completed' })
    expect(tools.calls('hold', key)).toHaveLength(1)
    const req2 = a.llm.requests(s.marker)[1].body.messages
    expect(req2.at(-1)).toMatchObject({ role: 'tool', tool_call_id: 'call_t1' })
    expect(userMessages(log)).toHaveLength(1)
    expectValidLog(log)
  }, 120000)

  it('kill after the claim and before admission: the continuation admits the carried message with its original id, exactly once', async () => {
    const s = await c.create()
    a.llm.script(s.marker, { chunks: ['carried and answered'] })
    const before = tools.calls('echo').length
    const { messageId } = await c.followup(s.id, '[hold-pre-step] please answer')
    await tools.waitForCalls('echo', before + 1)
    expect(tools.calls('echo').at(-1)!.body.arguments.held).toEqual([messageId])
    await crash()
    const log = await c.waitForTurnEnd(s.id, 2)
    // turn 1 claimed it and admitted nothing
    expect(userMessages(inTurn(log, 1))).toEqual([])
    expect(turnStarts(log).at(-1)).toEqual({ turn: 2, continues: 1 })
    const users = userMessages(log)
    expect(users.map((e) => e.data.id)).toEqual([messageId])
    expect(users[0].data.content).toEqual([{ type: 'text', text: '[hold-pre-step] please answer' }])
    expect(users[0].data.source).toMatchObject({ kind: 'user' })
    expect(inTurn(log, 2)).toContain(users[0])
    expect(turnEndOf(log, 2).data.reason).toEqual({ kind: 'completed' })
    expectValidLog(log)
  }, 120000)

  logicIt('a plugin rejects a continuation from agent/pre-step (payload.continues): the continuation ends blocked and nothing is admitted', async () => {
    const s = await c.create()
    const before = tools.calls('echo').length
    await c.followup(s.id, '[hold-pre-step] [reject-continuation]')
    await tools.waitForCalls('echo', before + 1)
    await crash()
    const log = await c.waitForTurnEnd(s.id, 2)
    expect(turnStarts(log).at(-1)).toEqual({ turn: 2, continues: 1 })
    expect(turnEndOf(log, 2).data.reason).toEqual({ kind: 'blocked' })
    expect(inTurn(log, 2).some((e) => e.type === 'step/start')).toBe(false)
    expect(userMessages(log)).toEqual([])
    expect(a.llm.requests(s.marker)).toHaveLength(0)
    expectValidLog(log)
  }, 120000)

  it('kill with a pending approval: repair closes it, the continuation runs, and its new pending call can be answered', async () => {
    const s = await c.create({ tools: [{ ...httpTool(tools, 'echo', 'echo'), approval: 'always' }] })
    a.llm.script(s.marker, { toolCalls: [{ id: 'call_a1', name: 'echo', arguments: { n: 1 } }] }, { toolCalls: [{ id: 'call_a2', name: 'echo', arguments: { n: 2 } }] }, { chunks: ['approved and done'] })
    await c.followup(s.id, 'echo something, with approval')
    const pending = async () => (await c.call('GET', `/v1/sessions/${s.id}/pending`)).body?.toolCalls?.map((x: any) => x.callId) ?? []
    const until = async (want: string[]) => {
      const deadline = Date.now() + 30000
      for (;;) {
        const p = await pending().catch(() => [])
        if (JSON.stringify(p) === JSON.stringify(want)) return
        if (Date.now() > deadline) throw new Error(`pending is ${JSON.stringify(p)}, want ${JSON.stringify(want)}`)
        await sleep(50)
      }
    }
    await until(['call_a1'])
    await crash()
    await until(['call_a2'])
    expect((await c.call('POST', `/v1/sessions/${s.id}/approvals/call_a1`, { decision: 'allow' })).status).toBe(409)
    expect((await c.call('POST', `/v1/sessions/${s.id}/approvals/call_a2`, { decision: 'allow' })).status).toBe(202)
    const log = await c.waitForTurnEnd(s.id, 2)
    const tr1 = inTurn(log, 1).find((e) => e.type === 'tool/result')
    expect(tr1.data.error.code).toBe('TOOL_OUTCOME_UNKNOWN')
    expect(turnStarts(log).at(-1)).toEqual({ turn: 2, continues: 1 })
    const tr2 = inTurn(log, 2).find((e) => e.type === 'tool/result')
    expect(tr2.data.error).toBeUndefined()
    expect(turnEndOf(log, 2).data.reason).toEqual({ kind: 'completed' })
    expect(await pending()).toEqual([])
    expectValidLog(log)
  }, 120000)

  logicIt("kill while a client call with approval 'always' waits, in each phase: repair closes the call (TOOL_OUTCOME_UNKNOWN) and its answers are refused; the continuation's new call goes approver, then client, and its result ends the turn", async () => {
    const s = await c.create({ tools: [{ name: 'ask_user', description: 'asks the user', parameters: { type: 'object', properties: {} }, execution: { type: 'client' }, approval: 'always' }] })
    const ask = (id: string) => ({ toolCalls: [{ id, name: 'ask_user', arguments: {} }] })
    a.llm.script(s.marker, ask('call_c1'), ask('call_c2'), ask('call_c3'), { chunks: ['the user said blue'] })
    await c.followup(s.id, 'ask the user, with approval')
    const pending = async () => ((await c.call('GET', `/v1/sessions/${s.id}/pending`)).body?.toolCalls ?? []).map((x: any) => `${x.callId}:${x.kind}`)
    const until = async (want: string[]) => {
      const deadline = Date.now() + 30000
      for (;;) {
        const p = await pending().catch(() => [])
        if (JSON.stringify(p) === JSON.stringify(want)) return
        if (Date.now() > deadline) throw new Error(`pending is ${JSON.stringify(p)}, want ${JSON.stringify(want)}`)
        await sleep(50)
      }
    }
    const answer = (callId: string) => c.call('POST', `/v1/sessions/${s.id}/tool-results`, { callId, content: 'blue' })
    const approve = (callId: string) => c.call('POST', `/v1/sessions/${s.id}/approvals/${callId}`, { decision: 'allow' })

    // phase 1: the call waits for the approver when the process dies
    await until(['call_c1:approval'])
    await crash()
    await until(['call_c2:approval'])
    expect((await approve('call_c1')).status).toBe(409)
    expect((await answer('call_c1')).status).toBe(409)
    // phase 2: the continuation's call was allowed and waits for the client when the process dies
    expect((await approve('call_c2')).status).toBe(202)
    await until(['call_c2:client'])
    await crash()
    await until(['call_c3:approval'])
    expect((await answer('call_c2')).status).toBe(409)
    // the next continuation's call runs through both phases, and the client's result ends the turn
    expect((await approve('call_c3')).status).toBe(202)
    await until(['call_c3:client'])
    expect((await answer('call_c3')).status).toBe(202)
    const log = await c.waitForTurnEnd(s.id, 3)
    expect(turnStarts(log)).toEqual([{ turn: 1 }, { turn: 2, continues: 1 }, { turn: 3, continues: 2 }])
    expect(log.filter((e) => e.type === 'turn/end').map((e) => e.data.reason.kind)).toEqual(['interrupted', 'interrupted', 'completed'])
    const results = log.filter((e) => e.type === 'tool/result').map((e) => [e.data.message.content[0].toolCallId, e.data.error?.code ?? e.data.message.content[0].content.map((b: any) => b.text).join('')])
    expect(results).toEqual([
      ['call_c1', 'TOOL_OUTCOME_UNKNOWN'],
      ['call_c2', 'TOOL_OUTCOME_UNKNOWN'],
      ['call_c3', 'blue'],
    ])
    expect(inTurn(log, 3).filter((e) => e.type === 'assistant/message').map(textOf).at(-1)).toBe('the user said blue')
    expect(await pending()).toEqual([])
    expect(userMessages(log)).toHaveLength(1)
    expectValidLog(log)
  }, 120000)

  logicIt('three kills in a row during the same work: two continuations, then the crash-loop limit (a crash-loop decision) and no fourth turn by itself; a new followup still runs', async () => {
    const s = await c.create()
    const hang = { chunks: ['partial'], hang: true }
    a.llm.script(s.marker, hang, hang, hang, { chunks: ['fresh answer'] })
    await c.followup(s.id, 'this work crashes the server')
    for (let n = 1; n <= 3; n++) {
      await a.llm.waitForRequest(s.marker, n, 30000)
      await crash()
    }
    const loopsBefore = 0 // the metric counts per process; this one started after the last kill
    const log = await c.waitFor(s.id, (l) => !!turnEndOf(l, 3) && l.at(-1).type === 'session/end-seed', 'turn 3 repaired')
    expect(turnStarts(log)).toEqual([{ turn: 1 }, { turn: 2, continues: 1 }, { turn: 3, continues: 2 }])
    const deadline = Date.now() + 15000
    while ((await c.metric('agentd_continuations_total', 'decision="crash-loop"')) === loopsBefore && Date.now() < deadline) await sleep(100)
    expect(await c.metric('agentd_continuations_total', 'decision="crash-loop"')).toBe(1)
    // nothing more by itself, the session idle
    await sleep(2500)
    const still = await c.events(s.id)
    expect(still.length).toBe(log.length)
    expect((await c.call('GET', `/v1/sessions/${s.id}`)).body.status).toBe('idle')
    expect(a.llm.requests(s.marker)).toHaveLength(3)
    await c.followup(s.id, 'try something else')
    const after = await c.waitForTurnEnd(s.id, 4)
    expect(turnStarts(after).at(-1)).toEqual({ turn: 4 })
    expect(turnEndOf(after, 4).data.reason).toEqual({ kind: 'completed' })
    expectValidLog(after)
  }, 120000)
})

describe.each(APP_DB_KINDS)('AGENTD_CONTINUE_AFTER_CRASH=0 on %s', (kind) => {
  let a: AgentdProcess
  beforeAll(async () => {
    a = await startAgentdProcess({ kind, env: { AGENTD_LEASE_TTL_MS: String(LEASE_TTL_MS), AGENTD_CONTINUE_AFTER_CRASH: '0' } })
  }, 90000)
  afterAll(async () => {
    await a?.close()
  }, 60000)

  it('the crash-interrupted turn stays closed until new input (today\'s behaviour)', async () => {
    const c = client(() => a.url, () => a.key)
    const s = await c.create()
    a.llm.script(s.marker, { chunks: ['Hel'], hang: true }, { chunks: ['second'] })
    await c.followup(s.id, 'hi')
    await a.llm.waitForRequest(s.marker, 1)
    await a.kill9()
    await a.start()
    const log = await c.waitFor(s.id, (l) => l.at(-1)?.type === 'session/end-seed', 'the repair')
    await sleep(2500)
    expect((await c.events(s.id)).length).toBe(log.length)
    expect(await c.metric('agentd_continuations_total', 'decision="disabled"')).toBe(1)
    await c.followup(s.id, 'again')
    const after = await c.waitForTurnEnd(s.id, 2)
    expect(turnStarts(after)).toEqual([{ turn: 1 }, { turn: 2 }])
    expect(a.llm.requests(s.marker)).toHaveLength(2)
    expectValidLog(after)
  }, 120000)
})

describe('takeover by another process: two processes of one PostgreSQL', () => {
  let cl: Cluster
  beforeAll(async () => {
    cl = await startCluster({ processes: 2, env: { AGENTD_LEASE_TTL_MS: String(LEASE_TTL_MS) } })
  }, 90000)
  beforeEach(async () => {
    await cl.ensureUp()
  }, 60000)
  afterAll(async () => {
    await cl?.close()
  }, 60000)

  it('takeover by another process, three kills in a row: two continuations, then agent/error CRASH_LOOP, seen live by a subscriber; no fourth turn by itself', async () => {
    const s = await cl.createSession(0)
    const hang = { chunks: ['partial'], hang: true }
    cl.llm.script(s.marker, hang, hang, hang, { chunks: ['fresh answer'] })
    expect((await cl.api(0, 'POST', `/v1/sessions/${s.id}/followup`, { content: 'this work crashes the server' })).status).toBe(202)
    const subs: Array<Awaited<ReturnType<typeof openSse>>> = []
    try {
      for (let n = 1; n <= 3; n++) {
        await cl.llm.waitForRequest(s.marker, n, 30000)
        const holder = await cl.waitForHolder(s.id)
        const other = 1 - holder
        const sub = await openSse(`${cl.procs[other].url}/v1/sessions/${encodeURIComponent(s.id)}/stream`, { authorization: `Bearer ${cl.key}` })
        subs.push(sub)
        await sub.waitFor((f) => f.event === 'agent/status')
        cl.procs[holder].child.kill('SIGKILL')
        await cl.procs[holder].exited
        await cl.start(holder)
      }
      const err = await subs[2].waitFor((f) => f.event === 'agent/error', 20000)
      expect(JSON.parse(err.data!)).toMatchObject({ turn: 3, error: { code: 'CRASH_LOOP' } })
      const log = await cl.waitFor(0, s.id, (e, all) => e.type === 'session/end-seed' && all.some((x) => x.type === 'turn/end' && x.data.turn === 3), 15000)
      expect(turnStarts(log)).toEqual([{ turn: 1 }, { turn: 2, continues: 1 }, { turn: 3, continues: 2 }])
      await sleep(2500)
      expect((await cl.events(0, s.id)).length).toBe(log.length)
      expect((await cl.lease(s.id)).runState).toBe('idle')
      expect(cl.llm.requests(s.marker)).toHaveLength(3)
      expect((await cl.api(1, 'POST', `/v1/sessions/${s.id}/followup`, { content: 'something else' })).status).toBe(202)
      const after = await cl.waitForTurnEnd(1, s.id, 4)
      expect(turnStarts(after).at(-1)).toEqual({ turn: 4 })
      expect(turnEndOf(after, 4).data.reason).toEqual({ kind: 'completed' })
      expectValidLog(after)
    } finally {
      for (const x of subs) x.close()
    }
  }, 120000)

  it('no continuation: the repair clears the cancel and the turn stays interrupted; a later followup runs as an ordinary turn', async () => {
    const s = await cl.createSession(0)
    cl.llm.script(s.marker, { chunks: ['Hel'], hang: true }, { chunks: ['after the cancel'] })
    expect((await cl.api(0, 'POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })).status).toBe(202)
    await cl.llm.waitForRequest(s.marker, 1)
    const holder = await cl.waitForHolder(s.id)
    const other = 1 - holder
    // the holder is frozen, so the cancel the other process accepts is still pending when it dies
    cl.procs[holder].child.kill('SIGSTOP')
    const cancel = await cl.api(other, 'POST', `/v1/sessions/${s.id}/cancel`, {})
    expect(cancel.body).toEqual({ cancelled: true })
    expect((await cl.pool.query('SELECT cancel_pending FROM sessions WHERE id = $1', [s.id])).rows[0].cancel_pending).toBe(true)
    cl.procs[holder].child.kill('SIGKILL')
    await cl.procs[holder].exited
    const log = await cl.waitFor(other, s.id, (e, all) => e.type === 'session/end-seed' && all.some((x) => x.type === 'turn/end'), 15000)
    expect(turnEndOf(log, 1).data.reason).toEqual({ kind: 'interrupted' })
    await sleep(2500)
    const still = await cl.events(other, s.id)
    expect(still.length).toBe(log.length)
    const row = (await cl.pool.query('SELECT run_state, cancel_pending, continue_turn FROM sessions WHERE id = $1', [s.id])).rows[0]
    expect(row).toEqual({ run_state: 'idle', cancel_pending: false, continue_turn: null })
    // a new delivery makes the run state non-idle again: still no continuation of turn 1
    expect((await cl.api(other, 'POST', `/v1/sessions/${s.id}/followup`, { content: 'next' })).status).toBe(202)
    const after = await cl.waitForTurnEnd(other, s.id, 2)
    expect(turnStarts(after)).toEqual([{ turn: 1 }, { turn: 2 }])
    expect(turnEndOf(after, 2).data.reason).toEqual({ kind: 'completed' })
    expectValidLog(after)
  }, 120000)
})
