// 10. OpenAI Responses (API.md §17.1) against the native API, on the same server and the same kind of
// turns, in alternating blocks so drift in the machine's load hits both:
//   - turn overhead: a blocking POST /v1/responses (sent → answer received) against POST …/followup
//     sent → turn/end received on the session's native SSE stream; faux/echo, one step, no tools.
//   - events per second: one turn of bench/chunks streaming N deltas, read at once by a native SSE
//     subscriber (its agent/assistant-stream chunk frames) and by a Responses stream (its
//     output_text.delta events), each rate taken from its first to its last such frame.
//   - memory (with `idleStreams`): the RSS of an agentd CHILD process holding that many idle Responses
//     streams (each following the next response of a session whose turn waits for a client tool), against
//     another child holding as many idle native SSE streams on sessions set up the same way.

import http from 'node:http'
import { ADMIN_TOKEN, createSession, dist, freshDir, freshPg, freshPgliteDir, now, openSse, pool, postSseTimes, request, startBenchApp, type Kind } from './lib.js'
import { settledRss, startChild } from './memory.js'
import { benchProvider, CHUNKS_MODEL } from './models.js'
import { mb, ms, num, times, yes, type Row } from './report.js'

export interface ResponsesOptions {
  turns: number
  warmup: number
  /** deltas of the streamed turn */
  chunks: number
  /** streamed turns (each read by both streams) */
  streams: number
  /** idle streams of the memory figure (0: not measured) */
  idleStreams?: number
}

/** An SSE request over its own socket, open once its answer's headers came; close() ends it. */
function openRaw(url: string, key: string): Promise<{ close(): void }> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: 'GET', agent: false, headers: { accept: 'text/event-stream', authorization: `Bearer ${key}` } }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`${url}: ${res.statusCode}`))
      res.on('data', () => {})
      res.on('error', () => {})
      resolve({ close: () => req.destroy() })
    })
    req.on('error', reject)
    req.end()
  })
}

/** RSS of a child agentd with `n` idle streams open: Responses streams, or native ones. */
async function idleStreamsRss(kind: Kind, n: number, responses: boolean): Promise<{ before: number; after: number }> {
  const d = kind === 'pg' ? await freshPg() : await freshPgliteDir()
  const env: Record<string, string> = kind === 'pg' ? { DATABASE_URL: (d as { url: string }).url, AGENTD_DATA_DIR: freshDir().dir } : { AGENTD_DATA_DIR: (d as { dir: string }).dir }
  const child = await startChild('src/main.ts', { ...env, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', AGENTD_ADMIN_TOKEN: ADMIN_TOKEN, AGENTD_RATE_LIMIT_PER_MIN: '100000000' }, 'agentd listening')
  const open: Array<{ close(): void }> = []
  try {
    const t = await request('POST', `${child.url}/v1/admin/tenants`, ADMIN_TOKEN, { name: 'bench' })
    const key: string = t.json.apiKey
    const tools = [{ name: 'ask', description: 'ask the user', parameters: { type: 'object', properties: {} }, execution: { type: 'client' } }]
    // each session's turn waits for a client tool: its next response has not opened yet
    const waits = await pool(Array.from({ length: n }, (_, i) => i), 16, async () => {
      const s = await createSession(child.url, key, { model: 'faux/tools', tools })
      const r = await request('POST', `${child.url}/v1/responses`, key, { conversation: s.id, input: '/call ask {}' })
      if (r.status !== 200 || r.json.output?.[0]?.type !== 'function_call') throw new Error(`wait: ${r.status} ${r.text}`)
      const head = (await request('GET', `${child.url}/v1/sessions/${s.id}`, key)).json.headSeq as number
      return { id: s.id, head }
    })
    const before = await settledRss(child.proc, 1000)
    await pool(waits, 25, async (w) => {
      const url = responses ? `${child.url}/v1/responses/resp_${Buffer.from(w.id).toString('base64url')}_w${w.head}?stream=true` : `${child.url}/v1/sessions/${w.id}/stream?after=${w.head}`
      open.push(await openRaw(url, key))
    })
    const after = await settledRss(child.proc, 1000)
    return { before, after }
  } finally {
    for (const s of open) s.close()
    await child.stop()
    await d.drop()
  }
}

const BLOCK = 10
const plus = (x: number) => `${x >= 0 ? '+' : ''}${mb(x)}`

const rate = (ts: number[]) => (ts.length > 1 ? ((ts.length - 1) * 1000) / (ts.at(-1)! - ts[0]) : NaN)

export async function benchResponses(kind: Kind, o: ResponsesOptions): Promise<{ rows: Row[]; data: Record<string, unknown> }> {
  const b = await startBenchApp(kind, { extraProviders: [benchProvider] })
  try {
    // turn overhead
    const s = await createSession(b.url, b.key, { model: 'faux/echo' })
    const native: number[] = []
    const viaResponses: number[] = []
    let waiter: (() => void) | undefined
    const sse = openSse(`${b.url}/v1/sessions/${s.id}/stream`, b.key, (f) => {
      if (f.event === 'session/event' && f.data?.includes('"type":"turn/end"')) waiter?.()
    })
    await sse.ready
    const nativeTurn = async () => {
      const ended = new Promise<void>((r) => (waiter = r))
      const t0 = now()
      const r = await request('POST', `${b.url}/v1/sessions/${s.id}/followup`, b.key, { content: 'hi' })
      if (r.status !== 202) throw new Error(`followup: ${r.status}`)
      await ended
      return now() - t0
    }
    const responsesTurn = async () => {
      const ended = new Promise<void>((r) => (waiter = r))
      const t0 = now()
      const r = await request('POST', `${b.url}/v1/responses`, b.key, { model: 'faux/echo', conversation: s.id, input: 'hi' })
      if (r.status !== 200 || r.json.status !== 'completed') throw new Error(`responses: ${r.status} ${r.text}`)
      const t = now() - t0
      // the native stream sees the turn end too: the next turn starts after it, as the native ones do
      await ended
      return t
    }
    for (let i = 0; i < o.warmup; i++) {
      await nativeTurn()
      await responsesTurn()
    }
    for (let done = 0; done < o.turns; done += BLOCK) {
      const n = Math.min(BLOCK, o.turns - done)
      for (let i = 0; i < n; i++) native.push(await nativeTurn())
      for (let i = 0; i < n; i++) viaResponses.push(await responsesTurn())
    }
    sse.close()

    // events per second of one streamed turn, both streams reading it at once
    const c = await createSession(b.url, b.key, { model: CHUNKS_MODEL })
    const nativeRates: number[] = []
    const respRates: number[] = []
    for (let k = 0; k < o.streams; k++) {
      const head = (await request('GET', `${b.url}/v1/sessions/${c.id}`, b.key)).json.headSeq
      const chunkTimes: number[] = []
      let onEnd: (() => void) | undefined
      const ended = new Promise<void>((r) => (onEnd = r))
      const ns = openSse(`${b.url}/v1/sessions/${c.id}/stream?after=${head}`, b.key, (f, at) => {
        if (f.event === 'agent/assistant-stream' && f.data?.includes('"kind":"chunk"') && f.data.includes('"text-delta"')) chunkTimes.push(at)
        if (f.event === 'session/event' && f.data?.includes('"type":"turn/end"')) onEnd?.()
      })
      await ns.ready
      const deltas = await postSseTimes(`${b.url}/v1/responses`, b.key, { model: CHUNKS_MODEL, conversation: c.id, input: `chunks:${o.chunks}`, stream: true }, (f) => f.startsWith('event: response.output_text.delta'))
      await ended
      ns.close()
      if (deltas.length !== o.chunks || chunkTimes.length !== o.chunks) throw new Error(`streamed ${deltas.length} Responses deltas and ${chunkTimes.length} native chunks of ${o.chunks}`)
      nativeRates.push(rate(chunkTimes))
      respRates.push(rate(deltas))
    }
    let memory: { responses: { before: number; after: number }; native: { before: number; after: number } } | undefined
    if (o.idleStreams) memory = { responses: await idleStreamsRss(kind, o.idleStreams, true), native: await idleStreamsRss(kind, o.idleStreams, false) }
    const a = dist(viaResponses)
    const f = dist(native)
    const nr = nativeRates.sort((x, y) => x - y)[Math.floor(nativeRates.length / 2)]
    const rr = respRates.sort((x, y) => x - y)[Math.floor(respRates.length / 2)]
    const rows: Row[] = [
      { measurement: `turn overhead p50, POST /v1/responses vs followup → turn/end (${o.turns} turns)`, db: kind, figure: ms(a.p50), floor: ms(f.p50), ratio: times(a.p50 / f.p50), target: '≤ 1.1× followup', met: yes(a.p50 / f.p50 <= 1.1) },
      { measurement: `turn overhead p99, POST /v1/responses vs followup → turn/end (${o.turns} turns)`, db: kind, figure: ms(a.p99), floor: ms(f.p99), ratio: times(a.p99 / f.p99), target: '', met: '' },
      { measurement: `events/s of one streamed turn (${o.chunks} deltas, median of ${o.streams}): Responses vs native SSE`, db: kind, figure: num(rr, 0), floor: num(nr, 0), ratio: times(rr / nr), target: '≥ 0.8× native', met: yes(rr / nr >= 0.8) },
    ]
    if (memory) {
      const rd = memory.responses.after - memory.responses.before
      const nd = memory.native.after - memory.native.before
      rows.push({ measurement: `RSS of ${o.idleStreams} idle streams: Responses vs native SSE`, db: kind, figure: `${mb(memory.responses.after)} (${plus(rd)})`, floor: `${mb(memory.native.after)} (${plus(nd)})`, ratio: times(rd / nd), target: '', met: '' })
    }
    return { rows, data: { responses: a, followup: f, eventsPerSecond: { responses: respRates, native: nativeRates }, memory } }
  } finally {
    await b.close()
  }
}
