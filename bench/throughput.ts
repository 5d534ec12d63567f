// 2. Throughput: C concurrent sessions (C = 1, 10, 100), each running T one-tool turns back to back
// (bench/tool calls the builtin `noop` once, then answers). turns/s and events/s over the wall time
// of the whole batch. Floor: C concurrent writers each replaying the same turn's commit units
// directly, T times, over a pool of the same size as agentd's.

import type { ClientProc } from './clientproc.js'
import { FloorWriter, floorSession, shape, type Unit } from './floor.js'
import { createSession, dist, now, pool, snapshot, sqlMix, startBenchApp, type Kind } from './lib.js'
import { benchModels, noopPlugin, NOOP_TOOL_SPEC, TOOL_MODEL } from './models.js'
import { ms, num, times, yes, type Row } from './report.js'
import { headSeq, turnUnits } from './turn.js'

export interface ThroughputOptions {
  levels: number[]
  turns: number
  /** caps sessions × turns per level (PGlite runs every statement on this process's one thread) */
  maxTurnsPerLevel?: number
}

interface Level {
  sessions: number
  turns: number
  /** CPU time of this (the server's) process per turn, ms */
  cpuMsPerTurn: number
  turnsPerSec: number
  eventsPerSec: number
  wallMs: number
  latency: ReturnType<typeof dist>
}

export async function benchThroughput(kind: Kind, o: ThroughputOptions, cp: ClientProc): Promise<{ rows: Row[]; data: Record<string, unknown> }> {
  const b = await startBenchApp(kind, { plugins: [noopPlugin], extraModels: benchModels })
  const agentd: Level[] = []
  const floor: Level[] = []
  let units: Unit[] = []
  const txPerTurn: number[] = []
  const perTurn: Array<Record<string, number>> = []
  try {
    // warm the process once (JIT, pools) on a throwaway session; its last turn gives the units
    const w = await createSession(b.url, b.key, { model: TOOL_MODEL, tools: [NOOP_TOOL_SPEC] })
    await cp.call({ op: 'turns', url: b.url, key: b.key, sessions: [{ id: w.id, after: -1 }], turns: 10 })
    units = (await turnUnits(b, w.id)).units
    const events = units.reduce((a, u) => a + u.length, 0)
    const raw = b.bdb.raw()
    {
      const fw = new FloorWriter(raw, await floorSession(raw, b.tenantId))
      for (let i = 0; i < 10; i++) await fw.turn(units)
    }
    // each level: agentd, then the floor right after (same machine state)
    for (const c of o.levels) {
      const turns = Math.max(1, Math.min(o.turns, Math.floor((o.maxTurnsPerLevel ?? Infinity) / c)))
      const ids = await pool(Array.from({ length: c }, (_, i) => i), 10, () => createSession(b.url, b.key, { model: TOOL_MODEL, tools: [NOOP_TOOL_SPEC] }))
      // one turn each first: attach (lease claim, log load) and the initial request header are not steady state
      await cp.call({ op: 'turns', url: b.url, key: b.key, sessions: ids.map((s) => ({ id: s.id, after: -1 })), turns: 1 })
      const sessions = await Promise.all(ids.map(async (s) => ({ id: s.id, after: await headSeq(b, s.id) })))
      const tx0 = b.bdb.counters.transactions + b.bdb.counters.autocommitWrites
      const c0 = snapshot(b.bdb.counters)
      const cpu0 = process.cpuUsage()
      const r = await cp.call({ op: 'turns', url: b.url, key: b.key, sessions, turns })
      const cpu = process.cpuUsage(cpu0)
      const total = c * turns
      txPerTurn.push((b.bdb.counters.transactions + b.bdb.counters.autocommitWrites - tx0) / total)
      const c1 = b.bdb.counters
      perTurn.push({ sessions: c, sqlMix: sqlMix(c0, c1, total) as never, transactions: (c1.transactions - c0.transactions) / total, statements: (c1.statements - c0.statements) / total, autocommit: (c1.autocommit - c0.autocommit) / total, autocommitWrites: (c1.autocommitWrites - c0.autocommitWrites) / total })
      agentd.push({ sessions: c, turns, cpuMsPerTurn: (cpu.user + cpu.system) / 1000 / total, turnsPerSec: (total / r.wallMs) * 1000, eventsPerSec: (r.durable / r.wallMs) * 1000, wallMs: r.wallMs, latency: dist(r.latencies) })

      const writers = await Promise.all(Array.from({ length: c }, async () => new FloorWriter(raw, await floorSession(raw, b.tenantId))))
      await Promise.all(writers.map((fw) => fw.turn(units)))
      const lat: number[] = []
      const fcpu0 = process.cpuUsage()
      const t0 = now()
      await Promise.all(
        writers.map(async (fw) => {
          for (let i = 0; i < turns; i++) {
            const t1 = now()
            await fw.turn(units)
            lat.push(now() - t1)
          }
        }),
      )
      const wallMs = now() - t0
      const fcpu = process.cpuUsage(fcpu0)
      floor.push({ sessions: c, turns, cpuMsPerTurn: (fcpu.user + fcpu.system) / 1000 / total, turnsPerSec: (total / wallMs) * 1000, eventsPerSec: ((total * events) / wallMs) * 1000, wallMs, latency: dist(lat) })
    }
  } finally {
    await b.close()
  }
  const rows: Row[] = []
  for (let i = 0; i < o.levels.length; i++) {
    const a = agentd[i]
    const f = floor[i]
    const ratio = a.turnsPerSec / f.turnsPerSec
    const targeted = a.sessions === 100 && kind === 'pg'
    rows.push({
      measurement: `${a.sessions} session${a.sessions > 1 ? 's' : ''} × ${a.turns} turns: turns/s`,
      db: kind,
      figure: `${num(a.turnsPerSec)} turns/s`,
      floor: `${num(f.turnsPerSec)} turns/s`,
      ratio: times(ratio),
      target: targeted ? '≥ 0.5× floor' : '',
      met: targeted ? yes(ratio >= 0.5) : '',
    })
    rows.push({
      measurement: `${a.sessions} session${a.sessions > 1 ? 's' : ''}: events/s (turn p50)`,
      db: kind,
      figure: `${num(a.eventsPerSec, 0)} ev/s (${ms(a.latency.p50)})`,
      floor: `${num(f.eventsPerSec, 0)} ev/s (${ms(f.latency.p50)})`,
      ratio: times(a.eventsPerSec / f.eventsPerSec),
      target: '',
      met: '',
    })
    rows.push({
      measurement: `${a.sessions} session${a.sessions > 1 ? 's' : ''}: server CPU per turn`,
      db: kind,
      figure: ms(a.cpuMsPerTurn),
      floor: ms(f.cpuMsPerTurn),
      ratio: times(a.cpuMsPerTurn / f.cpuMsPerTurn),
      target: '',
      met: '',
    })
  }
  return { rows, data: { agentd, floor, floorUnits: units.length, unitShape: shape(units), unitTypes: units.map((u) => u.map((e) => e.type).join('+')), commitsPerTurn: txPerTurn, countersPerTurn: perTurn } }
}
