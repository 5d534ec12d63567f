// 10. OpenAI Responses (API.md §17.1) against the native API, on the same server and the same kind of
// turns, in alternating blocks so drift in the machine's load hits both:
//   - turn overhead: a blocking POST /v1/responses (sent → answer received) against POST …/followup
//     sent → turn/end received on the session's native SSE stream; faux/echo, one step, no tools.
//   - events per second: one turn of bench/chunks streaming N deltas, read at once by a native SSE
//     subscriber (its agent/assistant-stream chunk frames) and by a Responses stream (its
//     output_text.delta events), each rate taken from its first to its last such frame.

import { createSession, dist, now, openSse, request, startBenchApp, type Kind } from './lib.js'
import { benchProvider, CHUNKS_MODEL } from './models.js'
import { ms, num, times, yes, type Row } from './report.js'

export interface ResponsesOptions {
  turns: number
  warmup: number
  /** deltas of the streamed turn */
  chunks: number
  /** streamed turns (each read by both streams) */
  streams: number
}

const BLOCK = 10

/** Reads a Responses SSE stream (POST body) until [DONE]: the receive times of its output_text.delta events. */
async function responsesStream(url: string, key: string, body: unknown): Promise<number[]> {
  const res = await fetch(`${url}/v1/responses`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) })
  if (res.status !== 200 || !res.body) throw new Error(`responses stream: ${res.status}`)
  const times: number[] = []
  const reader = res.body.getReader()
  const dec = new TextDecoder()
  let buf = ''
  for (;;) {
    const { value, done } = await reader.read()
    if (done) break
    const at = now()
    buf += dec.decode(value, { stream: true })
    let i: number
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, i)
      buf = buf.slice(i + 2)
      if (block.startsWith('event: response.output_text.delta')) times.push(at)
    }
  }
  return times
}

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
      const deltas = await responsesStream(b.url, b.key, { model: CHUNKS_MODEL, conversation: c.id, input: `chunks:${o.chunks}`, stream: true })
      await ended
      ns.close()
      if (deltas.length !== o.chunks || chunkTimes.length !== o.chunks) throw new Error(`streamed ${deltas.length} Responses deltas and ${chunkTimes.length} native chunks of ${o.chunks}`)
      nativeRates.push(rate(chunkTimes))
      respRates.push(rate(deltas))
    }
    const a = dist(viaResponses)
    const f = dist(native)
    const nr = nativeRates.sort((x, y) => x - y)[Math.floor(nativeRates.length / 2)]
    const rr = respRates.sort((x, y) => x - y)[Math.floor(respRates.length / 2)]
    const rows: Row[] = [
      { measurement: `turn overhead p50, POST /v1/responses vs followup → turn/end (${o.turns} turns)`, db: kind, figure: ms(a.p50), floor: ms(f.p50), ratio: times(a.p50 / f.p50), target: '≤ 1.1× followup', met: yes(a.p50 / f.p50 <= 1.1) },
      { measurement: `turn overhead p99, POST /v1/responses vs followup → turn/end (${o.turns} turns)`, db: kind, figure: ms(a.p99), floor: ms(f.p99), ratio: times(a.p99 / f.p99), target: '', met: '' },
      { measurement: `events/s of one streamed turn (${o.chunks} deltas, median of ${o.streams}): Responses vs native SSE`, db: kind, figure: num(rr, 0), floor: num(nr, 0), ratio: times(rr / nr), target: '≥ 0.8× native', met: yes(rr / nr >= 0.8) },
    ]
    return { rows, data: { responses: a, followup: f, eventsPerSecond: { responses: respRates, native: nativeRates } } }
  } finally {
    await b.close()
  }
}
