// The turn's unit buffer: the driver adds each durable event of a unit once, in order, as a part of
// the open unit; only the turn, step and attempt code end a unit (`close`, a barrier), where SPEC
// needs what was added durable — before foreign work (a hook, a model request, a tool body) runs,
// and at a turn's end. What is staged and not yet closed joins the next unit the turn commits.

import type { RowPatch, StoredEvent } from '../store/index.js'
import { commitDecision, type RowFlag, type UnitBuilder, type UnitLog } from './log.js'

export type { UnitLog }

/** Events of one writer, added to the open unit in order. */
export interface Part<F extends RowFlag = never> {
  /** what the build decides on: row flags and the inbox (the unit's declared inputs, log.ts) */
  reads?: readonly (F | 'inbox')[]
  /**
   * adds the part's drafts (each stamped and folded at once); it runs once, and again only when the
   * unit's declared inputs changed before it committed (log.ts commitDecision), so it leaves nothing
   * outside itself but its drafts and patch — what it learns goes through `committed`
   */
  build: (u: UnitBuilder<F>) => RowPatch | void
  /** once the part's events are published, before the next part's are (a settlement's end frame, SPEC §9.2) */
  published?: (events: StoredEvent[]) => void
  /** once the whole unit committed and was published, with the part's own events as committed */
  committed?: (events: StoredEvent[]) => void
  /** the unit carrying the part did not commit: nothing of it was written */
  failed?: (e: unknown) => void
}

export class OpenUnit {
  private parts: Part<RowFlag>[] = []

  constructor(private readonly log: UnitLog) {}

  /** Whether parts wait for the next barrier. */
  get staged(): boolean {
    return this.parts.length > 0
  }

  /** Adds a part to the open unit; it is written with the next `close`. */
  stage<F extends RowFlag>(part: Part<F>): void {
    this.parts.push(part)
  }

  /**
   * A barrier: commits the staged parts, then `last`, as ONE unit, published part by part. On
   * failure nothing of them was written, and the buffer is empty either way.
   */
  async close<F extends RowFlag = never>(last?: Part<F>): Promise<void> {
    const parts: Part<RowFlag>[] = last ? [...this.parts, last] : this.parts
    this.parts = []
    if (!parts.length) return
    const counts: number[] = []
    const reads = [...new Set(parts.flatMap((p) => p.reads ?? []))]
    let events: StoredEvent[]
    try {
      const r = await commitDecision<void, RowFlag>(
        this.log,
        (u) => {
          counts.length = 0
          let patch: RowPatch | undefined
          for (const p of parts) {
            let n = 0
            const counted: UnitBuilder<RowFlag> = { add: (d, o) => (n++, u.add(d, o)), side: (r) => u.side(r), row: u.row }
            const pp = p.build(counted)
            if (pp) patch = { ...patch, ...pp }
            counts.push(n)
          }
          return patch ? { patch } : undefined
        },
        { reads, segments: () => segments(parts, counts) },
      )
      events = r.events
    } catch (e) {
      for (const p of parts) p.failed?.(e)
      throw e
    }
    let at = 0
    parts.forEach((p, i) => p.committed?.(events.slice(at, (at += counts[i]))))
  }
}

/** Publication in one piece, cut only after a part that waits for its own publication. */
function segments(parts: readonly Part<RowFlag>[], counts: readonly number[]): Array<{ count: number; after?: (events: StoredEvent[]) => void }> {
  const out: Array<{ count: number; after?: (events: StoredEvent[]) => void }> = []
  let count = 0
  parts.forEach((p, i) => {
    count += counts[i]
    if (p.published) {
      out.push({ count, after: p.published })
      count = 0
    }
  })
  if (count) out.push({ count })
  return out
}
