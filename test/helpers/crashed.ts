// What a lease holder that died inside a turn leaves behind, written straight into the database: a log
// that ends inside turn 1 (its prompt claimed, step 1 open), the row's open turn and run state, and no
// live lease, so the worker's takeover scan repairs it (SPEC §13.1). By default a cancel was asked for
// too, so the repaired turn stays interrupted and nothing runs after it (no continuation, SPEC §19.5);
// with `cancel: false` the next holder continues it, admitting the claimed prompt (SPEC §19.3).

import crypto from 'node:crypto'
import { eventJson, type Db } from '../../src/store/index.js'
import type { SessionEvent } from '../../src/session/index.js'

/** Leaves session `id` crashed inside turn 1; returns its events and their time (5 s ago). */
export async function leaveCrashedTurn(db: Db, id: string, o: { cancel?: boolean } = {}): Promise<{ key: string; events: SessionEvent[]; time: number; prompt: { id: string } }> {
  const key = (await db.query<{ key: string }>('SELECT key FROM sessions WHERE id = $1', [id])).rows[0].key
  const time = Date.now() - 5000
  const prompt = { id: `msg_${crypto.randomUUID().replace(/-/g, '')}`, role: 'user', content: [{ type: 'text', text: 'hi' }], source: { kind: 'user' } }
  const drafts: Array<Omit<SessionEvent, 'seq' | 'time'>> = [
    { type: 'agent/inbox/spliced', data: { target: 'next-turn', start: 0, inserted: [prompt] } },
    { type: 'turn/start', data: { turn: 1 } },
    { type: 'agent/inbox/spliced', data: { target: 'next-turn', start: 0, removedCount: 1, inserted: [] } },
    { type: 'step/start', data: { turn: 1, step: 1 } },
  ]
  const events = drafts.map((x, i) => ({ ...x, seq: i, time }) as SessionEvent)
  await db.transaction(async (tx) => {
    await tx.query('SELECT key FROM sessions WHERE key = $1 FOR UPDATE', [key])
    for (const e of events) await tx.query('INSERT INTO session_events (session_key, seq, time, type, body) VALUES ($1, $2, $3, $4, $5)', [key, e.seq, e.time, e.type, eventJson(e)])
    await tx.query(
      `UPDATE sessions SET next_seq = $2, last_time = $3, updated_at = $3, open_turn = 1, run_state = 'running', cancel_pending = $4,
         inbox = '{"nextTurn":[],"nextStep":[]}', lease_owner = NULL, lease_expires_at = NULL WHERE key = $1`,
      [key, events.length, time, o.cancel ?? true],
    )
  })
  return { key, events, time, prompt }
}
