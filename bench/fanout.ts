// 4. Fan-out: N SSE subscribers (N = 1, 100, 1,000) on one session, opened by the load generator
// with raw node:http (one socket each). Turns on bench/chunks (CHUNKS text deltas per answer) are
// driven one after another; every subscriber records, for each durable frame, the delay from the
// event's `time` (stamped by agentd just before its transaction) to the frame's receipt — the two
// clocks are the same machine's — and counts live chunk frames.
// Floor: a minimal node:http SSE server in this process that commits the same turn's units directly
// (bench/floor.ts) and, after each commit, writes the same frames to every open response; between
// admission and the assistant message it writes the same number of chunk frames, one event-loop
// tick apart (the model's pace).

import http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { ClientProc } from './clientproc.js'
import type { FanoutRunResult } from './client.js'
import { FloorWriter, floorSession, type Unit } from './floor.js'
import { createSession, dist, now, startBenchApp, type Dist, type Kind, type RawDb } from './lib.js'
import { benchProvider, CHUNKS, CHUNKS_MODEL, chunksFor } from './models.js'
import { ms, num, times, yes, type Row } from './report.js'
import { headSeq, turnUnits } from './turn.js'

export interface FanoutOptions {
  levels: number[]
  turns: number
  /** the fewest chunk turns per level (default 12) */
  minChunkTurns?: number
}

const tick = () => new Promise<void>((r) => setImmediate(r))

/** The floor's SSE server: one session, N responses, turns replayed from `units`. */
async function floorServer(raw: RawDb, tenantId: string, units: Unit[]): Promise<{ url: string; close(): Promise<void>; takeWriteMs(): number[] }> {
  const w = new FloorWriter(raw, await floorSession(raw, tenantId))
  const subs = new Set<http.ServerResponse>()
  let seq = -1
  let revision = 0
  const broadcast = (s: string) => {
    for (const r of subs) r.write(s)
  }
  // how long writing one durable frame to every response takes (the server's share of the delay)
  let writeMs: number[] = []
  const commit = async (u: Unit) => {
    const bodies = await w.commit(u)
    seq += bodies.length
    for (const b of bodies) {
      const t0 = now()
      broadcast(`event: session/event\nid: ${b.slice(7, b.indexOf(','))}\ndata: ${b}\n\n`)
      writeMs.push(now() - t0)
    }
  }
  const turn = async (chunks: number) => {
    for (const u of units.slice(1)) {
      if (u[0].type === 'assistant/message') {
        const attemptId = `floor:${seq + 1}`
        const chunk = (c: unknown, index: number) => broadcast(`event: agent/assistant-stream\ndata: ${JSON.stringify({ kind: 'chunk', attemptId, revision: ++revision, index, time: Date.now(), chunk: c })}\n\n`)
        broadcast(`event: agent/assistant-stream\ndata: ${JSON.stringify({ kind: 'start', attemptId, revision: ++revision, turn: 1, step: 1 })}\n\n`)
        let i = 0
        chunk({ type: 'block-start', index: 0, blockType: 'text' }, i++)
        for (let k = 0; k < chunks; k++) {
          await tick()
          chunk({ type: 'text-delta', index: 0, text: `w${k} ` }, i++)
        }
        chunk({ type: 'block-end', index: 0, block: { type: 'text', text: 'w…' } }, i++)
        chunk({ type: 'usage', usage: { inputTokens: 12, outputTokens: 6 } }, i++)
        chunk({ type: 'finish', reason: { kind: 'stop' } }, i++)
        await commit(u)
        broadcast(`event: agent/assistant-stream\ndata: ${JSON.stringify({ kind: 'end', attemptId, revision: ++revision, index: i, outcome: { kind: 'committed', eventType: 'assistant/message', seq } })}\n\n`)
      } else await commit(u)
    }
  }
  const server = http.createServer((req, res) => {
    if (req.method === 'GET' && req.url?.startsWith('/f/stream')) {
      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' })
      res.write(`event: stream/ready\ndata: {"headSeq":${seq}}\n\n`)
      subs.add(res)
      res.on('close', () => subs.delete(res))
      return
    }
    if (req.method === 'POST' && req.url?.startsWith('/f/followup')) {
      let body = ''
      req.setEncoding('utf8')
      req.on('data', (d: string) => (body += d))
      req.on('end', () => {
        void (async () => {
          await commit(units[0])
          res.writeHead(202, { 'content-type': 'application/json' }).end(`{"seq":${seq}}`)
          await turn(chunksFor(String(JSON.parse(body).content ?? '')))
        })()
      })
      return
    }
    res.writeHead(404).end()
  })
  server.keepAliveTimeout = 60000
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    takeWriteMs() {
      const x = writeMs
      writeMs = []
      return x
    },
    async close() {
      for (const r of subs) r.destroy()
      await new Promise<void>((r) => server.close(() => r()))
    },
  }
}

interface Level {
  n: number
  openMs: number
  loadGenerators: number
  /** turns with a short answer (3 deltas, like faux/echo): the durable delay */
  delay: FanoutRunResult
  /** turns streaming CHUNKS deltas: the live chunk rate */
  chunks: FanoutRunResult
  /** floor only: time to write one durable frame to all n responses */
  writeMs?: Dist
}

/** Merges the results of several load generators (the first drove the turns). */
function merge(parts: FanoutRunResult[]): FanoutRunResult {
  const delays = parts.flatMap((p) => p.delays)
  return {
    delay: dist(delays),
    delays: [],
    durableFrames: parts.reduce((a, p) => a + p.durableFrames, 0),
    chunkFrames: parts.reduce((a, p) => a + p.chunkFrames, 0),
    // the processes saw the same turns: the window is the widest one
    chunkWindowMs: Math.max(...parts.map((p) => p.chunkWindowMs)),
    turnMs: parts[0].turnMs,
    gaps: parts.reduce((a, p) => a + p.gaps, 0),
  }
}

/**
 * `cps`: the load generators. From 100 subscribers on, the subscribers are split evenly over all of
 * them (separate processes, so that one client's parsing backlog does not dominate the delay).
 */
export async function benchFanout(kind: Kind, o: FanoutOptions, cps: ClientProc[]): Promise<{ rows: Row[]; data: Record<string, unknown> }> {
  const cp = cps[0]
  const b = await startBenchApp(kind, { extraProviders: [benchProvider] })
  const agentd: Level[] = []
  const floor: Level[] = []
  // the chunk rate's windows are short (200 deltas stream in tens of ms): at least 12 turns of them,
  // or one subscriber's figure and its floor's each moved by half between runs
  const chunkTurns = Math.max(o.minChunkTurns ?? 12, Math.ceil(o.turns / 3))
  try {
    const s = await createSession(b.url, b.key, { model: CHUNKS_MODEL })
    await cp.call({ op: 'turns', url: b.url, key: b.key, sessions: [{ id: s.id, after: -1 }], turns: 5 })
    const { units } = await turnUnits(b, s.id)
    const fs = await floorServer(b.bdb.raw(), b.tenantId, units)
    const level = async (n: number, url: string, key: string, session: string, after: number, paths: { streamPath?: string; postPath?: string }): Promise<Level> => {
      const used = n >= 100 ? cps : [cp]
      const shares = used.map((_, i) => Math.floor(n / used.length) + (i < n % used.length ? 1 : 0))
      const opens = await Promise.all(used.map((c, i) => c.call({ op: 'fanoutOpen', url, key, session, n: shares[i], after, streamPath: paths.streamPath })))
      const phase = async (turns: number, content?: string) => {
        await Promise.all(used.slice(1).map((c) => c.call({ op: 'fanoutArm' })))
        return merge(await Promise.all([cp.call({ op: 'fanoutRun', url, key, session, turns, postPath: paths.postPath, content }), ...used.slice(1).map((c) => c.call({ op: 'fanoutCollect', turns }))]))
      }
      try {
        const delay = await phase(o.turns)
        const chunks = await phase(chunkTurns, `chunks:${CHUNKS}`)
        return { n, openMs: Math.max(...opens.map((x) => x.openMs)), loadGenerators: used.length, delay, chunks }
      } finally {
        await Promise.all(used.map((c) => c.call({ op: 'fanoutClose' })))
      }
    }
    const floorPaths = { streamPath: '/f/stream', postPath: '/f/followup' }
    try {
      // warm both paths alike, the chunk path included (a level of one subscriber each)
      await level(1, b.url, b.key, s.id, await headSeq(b, s.id), {})
      await level(1, fs.url, '', 'f', -1, floorPaths)
      for (const n of o.levels) {
        agentd.push(await level(n, b.url, b.key, s.id, await headSeq(b, s.id), {}))
        fs.takeWriteMs()
        const fl = await level(n, fs.url, '', 'f', -1, floorPaths)
        floor.push({ ...fl, writeMs: dist(fs.takeWriteMs()) })
      }
    } finally {
      await fs.close()
    }
  } finally {
    await b.close()
  }
  const rows: Row[] = []
  const rate = (x: FanoutRunResult) => (x.chunkWindowMs > 0 ? (x.chunkFrames / x.chunkWindowMs) * 1000 : NaN)
  for (let i = 0; i < agentd.length; i++) {
    const a = agentd[i]
    const f = floor[i]
    const subs = `${a.n} subscriber${a.n > 1 ? 's' : ''}`
    const targeted = a.n === 1000
    const gaps = a.delay.gaps + a.chunks.gaps
    rows.push({ measurement: `${subs}: durable delay p50`, db: kind, figure: ms(a.delay.delay.p50), floor: ms(f.delay.delay.p50), ratio: times(a.delay.delay.p50 / f.delay.delay.p50), target: '', met: gaps ? `${gaps} gaps!` : '' })
    rows.push({
      measurement: `${subs}: durable delay p99`,
      db: kind,
      figure: ms(a.delay.delay.p99),
      floor: ms(f.delay.delay.p99),
      ratio: times(a.delay.delay.p99 / f.delay.delay.p99),
      target: targeted ? '≤ 50 ms' : '',
      met: targeted ? yes(a.delay.delay.p99 <= 50) : '',
    })
    // the target for the chunk path: one subscriber's frames/s at least half its floor's
    const chunkRatio = rate(a.chunks) / rate(f.chunks)
    rows.push({ measurement: `${subs}: chunk frames/s delivered`, db: kind, figure: `${num(rate(a.chunks), 0)}/s`, floor: `${num(rate(f.chunks), 0)}/s`, ratio: times(chunkRatio), target: a.n === 1 ? '≥ 0.5× floor' : '', met: a.n === 1 ? yes(chunkRatio >= 0.5) : '' })
  }
  return { rows, data: { agentd, floor, chunksPerAnswer: CHUNKS, delayTurns: o.turns, chunkTurns } }
}
