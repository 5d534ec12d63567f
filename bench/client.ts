// The load generator: a child process (forked by run.ts) that plays the API clients, so that their
// HTTP and SSE parsing does not run on the server's event loop. It takes commands over IPC:
//   turns       — per session: an SSE subscriber, then `turns` times POST followup and wait for the
//                 turn/end on the stream; returns each turn's latency (POST sent → turn/end received)
//   fanoutOpen  — opens n SSE subscribers on one session (raw node:http, one socket each)
//   fanoutRun   — drives turns on that session; every subscriber records, per durable frame, the
//                 delay from the event's `time` to its receipt, and counts live chunk frames
//   fanoutArm / fanoutCollect — the same recording in a process that does not drive the turns
//                 (subscribers split over several load generators): arm before the driver's first
//                 turn, collect after `turns` turn/ends were seen by all of this process's subscribers
//   fanoutClose — closes them
// Frames are parsed by bench/lib.ts openSse.

import { dist, now, openSse, pool, request, type Dist, type SseFrame } from './lib.js'

export type Command =
  | { op: 'turns'; url: string; key: string; sessions: Array<{ id: string; after: number }>; turns: number; streamPath?: string; postPath?: string }
  | { op: 'fanoutOpen'; url: string; key: string; session: string; n: number; after: number; streamPath?: string }
  | { op: 'fanoutRun'; url: string; key: string; session: string; turns: number; postPath?: string; content?: string }
  | { op: 'fanoutArm' }
  | { op: 'fanoutCollect'; turns: number }
  | { op: 'fanoutClose' }
  | { op: 'ping' }

export interface TurnsResult {
  /** latency of every turn, ms (all sessions) */
  latencies: number[]
  wallMs: number
  /** durable frames received across sessions */
  durable: number
}

export interface FanoutOpenResult {
  openMs: number
  n: number
}

export interface FanoutRunResult {
  /** commit→delivery delay over every (subscriber, durable frame) pair, ms */
  delay: Dist
  /** the raw delays (for merging several load generators), ms */
  delays: number[]
  durableFrames: number
  chunkFrames: number
  /** Σ over turns of (last chunk received − first chunk received), any subscriber, ms */
  chunkWindowMs: number
  /** per turn: POST sent → every subscriber (of this process) has the turn/end (driver only) */
  turnMs?: Dist
  /** subscribers that missed a durable frame (should be 0) */
  gaps: number
}

const TURN_END = '"type":"turn/end"'
const TIME_RE = /^\{"seq":(-?\d+),"time":(\d+),/

function streamUrl(url: string, path: string | undefined, session: string, after: number): string {
  return `${url}${(path ?? '/v1/sessions/:id/stream').replace(':id', session)}?after=${after}`
}

async function post(url: string, key: string, path: string | undefined, session: string, content = 'hello'): Promise<void> {
  const r = await request('POST', `${url}${(path ?? '/v1/sessions/:id/followup').replace(':id', session)}`, key, { content })
  if (r.status !== 202) throw new Error(`followup: ${r.status} ${r.text}`)
}

/** Waits for counters: resolves when turn/end number k has been seen. */
class TurnEnds {
  count = 0
  private waiters: Array<{ k: number; resolve: () => void }> = []
  seen(): void {
    this.count++
    this.waiters = this.waiters.filter((w) => {
      if (this.count >= w.k) w.resolve()
      return this.count < w.k
    })
  }
  wait(k: number): Promise<void> {
    if (this.count >= k) return Promise.resolve()
    return new Promise((resolve) => this.waiters.push({ k, resolve }))
  }
}

async function runTurns(c: Extract<Command, { op: 'turns' }>): Promise<TurnsResult> {
  const latencies: number[] = []
  let durable = 0
  const subs = await Promise.all(
    c.sessions.map(async (s) => {
      const ends = new TurnEnds()
      const sse = openSse(streamUrl(c.url, c.streamPath, s.id, s.after), c.key, (f: SseFrame) => {
        if (f.event !== 'session/event') return
        durable++
        if (f.data!.includes(TURN_END)) ends.seen()
      })
      await sse.ready
      return { s, ends, sse }
    }),
  )
  const t0 = now()
  await Promise.all(
    subs.map(async ({ s, ends }) => {
      for (let k = 1; k <= c.turns; k++) {
        const start = now()
        await Promise.all([post(c.url, c.key, c.postPath, s.id), ends.wait(k)])
        latencies.push(now() - start)
      }
    }),
  )
  const wallMs = now() - t0
  for (const x of subs) x.sse.close()
  return { latencies, wallMs, durable }
}

// ---- fan-out ----

interface FanSub {
  close(): void
  lastSeq: number
  gaps: number
}

let fan: { subs: FanSub[]; ends: TurnEnds; delays: number[]; durable: number; chunks: number; firstChunk: number; lastChunk: number; chunkWindowMs: number; recording: boolean } | undefined

async function fanoutOpen(c: Extract<Command, { op: 'fanoutOpen' }>): Promise<FanoutOpenResult> {
  const state = { subs: [] as FanSub[], ends: new TurnEnds(), delays: [] as number[], durable: 0, chunks: 0, firstChunk: 0, lastChunk: 0, chunkWindowMs: 0, recording: false }
  fan = state
  const t0 = now()
  const url = streamUrl(c.url, c.streamPath, c.session, c.after)
  let endsThisTurn = 0
  await pool(
    Array.from({ length: c.n }, (_, i) => i),
    50,
    async () => {
      const sub: FanSub = { close: () => {}, lastSeq: c.after, gaps: 0 }
      const sse = openSse(url, c.key, (f: SseFrame, at: number) => {
        if (f.event === 'stream/ready') sub.lastSeq = JSON.parse(f.data!).headSeq
        else if (f.event === 'session/event') {
          const m = TIME_RE.exec(f.data!)
          if (!m) return
          const seq = Number(m[1])
          if (seq !== sub.lastSeq + 1) sub.gaps++
          sub.lastSeq = seq
          if (state.recording) {
            state.delays.push(at - Number(m[2]))
            state.durable++
          }
          if (f.data!.includes(TURN_END)) {
            endsThisTurn++
            if (endsThisTurn === c.n) {
              endsThisTurn = 0
              // a turn is over for this process: close its chunk window
              if (state.recording && state.firstChunk) state.chunkWindowMs += state.lastChunk - state.firstChunk
              state.firstChunk = 0
              state.lastChunk = 0
              state.ends.seen()
            }
          }
        } else if (f.event === 'agent/assistant-stream' && state.recording && f.data!.includes('"kind":"chunk"')) {
          state.chunks++
          if (!state.firstChunk) state.firstChunk = at
          state.lastChunk = at
        }
      })
      sub.close = sse.close
      await sse.ready
      state.subs.push(sub)
    },
  )
  return { openMs: now() - t0, n: state.subs.length }
}

function arm(): { base: number } {
  const f = fan!
  f.delays = []
  f.durable = 0
  f.chunks = 0
  f.chunkWindowMs = 0
  f.firstChunk = 0
  f.lastChunk = 0
  f.recording = true
  armedBase = f.ends.count
  return { base: armedBase }
}

let armedBase = 0

function collect(turnMs?: number[]): FanoutRunResult {
  const f = fan!
  f.recording = false
  return {
    delay: dist(f.delays),
    delays: f.delays.map((x) => Math.round(x * 100) / 100),
    durableFrames: f.durable,
    chunkFrames: f.chunks,
    chunkWindowMs: f.chunkWindowMs,
    ...(turnMs ? { turnMs: dist(turnMs) } : {}),
    gaps: f.subs.reduce((a, s) => a + s.gaps, 0),
  }
}

async function fanoutRun(c: Extract<Command, { op: 'fanoutRun' }>): Promise<FanoutRunResult> {
  const f = fan!
  const { base } = arm()
  const turnMs: number[] = []
  for (let k = 1; k <= c.turns; k++) {
    const start = now()
    await Promise.all([post(c.url, c.key, c.postPath, c.session, c.content), f.ends.wait(base + k)])
    turnMs.push(now() - start)
  }
  return collect(turnMs)
}

async function fanoutCollect(c: Extract<Command, { op: 'fanoutCollect' }>): Promise<FanoutRunResult> {
  await fan!.ends.wait(armedBase + c.turns)
  return collect()
}

function fanoutClose(): { closed: number } {
  const n = fan?.subs.length ?? 0
  for (const s of fan?.subs ?? []) s.close()
  fan = undefined
  return { closed: n }
}

process.on('message', (msg: { id: number; cmd: Command }) => {
  const { id, cmd } = msg
  const run = async () => {
    switch (cmd.op) {
      case 'turns':
        return runTurns(cmd)
      case 'fanoutOpen':
        return fanoutOpen(cmd)
      case 'fanoutRun':
        return fanoutRun(cmd)
      case 'fanoutArm':
        return arm()
      case 'fanoutCollect':
        return fanoutCollect(cmd)
      case 'fanoutClose':
        return fanoutClose()
      case 'ping':
        return { pong: true }
    }
  }
  run().then(
    (result) => process.send!({ id, result }),
    (e: Error) => process.send!({ id, error: e?.stack ?? String(e) }),
  )
})
process.on('disconnect', () => process.exit(0))
