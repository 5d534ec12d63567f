// 11. Chat front-end protocols (API.md §17.2, §17.3) against the native stream, on the same server:
// one turn of bench/chunks streaming N deltas, read at once by a native SSE subscriber (its
// agent/assistant-stream text-delta chunk frames) and by the protocol's own stream — the AI SDK UI
// message stream (its text-delta parts, POST /v1/ui/:agentId/chat) or AG-UI (its TEXT_MESSAGE_CONTENT
// events, POST /v1/ag-ui/:agentId) — each rate taken from its first to its last such frame.

import { createSession, openSse, postSseTimes, request, startBenchApp, type Kind } from './lib.js'
import { benchProvider, CHUNKS_MODEL } from './models.js'
import { num, times, yes, type Row } from './report.js'

export interface ChatOptions {
  /** deltas of each streamed turn */
  chunks: number
  /** streamed turns per protocol (each read by both streams) */
  streams: number
}

const rate = (ts: number[]) => (ts.length > 1 ? ((ts.length - 1) * 1000) / (ts.at(-1)! - ts[0]) : NaN)
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]

export async function benchChat(kind: Kind, o: ChatOptions): Promise<{ rows: Row[]; data: Record<string, unknown> }> {
  const b = await startBenchApp(kind, { extraProviders: [benchProvider] })
  try {
    const agent = await request('POST', `${b.url}/v1/agents`, b.key, { id: 'bench-chat', name: 'bench', model: CHUNKS_MODEL })
    if (agent.status !== 201) throw new Error(`agent: ${agent.status} ${agent.text}`)
    const protocols = {
      'AI SDK UI stream': (id: string, k: number) => postSseTimes(`${b.url}/v1/ui/bench-chat/chat`, b.key, { id, trigger: 'submit-message', messages: [{ id: `m-${k}`, role: 'user', parts: [{ type: 'text', text: `chunks:${o.chunks}` }] }] }, (f) => f.includes('"type":"text-delta"')),
      'AG-UI': (id: string, k: number) => postSseTimes(`${b.url}/v1/ag-ui/bench-chat`, b.key, { threadId: id, runId: `r-${k}`, messages: [{ id: `u-${k}`, role: 'user', content: `chunks:${o.chunks}` }] }, (f) => f.includes('"type":"TEXT_MESSAGE_CONTENT"')),
    }
    const rows: Row[] = []
    const data: Record<string, unknown> = {}
    for (const [name, stream] of Object.entries(protocols)) {
      const s = await createSession(b.url, b.key, { agent: 'bench-chat' })
      const nativeRates: number[] = []
      const protoRates: number[] = []
      for (let k = 0; k < o.streams; k++) {
        const head = (await request('GET', `${b.url}/v1/sessions/${s.id}`, b.key)).json.headSeq
        const chunkTimes: number[] = []
        let onEnd: (() => void) | undefined
        const ended = new Promise<void>((r) => (onEnd = r))
        const ns = openSse(`${b.url}/v1/sessions/${s.id}/stream?after=${head}`, b.key, (f, at) => {
          if (f.event === 'agent/assistant-stream' && f.data?.includes('"kind":"chunk"') && f.data.includes('"text-delta"')) chunkTimes.push(at)
          if (f.event === 'session/event' && f.data?.includes('"type":"turn/end"')) onEnd?.()
        })
        await ns.ready
        const deltas = await stream(s.id, k)
        await ended
        ns.close()
        if (deltas.length !== o.chunks || chunkTimes.length !== o.chunks) throw new Error(`${name}: streamed ${deltas.length} deltas and ${chunkTimes.length} native chunks of ${o.chunks}`)
        nativeRates.push(rate(chunkTimes))
        protoRates.push(rate(deltas))
      }
      const nr = median(nativeRates)
      const pr = median(protoRates)
      rows.push({ measurement: `frames/s of one streamed turn (${o.chunks} deltas, median of ${o.streams}): ${name} vs native SSE`, db: kind, figure: num(pr, 0), floor: num(nr, 0), ratio: times(pr / nr), target: '≥ 0.8× native', met: yes(pr / nr >= 0.8) })
      data[name] = { protocol: protoRates, native: nativeRates }
    }
    return { rows, data }
  } finally {
    await b.close()
  }
}
