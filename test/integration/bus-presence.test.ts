// Presence on the PostgreSQL bus (src/bus/pg.ts): doorbells, live frames and pokes go over NOTIFY only
// while another agentd process listens on the database. A process alone sends none of them once its
// grace after connecting has passed; a process that starts is forwarded to at once (its `hi` is
// answered with an `ack`, after which it re-reads what its subscribers watch); heartbeats keep two
// processes forwarding to each other; one that leaves stops being forwarded to once its silence
// expires. Real PostgreSQL, real processes' buses (apps in this process), a plain LISTEN client
// counting what goes over the channel.

import pg from 'pg'
import { afterEach, describe, expect, it } from 'vitest'
import { PgBus } from '../../src/bus/index.js'
import { openSse, startTestApp, type TestApp } from '../helpers/app.js'
import { openTestDb, type TestDb } from '../helpers/db.js'
import { expectValidLog } from '../helpers/invariants.js'
import { sleep, until } from '../helpers/wait.js'

const HEARTBEAT = 150
/** a peer silent for three heartbeats is gone; the grace after connecting is as long */
const EXPIRE = 3 * HEARTBEAT

interface Heard {
  o: string
  c?: unknown[]
  f?: unknown[]
  p?: unknown[]
  hi?: 1
  hb?: 1
  ack?: string
}

/** A plain client LISTENing on the bus channel: what each origin sent. */
async function listen(url: string): Promise<{ heard: Heard[]; fanOut: (origin: string) => number; close(): Promise<void> }> {
  const c = new pg.Client({ connectionString: url })
  await c.connect()
  const heard: Heard[] = []
  c.on('notification', (m) => {
    if (m.channel === 'agentd_bus') heard.push(JSON.parse(m.payload ?? '{}'))
  })
  await c.query('LISTEN agentd_bus')
  return {
    heard,
    fanOut: (origin) => heard.filter((h) => h.o === origin && (h.c || h.f || h.p)).length,
    close: () => c.end(),
  }
}

const originOf = (t: TestApp) => (t.app.bus as PgBus).origin

describe('presence on the PostgreSQL bus (pg)', () => {
  let a: TestApp | undefined
  let b: TestApp | undefined
  let db: TestDb | undefined
  afterEach(async () => {
    await b?.close({ keepDb: true })
    await a?.close()
    a = b = db = undefined
  })

  it('a process alone sends no doorbell or frame once its grace passed; a second process is forwarded to at once; one that left is not any more', async () => {
    db = await openTestDb('pg')
    a = await startTestApp({ kind: 'pg', testDb: db, busHeartbeatMs: HEARTBEAT })
    const l = await listen(db.url!)
    const s = await a.createSession()
    a.models.script(s.id, { text: ['one', 'two'] }, { text: ['three', 'four'] }, { text: ['five'] })
    await sleep(EXPIRE + 100)
    expect((a.app.bus as PgBus).forwarding).toBe(false)

    // alone: a whole turn, with streamed text, sends nothing over the channel but heartbeats
    let before = l.fanOut(originOf(a))
    expect((await a.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'alone' })).status).toBe(202)
    await a.waitForTurnEnd(s.id, 1)
    await sleep(200)
    expect(l.fanOut(originOf(a)) - before).toBe(0)
    expect(l.heard.some((h) => h.o === originOf(a!) && h.hb)).toBe(true)

    // a second process (serving HTTP only) starts: its `hi` is answered at once, and a subscriber there
    // gets every durable event of the session the first drives, and its live frames
    b = await startTestApp({ kind: 'pg', testDb: db, env: { AGENTD_ROLE: 'api' }, busHeartbeatMs: HEARTBEAT })
    await until('the first process answered the newcomer', () => l.heard.some((h) => h.o === originOf(a!) && h.ack === originOf(b!)))
    expect((a.app.bus as PgBus).forwarding).toBe(true)
    const sub = await openSse(`${b.url}/v1/sessions/${s.id}/stream`, { authorization: `Bearer ${a.key}` })
    expect(sub.status).toBe(200)
    await sub.waitFor((f) => f.event === 'agent/status')
    before = l.fanOut(originOf(a))
    expect((await a.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'with company' })).status).toBe(202)
    const log = await a.waitForTurnEnd(s.id, 2)
    expectValidLog(log)
    await until('the subscriber on the second process received turn 2', () => sub.frames.some((f) => f.event === 'session/event' && f.json.type === 'turn/end' && f.json.data.turn === 2), 3000)
    expect(sub.frames.filter((f) => f.event === 'session/event').map((f) => Number(f.id))).toEqual(log.map((e) => e.seq))
    expect(sub.frames.some((f) => f.event === 'agent/assistant-stream' && f.json.kind === 'chunk')).toBe(true)
    expect(l.fanOut(originOf(a)) - before).toBeGreaterThan(0)
    // heartbeats keep both forwarding long past the grace
    await sleep(2 * EXPIRE)
    expect((a.app.bus as PgBus).forwarding).toBe(true)
    expect((b.app.bus as PgBus).forwarding).toBe(true)
    sub.close()

    // the second process leaves: once its silence expires, the first sends nothing again
    await b.close({ keepDb: true })
    b = undefined
    await until('the peer expired', () => !(a!.app.bus as PgBus).forwarding, 5000)
    before = l.fanOut(originOf(a))
    expect((await a.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'alone again' })).status).toBe(202)
    await a.waitForTurnEnd(s.id, 3)
    await sleep(200)
    expect(l.fanOut(originOf(a)) - before).toBe(0)
    await l.close()
  })

  it("the acknowledged process re-reads what its subscribers watch; a reconnecting listener is answered again", async () => {
    db = await openTestDb('pg')
    const one = new PgBus({ url: db.url!, db: db.db, heartbeatMs: HEARTBEAT })
    await one.start()
    const two = new PgBus({ url: db.url!, db: db.db, heartbeatMs: HEARTBEAT })
    let resets = 0
    two.live.subscribe('00000000-0000-4000-8000-000000000000', { reset: () => void resets++ })
    try {
      await two.start()
      // `two` said hi; `one` started forwarding and acknowledged, and `two` re-read on the ack
      await until('two was acknowledged', () => resets >= 1)
      expect(one.forwarding).toBe(true)
      await sleep(EXPIRE + 100)
      expect(one.forwarding).toBe(true)
      // two's listener drops and comes back: it re-reads on reconnecting, and again on one's answer
      const before = resets
      const gen = two.generation
      two.dropListener()
      await until('two reconnected', () => two.generation > gen)
      await until('two re-read on reconnecting and on the answer', () => resets >= before + 2)
    } finally {
      await two.close()
      await one.close()
      await db.drop()
    }
  })
})
