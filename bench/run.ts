// `npm run bench [-- --only turn,throughput,growth,fanout,memory,budget,agents,tokens,tracing] [--db pg,pglite] [--quick] [--out file]
//   [--levels 1,10,100] [--turns N] [--tools N] [--peers] [--cpu-prof DIR]`
// Runs each measurement on each database, prints one table per measurement and writes
// bench/results.json (git-ignored). See bench/README.md for what every figure means.

import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { ClientProc } from './clientproc.js'
import { dropAll, PG_BASE, type Kind } from './lib.js'
import { table, type Row } from './report.js'
import { benchTurn } from './turn.js'
import { benchAgents } from './agents.js'
import { benchThroughput } from './throughput.js'
import { benchGrowth } from './growth.js'
import { benchFanout } from './fanout.js'
import { benchMemory } from './memory.js'
import { benchBudget } from './budget.js'
import { benchTokens } from './tokens.js'
import { benchTracing } from './tracing.js'
import { benchResponses } from './responses.js'
import { benchChat } from './chat.js'

const MEASUREMENTS = ['turn', 'throughput', 'growth', 'fanout', 'memory', 'budget', 'agents', 'tokens', 'tracing', 'responses', 'chat'] as const
type Measurement = (typeof MEASUREMENTS)[number]

const TITLES: Record<Measurement, string> = {
  turn: '1. Turn overhead (faux/echo, one step, no tools; POST followup → turn/end on SSE)',
  throughput: '2. Throughput (concurrent sessions, one-tool turns back to back)',
  growth: '3. Growth with session length (per-step overhead after N prior events)',
  fanout: '4. Fan-out (SSE subscribers on one session)',
  memory: '5. Memory (RSS of a child server process)',
  budget: '6. Budget check (turn overhead with the check before every model attempt / without it; "floor" = without)',
  agents: '7. Sessions from agents (a new session and its first turn, and turns, from an agent / inline with the same settings; "floor" = inline)',
  tokens: '8. Credentials (turn overhead driven with a token / with the tenant key; "floor" = the key)',
  tracing: '9. Tracing (server CPU per turn with OpenTelemetry traces exported / off; "floor" = off)',
  responses: '10. OpenAI Responses (turn overhead and streamed events per second through /v1/responses / the native API; "floor" = native)',
  chat: '11. Chat front ends (frames per second through the AI SDK UI stream and AG-UI / the native stream; "floor" = native)',
}

function parseArgs(argv: string[]) {
  const o = {
    only: [...MEASUREMENTS] as Measurement[],
    dbs: ['pg', 'pglite'] as Kind[],
    quick: false,
    out: fileURLToPath(new URL('./results.json', import.meta.url)),
    levels: undefined as number[] | undefined,
    turns: undefined as number | undefined,
    peers: false,
    cpuProf: undefined as string | undefined,
    tools: undefined as number | undefined,
  }
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]
    const val = () => {
      const v = a.includes('=') ? a.slice(a.indexOf('=') + 1) : argv[++i]
      if (v === undefined) throw new Error(`${a} needs a value`)
      return v
    }
    if (a === '--quick') o.quick = true
    else if (a.startsWith('--only')) {
      const list = val().split(',').map((s) => s.trim()).filter(Boolean)
      for (const m of list) if (!MEASUREMENTS.includes(m as Measurement)) throw new Error(`--only: unknown measurement ${m} (known: ${MEASUREMENTS.join(', ')})`)
      o.only = MEASUREMENTS.filter((m) => list.includes(m))
    } else if (a.startsWith('--db')) {
      const list = val().split(',').map((s) => s.trim()).filter(Boolean)
      for (const d of list) if (d !== 'pg' && d !== 'pglite') throw new Error(`--db: unknown database ${d} (pg, pglite)`)
      o.dbs = list as Kind[]
    } else if (a.startsWith('--out')) o.out = path.resolve(val())
    else if (a.startsWith('--levels')) {
      o.levels = val().split(',').map((x) => Number(x.trim()))
      if (!o.levels.length || o.levels.some((n) => !Number.isInteger(n) || n < 1)) throw new Error('--levels: positive integers, e.g. 1,10,100')
    } else if (a.startsWith('--turns')) {
      o.turns = Number(val())
      if (!Number.isInteger(o.turns) || o.turns < 1) throw new Error('--turns: a positive integer')
    } else if (a.startsWith('--tools')) {
      o.tools = Number(val())
      if (!Number.isInteger(o.tools) || o.tools < 1) throw new Error('--tools: a positive integer')
    } else if (a === '--peers') o.peers = true
    else if (a.startsWith('--cpu-prof')) o.cpuProf = path.resolve(val())
    else if (a === '--help' || a === '-h') {
      process.stdout.write('usage: npm run bench -- [--only turn,throughput,growth,fanout,memory,budget,agents,tokens,tracing,responses,chat] [--db pg,pglite] [--quick] [--out file] [--levels 1,10,100] [--turns N] [--tools N] [--peers] [--cpu-prof DIR]\n')
      process.exit(0)
    } else throw new Error(`unknown argument ${a}`)
  }
  return o
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2))
  const q = args.quick
  const startedAt = new Date()
  const results: Record<string, unknown> = {
    startedAt: startedAt.toISOString(),
    args: { only: args.only, dbs: args.dbs, quick: q, levels: args.levels, turns: args.turns, peers: args.peers, cpuProf: args.cpuProf, tools: args.tools },
    machine: {
      platform: `${os.type()} ${os.release()} ${os.arch()}`,
      cpus: os.cpus().map((c) => ({ model: c.model, speed: c.speed })),
      totalMemMB: Math.round(os.totalmem() / 2 ** 20),
      loadavg: os.loadavg(),
      node: process.version,
    },
    database: { pg: PG_BASE.replace(/\/\/([^:@/]+):[^@/]*@/, '//$1:***@'), pglite: 'fresh temp data dir' },
    measurements: {} as Record<string, unknown>,
  }
  const write = () => fs.writeFileSync(args.out, JSON.stringify(results, null, 2) + '\n')
  const all: Array<{ title: string; rows: Row[] }> = []
  const cp = new ClientProc()
  // a second load generator for fan-out (subscribers split over two processes)
  let cp2: ClientProc | undefined
  process.stdout.write(`agentd bench: ${args.only.join(', ')} on ${args.dbs.join(', ')}${q ? ' (quick)' : ''}; ${os.cpus().length} cpus, node ${process.version}\n`)
  try {
    for (const m of args.only) {
      const rows: Row[] = []
      const data: Record<string, unknown> = {}
      for (const kind of args.dbs) {
        const t0 = Date.now()
        process.stdout.write(`… ${m} on ${kind}\n`)
        let r: { rows: Row[]; data: Record<string, unknown> }
        try {
          if (m === 'turn') r = await benchTurn(kind, q ? { turns: 20, warmup: 5 } : { turns: 200, warmup: 20 }, cp)
          else if (m === 'throughput') {
            const base = q ? { levels: [1, 10], turns: 3, warmRounds: 1, minLevelTurns: 6 } : { levels: [1, 10, 100], turns: 20, maxTurnsPerLevel: kind === 'pglite' ? 400 : undefined }
            r = await benchThroughput(kind, { ...base, levels: args.levels ?? base.levels, turns: args.turns ?? base.turns, peers: args.peers, cpuProf: args.cpuProf, tools: args.tools }, cp)
          }
          else if (m === 'growth') r = await benchGrowth(kind, q ? { sizes: [10, 1000], turns: 8, warmup: 5, live: { turns: 120, window: 40 } } : { sizes: [10, 1000, 10000], turns: 40, warmup: 20, live: { turns: 1000, window: 100 } }, cp)
          else if (m === 'fanout') r = await benchFanout(kind, q ? { levels: [1, 100], turns: 2, minChunkTurns: 1 } : { levels: [1, 100, 1000], turns: 10 }, [cp, (cp2 ??= new ClientProc())])
          else if (m === 'budget') r = await benchBudget(kind, q ? { turns: 20, warmup: 5 } : { turns: 200, warmup: 20 }, cp)
          else if (m === 'agents') r = await benchAgents(kind, q ? { sessions: 10, turns: 20, warmup: 3 } : { sessions: 100, turns: 200, warmup: 10 }, cp)
          else if (m === 'tokens') r = await benchTokens(kind, q ? { turns: 20, warmup: 5 } : { turns: 200, warmup: 20 }, cp)
          else if (m === 'tracing') r = await benchTracing(kind, q ? { turns: 40, warmup: 10 } : { turns: 400, warmup: 40 }, cp)
          else if (m === 'responses') r = await benchResponses(kind, q ? { turns: 20, warmup: 5, chunks: 500, streams: 3, idleStreams: 100 } : { turns: 200, warmup: 20, chunks: 2000, streams: 5, idleStreams: 1000 })
          else if (m === 'chat') r = await benchChat(kind, q ? { chunks: 500, streams: 3 } : { chunks: 2000, streams: 5 })
          else r = await benchMemory(kind, q ? { sessions: 200, connections: 100, settleMs: 300 } : { sessions: 10000, connections: 1000, settleMs: 2000 })
        } catch (e) {
          process.stdout.write(`   ${m} on ${kind} failed: ${(e as Error)?.stack ?? e}\n`)
          r = { rows: [{ measurement: m, db: kind, figure: 'FAILED', floor: '', ratio: '', target: '', met: '' }], data: { error: String((e as Error)?.stack ?? e) } }
        }
        rows.push(...r.rows)
        data[kind] = { ...r.data, seconds: (Date.now() - t0) / 1000 }
        process.stdout.write(`  (${((Date.now() - t0) / 1000).toFixed(1)} s)\n`)
        ;(results.measurements as Record<string, unknown>)[m] = { rows: rows.slice(), ...data }
        write()
      }
      process.stdout.write(table(TITLES[m], rows) + '\n')
      if (m === 'throughput' && args.cpuProf) process.stdout.write(`\nCPU profiles of agentd's measured windows and their summaries: ${args.cpuProf}/throughput-<db>-C<n>.{cpuprofile,txt}\n`)
      all.push({ title: TITLES[m], rows })
    }
  } finally {
    cp.close()
    cp2?.close()
    await dropAll()
  }
  results.finishedAt = new Date().toISOString()
  results.seconds = (Date.now() - startedAt.getTime()) / 1000
  results.targets = all.flatMap((t) => t.rows.filter((r) => r.met).map((r) => ({ measurement: r.measurement, db: r.db, figure: r.figure, floor: r.floor, ratio: r.ratio, target: r.target, met: r.met === 'yes' })))
  write()
  const missed = all.flatMap((t) => t.rows).filter((r) => r.met === 'NO')
  process.stdout.write(`\ndone in ${((Date.now() - startedAt.getTime()) / 1000).toFixed(0)} s; results in ${path.relative(process.cwd(), args.out)}\n`)
  process.stdout.write(missed.length ? `targets missed: ${missed.map((r) => `${r.measurement} [${r.db}]`).join('; ')}\n` : 'all targets met\n')
  // pending handles (pg pools, PGlite) must not keep the process alive
  process.exit(0)
}

main().catch(async (e) => {
  process.stderr.write(`bench failed: ${(e as Error)?.stack ?? e}\n`)
  await dropAll()
  process.exit(1)
})
