// @agentd/client across a real slow-consumer cut (API.md §6): a consumer that stops pulling frames
// stops the SDK reading its socket, the server's buffer fills, and after its grace period the server
// ends the stream with `stream/error {code:"slow-consumer"}`. When the consumer pulls again it gets
// the rest of the cut connection, the error frame, then the SDK's reconnect from its last id: every
// durable seq exactly once, in order. The server's grace period (30 s by default) is set to 3 s here;
// on one database (docs/testing.md).

import { describe, expect, it } from 'vitest'
import { AgentdClient, type StreamFrame } from '../../clients/typescript/src/index.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { APP_DB_KINDS } from '../helpers/db.js'
import { until } from '../helpers/wait.js'

/** Open SSE and WebSocket subscriptions of the app (its /metrics gauge). */
async function subscribers(t: TestApp): Promise<number> {
  const text = await (await fetch(`${t.url}/metrics`)).text()
  const m = /^agentd_stream_subscribers\s+(\d+)/m.exec(text)
  if (!m) throw new Error('no agentd_stream_subscribers in /metrics')
  return Number(m[1])
}

describe('@agentd/client across a slow-consumer cut', () => {
  it.concurrent.each(APP_DB_KINDS)(
    'on %s: the server cuts a consumer that stopped reading, and the stream resumes from its last id with every seq once, in order',
    async (kind) => {
      const t = await startTestApp({ kind, env: { AGENTD_SLOW_CONSUMER_MS: '3000' } })
      try {
        const client = new AgentdClient({ baseUrl: t.url, apiKey: t.key })
        const s = await client.sessions.create({ model: 'faux/echo' })
        const stream = client.stream(s.id)
        const frames: StreamFrame[] = []
        for (;;) {
          const r = await stream.next()
          frames.push(r.value as StreamFrame)
          if (r.value.event === 'agent/status') break
        }
        expect(await subscribers(t)).toBe(1)

        // the consumer stops pulling; meanwhile ~16 MB of events and inbox frames go out to it
        const big = 'x'.repeat(700_000)
        for (let i = 0; i < 12; i++) await client.inject(s.id, `${i} ${big}`, { id: `big-${i}` })
        // the server checks a paused subscriber whenever it has something for it: keep giving it something
        let pokes = 0
        await until(
          'the server to cut the paused subscriber',
          async () => {
            await client.inject(s.id, `poke ${pokes}`, { id: `poke-${pokes++}` })
            return (await subscribers(t)) === 0
          },
          70000,
          1000,
        )
        const head = (await client.sessions.get(s.id)).headSeq

        // pulling again: the cut connection's rest, its stream/error, the reconnect, the missed events
        let reconnected = false
        for await (const f of stream) {
          frames.push(f)
          if (f.event === 'client/reconnecting') reconnected = true
          if (reconnected && f.event === 'agent/status' && stream.lastSeq >= head) break
        }
        stream.close()

        expect(frames.filter((f) => f.event === 'stream/error')).toEqual([{ event: 'stream/error', data: { code: 'slow-consumer' } }])
        const rec = frames.filter((f) => f.event === 'client/reconnecting')
        expect(rec).toHaveLength(1)
        expect(rec[0]!.data).toMatchObject({ reason: 'stream/error slow-consumer' })
        expect(stream.connections).toBe(2)
        const seqs = frames.flatMap((f) => (f.event === 'session/event' ? [f.data.seq] : []))
        expect(seqs).toEqual([...Array(head + 1).keys()])
        const ids = frames.flatMap((f) => (f.event === 'session/event' && f.data.type === 'agent/inbox/spliced' ? (f.data.data as { inserted: Array<{ id: string }> }).inserted.map((m) => m.id) : []))
        expect(ids).toEqual([...Array(12).keys()].map((i) => `big-${i}`).concat([...Array(pokes).keys()].map((i) => `poke-${i}`)))
      } finally {
        await t.close()
      }
    },
    120000,
  )
})
