// How an Agent learns what others committed (DESIGN.md §3 Fan-out): the session's doorbells and
// pokes on the bus; this process's own commits fold without a read, others' through a sync that also
// reads the row flags (a cancel request, a wake) and the answers to pending calls. Syncs are
// coalesced: one at a time, and one more if asked meanwhile.

import type { LiveFrames } from '../bus/index.js'
import { errorChain } from '../session/index.js'
import type { LeanRow } from '../store/index.js'
import { LeaseLostError, type SessionLog } from './log.js'
import type { PendingCalls } from './pending.js'

export interface WatchTarget {
  readonly log: SessionLog
  readonly pending: PendingCalls
  /** the row flags a sync saw */
  react(row: LeanRow): void
  /** a poke or reset: the row may have changed in ways no event shows (a PATCH of the settings) */
  poked?(): void
  lost(e: LeaseLostError): void
  warn(o: object, msg: string): void
}

export class SessionWatch {
  private syncing: Promise<void> | undefined
  private again = false
  private unsubscribe: () => void = () => {}
  stopped = false

  constructor(private readonly live: LiveFrames, private readonly key: string, private readonly t: WatchTarget) {}

  start(): void {
    const state = this.t.log.state
    this.unsubscribe = this.live.subscribe(this.key, {
      commit: (n) => {
        if (n.seq <= state.headSeq) return
        if (n.events?.length) void this.t.log.foldLocal(n.events).then((ok) => ok || this.sync(), () => this.sync())
        else this.sync()
      },
      poke: () => {
        this.t.poked?.()
        this.sync()
      },
      reset: () => {
        this.t.poked?.()
        this.sync()
      },
    })
  }

  /** Folds what others committed and hands the row flags and answers on. */
  sync(): void {
    if (this.stopped) return
    if (this.syncing) {
      this.again = true
      return
    }
    this.syncing = (async () => {
      do {
        this.again = false
        try {
          this.t.react(await this.t.log.sync())
          if (this.t.pending.waits) await this.t.pending.check()
        } catch (e) {
          if (e instanceof LeaseLostError) this.t.lost(e)
          else this.t.warn({ err: errorChain(e) }, 'session sync failed')
        }
      } while (this.again && !this.stopped)
      this.syncing = undefined
    })()
  }

  stop(): void {
    this.stopped = true
    this.unsubscribe()
  }
}
