// The one tracker of streaming attempts in a process, so a late subscriber gets the snapshot frame of
// API.md §6 wherever the session's driver runs: a driver here opens its attempts in it and pushes
// each chunk once (its stream is also what it settles); attempts driven elsewhere are followed
// through their live frames on the bus.

import { StreamAccumulator, type AssistantStreamRecord, type StreamChunk } from '../session/index.js'
import type { LiveFrame, LiveFrames } from './local.js'

interface Inflight {
  attemptId: string
  revision: number
  turn: number
  step: number
  acc: StreamAccumulator
  at: number
}

/** A streaming attempt of a session driven in this process (SPEC §9.1). */
export interface TrackedAttempt {
  /** a chunk as stamped (its time) and the frame revision it went out with */
  push(time: number, chunk: StreamChunk, revision: number): void
  /** the compact stream so far (SPEC §9.4): what the settlement stores */
  readonly records: AssistantStreamRecord[]
  /** the attempt ended (before its end frame goes out) */
  close(): void
}

const STALE_MS = 10 * 60 * 1000

export class LiveAttempts {
  /** attempts of sessions driven here */
  private readonly local = new Map<string, Inflight>()
  /** attempts seen through other processes' frames */
  private readonly remote = new Map<string, Inflight>()
  private readonly off: () => void
  private readonly sweep: NodeJS.Timeout

  constructor(live: LiveFrames) {
    this.off = live.tap((key, f) => this.see(key, f))
    // a driver that died mid-attempt never sends `end`; forget what has gone quiet
    this.sweep = setInterval(() => {
      const now = Date.now()
      for (const [k, v] of this.remote) if (now - v.at > STALE_MS) this.remote.delete(k)
    }, 60000)
    this.sweep.unref()
  }

  /** Opens an attempt this process drives; call before its start frame goes out. */
  open(key: string, a: { attemptId: string; revision: number; turn: number; step: number }): TrackedAttempt {
    const entry: Inflight = { ...a, acc: new StreamAccumulator(), at: Date.now() }
    this.local.set(key, entry)
    return {
      push: (time, chunk, revision) => {
        entry.acc.push(time, chunk)
        entry.revision = revision
        entry.at = Date.now()
      },
      get records() {
        return entry.acc.records
      },
      close: () => {
        if (this.local.get(key) === entry) this.local.delete(key)
      },
    }
  }

  private see(key: string, f: LiveFrame): void {
    if (f.event === 'agent/session-start') {
      this.remote.delete(key)
      return
    }
    if (f.event !== 'agent/assistant-stream') return
    const d = f.data as { kind: string; attemptId: string; revision: number; turn?: number; step?: number; time?: number; chunk?: StreamChunk }
    // this process's own frames: the driver tracked them already
    if (this.local.get(key)?.attemptId === d.attemptId) return
    if (d.kind === 'start') this.remote.set(key, { attemptId: d.attemptId, revision: d.revision, turn: d.turn!, step: d.step!, acc: new StreamAccumulator(), at: Date.now() })
    else if (d.kind === 'chunk') {
      const a = this.remote.get(key)
      if (!a || a.attemptId !== d.attemptId) return
      a.acc.push(d.time!, d.chunk!)
      a.revision = d.revision
      a.at = Date.now()
    } else if (d.kind === 'end' && this.remote.get(key)?.attemptId === d.attemptId) this.remote.delete(key)
  }

  /** The snapshot frame of the session's in-flight attempt, if one is streaming. */
  snapshot(key: string): LiveFrame | undefined {
    const a = this.local.get(key) ?? this.remote.get(key)
    if (!a) return undefined
    return { event: 'agent/assistant-stream', data: { kind: 'snapshot', attemptId: a.attemptId, revision: a.revision, turn: a.turn, step: a.step, stream: structuredClone(a.acc.records) } }
  }

  close(): void {
    this.off()
    clearInterval(this.sweep)
  }
}
