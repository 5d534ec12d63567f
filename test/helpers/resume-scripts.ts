// The generated scripts of the client protocols' resume tests (Responses, the AI SDK UI stream,
// AG-UI): steps of text, reasoning, server tool calls and failed attempts, maybe a steer mid-turn,
// the same for a seed in every test that uses them.

import { rng } from './rng.js'
import type { Step } from './scripted.js'

export interface Script {
  steps: Step[]
  /** a steer posted while the first model call holds after its first delta */
  steer: boolean
}

/** The script of `seed` (a failing one is replayed by its seed). */
export function generateScript(seed: number): Script {
  const r = rng(seed)
  const words = (n: number) => Array.from({ length: 1 + Math.floor(r() * n) }, (_, i) => `w${seed}.${i} `)
  const steps: Step[] = []
  const n = 1 + Math.floor(r() * 3)
  for (let i = 0; i < n; i++) {
    const kind = Math.floor(r() * 4)
    if (kind === 1) steps.push({ reasoning: words(3), text: words(4) })
    else if (kind === 2) steps.push({ text: words(2), error: '429 rate limited, try again in 0.01s' })
    else if (kind === 3) steps.push({ text: r() < 0.5 ? words(2) : undefined, toolCalls: [{ id: `call_${seed}_${i}`, name: 'lookup', arguments: { q: `q${i}` } }] })
    else steps.push({ text: words(5) })
  }
  // the turn ends with a plain answer (a tool step or a failed attempt asks for another call)
  steps.push({ text: words(3), usage: { input: 7 + seed, output: 3, reasoning: 1 } })
  const steer = r() < 0.4
  if (steer) steps.push({ text: ['after the steer'] })
  return { steps, steer }
}
