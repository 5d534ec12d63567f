// The SPEC §15 invariants as a log checker, written independently of the server's fold, plus the
// reconstruction check of SPEC §8.10 / §14.4 as an llm/stream listener.

import { expect } from 'vitest'
import type { Context } from '../../src/hooks/index.js'
import { SessionState, deriveFromSurfaceEvents, jsonEqual, type SessionEvent } from '../../src/session/index.js'
import { readEvents, type Db } from '../../src/store/index.js'
import { LOOP_REQUEST } from '../../src/agent/index.js'

const SURFACE = new Set(['system/message', 'user/message', 'assistant/message', 'tool/result'])
const STEP_SCOPED = new Set(['system/message', 'assistant/message', 'assistant/attempt', 'tool/call'])
const isReplace = (e: SessionEvent) => typeof e.surfaceOp === 'object' && e.surfaceOp !== null

/** Every violation of SPEC §15 in a log (empty when it holds). */
export function violations(events: SessionEvent[]): string[] {
  const v: string[] = []
  const at = (e: SessionEvent, m: string) => v.push(`seq ${e.seq} ${e.type}: ${m}`)
  let time = -Infinity
  let openTurn: number | null = null
  let lastTurn = 0
  let openStep: number | null = null
  let lastStep = 0
  let settled = false // a settlement happened in the open step
  let maxTokens = false
  let calls = new Map<string, number>()
  let callOrder: string[] = []
  let resultOrder: string[] = []
  const surface: SessionEvent[] = []
  const inbox: Record<string, Array<{ id: string }>> = { 'next-turn': [], 'next-step': [] }
  const claimed = new Set<string>()
  let headersSinceSeed = 0
  let seenHeader = false
  let stepHasUser = false
  // SPEC §19.7
  const claimedBy = new Map<string, number>() // message id → the turn whose claim took it
  const continues = new Map<number, number>() // turn → the turn it continues
  const endedInterrupted = new Set<number>()
  const continued = new Set<number>()
  const admitted = new Set<string>()
  events.forEach((e, i) => {
    const d = e.data as any
    // 1. seq dense from 0, time non-decreasing
    if (e.seq !== i) v.push(`position ${i} holds seq ${e.seq}`)
    if (!(e.time >= time)) at(e, `time ${e.time} decreases`)
    time = Math.max(time, e.time)
    // surface fields only on surface events
    if (!SURFACE.has(e.type) && (e.surfaceOp !== undefined || e.sourceEventSeqs !== undefined)) at(e, 'surface fields on a non-surface event')
    if (SURFACE.has(e.type) && e.surfaceOp === undefined) at(e, 'surface event without surfaceOp')
    switch (e.type) {
      case 'turn/start':
        if (openTurn !== null) at(e, 'turn/start inside a turn')
        if (d.turn !== lastTurn + 1) at(e, `turn ${d.turn} after ${lastTurn}`)
        openTurn = lastTurn = d.turn
        lastStep = 0
        if (d.continues !== undefined) {
          // 17. continues names a turn that ended interrupted, and no two turns continue the same one
          if (!endedInterrupted.has(d.continues)) at(e, `continues ${d.continues}, which did not end interrupted`)
          if (continued.has(d.continues)) at(e, `turn ${d.continues} is continued twice`)
          continued.add(d.continues)
          continues.set(d.turn, d.continues)
        }
        break
      case 'turn/end':
        if (openTurn !== d.turn) at(e, 'turn/end of a turn that is not open')
        if (openStep !== null) at(e, 'turn/end inside a step')
        if (d.reason?.kind === 'interrupted') endedInterrupted.add(d.turn)
        openTurn = null
        break
      case 'step/start':
        if (openTurn !== d.turn || openStep !== null) at(e, 'step/start outside its turn or inside a step')
        if (d.step !== lastStep + 1) at(e, `step ${d.step} after ${lastStep}`)
        openStep = lastStep = d.step
        settled = false
        maxTokens = false
        calls = new Map()
        callOrder = []
        resultOrder = []
        stepHasUser = false
        break
      case 'step/end':
        if (openStep !== d.step || openTurn !== d.turn) at(e, 'step/end of a step that is not open')
        // 5. results in model order
        if (resultOrder.length && !jsonEqual(resultOrder, callOrder.filter((c) => resultOrder.includes(c)))) at(e, `tool results out of model order: calls ${callOrder} results ${resultOrder}`)
        openStep = null
        break
      case 'request/header':
        // 9. instance headers
        if (!seenHeader && d.reason !== 'initial') at(e, 'the first header must be initial')
        if (seenHeader && d.reason === 'initial') at(e, 'initial after a header')
        if (seenHeader && headersSinceSeed === 0 && d.reason !== 'resume' && events.slice(0, i).some((x) => x.type === 'session/end-seed')) {
          const lastSeed = events.slice(0, i).findLastIndex((x) => x.type === 'session/end-seed')
          const lastHeader = events.slice(0, i).findLastIndex((x) => x.type === 'request/header')
          if (lastSeed > lastHeader) at(e, 'the first header after session/end-seed must be resume')
        }
        if (d.startsSeries !== undefined && d.reason !== 'change') at(e, 'startsSeries only with change')
        seenHeader = true
        headersSinceSeed++
        break
      case 'session/end-seed':
        headersSinceSeed = 0
        break
      case 'assistant/message':
      case 'assistant/attempt':
        settled = true
        if (e.type === 'assistant/message') {
          const finish = lastFinish(d.stream)
          if (finish === 'max-tokens') maxTokens = true
          for (const b of d.message?.content ?? []) if (b.type === 'tool-call') callOrder.push(b.id)
        }
        break
      case 'tool/call':
        if (maxTokens) at(e, 'tool/call after a max-tokens settlement in its step') // 14
        calls.set(d.callId, e.seq)
        if (!callOrder.includes(d.callId)) callOrder.push(d.callId)
        break
      case 'tool/result':
        if (e.surfaceOp === 'append') {
          const id = d.message?.source?.callId
          const callSeq = calls.get(id)
          // 4. follows its same-step tool/call (crash-repair synthetics aside)
          if (callSeq === undefined && d.error?.code !== 'TOOL_NOT_STARTED') at(e, `no tool/call ${id} earlier in this step`)
          if (callSeq !== undefined && !jsonEqual(e.sourceEventSeqs, [callSeq])) at(e, 'sourceEventSeqs must cite its tool/call')
          resultOrder.push(id)
        }
        break
      case 'user/message': {
        // 16. no id admitted twice
        if (admitted.has(d.id)) at(e, `message ${d.id} admitted twice`)
        admitted.add(d.id)
        // 15. a message claimed by another turn is admitted only by a continuation (chain) of that turn
        const by = claimedBy.get(d.id)
        if (by !== undefined && by !== openTurn) {
          let t = openTurn === null ? undefined : continues.get(openTurn)
          while (t !== undefined && t !== by) t = continues.get(t)
          if (t !== by) at(e, `message ${d.id} claimed by turn ${by} is admitted in turn ${openTurn}, which does not continue it`)
        }
        if (e.surfaceOp === 'append') {
          // 6. inside an open step, on its first attempt (before any settlement)
          if (openStep === null) at(e, 'user/message outside a step')
          else if (settled) at(e, 'user/message after the step settled an attempt')
          stepHasUser = true
        }
        break
      }
      case 'system/message':
        // 7. a step's prompt appends precede its users
        if (e.surfaceOp === 'append' && stepHasUser) at(e, 'a system append after the step admitted users')
        break
      case 'agent/inbox/spliced': {
        const list = inbox[d.target]
        if (!list) {
          at(e, `unknown target ${d.target}`)
          break
        }
        const removed = list.splice(d.start, d.removedCount ?? 0)
        if (removed.length !== (d.removedCount ?? 0)) at(e, 'splice out of range')
        if (!d.outcome)
          for (const m of removed) {
            claimed.add(m.id)
            if (openTurn !== null) claimedBy.set(m.id, openTurn)
          }
        const pending = new Set([...inbox['next-turn'], ...inbox['next-step']].map((m) => m.id))
        for (const m of d.inserted ?? []) {
          // 12. claimed never re-enters; no id pending twice
          if (pending.has(m.id)) at(e, `id ${m.id} pending twice`)
          if (claimed.has(m.id)) at(e, `claimed id ${m.id} re-entered the inbox`)
          pending.add(m.id)
        }
        list.splice(d.start, 0, ...(d.inserted ?? []))
        if (d.removedCount === 0) at(e, 'removedCount 0 must be omitted')
        break
      }
    }
    // 3. step-scoped events carry the open turn and step
    if (STEP_SCOPED.has(e.type) || (e.type === 'tool/result' && e.surfaceOp === 'append')) {
      if (openStep === null || d.turn !== openTurn || d.step !== openStep) at(e, `carries ${d.turn}/${d.step}, open is ${openTurn}/${openStep}`)
    }
    // the surface and 10. head protection
    if (SURFACE.has(e.type) && e.surfaceOp !== undefined) {
      if (e.surfaceOp === 'append') surface.push(e)
      else if (isReplace(e)) {
        const op = e.surfaceOp as { start: number; end: number }
        const a = surface.findIndex((x) => x.seq === op.start)
        const b = surface.findIndex((x) => x.seq === op.end)
        if (a < 0 || b < a) at(e, 'replace range not on the surface')
        else {
          const shadowed = surface.slice(a, b + 1).map((x) => x.seq)
          if (!shadowed.every((s) => e.sourceEventSeqs?.includes(s))) at(e, 'sourceEventSeqs must list every shadowed seq')
          if (a === 0 && surface[0].type === 'system/message' && !(e.type === 'system/message' && a === b)) at(e, 'head replaced by something other than a single-node system/message')
          if (e.type === 'tool/result' && !(a === b && surface[a].type === 'tool/result')) at(e, 'a replacing tool/result must shadow one tool/result')
          surface.splice(a, b - a + 1, e)
        }
      }
    }
  })
  return v
}

function lastFinish(stream: any[]): string | undefined {
  for (let i = (stream?.length ?? 0) - 1; i >= 0; i--) {
    const r = stream[i]
    if (r.type === 'chunk' && r.chunk?.type === 'finish') return r.chunk.reason?.kind
  }
  return undefined
}

export function expectValidLog(events: SessionEvent[]): void {
  const v = violations(events)
  expect(v, `SPEC §15 violations:\n${v.join('\n')}`).toEqual([])
}

/**
 * A test plugin: every loop request must equal the derivation of a fresh copy of the log (SPEC
 * §8.10, §14.4), have no `system` field, and carry the folded header's config and tools.
 */
export function reconstructionCheck(db: Db, problems: string[], seen: { n: number } = { n: 0 }) {
  return (root: Context) => {
    root.plugin({
      name: 'test-reconstruction',
      apply(ctx: any) {
        ctx.hooks.waterfall('llm/stream', async (req: any, next: () => Promise<unknown>) => {
          if (!req[LOOP_REQUEST]) return next()
          seen.n++
          const sessions = await db.query<{ key: string }>('SELECT key FROM sessions WHERE id = $1', [req.sessionId])
          const events: SessionEvent[] = []
          for (const s of sessions.rows) events.push(...(await readEvents(db, s.key)))
          const fresh = SessionState.fromEvents(events)
          if (!Object.isFrozen(req)) problems.push('a loop request is not frozen')
          if ('system' in req) problems.push('a loop request has a system field')
          if (!jsonEqual(req.messages, fresh.deriveMessages())) problems.push(`request messages differ from the fresh log's derivation (session ${req.sessionId})`)
          if (!jsonEqual(req.messages, deriveFromSurfaceEvents(events))) problems.push('request messages differ from the surface-event derivation')
          const h = fresh.latestHeader?.header
          if (!h) problems.push('no header folded')
          else {
            for (const [k, v] of Object.entries(h.config)) if (!jsonEqual(req[k], v)) problems.push(`request ${k} ${JSON.stringify(req[k])} differs from the header's ${JSON.stringify(v)}`)
            if (!jsonEqual(req.tools ?? [], h.tools ?? [])) problems.push('request tools differ from the header')
          }
          const lastStart = events.findLastIndex((e) => e.type === 'step/start')
          if (lastStart < 0 || events.slice(lastStart).some((e) => e.type === 'step/end')) problems.push('a request while no step is open')
          return next()
        })
      },
    })
  }
}
