// 2. Throughput: C concurrent sessions (C = 1, 10, 100), each running T one-tool turns back to back
// (bench/tool calls the builtin `noop` once, then answers). turns/s and events/s over the wall time
// of the whole batch. Floor: C concurrent writers each writing the same turn's commit units
// directly, T times, over a pool of the same size as agentd's: each unit in ONE round trip (the honest
// floor), and, as a labelled second reference, each unit as a 4-statement transaction (the replay).
// With `peers`, LangGraph JS + PostgresSaver (bench/peers.ts) runs the same C × T right after, on
// PostgreSQL. With `cpuProf`, agentd's measured window of each level is CPU-profiled (bench/prof.ts).

import type { ClientProc } from './clientproc.js'
import { FloorWriter, floorSession, shape, type Unit } from './floor.js'
import { createSession, dbCpuMs, dist, now, pool, sqlMix, startBenchApp, type DbCounters, type Kind, type RawDb } from './lib.js'
import { benchProvider, benchToolSpecs, noopPlugin, TOOL_MODEL } from './models.js'
import { ms, num, times, yes, type Row } from './report.js'
import { headSeq, turnUnits } from './turn.js'
import { peersPresent, runLanggraph, type PeerLevel } from './peers.js'
import { profileStart, profileStop } from './prof.js'

export interface ThroughputOptions {
  levels: number[]
  turns: number
  /** caps sessions × turns per level (PGlite runs every statement on this process's one thread) */
  maxTurnsPerLevel?: number
  /** also run LangGraph JS + PostgresSaver at each level (PostgreSQL only) */
  peers?: boolean
  /** write a CPU profile of agentd's measured window of each level into this directory */
  cpuProf?: string
  /** warm-up rounds before the first level (default WARM_ROUNDS) */
  warmRounds?: number
  /** the fewest turns a level measures, in rounds of fresh sessions (default MIN_LEVEL_TURNS) */
  minLevelTurns?: number
  /** tools per session: `noop` and unused client tools with realistic schemas (default 1, `noop` alone) */
  tools?: number
}

/**
 * A checkpoint before each measured window (PostgreSQL; PGlite has nothing to gain): every window
 * starts from the same state, with no checkpoint in flight — one that a database drop requested (the
 * LangGraph peer's, at the end of the previous level) would otherwise write out its pages, and every
 * page's first change after it a full-page image into the WAL, inside whichever window came next.
 * Without the privilege (superuser or pg_checkpoint) it is skipped.
 */
async function checkpoint(raw: RawDb): Promise<void> {
  if (raw.kind !== 'pg') return
  await raw.pool.query('CHECKPOINT').catch(() => {})
}

/** A level measures at least this many turns (in rounds of fresh sessions, each `turns` long). */
export const MIN_LEVEL_TURNS = 400

/** Counters summed over the rounds of a level: `into` += the snapshot `c` (statement mix included). */
function addCounters(into: DbCounters, c: DbCounters): void {
  into.transactions += c.transactions
  into.statements += c.statements
  into.autocommit += c.autocommit
  into.autocommitWrites += c.autocommitWrites
  for (const [k, v] of Object.entries(c.bySql)) into.bySql[k] = (into.bySql[k] ?? 0) + v
}
const emptyCounters = (): DbCounters => ({ transactions: 0, statements: 0, autocommit: 0, autocommitWrites: 0, bySql: {} })

/**
 * The server's warm-up before any level: rounds shaped like the measurement (fresh sessions, one
 * untimed turn each, then the turns back to back), each round 10 sessions × 20 turns and then one
 * session × 20 turns. V8 keeps optimizing the turn's functions for about 1,500–2,000 turns (measured:
 * server CPU per turn at 10 sessions fell 4.6 → 3.4 → 2.9 → 2.7 ms over four 200-turn rounds after the
 * older 300-turn warm-up, and was flat from about the eighth round on), so a shorter warm-up measured
 * the first level, 1 session, on a server still compiling its hot path.
 */
export const WARM_ROUNDS = 12
const WARM_SHAPE = [
  { sessions: 10, turns: 20 },
  { sessions: 1, turns: 20 },
]

interface Level {
  sessions: number
  /** turns per session (per round) */
  turns: number
  /** rounds of fresh sessions (agentd; the floor's writers write turns × rounds each) */
  rounds?: number
  /** CPU time of this (the server's) process per turn, ms */
  cpuMsPerTurn: number
  /** of which kernel time (system calls: sockets), ms */
  cpuSysMsPerTurn?: number
  /** CPU time of the PostgreSQL processes per turn over the same window, ms (lib.ts dbCpuMs; absent when not measurable) */
  dbCpuMsPerTurn?: number
  turnsPerSec: number
  eventsPerSec: number
  wallMs: number
  latency: ReturnType<typeof dist>
}

/** CPU ms per turn between two dbCpuMs readings; undefined when either is missing. */
function perTurnOf(from: number | null, to: number | null, turns: number): number | undefined {
  return from === null || to === null ? undefined : (to - from) / turns
}

export async function benchThroughput(kind: Kind, o: ThroughputOptions, cp: ClientProc): Promise<{ rows: Row[]; data: Record<string, unknown> }> {
  const b = await startBenchApp(kind, { plugins: [noopPlugin], extraProviders: [benchProvider] })
  const tools = benchToolSpecs(o.tools ?? 1)
  // PGlite runs inside this process: its CPU is in the server's figure already
  const dbCpu = kind === 'pg' ? dbCpuMs : () => null
  const agentd: Level[] = []
  const floor: Level[] = []
  const replay: Level[] = []
  const peers: Array<PeerLevel | { error: string }> = []
  const profiles: Record<string, string> = {}
  let units: Unit[] = []
  const txPerTurn: number[] = []
  const perTurn: Array<Record<string, number>> = []
  const warmup: Array<{ round: number; sessions: number; turns: number; cpuMsPerTurn: number; turnsPerSec: number }> = []
  try {
    // warm the process (JIT, pools) on throwaway sessions first: a long-running server is measured
    // in its steady state, not while V8 still compiles its hot path; fresh sessions each round, so no
    // measured session carries a longer history than its level gives it. Each round's CPU per turn is
    // kept (data.warmup) to show where it levelled off.
    const rounds = o.warmRounds ?? WARM_ROUNDS
    for (let r = 0; r < rounds; r++) {
      for (const w of WARM_SHAPE) {
        const ids = await pool(Array.from({ length: w.sessions }, (_, i) => i), 10, () => createSession(b.url, b.key, { model: TOOL_MODEL, tools }))
        await cp.call({ op: 'turns', url: b.url, key: b.key, sessions: ids.map((s) => ({ id: s.id, after: -1 })), turns: 1 })
        const sessions = await Promise.all(ids.map(async (s) => ({ id: s.id, after: await headSeq(b, s.id) })))
        const cpu0 = process.cpuUsage()
        const res = await cp.call({ op: 'turns', url: b.url, key: b.key, sessions, turns: w.turns })
        const cpu = process.cpuUsage(cpu0)
        const total = w.sessions * w.turns
        warmup.push({ round: r, sessions: w.sessions, turns: w.turns, cpuMsPerTurn: (cpu.user + cpu.system) / 1000 / total, turnsPerSec: (total / res.wallMs) * 1000 })
      }
    }
    // and one more, whose last turn gives the units
    const w = await createSession(b.url, b.key, { model: TOOL_MODEL, tools })
    await cp.call({ op: 'turns', url: b.url, key: b.key, sessions: [{ id: w.id, after: -1 }], turns: 10 })
    units = (await turnUnits(b, w.id)).units
    const events = units.reduce((a, u) => a + u.length, 0)
    const raw = b.bdb.raw()
    for (const mode of ['one', 'replay'] as const) {
      const fw = new FloorWriter(raw, await floorSession(raw, b.tenantId), mode)
      for (let i = 0; i < 10; i++) await fw.turn(units)
    }
    const floorLevel = async (c: number, turns: number, mode: 'one' | 'replay'): Promise<Level> => {
      const writers = await Promise.all(Array.from({ length: c }, async () => new FloorWriter(raw, await floorSession(raw, b.tenantId), mode)))
      await Promise.all(writers.map((fw) => fw.turn(units)))
      await checkpoint(raw)
      const lat: number[] = []
      const db0 = dbCpu()
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
      const db1 = dbCpu()
      const total = c * turns
      return { sessions: c, turns, cpuMsPerTurn: (fcpu.user + fcpu.system) / 1000 / total, cpuSysMsPerTurn: fcpu.system / 1000 / total, dbCpuMsPerTurn: perTurnOf(db0, db1, total), turnsPerSec: (total / wallMs) * 1000, eventsPerSec: ((total * events) / wallMs) * 1000, wallMs, latency: dist(lat) }
    }
    // each level: agentd, then the floor right after (same machine state). A level measures at least
    // MIN_LEVEL_TURNS turns, in rounds of fresh sessions of `turns` turns each (one session × 20 turns
    // is about 0.2 s, too short a window to tell anything from the machine's noise)
    for (const c of o.levels) {
      const turns = Math.max(1, Math.min(o.turns, Math.floor((o.maxTurnsPerLevel ?? Infinity) / c)))
      const rounds = Math.max(1, Math.ceil(Math.min(o.minLevelTurns ?? MIN_LEVEL_TURNS, o.maxTurnsPerLevel ?? Infinity) / (c * turns)))
      let wallMs = 0
      let cpuUser = 0
      let cpuSys = 0
      let durable = 0
      let dbMs: number | null = 0
      const latencies: number[] = []
      const before = emptyCounters()
      const after = emptyCounters()
      if (o.cpuProf) await profileStart()
      for (let round = 0; round < rounds; round++) {
        const ids = await pool(Array.from({ length: c }, (_, i) => i), 10, () => createSession(b.url, b.key, { model: TOOL_MODEL, tools }))
        // one turn each first: attach (lease claim, log load) and the initial request header are not steady state
        await cp.call({ op: 'turns', url: b.url, key: b.key, sessions: ids.map((s) => ({ id: s.id, after: -1 })), turns: 1 })
        const sessions = await Promise.all(ids.map(async (s) => ({ id: s.id, after: await headSeq(b, s.id) })))
        await checkpoint(raw)
        addCounters(before, b.bdb.counters)
        const db0 = dbCpu()
        const cpu0 = process.cpuUsage()
        const r = await cp.call({ op: 'turns', url: b.url, key: b.key, sessions, turns })
        const cpu = process.cpuUsage(cpu0)
        const db1 = dbCpu()
        dbMs = dbMs === null || db0 === null || db1 === null ? null : dbMs + db1 - db0
        addCounters(after, b.bdb.counters)
        wallMs += r.wallMs
        cpuUser += cpu.user
        cpuSys += cpu.system
        durable += r.durable
        latencies.push(...r.latencies)
      }
      if (o.cpuProf) {
        const name = `throughput-${kind}-C${c}`
        const text = await profileStop(o.cpuProf, name)
        profiles[name] = text
      }
      const total = c * turns * rounds
      txPerTurn.push((after.transactions + after.autocommitWrites - before.transactions - before.autocommitWrites) / total)
      perTurn.push({ sessions: c, rounds, sqlMix: sqlMix(before, after, total) as never, transactions: (after.transactions - before.transactions) / total, statements: (after.statements - before.statements) / total, autocommit: (after.autocommit - before.autocommit) / total, autocommitWrites: (after.autocommitWrites - before.autocommitWrites) / total })
      agentd.push({ sessions: c, turns, rounds, cpuMsPerTurn: (cpuUser + cpuSys) / 1000 / total, cpuSysMsPerTurn: cpuSys / 1000 / total, dbCpuMsPerTurn: perTurnOf(0, dbMs, total), turnsPerSec: (total / wallMs) * 1000, eventsPerSec: (durable / wallMs) * 1000, wallMs, latency: dist(latencies) })

      // the floor writes as many turns per writer as agentd's sessions took over all rounds
      floor.push(await floorLevel(c, turns * rounds, 'one'))
      replay.push(await floorLevel(c, turns * rounds, 'replay'))
      if (o.peers && kind === 'pg' && peersPresent()) {
        process.stdout.write(`   langgraph C=${c} × ${turns}\n`)
        peers.push(await runLanggraph(c, turns).catch((e) => ({ error: String((e as Error)?.message ?? e) })))
      }
    }
  } finally {
    await b.close()
  }
  const rows: Row[] = []
  const w10 = warmup.filter((w) => w.sessions === 10)
  if (w10.length) {
    rows.push({
      measurement: `warm-up, ${w10.length} rounds: server CPU per turn at 10 sessions, first → last round`,
      db: kind,
      figure: `${ms(w10[0].cpuMsPerTurn)} → ${ms(w10[w10.length - 1].cpuMsPerTurn)}`,
      floor: '',
      ratio: '',
      target: '',
      met: '',
    })
  }
  const plural = (n: number) => `${n} session${n > 1 ? 's' : ''}`
  for (let i = 0; i < o.levels.length; i++) {
    const a = agentd[i]
    const f = floor[i]
    const rf = replay[i]
    const ratio = a.turnsPerSec / f.turnsPerSec
    const judged = kind === 'pg' && (a.sessions === 10 || a.sessions === 100)
    rows.push({
      measurement: `${plural(a.sessions)} × ${a.turns} turns${(a.rounds ?? 1) > 1 ? `, ${a.rounds} rounds` : ''}${tools.length > 1 ? `, ${tools.length} tools` : ''}: turns/s`,
      db: kind,
      figure: `${num(a.turnsPerSec)} turns/s`,
      floor: `${num(f.turnsPerSec)} turns/s`,
      ratio: times(ratio),
      target: judged ? '≥ 0.5× floor' : '',
      met: judged ? yes(ratio >= 0.5) : '',
    })
    rows.push({
      measurement: `${plural(a.sessions)}: turns/s vs replay reference (4-statement tx per unit)`,
      db: kind,
      figure: `${num(a.turnsPerSec)} turns/s`,
      floor: `${num(rf.turnsPerSec)} turns/s`,
      ratio: times(a.turnsPerSec / rf.turnsPerSec),
      target: '',
      met: '',
    })
    const p = peers[i]
    if (p) {
      const ok = !('error' in p)
      const pr = ok ? a.turnsPerSec / p.turnsPerSec : NaN
      rows.push({
        measurement: `${plural(a.sessions)}: turns/s ÷ LangGraph JS + PostgresSaver`,
        db: kind,
        figure: `${num(a.turnsPerSec)} turns/s`,
        floor: ok ? `LangGraph ${num(p.turnsPerSec)} turns/s` : 'LangGraph FAILED',
        ratio: times(pr),
        target: '≥ 5× LangGraph',
        met: yes(pr >= 5),
      })
    }
    rows.push({
      measurement: `${plural(a.sessions)}: events/s (turn p50)`,
      db: kind,
      figure: `${num(a.eventsPerSec, 0)} ev/s (${ms(a.latency.p50)})`,
      floor: `${num(f.eventsPerSec, 0)} ev/s (${ms(f.latency.p50)})`,
      ratio: times(a.eventsPerSec / f.eventsPerSec),
      target: '',
      met: '',
    })
    const cpuTarget = kind === 'pg' ? (a.sessions === 1 ? 3 : a.sessions === 100 ? 2 : undefined) : undefined
    rows.push({
      measurement: `${plural(a.sessions)}: server CPU per turn`,
      db: kind,
      figure: `${ms(a.cpuMsPerTurn)} (sys ${ms(a.cpuSysMsPerTurn ?? NaN)})`,
      floor: `${ms(f.cpuMsPerTurn)} (sys ${ms(f.cpuSysMsPerTurn ?? NaN)})`,
      ratio: times(a.cpuMsPerTurn / f.cpuMsPerTurn),
      target: cpuTarget ? `≤ ${cpuTarget} ms` : '',
      met: cpuTarget ? yes(a.cpuMsPerTurn <= cpuTarget) : '',
    })
    // /proc counts in 10 ms ticks: a window under a second (--quick) would print noise
    if (a.dbCpuMsPerTurn !== undefined && f.dbCpuMsPerTurn !== undefined && Math.min(a.wallMs, f.wallMs) >= 1000) {
      rows.push({
        measurement: `${plural(a.sessions)}: database CPU per turn (all PostgreSQL processes)`,
        db: kind,
        figure: ms(a.dbCpuMsPerTurn),
        floor: ms(f.dbCpuMsPerTurn),
        ratio: times(a.dbCpuMsPerTurn / f.dbCpuMsPerTurn),
        target: '',
        met: '',
      })
    }
  }
  return { rows, data: { warmup, agentd, floor, replay, peers, profiles: Object.keys(profiles), floorUnits: units.length, unitShape: shape(units), unitTypes: units.map((u) => u.map((e) => e.type).join('+')), commitsPerTurn: txPerTurn, countersPerTurn: perTurn } }
}
