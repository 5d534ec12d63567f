// Tool calls that wait on a pending row (SPEC §18.10): which calls of this loop instance have a row
// (their result deletes it), and who waits for an answer. Answers arrive in the row, from any
// process; the Agent checks them on every sync.

import { getPending, type Db } from '../store/index.js'

export class PendingCalls {
  /** calls with a pending_calls row, and the row's kind */
  private readonly rows = new Map<string, 'client' | 'approval'>()
  private readonly waiting = new Map<string, { kind: 'client' | 'approval'; resolve: (answer: unknown) => void }>()

  constructor(private readonly db: Db, private readonly key: string) {}

  opened(callId: string, kind: 'client' | 'approval'): void {
    this.rows.set(callId, kind)
  }

  hasRow(callId: string): boolean {
    return this.rows.has(callId)
  }

  /** the kind the call's row was last written as */
  rowKind(callId: string): 'client' | 'approval' | undefined {
    return this.rows.get(callId)
  }

  closed(callId: string): void {
    this.rows.delete(callId)
  }

  /** Someone waits for an answer: the sync should look at the rows. */
  get waits(): boolean {
    return this.waiting.size > 0
  }

  /** The answer to a pending call, or undefined once `signal` aborts. */
  wait(callId: string, kind: 'client' | 'approval', signal: AbortSignal): Promise<unknown> {
    return new Promise((resolve) => {
      const done = (v: unknown) => {
        this.waiting.delete(callId)
        signal.removeEventListener('abort', onAbort)
        resolve(v)
      }
      const onAbort = () => done(undefined)
      if (signal.aborted) return done(undefined)
      signal.addEventListener('abort', onAbort, { once: true })
      this.waiting.set(callId, { kind, resolve: done })
      void this.check()
    })
  }

  /** Hands every answered row to its waiter. */
  async check(): Promise<void> {
    for (const [callId, w] of [...this.waiting]) {
      const row = await getPending(this.db, this.key, callId).catch(() => undefined)
      if (row?.answered && row.kind === w.kind) w.resolve(row.answer)
    }
  }

  /** Disposal and lease loss: every wait ends without an answer. */
  releaseAll(): void {
    for (const w of [...this.waiting.values()]) w.resolve(undefined)
  }
}
