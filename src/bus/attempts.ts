// In-flight attempts as every process sees them through live frames, so a late subscriber on any
// process gets the snapshot frame of API.md §6, wherever the session's driver runs.

import { StreamAccumulator, type StreamChunk } from '../session/index.js'
import type { Bus, LiveFrame } from './local.js'

interface Inflight {
  attemptId: string
  revision: number
  turn: number
  step: number
  acc: StreamAccumulator
  at: number
}

const STALE_MS = 10 * 60 * 1000

export class LiveAttempts {
  private readonly inflight = new Map<string, Inflight>()
  private readonly off: () => void
  private readonly sweep: NodeJS.Timeout

  constructor(bus: Bus) {
    this.off = bus.tap((key, f) => this.see(key, f))
    // a driver that died mid-attempt never sends `end`; forget what has gone quiet
    this.sweep = setInterval(() => {
      const now = Date.now()
      for (const [k, v] of this.inflight) if (now - v.at > STALE_MS) this.inflight.delete(k)
    }, 60000)
    this.sweep.unref()
  }

  private see(key: string, f: LiveFrame): void {
    if (f.event === 'agent/session-start') {
      this.inflight.delete(key)
      return
    }
    if (f.event !== 'agent/assistant-stream') return
    const d = f.data as { kind: string; attemptId: string; revision: number; turn?: number; step?: number; time?: number; chunk?: StreamChunk }
    if (d.kind === 'start') this.inflight.set(key, { attemptId: d.attemptId, revision: d.revision, turn: d.turn!, step: d.step!, acc: new StreamAccumulator(), at: Date.now() })
    else if (d.kind === 'chunk') {
      const a = this.inflight.get(key)
      if (!a || a.attemptId !== d.attemptId) return
      a.acc.push(d.time!, d.chunk!)
      a.revision = d.revision
      a.at = Date.now()
    } else if (d.kind === 'end') this.inflight.delete(key)
  }

  /** The snapshot frame of the session's in-flight attempt, if one is streaming. */
  snapshot(key: string): LiveFrame | undefined {
    const a = this.inflight.get(key)
    if (!a) return undefined
    return { event: 'agent/assistant-stream', data: { kind: 'snapshot', attemptId: a.attemptId, revision: a.revision, turn: a.turn, step: a.step, stream: structuredClone(a.acc.records) } }
  }

  close(): void {
    this.off()
    clearInterval(this.sweep)
  }
}
