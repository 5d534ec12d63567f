// The turn's unit buffer: the driver adds each durable event of a unit once, in order, as a part of
// the open unit; only the turn, step and attempt code end a unit (`close`, a barrier), where SPEC
// needs what was added durable — before foreign work (a hook, a model request, a tool body) runs,
// and at a turn's end. What is staged and not yet closed joins the next unit the turn commits.

import type { RowPatch, StoredEvent } from '../store/index.js'
import type { CommitResult, UnitBuilder } from './log.js'

/** The one way the driver appends: a fenced unit, published after commit (log.ts). */
export interface UnitLog {
  commit<T = void>(
    build: (u: UnitBuilder) => { patch?: RowPatch; value?: T } | void,
    opts?: { beforePublish?: (value: T, events: StoredEvent[]) => void; segments?: () => Array<{ count: number; after?: (events: StoredEvent[]) => void }> },
  ): Promise<CommitResult<T>>
}

/** Events of one writer, added to the open unit in order. */
export interface Part {
  /** adds the part's drafts (each stamped and folded at once); may run again on the locked path */
  build: (u: UnitBuilder) => RowPatch | void
  /** once the part's events are published, before the next part's are (a settlement's end frame, SPEC §9.2) */
  published?: (events: StoredEvent[]) => void
  /** once the whole unit committed and was published */
  committed?: () => void
  /** the unit carrying the part did not commit: nothing of it was written */
  failed?: (e: unknown) => void
}

export class OpenUnit {
  private parts: Part[] = []

  constructor(private readonly log: UnitLog) {}

  /** Whether parts wait for the next barrier. */
  get staged(): boolean {
    return this.parts.length > 0
  }

  /** Adds a part to the open unit; it is written with the next `close`. */
  stage(part: Part): void {
    this.parts.push(part)
  }

  /**
   * A barrier: commits the staged parts, then `last`, as ONE unit, published part by part. On
   * failure nothing of them was written, and the buffer is empty either way.
   */
  async close(last?: Part): Promise<void> {
    const parts = last ? [...this.parts, last] : this.parts
    this.parts = []
    if (!parts.length) return
    const counts: number[] = []
    try {
      await this.log.commit<void>(
        (u) => {
          counts.length = 0
          let patch: RowPatch | undefined
          for (const p of parts) {
            let n = 0
            const counted: UnitBuilder = {
              add: (d, o) => (n++, u.add(d, o)),
              side: (r) => u.side(r),
              get row() {
                return u.row
              },
            }
            const pp = p.build(counted)
            if (pp) patch = { ...patch, ...pp }
            counts.push(n)
          }
          return patch ? { patch } : undefined
        },
        { segments: () => segments(parts, counts) },
      )
    } catch (e) {
      for (const p of parts) p.failed?.(e)
      throw e
    }
    for (const p of parts) p.committed?.()
  }
}

/** Publication in one piece, cut only after a part that waits for its own publication. */
function segments(parts: readonly Part[], counts: readonly number[]): Array<{ count: number; after?: (events: StoredEvent[]) => void }> {
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
