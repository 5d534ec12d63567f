// 3. Growth with session length: the per-step overhead (faux/echo one-step turns, POST → turn/end)
// of a session that already holds N prior events (N ≈ 10, 1,000, 10,000), as a ratio to the
// 10-event figure. The history is built fast: completed faux turns, cloned from a real one
// (fresh turn numbers, message ids, seq and time), checked to fold with SessionState, inserted
// directly into session_events with the row's next_seq/last_time/inbox moved to match. A new loop
// instance then loads them: the claim (attach: lease, fold of the whole log, end-seed) is timed on
// its own, then steady-state turns are measured. Floor: the same turn's units replayed directly in
// a floor session holding the same history; for the load, one SELECT of the session's rows.

import crypto from 'node:crypto'
import v8 from 'node:v8'
import { runInNewContext } from 'node:vm'
import { SessionState, type SessionEvent } from '../src/session/index.js'
import type { ClientProc } from './clientproc.js'
import { bulkInsert, FloorWriter, floorSession, unitsOf, writtenBy } from './floor.js'
import { createSession, dist, getEvents, now, startBenchApp, type BenchApp, type Kind, type RawDb } from './lib.js'
import { ms, times, yes, type Row } from './report.js'
import { BLOCK, headSeq } from './turn.js'

export interface GrowthOptions {
  sizes: number[]
  turns: number
  warmup: number
  /** a live session: `turns` turns in one session the process keeps driving, measured over its first and last `window` */
  live: { turns: number; window: number }
}

interface SynthRow {
  seq: number
  time: number
  type: string
  body: string
}

/** Splits a log of complete turns into turns (each from its delivery splice to its turn/end). */
function turnsOf(events: any[]): any[][] {
  const out: any[][] = []
  let cur: any[] = []
  for (const e of events) {
    cur.push(e)
    if (e.type === 'turn/end') {
      out.push(cur)
      cur = []
    }
  }
  return out
}

/** A history of about `size` events: the first template turn once, then copies of the second. */
export function synthesize(first: any[], steady: any[], size: number): { rows: SynthRow[]; events: SessionEvent[] } {
  const rows: SynthRow[] = []
  const events: SessionEvent[] = []
  let seq = 0
  let turn = 0
  let time = Date.now() - 10 * 60 * 1000 - size
  const add = (tmpl: any[]) => {
    turn++
    const ids = new Map<string, string>()
    for (const e of tmpl) {
      const text = JSON.stringify(e)
        .replace(/"turn":\d+/g, `"turn":${turn}`)
        .replace(/msg_[0-9a-f]{32}/g, (m) => {
          let n = ids.get(m)
          if (!n) ids.set(m, (n = `msg_${crypto.randomBytes(16).toString('hex')}`))
          return n
        })
      const ev = JSON.parse(text)
      ev.seq = seq++
      ev.time = time++
      const body = JSON.stringify(ev)
      rows.push({ seq: ev.seq, time: ev.time, type: ev.type, body })
      events.push(ev)
    }
  }
  add(first)
  while (rows.length + steady.length <= Math.max(size, first.length)) add(steady)
  return { rows, events }
}

async function keyOf(b: BenchApp, id: string): Promise<string> {
  const { rows } = await b.app.db.query<{ key: string }>('SELECT key FROM sessions WHERE tenant_id = $1 AND id = $2', [b.tenantId, id])
  return rows[0].key
}

/** A full garbage collection (V8's flag set at run time, as test/faults/hostile.ts does). */
function collect(): void {
  v8.setFlagsFromString('--expose-gc')
  ;(runInNewContext('gc') as () => void)()
}

/**
 * A live session: one session that the process drives turn after turn, as a long conversation is.
 * Unlike the sizes above (a history loaded at once), whatever the process keeps per step grows here.
 * The server's CPU per turn over its last window against its first (after ten turns of settling), and
 * the heap it holds at the end per event of its log, after a full collection.
 */
async function liveSession(b: BenchApp, cp: ClientProc, o: GrowthOptions['live']) {
  const s = await createSession(b.url, b.key, { model: 'faux/echo' })
  const run = async (n: number) => {
    for (let done = 0; done < n; done += BLOCK) await cp.call({ op: 'turns', url: b.url, key: b.key, sessions: [{ id: s.id, after: await headSeq(b, s.id) }], turns: Math.min(BLOCK, n - done) })
  }
  const window = async () => {
    const c0 = process.cpuUsage()
    await run(o.window)
    const c = process.cpuUsage(c0)
    return (c.user + c.system) / 1000 / o.window
  }
  collect()
  const heap0 = process.memoryUsage().heapUsed
  await run(10)
  const first = await window()
  await run(o.turns - 10 - 2 * o.window)
  const last = await window()
  collect()
  const events = (await headSeq(b, s.id)) + 1
  return { turns: o.turns, window: o.window, events, first, last, heapPerEvent: (process.memoryUsage().heapUsed - heap0) / events }
}

async function readAll(raw: RawDb, key: string): Promise<number> {
  const sql = 'SELECT seq, body FROM session_events WHERE session_key = $1 ORDER BY seq'
  const t0 = now()
  if (raw.kind === 'pg') await raw.pool.query(sql, [key])
  else await raw.pglite.query(sql, [key])
  return now() - t0
}

export async function benchGrowth(kind: Kind, o: GrowthOptions, cp: ClientProc): Promise<{ rows: Row[]; data: Record<string, unknown> }> {
  const b = await startBenchApp(kind)
  const agentd: Array<{ size: number; events: number; attachMs: number; turn: ReturnType<typeof dist> }> = []
  const floor: Array<{ size: number; loadMs: number; turn: ReturnType<typeof dist> }> = []
  let live: Awaited<ReturnType<typeof liveSession>> | undefined
  try {
    // warm-up session; its first two turns are the templates
    const w = await createSession(b.url, b.key, { model: 'faux/echo' })
    await cp.call({ op: 'turns', url: b.url, key: b.key, sessions: [{ id: w.id, after: -1 }], turns: o.warmup })
    const turns = turnsOf(await getEvents(b.url, b.key, w.id))
    const first = turns[0]
    const steady = turns[1]
    const raw = b.bdb.raw()
    const units = unitsOf(steady, steady.map((e) => JSON.stringify(e)), await writtenBy(raw, w.id, steady.map((e: { seq: number }) => e.seq)))
    {
      const fw = new FloorWriter(raw, await floorSession(raw, b.tenantId))
      for (let i = 0; i < o.warmup; i++) await fw.turn(units)
    }
    for (const size of o.sizes) {
      // agentd: a session created through the API, its history inserted, then claimed (timed)
      const s = await createSession(b.url, b.key, { model: 'faux/echo' })
      const key = await keyOf(b, s.id)
      const h = synthesize(first, steady, size)
      SessionState.fromEvents(h.events) // throws if the synthetic log does not fold
      await bulkInsert(raw, key, h.rows)
      const t0 = now()
      const agent = await b.app.host!.claim(key)
      const attachMs = now() - t0
      if (!agent) throw new Error('could not claim the session')
      // floor: a session of its own with the same history
      const fkey = await floorSession(raw, b.tenantId)
      await bulkInsert(raw, fkey, synthesize(first, steady, size).rows)
      await readAll(raw, fkey)
      const loadMs = await readAll(raw, fkey)
      const fw = new FloorWriter(raw, fkey)
      // a few turns first: the first request after a load logs a resume header
      await cp.call({ op: 'turns', url: b.url, key: b.key, sessions: [{ id: s.id, after: await headSeq(b, s.id) }], turns: 3 })
      for (let i = 0; i < 3; i++) await fw.turn(units)
      const lat: number[] = []
      const flat: number[] = []
      for (let done = 0; done < o.turns; done += BLOCK) {
        const n = Math.min(BLOCK, o.turns - done)
        const r = await cp.call({ op: 'turns', url: b.url, key: b.key, sessions: [{ id: s.id, after: await headSeq(b, s.id) }], turns: n })
        lat.push(...r.latencies)
        for (let i = 0; i < n; i++) {
          const t1 = now()
          await fw.turn(units)
          flat.push(now() - t1)
        }
      }
      agentd.push({ size, events: h.rows.length, attachMs, turn: dist(lat) })
      floor.push({ size, loadMs, turn: dist(flat) })
    }
    live = await liveSession(b, cp, o.live)
  } finally {
    await b.close()
  }
  const rows: Row[] = []
  const base = agentd[0].turn.p50
  const largest = agentd[agentd.length - 1].size
  for (let i = 0; i < agentd.length; i++) {
    const a = agentd[i]
    const f = floor[i]
    const growth = a.turn.p50 / base
    const fgrowth = f.turn.p50 / floor[0].turn.p50
    const targeted = a.size === largest && a.size > agentd[0].size
    rows.push({
      measurement: `per-step p50 after ${a.events} events`,
      db: kind,
      figure: `${ms(a.turn.p50)} (${times(growth)} of @${agentd[0].events})`,
      floor: `${ms(f.turn.p50)} (${times(fgrowth)})`,
      ratio: times(a.turn.p50 / f.turn.p50),
      target: targeted ? `≤ 1.3× of @${agentd[0].events}` : '',
      met: targeted ? yes(growth <= 1.3) : '',
    })
  }
  for (let i = 0; i < agentd.length; i++) {
    const a = agentd[i]
    const f = floor[i]
    rows.push({ measurement: `attach/load of ${a.events} events`, db: kind, figure: ms(a.attachMs), floor: `${ms(f.loadMs)} (SELECT)`, ratio: times(a.attachMs / f.loadMs), target: '', met: '' })
  }
  if (live) {
    const n = (x: number) => x.toLocaleString('en-US')
    const firstTurns = `${n(11)}–${n(10 + live.window)}`
    const lastTurns = `${n(live.turns - live.window + 1)}–${n(live.turns)}`
    const growth = live.last / live.first
    rows.push({
      measurement: `live session: server CPU per turn, turns ${lastTurns} of one session`,
      db: kind,
      figure: `${ms(live.last)} (${times(growth)} of turns ${firstTurns}: ${ms(live.first)})`,
      floor: '',
      ratio: '',
      target: `≤ 1.3× of turns ${firstTurns}`,
      met: yes(growth <= 1.3),
    })
    rows.push({ measurement: `live session: heap held per event after ${n(live.turns)} turns (${n(live.events)} events)`, db: kind, figure: `${(live.heapPerEvent / 1024).toFixed(2)} KB`, floor: '', ratio: '', target: '', met: '' })
  }
  return { rows, data: { agentd, floor, growthAtLargest: agentd[agentd.length - 1].turn.p50 / base, live } }
}
