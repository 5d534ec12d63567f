// 6. The budget check (API.md §15): turn overhead with the check before every model attempt and
// without it, on one session of one server, in alternating blocks of turns so the machine's load hits
// both alike. The tenant has a token and a cost budget (never reached), so the check reads its totals.
// "Without" replaces the Tenancy's checkBudget with one that answers at once: everything else — the
// ledger rows written with each settlement, the slots — stays as it is in both.

import type { ClientProc } from './clientproc.js'
import { createSession, dist, request, snapshot, startBenchApp, ADMIN_TOKEN, type Dist, type Kind } from './lib.js'
import { ms, times, type Row } from './report.js'
import { BLOCK, headSeq } from './turn.js'

export interface BudgetOptions {
  turns: number
  warmup: number
}

export async function benchBudget(kind: Kind, o: BudgetOptions, cp: ClientProc): Promise<{ rows: Row[]; data: Record<string, unknown> }> {
  const b = await startBenchApp(kind)
  const tenancy = b.app.tenancy
  const check = tenancy.checkBudget.bind(tenancy)
  const lat = { on: [] as number[], off: [] as number[] }
  const stmts = { on: 0, off: 0 }
  let on: Dist
  let off: Dist
  try {
    const set = await request('PATCH', `${b.url}/v1/admin/tenants/${b.tenantId}`, ADMIN_TOKEN, { limits: { tokensPerDay: 1e12, costUsdPerMonth: 1e9 } })
    if (set.status !== 200) throw new Error(`limits: ${set.status} ${set.text}`)
    const s = await createSession(b.url, b.key, { model: 'faux/echo' })
    await cp.call({ op: 'turns', url: b.url, key: b.key, sessions: [{ id: s.id, after: -1 }], turns: o.warmup })
    for (let done = 0; done < o.turns; done += BLOCK) {
      const n = Math.min(BLOCK, o.turns - done)
      for (const mode of ['on', 'off'] as const) {
        tenancy.checkBudget = mode === 'on' ? check : async () => null
        const after = await headSeq(b, s.id)
        const c0 = snapshot(b.bdb.counters)
        const r = await cp.call({ op: 'turns', url: b.url, key: b.key, sessions: [{ id: s.id, after }], turns: n })
        stmts[mode] += b.bdb.counters.statements - c0.statements
        lat[mode].push(...r.latencies)
      }
    }
    on = dist(lat.on)
    off = dist(lat.off)
  } finally {
    tenancy.checkBudget = check
    await b.close()
  }
  const r50 = on.p50 / off.p50
  const r99 = on.p99 / off.p99
  const perTurn = { on: stmts.on / o.turns, off: stmts.off / o.turns }
  const rows: Row[] = [
    { measurement: `turn overhead p50 with / without the check (${o.turns} + ${o.turns} turns)`, db: kind, figure: ms(on.p50), floor: ms(off.p50), ratio: times(r50), target: '', met: '' },
    { measurement: `turn overhead p99 with / without the check`, db: kind, figure: ms(on.p99), floor: ms(off.p99), ratio: times(r99), target: '', met: '' },
    { measurement: 'cost of the check per attempt (p50 difference, one attempt per turn)', db: kind, figure: ms(on.p50 - off.p50), floor: '', ratio: '', target: '', met: '' },
    { measurement: 'statements per turn with / without the check', db: kind, figure: perTurn.on.toFixed(1), floor: perTurn.off.toFixed(1), ratio: times(perTurn.on / perTurn.off), target: '', met: '' },
  ]
  return { rows, data: { on, off, ratioP50: r50, ratioP99: r99, statementsPerTurn: perTurn } }
}
