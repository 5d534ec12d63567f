// kill -9 while a group commit is in flight (src/store/group.ts): one agentd process on PostgreSQL,
// two dozen sessions taking followups as fast as they are answered, so units of different sessions
// share group statements. The test watches pg_stat_activity and SIGKILLs the process the moment one of
// its group statements is executing: the group either committed without its callers learning it, or
// did not commit at all. After each kill the process starts again and takes its sessions back (crash
// repair, SPEC §16). Then every accepted followup is in its session's log exactly once, every log
// keeps the invariants of SPEC §15, and no running-session slot is left behind.

import crypto from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { expectValidLog } from '../helpers/invariants.js'
import { sleep, until } from '../helpers/wait.js'
import { startCluster, type Cluster } from './helpers-processes.js'

const SESSIONS = 24
const KILLS = 3
/** a group statement of the server executing right now (the watcher's own query excluded) */
const GROUP_ACTIVE = `SELECT count(*)::int AS n FROM pg_stat_activity
  WHERE state = 'active' AND datname = current_database() AND pid <> pg_backend_pid()
    AND query LIKE '%jsonb_to_recordset($1::jsonb -> ''u'')%'`

describe('kill -9 in the middle of a group commit', () => {
  let c: Cluster
  beforeAll(async () => {
    c = await startCluster({ processes: 1, env: { AGENTD_LEASE_TTL_MS: '1500' } })
  }, 60000)
  afterAll(async () => {
    await c?.close()
  })

  it('every accepted followup is in its log exactly once, every log is valid and no slot is left behind', async () => {
    const sessions = await Promise.all(Array.from({ length: SESSIONS }, () => c.createSession(0)))
    for (const s of sessions) c.llm.fallback(s.marker, { chunks: ['ok'] })

    // one client per session: followups back to back, each retried with its idempotency key until accepted
    const accepted = new Map<string, string[]>(sessions.map((s) => [s.id, []]))
    let stop = false
    const clients = sessions.map(async (s, k) => {
      for (let n = 0; !stop; n++) {
        const key = `gk-${k}-${n}-${crypto.randomBytes(3).toString('hex')}`
        for (let attempt = 0; ; attempt++) {
          if (attempt > 600) throw new Error(`followup ${key} was not accepted`)
          const p = c.procs[0]
          const r = await fetch(`${p.url}/v1/sessions/${s.id}/followup`, {
            method: 'POST',
            headers: { authorization: `Bearer ${c.key}`, 'content-type': 'application/json', 'idempotency-key': key },
            body: JSON.stringify({ content: `session ${k} message ${n}` }),
          }).catch(() => undefined)
          if (r?.status === 202) {
            accepted.get(s.id)!.push(((await r.json()) as { messageId: string }).messageId)
            break
          }
          await r?.body?.cancel()
          await sleep(50)
        }
      }
    })

    // the kills: each the moment a group statement is seen executing
    let groupsSeen = 0
    for (let k = 0; k < KILLS; k++) {
      await sleep(500)
      const deadline = Date.now() + 20000
      for (;;) {
        if ((await c.pool.query<{ n: number }>(GROUP_ACTIVE)).rows[0].n > 0) break
        if (Date.now() > deadline) throw new Error(`kill ${k + 1}: no group statement seen executing within 20 s`)
      }
      groupsSeen++
      c.procs[0].child.kill('SIGKILL')
      await c.procs[0].exited
      await c.start(0)
    }
    await sleep(1000)
    stop = true
    await Promise.all(clients)

    // every session idle again with nothing waiting (the restarted process took them all back)
    const deadline = Date.now() + 30000
    for (const s of sessions) {
      await until(
        `session ${s.id} idle with an empty inbox`,
        async () => {
          const row = await c.api(0, 'GET', `/v1/sessions/${s.id}`)
          const inbox = await c.api(0, 'GET', `/v1/sessions/${s.id}/inbox`)
          return row.body?.status === 'idle' && [...(inbox.body?.nextTurn ?? []), ...(inbox.body?.nextStep ?? [])].length === 0
        },
        Math.max(0, deadline - Date.now()),
        50,
      )
    }

    expect(groupsSeen).toBe(KILLS)
    let total = 0
    for (const s of sessions) {
      const log = await c.events(0, s.id)
      expectValidLog(log)
      const ids = log.filter((e) => e.type === 'user/message').map((e) => e.data.id)
      const mine = accepted.get(s.id)!
      total += mine.length
      // each accepted message once, and nothing that was not accepted
      expect([...ids].sort()).toEqual([...mine].sort())
      expect(log.filter((e) => e.type === 'turn/start').length).toBe(log.filter((e) => e.type === 'turn/end').length)
    }
    expect(total).toBeGreaterThan(SESSIONS * KILLS)
    console.log(`group-kill: ${KILLS} kills, ${total} followups accepted over ${SESSIONS} sessions`)
    const { rows } = await c.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM running_slots')
    expect(rows[0].n).toBe(0)
  }, 180000)
})
