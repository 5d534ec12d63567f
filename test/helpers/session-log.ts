// Building session logs event by event against a SessionState (unit tests of src/session): message
// factories, a log builder whose every event continues the state's seq and time, and snapshots of
// everything apply() may touch, for checking that a rejected event left the state as it was.

import { expect } from 'vitest'
import { SessionState, type ContentBlock, type Json, type SessionEvent, type SurfaceOp, type UserMessage } from '../../src/session/index.js'

export const rep = (start: number, end: number): SurfaceOp => ({ op: 'replace', start, end })

export function sysMsg(id: string, text: string | null): Json {
  return { id, role: 'system', content: text === null ? [] : [{ type: 'text', text }], source: { kind: 'plugin', plugin: 'system-prompt' } }
}
export function userMsg(id: string, text: string, source: Record<string, Json> = { kind: 'user' }): UserMessage {
  return { id, role: 'user', content: [{ type: 'text', text }], source: source as UserMessage['source'] }
}
export function asstMsg(id: string, content: ContentBlock[]): Json {
  return { id, role: 'assistant', content: content as unknown as Json, source: { kind: 'model', provider: 'test', model: 'm' } }
}
export function toolResMsg(callId: string, text: string, isError = false): Json {
  return { id: `r-${callId}`, role: 'user', content: [{ type: 'tool-result', toolCallId: callId, isError, content: [{ type: 'text', text }] }], source: { kind: 'tool', callId } }
}

/** A log under construction: each helper applies the next event to `s` and appends it to `log`. */
export class LogBuilder {
  readonly s = new SessionState()
  readonly log: SessionEvent[] = []
  ev(type: string, data: Json, surfaceOp?: SurfaceOp, sourceEventSeqs?: number[]): SessionEvent {
    const e: SessionEvent = { seq: this.s.nextSeq, time: this.s.lastTime + 1, type, data }
    if (surfaceOp !== undefined) e.surfaceOp = surfaceOp
    if (sourceEventSeqs !== undefined) e.sourceEventSeqs = sourceEventSeqs
    return e
  }
  add(type: string, data: Json, surfaceOp?: SurfaceOp, sourceEventSeqs?: number[]): number {
    const e = this.ev(type, data, surfaceOp, sourceEventSeqs)
    this.s.apply(e)
    this.log.push(e)
    return e.seq
  }
  get ts(): { turn: number; step: number } {
    return { turn: this.s.openTurn!, step: this.s.openStep! }
  }
  turnStart(): number {
    return this.add('turn/start', { turn: this.s.lastTurn + 1 })
  }
  turnEnd(): number {
    return this.add('turn/end', { turn: this.s.openTurn, reason: { kind: 'completed' } })
  }
  stepStart(): number {
    return this.add('step/start', { turn: this.s.openTurn, step: this.s.lastStep + 1 })
  }
  stepEnd(): number {
    return this.add('step/end', { ...this.ts })
  }
  splice(data: Record<string, Json>): number {
    return this.add('agent/inbox/spliced', data)
  }
  user(m: UserMessage, op: SurfaceOp = 'append', src?: number[]): number {
    return this.add('user/message', m as unknown as Json, op, src)
  }
  toolCall(callId: string, name = 'echo', args = '{}'): number {
    return this.add('tool/call', { ...this.ts, callId, name, arguments: args })
  }
  toolResultData(callId: string, text: string, isError = false): Json {
    return { ...this.ts, message: toolResMsg(callId, text, isError) }
  }
  toolResult(callId: string, text: string, callSeq?: number): number {
    return this.add('tool/result', this.toolResultData(callId, text), 'append', callSeq === undefined ? undefined : [callSeq])
  }
}

/** Everything apply() may touch, deep-copied (`fresh` included unless `o.fresh` is false). */
export function snapshotState(s: SessionState, o: { fresh?: boolean } = {}) {
  return structuredClone({
    nextSeq: s.nextSeq,
    lastTime: s.lastTime,
    nodes: s.nodes.map((n) => ({ seq: n.seq, type: n.type, event: n.event, message: n.message })),
    replaceGeneration: s.replaceGeneration,
    inbox: s.inbox,
    lastTurn: s.lastTurn,
    openTurn: s.openTurn,
    openStep: s.openStep,
    lastStep: s.lastStep,
    latestHeader: s.latestHeader,
    latestContext: s.latestContext,
    snapshot: s.snapshot,
    lastSeedSeq: s.lastSeedSeq,
    nonSpliceSinceSeed: s.nonSpliceSinceSeed,
    ...(o.fresh === false ? {} : { fresh: s.fresh }),
    openCompaction: s.openCompaction,
    openCalls: [...s.openCalls.entries()],
    anchor: s.anchor,
    retries: [...s.retries.entries()],
    derived: s.deriveMessages(),
  })
}

/**
 * `expectRejected(x, e, cls = defaultCls)`: apply() must throw `cls` and leave every part of the
 * state, as `snap` sees it, as it was.
 */
export function rejectionCheck(defaultCls: new (...a: never[]) => Error, snap: (s: SessionState) => unknown) {
  return (x: { s: SessionState }, e: SessionEvent, cls: new (...a: never[]) => Error = defaultCls): void => {
    const before = snap(x.s)
    expect(() => x.s.apply(e)).toThrow(cls)
    expect(snap(x.s)).toEqual(before)
  }
}
