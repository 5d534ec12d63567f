// A session survives a restart of the whole server on the same database (API.md §5 "durable when the
// answer is sent", SPEC §13.4 loading): the same log, session object and inbox, and a new followup runs
// turn 2 on a fresh loop instance that writes session/end-seed and a 'resume' header.

import { afterAll, describe, expect, it } from 'vitest'
import { DB_KINDS, type TestDb } from '../helpers/db.js'
import { openSse, startTestApp, type TestApp } from '../helpers/app.js'
import { expectValidLog } from '../helpers/invariants.js'

const types = (evs: Array<{ type: string }>) => evs.map((e) => e.type)

describe.each(DB_KINDS)('restart on %s', (kind) => {
  const running = new Set<TestApp>()
  let testDb: TestDb | undefined
  const closeKeeping = async (a: TestApp) => {
    running.delete(a)
    await a.close({ keepDb: true })
  }
  afterAll(async () => {
    for (const a of [...running]) await closeKeeping(a).catch(() => {})
    await testDb?.drop()
  })

  it('a session with a completed turn and pending input survives; a followup then runs turn 2', async () => {
    const t1 = await startTestApp({ kind })
    running.add(t1)
    testDb = t1.testDb
    const key = t1.key
    const s = await t1.createSession({ id: 'survivor', system: 'be brief', metadata: { m: 1 } })
    await t1.api('PATCH', '/v1/sessions/survivor', { title: 'before restart' })
    t1.models.script(s.id, { text: ['first answer'], usage: { input: 12, output: 4 } })
    await t1.api('POST', '/v1/sessions/survivor/followup', { content: 'first question', id: 'f1' })
    await t1.waitForTurnEnd(s.id, 1)
    await t1.waitIdle(s.id)
    const inj = await t1.api('POST', '/v1/sessions/survivor/inject', { content: 'parked context', id: 'ctx-1' })
    expect(inj.status).toBe(202)
    const before = {
      events: await t1.events(s.id),
      session: (await t1.api('GET', '/v1/sessions/survivor')).body,
      inbox: (await t1.api('GET', '/v1/sessions/survivor/inbox')).body,
      messages: (await t1.api('GET', '/v1/sessions/survivor/messages')).body,
    }
    expect(before.inbox.nextStep.map((m: any) => m.id)).toEqual(['ctx-1'])
    expect(before.session.usage.inputTokens).toBe(12)
    await closeKeeping(t1)

    // a new server on the same database; the session belongs to the first tenant, so use its key
    const t2 = await startTestApp({ kind, testDb: t1.testDb })
    running.add(t2)
    const api = (m: string, p: string, b?: unknown) => t2.api(m, p, b, { key })
    const eventsOf = async () => (await api('GET', '/v1/sessions/survivor/events?limit=5000')).body.events
    const after = {
      events: await eventsOf(),
      session: (await api('GET', '/v1/sessions/survivor')).body,
      inbox: (await api('GET', '/v1/sessions/survivor/inbox')).body,
      messages: (await api('GET', '/v1/sessions/survivor/messages')).body,
    }
    expect(after).toEqual(before)
    // the new tenant of t2 does not see it
    expect((await t2.api('GET', '/v1/sessions/survivor')).status).toBe(404)
    // an SSE reader on the new server gets the whole log
    const sse = await openSse(`${t2.url}/v1/sessions/survivor/stream`, { authorization: `Bearer ${key}` })
    try {
      await sse.waitFor((f) => f.event === 'stream/ready')
      expect(sse.frames.filter((f) => f.event === 'session/event').map((f) => f.json)).toEqual(before.events)
    } finally {
      sse.close()
    }
    // idempotency records survive: the consumed followup is answered as before
    const replay = await api('POST', '/v1/sessions/survivor/followup', { content: 'first question', id: 'f1' })
    expect(replay.status).toBe(202)
    expect(replay.body).toEqual({ messageId: 'f1', seq: 0 })
    expect(await eventsOf()).toEqual(before.events)

    // a new followup runs turn 2 on a fresh loop instance, announced live as a resume
    const live = await openSse(`${t2.url}/v1/sessions/survivor/stream?after=${before.events.length - 1}`, { authorization: `Bearer ${key}` })
    await live.waitFor((f) => f.event === 'stream/ready')
    t2.models.script(s.id, { text: ['second answer'], usage: { input: 20, output: 6 } })
    const f2 = await api('POST', '/v1/sessions/survivor/followup', { content: 'second question', id: 'f2' })
    expect(f2.status).toBe(202)
    expect(f2.body.seq).toBe(before.events.length)
    const deadline = Date.now() + 10000
    let log: any[] = []
    for (;;) {
      log = await eventsOf()
      const idle = (await api('GET', '/v1/sessions/survivor')).body.status === 'idle'
      if (idle && log.some((e) => e.type === 'turn/end' && e.data.turn === 2)) break
      if (Date.now() > deadline) throw new Error(`turn 2 did not end: ${types(log).join(' ')}`)
      await new Promise((r) => setTimeout(r, 25))
    }
    expectValidLog(log)
    try {
      const started = await live.waitFor((f) => f.event === 'agent/session-start')
      expect(started.json).toEqual({ source: 'resume' })
      await live.waitFor((f) => f.event === 'session/event' && f.json.type === 'turn/end')
      expect(live.frames.filter((f) => f.event === 'session/event').map((f) => f.json)).toEqual(log.slice(before.events.length))
    } finally {
      live.close()
    }
    expect(log.slice(0, before.events.length)).toEqual(before.events)
    const fresh = log.slice(before.events.length)
    expect(types(fresh)).toEqual([
      'agent/inbox/spliced',
      'session/end-seed',
      'turn/start',
      'agent/inbox/spliced',
      'agent/inbox/spliced',
      'step/start',
      'user/message',
      'user/message',
      'request/header',
      'assistant/message',
      'step/end',
      'turn/end',
    ])
    expect(fresh[1].data).toEqual({})
    expect(fresh[2].data).toEqual({ turn: 2 })
    expect(fresh.find((e) => e.type === 'request/header')!.data.reason).toBe('resume')
    expect(fresh.filter((e) => e.type === 'user/message').map((e) => e.data.id)).toEqual(['ctx-1', 'f2'])
    expect(fresh.at(-1)!.data).toEqual({ turn: 2, reason: { kind: 'completed' } })
    // the model saw the whole history: turn 1, the parked context, the new prompt
    const req = t2.models.requestsOf(s.id)[0]
    expect(req.context.systemPrompt).toContain('be brief')
    expect(req.context.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'user', 'user'])
    const obj = (await api('GET', '/v1/sessions/survivor')).body
    expect(obj.title).toBe('before restart')
    expect(obj.metadata).toEqual({ m: 1 })
    expect(obj.createdAt).toBe(before.session.createdAt)
    expect(obj.usage).toEqual({ inputTokens: 32, outputTokens: 10, cacheReadTokens: 0, cacheWriteTokens: 0, reasoningTokens: 0, costUsd: 0 })
    expect(obj.headSeq).toBe(log.at(-1).seq)
    expect((await api('GET', '/v1/sessions/survivor/inbox')).body).toEqual({ nextTurn: [], nextStep: [] })
  })
})
