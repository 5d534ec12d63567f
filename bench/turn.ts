// 1. Turn overhead: one session on the instant faux/echo model, one step, no tools. Each turn is
// timed by the load generator from POST …/followup sent to the turn/end frame received on its SSE
// subscriber. Floor: the same turn's commit units written directly (bench/floor.ts), back to back, each
// in ONE round trip (the honest floor); the 4-statement-transaction replay is a second, labelled reference.

import type { ClientProc } from './clientproc.js'
import { FloorWriter, floorSession, shape, unitsOf, writtenBy, type Unit } from './floor.js'
import { createSession, dist, getEvents, now, request, snapshot, sqlMix, startBenchApp, type BenchApp, type Dist, type Kind } from './lib.js'
import { ms, times, yes, type Row } from './report.js'

export interface TurnOptions {
  turns: number
  warmup: number
}

/** The events of the session's last complete turn, from its delivery splice to its turn/end. */
export function lastTurn(events: any[]): any[] {
  let e = events.length - 1
  while (e >= 0 && events[e].type !== 'turn/end') e--
  let s = e
  while (s >= 0 && events[s].type !== 'turn/start') s--
  let d = s
  while (d > 0 && events[d - 1].type === 'agent/inbox/spliced' && events[d - 1].data?.inserted?.length) d--
  return events.slice(d, e + 1)
}

/** The commit units of the session's last turn, with their stored bodies. */
export async function turnUnits(b: BenchApp, sessionId: string): Promise<{ units: Unit[]; events: any[] }> {
  const events = lastTurn(await getEvents(b.url, b.key, sessionId))
  const txs = await writtenBy(b.bdb.raw(), sessionId, events.map((e) => e.seq))
  return { units: unitsOf(events, events.map((e) => JSON.stringify(e)), txs), events }
}

export async function headSeq(b: BenchApp, id: string): Promise<number> {
  const r = await request('GET', `${b.url}/v1/sessions/${id}`, b.key)
  return r.json.headSeq
}

/** Block size of the interleaving: agentd and floor alternate, so drift in the machine's load hits both. */
export const BLOCK = 10

export async function benchTurn(kind: Kind, o: TurnOptions, cp: ClientProc): Promise<{ rows: Row[]; data: Record<string, unknown> }> {
  const b = await startBenchApp(kind)
  let agentd: Dist
  let floor: Dist
  let replay: Dist
  const c = { transactions: 0, statements: 0, autocommit: 0, autocommitWrites: 0 }
  let units: Unit[]
  let cpu: { agentdMsPerTurn: number; floorMsPerTurn: number; replayMsPerTurn: number }
  let sql: Record<string, number>
  try {
    const s = await createSession(b.url, b.key, { model: 'faux/echo' })
    await cp.call({ op: 'turns', url: b.url, key: b.key, sessions: [{ id: s.id, after: -1 }], turns: o.warmup })
    units = (await turnUnits(b, s.id)).units
    const raw = b.bdb.raw()
    const w = new FloorWriter(raw, await floorSession(raw, b.tenantId), 'one')
    const wr = new FloorWriter(raw, await floorSession(raw, b.tenantId), 'replay')
    for (let i = 0; i < o.warmup; i++) await w.turn(units)
    for (let i = 0; i < o.warmup; i++) await wr.turn(units)
    const lat: number[] = []
    const flat: number[] = []
    const rlat: number[] = []
    const mix: Record<string, number> = {}
    let cpuA = 0
    let cpuF = 0
    let cpuR = 0
    for (let done = 0; done < o.turns; done += BLOCK) {
      const n = Math.min(BLOCK, o.turns - done)
      const after = await headSeq(b, s.id)
      const c0 = snapshot(b.bdb.counters)
      const u0 = process.cpuUsage()
      const r = await cp.call({ op: 'turns', url: b.url, key: b.key, sessions: [{ id: s.id, after }], turns: n })
      const u1 = process.cpuUsage(u0)
      cpuA += u1.user + u1.system
      const c1 = b.bdb.counters
      c.transactions += c1.transactions - c0.transactions
      c.statements += c1.statements - c0.statements
      c.autocommit += c1.autocommit - c0.autocommit
      c.autocommitWrites += c1.autocommitWrites - c0.autocommitWrites
      for (const [k, v] of Object.entries(sqlMix(c0, c1, 1))) mix[k] = (mix[k] ?? 0) + v
      lat.push(...r.latencies)
      const f0 = process.cpuUsage()
      for (let i = 0; i < n; i++) {
        const t0 = now()
        await w.turn(units)
        flat.push(now() - t0)
      }
      const f1 = process.cpuUsage(f0)
      cpuF += f1.user + f1.system
      const r0 = process.cpuUsage()
      for (let i = 0; i < n; i++) {
        const t0 = now()
        await wr.turn(units)
        rlat.push(now() - t0)
      }
      const r1 = process.cpuUsage(r0)
      cpuR += r1.user + r1.system
    }
    sql = Object.fromEntries(Object.entries(mix).map(([k, v]): [string, number] => [k, Math.round((v / o.turns) * 100) / 100]).sort((x, y) => y[1] - x[1]))
    cpu = { agentdMsPerTurn: cpuA / 1000 / o.turns, floorMsPerTurn: cpuF / 1000 / o.turns, replayMsPerTurn: cpuR / 1000 / o.turns }
    agentd = dist(lat)
    floor = dist(flat)
    replay = dist(rlat)
  } finally {
    await b.close()
  }
  const perTurn = { transactions: c.transactions / o.turns, statements: c.statements / o.turns, autocommit: c.autocommit / o.turns, autocommitWrites: c.autocommitWrites / o.turns, commits: (c.transactions + c.autocommitWrites) / o.turns }
  const r50 = agentd.p50 / floor.p50
  const r99 = agentd.p99 / floor.p99
  const rows: Row[] = [
    { measurement: `turn overhead p50 (${o.turns} turns)`, db: kind, figure: ms(agentd.p50), floor: ms(floor.p50), ratio: times(r50), target: '≤ 3× floor', met: yes(r50 <= 3) },
    { measurement: `turn overhead p99 (${o.turns} turns)`, db: kind, figure: ms(agentd.p99), floor: ms(floor.p99), ratio: times(r99), target: '≤ 3× floor', met: yes(r99 <= 3) },
    { measurement: 'turn overhead p50/p99, vs replay reference (4-statement tx per unit)', db: kind, figure: `${ms(agentd.p50)} / ${ms(agentd.p99)}`, floor: `${ms(replay.p50)} / ${ms(replay.p99)}`, ratio: `${times(agentd.p50 / replay.p50)} / ${times(agentd.p99 / replay.p99)}`, target: '', met: '' },
    {
      measurement: 'commits per turn (tx + 1-statement writes)',
      db: kind,
      figure: `${perTurn.commits.toFixed(1)} (${perTurn.transactions.toFixed(1)} + ${perTurn.autocommitWrites.toFixed(1)}), ${perTurn.statements.toFixed(1)} stmts`,
      floor: `${units.length} (0 + ${units.length}), ${units.length} stmts`,
      ratio: times(perTurn.commits / units.length),
      target: '',
      met: '',
    },
    { measurement: 'server CPU per turn', db: kind, figure: ms(cpu.agentdMsPerTurn), floor: ms(cpu.floorMsPerTurn), ratio: times(cpu.agentdMsPerTurn / cpu.floorMsPerTurn), target: '', met: '' },
  ]
  return { rows, data: { agentd, floor, replay, ratioP50: r50, ratioP99: r99, perTurn, sqlPerTurn: sql, cpu, floorUnits: units.length, unitShape: shape(units), unitTypes: units.map((u) => u.map((e) => e.type).join('+')) } }
}
