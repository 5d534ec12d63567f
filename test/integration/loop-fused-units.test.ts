// Adjacent units with nothing foreign between them share one write (issue 16, SPEC §2.7, §6.2):
//  - a step's step/start and its first admission, when no agent/request listener runs between them
//    (a step that fails before admission writes its step/start with its step/end);
//  - a settled assistant/message and its first tool/call (the scheduler starts the first call at once);
//  - an approval-always call's tool/call and its pending row (a client call's too, whose row is
//    re-opened for the client once allowed), and a client call's tool/call and its row, when no
//    tools/pre-execute listener could decide otherwise (the call is pending as soon as it is visible);
//  - the batch's last tool/result and its step's step/end (nothing runs after the last result);
//  - a settled assistant/message without calls and its step's step/end (nothing runs between them);
//  - a stopping step's step/end and the turn/end, when next-step is empty and no agent/turn-stopping
//    listener is registered (nothing is awaited between them) — so a turn's last settlement carries
//    both.
// Rows written by one statement share their transaction id (xmin); every other unit has its own.
// The log itself is the one SPEC describes, event for event; listeners of those hooks, a tool's
// additional contexts or a steer that is pending keep the units apart, and the turn goes on as before.

import { afterEach, describe, expect, it } from 'vitest'
import type { Context } from '../../src/hooks/index.js'
import { openSse, startTestApp, type TestApp } from '../helpers/app.js'
import { APP_DB_KINDS, DB_KINDS } from '../helpers/db.js'
import { gate } from '../helpers/scripted.js'
import { expectValidLog } from '../helpers/invariants.js'
import type { Ev } from '../helpers/events.js'

let t: TestApp | undefined
afterEach(async () => {
  await t?.close()
  t = undefined
})

/** A builtin `ping`, and `ctx` that answers with an additional context. */
const tools = (root: Context) =>
  root.plugin({
    name: 'fused-tools',
    apply(ctx: any) {
      ctx.tools.register({ name: 'ping', description: 'answers pong', parameters: { type: 'object', properties: {} }, execute: async () => ({ content: 'pong' }) })
      ctx.tools.register({
        name: 'ctx',
        description: 'answers with a context',
        parameters: { type: 'object', properties: {} },
        execute: async () => ({ content: 'ok', additionalContexts: [{ content: 'a context' }] }),
      })
    },
  })

/** An agent/turn-stopping listener that records which events the log had when it ran. */
function stoppingListener(seen: string[][]) {
  return (root: Context, db: any) =>
    root.plugin({
      name: 'stopping-probe',
      apply(ctx: any) {
        ctx.hooks.serial('agent/turn-stopping', async (p: { agent: { id: string } }) => {
          const r = await db.query("SELECT e.type FROM session_events e JOIN sessions s ON s.key = e.session_key WHERE s.id = $1 ORDER BY e.seq", [p.agent.id])
          seen.push(r.rows.map((x: { type: string }) => x.type))
        })
      },
    })
}

/** The session's events with the transaction that wrote each. */
async function writes(app: TestApp, id: string): Promise<Array<{ seq: number; type: string; tx: string }>> {
  const r = await app.app.db.query<{ seq: number; type: string; tx: string }>(
    'SELECT e.seq, e.type, e.xmin::text AS tx FROM session_events e JOIN sessions s ON s.key = e.session_key WHERE s.id = $1 ORDER BY e.seq',
    [id],
  )
  return r.rows.map((x) => ({ seq: Number(x.seq), type: x.type, tx: x.tx }))
}

/** Groups consecutive events written by one transaction: the units as committed. */
const units = (w: Array<{ type: string; tx: string }>) =>
  w.reduce<Array<{ tx: string; types: string[] }>>((out, e) => {
    const last = out.at(-1)
    if (last && last.tx === e.tx) last.types.push(e.type)
    else out.push({ tx: e.tx, types: [e.type] })
    return out
  }, []).map((u) => u.types.join(' + '))

const toolTurn = (name: string) => [{ toolCalls: [{ id: 'call_1', name, arguments: {} }] }, { text: ['done'] }]

/** A session with the builtin `tool`, one followup that calls it once; its valid log and its units once idle. */
async function runToolTurn(kind: (typeof DB_KINDS)[number], tool: string, plugins: Array<(root: Context, db: any) => void> = []) {
  t = await startTestApp({ kind, plugins: [tools, ...plugins] })
  const s = await t.createSession({ tools: [{ name: tool, execution: { type: 'builtin' } }] })
  t.models.script(s.id, ...toolTurn(tool))
  expect((await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })).status).toBe(202)
  await t.waitIdle(s.id)
  const log = (await t.events(s.id)) as Ev[]
  expectValidLog(log)
  return { s, log, u: units(await writes(t, s.id)) }
}

/** A session with `tool` (a ToolSpec), one followup that calls it once; resolves once its tool/call is in the log. */
async function untilToolCall(kind: (typeof DB_KINDS)[number], tool: Record<string, unknown>, plugins: Array<(root: Context, db: any) => void> = [tools]) {
  t = await startTestApp({ kind, plugins })
  const s = await t.createSession({ tools: [tool] })
  t.models.script(s.id, ...toolTurn(tool.name as string))
  expect((await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })).status).toBe(202)
  await t.waitFor(s.id, (e) => e.type === 'tool/call')
  return { app: t, s }
}

/** GET …/pending until `ready` holds of its body (a row written one unit after the tool/call shows a moment later). */
async function pendingWhen(id: string, ready: (body: any) => boolean): Promise<any> {
  let body: any
  for (let i = 0; i < 100; i++) {
    body = (await t!.api('GET', `/v1/sessions/${id}/pending`)).body
    if (ready(body)) break
    await new Promise((r) => setTimeout(r, 20))
  }
  return body
}

describe.each(APP_DB_KINDS)('fused units (%s)', (kind) => {
  it('a one-tool turn: the last tool/result carries its step/end, the last step/end carries the turn/end', async () => {
    const { s, log, u } = await runToolTurn(kind, 'ping')
    expect(u.slice(u.indexOf('turn/start + agent/inbox/spliced'))).toEqual([
      'turn/start + agent/inbox/spliced',
      // admission (SPEC §2.4): the first request of the session logs its prompt and header
      'step/start + system/message + user/message + request/header + request/context',
      'assistant/message + tool/call',
      'tool/result + step/end',
      // the second step admits nothing new: its step/start is the admission unit
      'step/start',
      // the answer closes the step and the turn
      'assistant/message + step/end + turn/end',
    ])
    const end = log.at(-1)!
    expect(end).toMatchObject({ type: 'turn/end', data: { turn: 1, reason: { kind: 'completed' } } })
    // the session is idle with the turn closed, and the next followup runs the next turn
    const row = (await t!.api('GET', `/v1/sessions/${s.id}`)).body
    expect(row).toMatchObject({ status: 'idle', headSeq: end.seq })
    t!.models.script(s.id, { text: ['again'] })
    expect((await t!.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'more' })).status).toBe(202)
    await t!.waitIdle(s.id)
    const all = (await t!.events(s.id)) as Ev[]
    expectValidLog(all)
    expect(all.filter((e) => e.type === 'turn/end').map((e) => (e.data as any).turn)).toEqual([1, 2])
  })

  it("a subscriber sees the settlement's end frame between the assistant/message and the tool/call of its unit", async () => {
    t = await startTestApp({ kind, plugins: [tools] })
    const s = await t.createSession({ tools: [{ name: 'ping', execution: { type: 'builtin' } }] })
    const c = await openSse(`${t.url}/v1/sessions/${s.id}/stream`, { authorization: `Bearer ${t.key}` })
    try {
      t.models.script(s.id, ...toolTurn('ping'))
      expect((await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })).status).toBe(202)
      const log = (await t.waitIdle(s.id)) as Ev[]
      await c.waitFor((f) => f.event === 'session/event' && f.json.seq === log.at(-1)!.seq)
      const am = log.find((e) => e.type === 'assistant/message')!
      const call = log.find((e) => e.type === 'tool/call')!
      expect(call.seq).toBe(am.seq + 1)
      const at = (pred: (f: any) => boolean) => c.frames.findIndex(pred)
      const amAt = at((f) => f.event === 'session/event' && f.json.seq === am.seq)
      const endAt = at((f) => f.event === 'agent/assistant-stream' && f.json.kind === 'end' && f.json.outcome?.seq === am.seq)
      const callAt = at((f) => f.event === 'session/event' && f.json.seq === call.seq)
      expect(amAt).toBeGreaterThanOrEqual(0)
      expect([amAt < endAt, endAt < callAt]).toEqual([true, true])
    } finally {
      c.close()
    }
  })

  it('an agent/request listener runs after a durable step/start, which stays apart from the admission', async () => {
    const seen: string[] = []
    const probe = (root: Context, db: any) =>
      root.plugin({
        name: 'request-probe',
        apply(ctx: any) {
          ctx.hooks.waterfall('agent/request', async (p: { agent: { id: string } }, next: () => Promise<unknown>) => {
            const r = await db.query('SELECT e.type FROM session_events e JOIN sessions s ON s.key = e.session_key WHERE s.id = $1 ORDER BY e.seq DESC LIMIT 1', [p.agent.id])
            seen.push(r.rows[0].type)
            return next()
          })
        },
      })
    const { u } = await runToolTurn(kind, 'ping', [probe])
    expect(seen).toEqual(['step/start', 'step/start'])
    expect(u.slice(u.indexOf('turn/start + agent/inbox/spliced'))).toEqual([
      'turn/start + agent/inbox/spliced',
      'step/start',
      'system/message + user/message + request/header + request/context',
      'assistant/message + tool/call',
      'tool/result + step/end',
      'step/start',
      'assistant/message + step/end + turn/end',
    ])
  })

  it('a step that fails before its admission writes its step/start with its step/end, and the turn ends error', async () => {
    t = await startTestApp({ kind, plugins: [tools] })
    const llm = t.app.llm as unknown as { prepareCall: (c: unknown, s: AbortSignal) => Promise<unknown> }
    const orig = llm.prepareCall.bind(llm)
    let failures = 1
    llm.prepareCall = async (c, signal) => {
      if (failures-- > 0) throw new Error('the route broke before admission')
      return orig(c, signal)
    }
    const s = await t.createSession({})
    expect((await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })).status).toBe(202)
    await t.waitIdle(s.id)
    const log = (await t.events(s.id)) as Ev[]
    expectValidLog(log)
    const u = units(await writes(t, s.id))
    expect(u.slice(u.indexOf('turn/start + agent/inbox/spliced'))).toEqual(['turn/start + agent/inbox/spliced', 'step/start + step/end', 'turn/end'])
    expect(log.at(-1)).toMatchObject({ type: 'turn/end', data: { turn: 1, reason: { kind: 'error', error: { message: expect.stringContaining('the route broke before admission') } } } })
    // the next turn runs normally, and its step/start rides with its admission again
    t.models.script(s.id, { text: ['fine now'] })
    expect((await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'again' })).status).toBe(202)
    await t.waitIdle(s.id)
    expectValidLog((await t.events(s.id)) as Ev[])
    const next = units(await writes(t, s.id))
    expect(next.at(-2)).toMatch(/^step\/start \+ system\/message \+ user\/message/)
    expect(next.at(-1)).toBe('assistant/message + step/end + turn/end')
  })

  it("an approval-always call's pending row is written with its tool/call; approving it runs the call", async () => {
    const { app, s } = await untilToolCall(kind, { name: 'ping', execution: { type: 'builtin' }, approval: 'always' })
    // as soon as the tool/call is visible, the call is pending
    expect((await app.api('GET', `/v1/sessions/${s.id}/pending`)).body).toMatchObject({ toolCalls: [{ callId: 'call_1', kind: 'approval', name: 'ping' }] })
    const call = (await writes(app, s.id)).find((e) => e.type === 'tool/call')!
    const row = await app.app.db.query<{ tx: string }>('SELECT p.xmin::text AS tx FROM pending_calls p JOIN sessions s ON s.key = p.session_key WHERE s.id = $1', [s.id])
    expect(row.rows.map((r) => r.tx)).toEqual([call.tx])
    expect((await app.api('POST', `/v1/sessions/${s.id}/approvals/call_1`, { decision: 'allow' })).status).toBe(202)
    await app.waitIdle(s.id)
    const log = (await app.events(s.id)) as Ev[]
    expectValidLog(log)
    expect(JSON.stringify(log.find((e) => e.type === 'tool/result')!.data)).toContain('pong')
    expect((await app.api('GET', `/v1/sessions/${s.id}/pending`)).body).toMatchObject({ toolCalls: [] })
  })

  it("a client call with approval 'always' waits for the approver first: its approval row rides with its tool/call; once allowed, its row is re-opened for the client apart", async () => {
    const { app, s } = await untilToolCall(kind, { name: 'ask_user', execution: { type: 'client' }, approval: 'always' })
    // as soon as the tool/call is visible, the call is pending for the approver (not for the client)
    expect((await app.api('GET', `/v1/sessions/${s.id}/pending`)).body).toMatchObject({ toolCalls: [{ callId: 'call_1', kind: 'approval', name: 'ask_user' }] })
    const call = (await writes(app, s.id)).find((e) => e.type === 'tool/call')!
    const rowOf = async () => (await app.app.db.query<{ kind: string; tx: string }>('SELECT p.kind, p.xmin::text AS tx FROM pending_calls p JOIN sessions s ON s.key = p.session_key WHERE s.id = $1', [s.id])).rows
    expect(await rowOf()).toEqual([{ kind: 'approval', tx: call.tx }])
    expect((await app.api('POST', `/v1/sessions/${s.id}/approvals/call_1`, { decision: 'allow' })).status).toBe(202)
    const pending = await pendingWhen(s.id, (b) => b.toolCalls[0]?.kind === 'client')
    expect(pending).toMatchObject({ toolCalls: [{ callId: 'call_1', kind: 'client', name: 'ask_user' }] })
    const [row] = await rowOf()
    expect(row.kind).toBe('client')
    expect(row.tx).not.toBe(call.tx)
    expect((await app.api('POST', `/v1/sessions/${s.id}/tool-results`, { callId: 'call_1', content: 'fine' })).status).toBe(202)
    await app.waitIdle(s.id)
    const log = (await app.events(s.id)) as Ev[]
    expectValidLog(log)
    expect(log.filter((e) => e.type === 'tool/result').map((e) => (e.data as any).message.content[0].content)).toEqual([[{ type: 'text', text: 'fine' }]])
    expect((await app.api('GET', `/v1/sessions/${s.id}/pending`)).body).toMatchObject({ toolCalls: [] })
  })

  it('a client call without approval: its client row rides with its tool/call; a tools/pre-execute listener asks the client only after it allowed, apart', async () => {
    const spec = { name: 'ask_user', execution: { type: 'client' } }
    const rowTx = async (app: TestApp, id: string) => (await app.app.db.query<{ tx: string }>('SELECT p.xmin::text AS tx FROM pending_calls p JOIN sessions s ON s.key = p.session_key WHERE s.id = $1', [id])).rows.map((r) => r.tx)
    {
      const { app, s } = await untilToolCall(kind, spec)
      expect((await app.api('GET', `/v1/sessions/${s.id}/pending`)).body).toMatchObject({ toolCalls: [{ callId: 'call_1', kind: 'client' }] })
      expect(await rowTx(app, s.id)).toEqual([(await writes(app, s.id)).find((e) => e.type === 'tool/call')!.tx])
      await app.close()
      t = undefined
    }
    const seen: string[] = []
    const policy = (root: Context) =>
      root.plugin({
        name: 'policy-probe',
        apply(ctx: any) {
          ctx.hooks.waterfall('tools/pre-execute', async (p: { call: { callId: string } }, next: () => Promise<unknown>) => {
            seen.push(p.call.callId)
            return next()
          })
        },
      })
    const { app, s } = await untilToolCall(kind, spec, [tools, policy])
    const pending = await pendingWhen(s.id, (b) => b.toolCalls.length > 0)
    expect(pending).toMatchObject({ toolCalls: [{ callId: 'call_1', kind: 'client' }] })
    expect(seen).toEqual(['call_1'])
    const rows = await rowTx(app, s.id)
    expect(rows).toHaveLength(1)
    expect(rows[0]).not.toBe((await writes(app, s.id)).find((e) => e.type === 'tool/call')!.tx)
    expect((await app.api('POST', `/v1/sessions/${s.id}/tool-results`, { callId: 'call_1', content: 'fine' })).status).toBe(202)
    await app.waitIdle(s.id)
    expectValidLog((await app.events(s.id)) as Ev[])
  })

  it("a client call with approval 'always', denied: TOOL_DENIED; from its tool/call on it was pending for the approver, not the client", async () => {
    const { app, s } = await untilToolCall(kind, { name: 'ask_user', execution: { type: 'client' }, approval: 'always' })
    expect((await app.api('GET', `/v1/sessions/${s.id}/pending`)).body).toMatchObject({ toolCalls: [{ callId: 'call_1', kind: 'approval', name: 'ask_user' }] })
    // the row the tool/call wrote is the approver's (a client row re-opened later would carry another transaction)
    const call = (await writes(app, s.id)).find((e) => e.type === 'tool/call')!
    const row = await app.app.db.query<{ kind: string; tx: string }>('SELECT p.kind, p.xmin::text AS tx FROM pending_calls p JOIN sessions s ON s.key = p.session_key WHERE s.id = $1', [s.id])
    expect(row.rows).toEqual([{ kind: 'approval', tx: call.tx }])
    expect((await app.api('POST', `/v1/sessions/${s.id}/tool-results`, { callId: 'call_1', content: 'too early' })).status).toBe(409)
    expect((await app.api('POST', `/v1/sessions/${s.id}/approvals/call_1`, { decision: 'deny', reason: 'not now' })).status).toBe(202)
    await app.waitIdle(s.id)
    const log = (await app.events(s.id)) as Ev[]
    expectValidLog(log)
    expect(JSON.stringify(log.find((e) => e.type === 'tool/result')!.data)).toContain('TOOL_DENIED')
    expect((await app.api('POST', `/v1/sessions/${s.id}/tool-results`, { callId: 'call_1', content: 'late' })).status).toBe(409)
  })

  it('a tools/pre-execute listener decides first: the approval row is written after it, apart from the tool/call', async () => {
    const policy = (root: Context) =>
      root.plugin({
        name: 'policy-probe',
        apply(ctx: any) {
          ctx.hooks.waterfall('tools/pre-execute', async (_p: unknown, next: () => Promise<unknown>) => next())
        },
      })
    const { app, s } = await untilToolCall(kind, { name: 'ping', execution: { type: 'builtin' }, approval: 'always' }, [tools, policy])
    const pending = await pendingWhen(s.id, (b) => b.toolCalls.length > 0)
    expect(pending).toMatchObject({ toolCalls: [{ callId: 'call_1', kind: 'approval' }] })
    const call = (await writes(app, s.id)).find((e) => e.type === 'tool/call')!
    const row = await app.app.db.query<{ tx: string }>('SELECT p.xmin::text AS tx FROM pending_calls p JOIN sessions s ON s.key = p.session_key WHERE s.id = $1', [s.id])
    expect(row.rows).toHaveLength(1)
    expect(row.rows[0].tx).not.toBe(call.tx)
    expect((await app.api('POST', `/v1/sessions/${s.id}/approvals/call_1`, { decision: 'deny', reason: 'no' })).status).toBe(202)
    await app.waitIdle(s.id)
    const log = (await app.events(s.id)) as Ev[]
    expectValidLog(log)
    expect(JSON.stringify(log.find((e) => e.type === 'tool/result')!.data)).toContain('TOOL_DENIED')
  })

  it('an agent/turn-stopping listener runs between the step/end and the turn/end, which stay apart', async () => {
    const seen: string[][] = []
    const { u } = await runToolTurn(kind, 'ping', [stoppingListener(seen)])
    // the answer still carries its step/end; the listener runs before the turn/end
    expect(u.slice(-2)).toEqual(['assistant/message + step/end', 'turn/end'])
    // the tool step still closes with its result: no listener runs between them
    expect(u).toContain('tool/result + step/end')
    expect(seen).toHaveLength(1)
    expect(seen[0].at(-1)).toBe('step/end')
  })

  it("a tool's additional context keeps its result apart from the step/end, and the context reaches the next step", async () => {
    const { log, u } = await runToolTurn(kind, 'ctx')
    expect(u).toContain('tool/result + agent/inbox/spliced')
    expect(u).not.toContain('tool/result + agent/inbox/spliced + step/end')
    expect(u.at(-1)).toBe('assistant/message + step/end + turn/end')
    const texts = log.filter((e) => e.type === 'user/message').map((e) => JSON.stringify(e.data))
    expect(texts.some((x) => x.includes('a context'))).toBe(true)
  })

  it('steering that is pending when the step stops continues the turn: no turn/end rides with the step/end', async () => {
    t = await startTestApp({ kind, plugins: [tools] })
    const s = await t.createSession({ tools: [{ name: 'ping', execution: { type: 'builtin' } }] })
    // the model waits for a release before answering: a steer arrives while the step is open
    const g = gate()
    t.models.script(s.id, { text: ['first answer'], gate: g.promise }, { text: ['steered answer'] })
    expect((await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'hi' })).status).toBe(202)
    await t.waitFor(s.id, (e) => e.type === 'step/start')
    expect((await t.api('POST', `/v1/sessions/${s.id}/steer`, { content: 'also this' })).status).toBe(202)
    await t.waitFor(s.id, (e) => e.type === 'agent/inbox/spliced' && JSON.stringify(e.data).includes('also this'))
    g.open()
    await t.waitIdle(s.id)
    const log = (await t.events(s.id)) as Ev[]
    expectValidLog(log)
    const u = units(await writes(t, s.id))
    // step 1 stopped with the steer pending: its answer carries its step/end but no turn/end, then
    // step 2 takes the steer and its answer ends the turn
    expect(u.filter((x) => x.includes('step/end'))).toEqual(['assistant/message + step/end', 'assistant/message + step/end + turn/end'])
    expect(log.filter((e) => e.type === 'turn/end')).toHaveLength(1)
    expect(log.filter((e) => e.type === 'step/start')).toHaveLength(2)
  })
})
