// The tool-result-pruner plugin (SPEC §12.4): cuts oversized tool results to head + marker + tail
// (code points), each as compaction/prune plus a replacing tool/result. It offers itself to the
// compaction plugin through the root context; it prunes only when compaction asks.

import type { Context } from 'cordis'
import type { Agent } from '../agent/index.js'
import { codePoints, nodeTokens, type ContentBlock, type Json, type SessionEvent } from '../session/index.js'

export interface PrunerConfig {
  thresholdChars: number
  headChars: number
  tailChars: number
}

export const PRUNER_DEFAULTS: PrunerConfig = { thresholdChars: 8192, headChars: 4096, tailChars: 1024 }
export const PRUNER = Symbol.for('agentd.toolResultPruner')

export type Pruner = (agent: Agent) => Promise<number>

export const pruneMarker = (omitted: number) => `\n\n[… ${omitted} characters of this tool result were pruned to save context …]\n\n`

/** The cut text, or undefined when it fits (SPEC §12.4). */
export function cutText(text: string, c: PrunerConfig): string | undefined {
  if (codePoints(text) <= c.thresholdChars) return undefined
  const cps = Array.from(text)
  const omitted = cps.length - c.headChars - c.tailChars
  return cps.slice(0, c.headChars).join('') + pruneMarker(omitted) + cps.slice(cps.length - c.tailChars).join('')
}

/** Prunes every oversized tool/result on the surface, one unit per node; returns how many. */
export async function prune(agent: Agent, c: PrunerConfig): Promise<number> {
  // snapshot the tool/result nodes once
  const candidates = agent.state.nodes.filter((n) => n.type === 'tool/result').map((n) => n.event)
  let pruned = 0
  for (const e of candidates) {
    const replacement = prunedData(e, c)
    if (!replacement) continue
    if (agent.state.nodeIndex(e.seq) < 0) continue // shadowed meanwhile
    await agent.appendOwned((u) => {
      const node = agent.state.nodes[agent.state.nodeIndex(e.seq)]
      const tokens = nodeTokens(node)
      u.add({ type: 'compaction/prune', data: { shadowedRange: { start: e.seq, end: e.seq }, shadowedSeqs: [e.seq], shadowedTokenCount: tokens } })
      u.add({ type: 'tool/result', data: replacement, surfaceOp: { op: 'replace', start: e.seq, end: e.seq }, sourceEventSeqs: [e.seq] })
    })
    pruned++
  }
  return pruned
}

/** The data of the replacing tool/result, equal to the original but inside the tool-result content. */
function prunedData(e: SessionEvent, c: PrunerConfig): Json | undefined {
  const d = e.data as unknown as { message: { content: Array<{ type: string; content?: ContentBlock[] }> } }
  let changed = false
  const content = d.message.content.map((b) => {
    if (b.type !== 'tool-result' || !Array.isArray(b.content)) return b
    return {
      ...b,
      content: b.content.map((x) => {
        if (x.type !== 'text') return x
        const cut = cutText(x.text, c)
        if (cut === undefined) return x
        changed = true
        return { ...x, text: cut }
      }),
    }
  })
  if (!changed) return undefined
  return { ...(e.data as object), message: { ...d.message, content } } as unknown as Json
}

export function validatePrunerConfig(c: PrunerConfig): void {
  if (c.headChars + c.tailChars + pruneMarker(999999999).length > c.thresholdChars) throw new Error('tool-result-pruner: headChars + marker + tailChars must fit thresholdChars')
}

export default {
  name: 'tool-result-pruner',
  apply(ctx: Context, config?: Partial<PrunerConfig>) {
    const c = { ...PRUNER_DEFAULTS, ...(config ?? {}) }
    validatePrunerConfig(c)
    const root = ctx.root as unknown as Record<symbol, Pruner | undefined>
    ctx.effect(() => {
      root[PRUNER] = (agent: Agent) => prune(agent, c)
      return () => {
        root[PRUNER] = undefined
      }
    })
  },
}
