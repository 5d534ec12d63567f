// 7. Credentials (API.md §18): turn overhead when the client sends a token and when it sends the tenant
// key, on one server, in alternating blocks of turns so the machine's load hits both alike. The token
// is what a browser gets: read and write, with a subject owning the session it drives; the key drives a
// session of its own. Every request of a turn — the followup and the stream — carries the credential.

import crypto from 'node:crypto'
import type { ClientProc } from './clientproc.js'
import { createSession, dist, request, snapshot, startBenchApp, type Dist, type Kind } from './lib.js'
import { ms, times, yes, type Row } from './report.js'
import { BLOCK, headSeq } from './turn.js'

export interface TokensOptions {
  turns: number
  warmup: number
}

export async function benchTokens(kind: Kind, o: TokensOptions, cp: ClientProc): Promise<{ rows: Row[]; data: Record<string, unknown> }> {
  // the keys that sign tokens are sealed with it (PostgreSQL has no key of its own)
  const b = await startBenchApp(kind, { env: { AGENTD_SECRET_KEY: crypto.randomBytes(32).toString('base64') } })
  const lat = { token: [] as number[], key: [] as number[] }
  const stmts = { token: 0, key: 0 }
  let token: Dist
  let key: Dist
  try {
    const minted = await request('POST', `${b.url}/v1/tokens`, b.key, { scopes: ['read', 'write'], subject: 'bench-user', ttlSeconds: 86400 })
    if (minted.status !== 201) throw new Error(`token: ${minted.status} ${minted.text}`)
    const credential = { token: minted.json.token as string, key: b.key }
    const session = {
      token: await createSession(b.url, credential.token, { model: 'faux/echo' }),
      key: await createSession(b.url, credential.key, { model: 'faux/echo' }),
    }
    for (const mode of ['token', 'key'] as const) await cp.call({ op: 'turns', url: b.url, key: credential[mode], sessions: [{ id: session[mode].id, after: -1 }], turns: o.warmup })
    for (let done = 0; done < o.turns; done += BLOCK) {
      const n = Math.min(BLOCK, o.turns - done)
      for (const mode of ['token', 'key'] as const) {
        const after = await headSeq(b, session[mode].id)
        const c0 = snapshot(b.bdb.counters)
        const r = await cp.call({ op: 'turns', url: b.url, key: credential[mode], sessions: [{ id: session[mode].id, after }], turns: n })
        stmts[mode] += b.bdb.counters.statements - c0.statements
        lat[mode].push(...r.latencies)
      }
    }
    token = dist(lat.token)
    key = dist(lat.key)
  } finally {
    await b.close()
  }
  const r50 = token.p50 / key.p50
  const r99 = token.p99 / key.p99
  const perTurn = { token: stmts.token / o.turns, key: stmts.key / o.turns }
  const rows: Row[] = [
    { measurement: `turn overhead p50 with a token / with the key (${o.turns} + ${o.turns} turns)`, db: kind, figure: ms(token.p50), floor: ms(key.p50), ratio: times(r50), target: '≤ 1.05× key', met: yes(r50 <= 1.05) },
    { measurement: 'turn overhead p99 with a token / with the key', db: kind, figure: ms(token.p99), floor: ms(key.p99), ratio: times(r99), target: '', met: '' },
    { measurement: 'statements per turn with a token / with the key', db: kind, figure: perTurn.token.toFixed(1), floor: perTurn.key.toFixed(1), ratio: times(perTurn.token / perTurn.key), target: '', met: '' },
  ]
  return { rows, data: { token, key, ratioP50: r50, ratioP99: r99, statementsPerTurn: perTurn } }
}
