// 7. Sessions from agents (API.md §16): a session created from an agent and its first turn, beside the
// same with an inline session of the same settings, on one server, alternating one by one so the
// machine's load hits both alike ("floor" = inline); then turns on one long-lived session of each kind
// in alternating blocks. A create is timed around its request from the bench process (the server's own:
// the client's share is the same for both), a turn as measurement 1 times it, from the load generator.

import type { ClientProc } from './clientproc.js'
import { createSession, dist, now, request, startBenchApp, type Dist, type Kind } from './lib.js'
import { ms, times, yes, type Row } from './report.js'
import { BLOCK, headSeq } from './turn.js'

export interface AgentsOptions {
  /** new sessions of each kind, each with its first turn */
  sessions: number
  /** turns on one existing session of each kind */
  turns: number
  warmup: number
}

const SETTINGS = { model: 'faux/echo', system: 'You are terse. Answer in one line.' }
const MODES = ['agent', 'inline'] as const
type Mode = (typeof MODES)[number]

export async function benchAgents(kind: Kind, o: AgentsOptions, cp: ClientProc): Promise<{ rows: Row[]; data: Record<string, unknown> }> {
  const b = await startBenchApp(kind)
  const lat = { create: { agent: [] as number[], inline: [] as number[] }, first: { agent: [] as number[], inline: [] as number[] }, both: { agent: [] as number[], inline: [] as number[] }, turn: { agent: [] as number[], inline: [] as number[] } }
  const d = {} as Record<keyof typeof lat, Record<Mode, Dist>>
  try {
    const a = await request('POST', `${b.url}/v1/agents`, b.key, { id: 'bench', name: 'Bench', ...SETTINGS })
    if (a.status !== 201) throw new Error(`create agent: ${a.status} ${a.text}`)
    const body = { agent: { agent: 'bench' }, inline: SETTINGS }
    /** a new session and its first turn */
    const fresh = async (mode: Mode) => {
      const t0 = now()
      const s = await createSession(b.url, b.key, body[mode])
      const create = now() - t0
      const r = await cp.call({ op: 'turns', url: b.url, key: b.key, sessions: [{ id: s.id, after: -1 }], turns: 1 })
      return { id: s.id, create, first: r.latencies[0]! }
    }
    for (let i = 0; i < o.warmup; i++) for (const mode of MODES) await fresh(mode)
    for (let i = 0; i < o.sessions; i++) {
      // which kind goes first alternates too
      for (const mode of i % 2 ? [...MODES].reverse() : MODES) {
        const f = await fresh(mode)
        lat.create[mode].push(f.create)
        lat.first[mode].push(f.first)
        lat.both[mode].push(f.create + f.first)
      }
    }
    const long = { agent: (await fresh('agent')).id, inline: (await fresh('inline')).id }
    for (const mode of MODES) await cp.call({ op: 'turns', url: b.url, key: b.key, sessions: [{ id: long[mode], after: await headSeq(b, long[mode]) }], turns: o.warmup })
    for (let done = 0; done < o.turns; done += BLOCK) {
      const n = Math.min(BLOCK, o.turns - done)
      for (const mode of MODES) {
        const r = await cp.call({ op: 'turns', url: b.url, key: b.key, sessions: [{ id: long[mode], after: await headSeq(b, long[mode]) }], turns: n })
        lat.turn[mode].push(...r.latencies)
      }
    }
    for (const k of Object.keys(lat) as Array<keyof typeof lat>) d[k] = { agent: dist(lat[k].agent), inline: dist(lat[k].inline) }
  } finally {
    await b.close()
  }
  const r = (k: keyof typeof lat, q: 'p50' | 'p99' = 'p50') => d[k].agent[q] / d[k].inline[q]
  const row = (measurement: string, k: keyof typeof lat, q: 'p50' | 'p99', target?: number): Row => ({ measurement, db: kind, figure: ms(d[k].agent[q]), floor: ms(d[k].inline[q]), ratio: times(r(k, q)), target: target ? `≤ ${target.toFixed(2)}× inline` : '', met: target ? yes(r(k, q) <= target) : '' })
  const rows: Row[] = [
    row(`new session + its first turn p50, from an agent / inline (${o.sessions} + ${o.sessions})`, 'both', 'p50', 1.05),
    row('new session + its first turn p99', 'both', 'p99'),
    row('session create p50 (POST /v1/sessions)', 'create', 'p50'),
    row('first turn p50 (POST followup → turn/end)', 'first', 'p50'),
    row(`turn overhead p50 on an existing session (${o.turns} + ${o.turns} turns)`, 'turn', 'p50', 1.05),
    row('turn overhead p99 on an existing session', 'turn', 'p99'),
  ]
  return { rows, data: { ...d, ratios: { both: r('both'), create: r('create'), first: r('first'), turn: r('turn') } } }
}
