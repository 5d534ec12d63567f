// An Agent's phases (SPEC §5.1): idle, running or maintenance; the activity that runs in them (a wake
// prefix, the driver, a maintenance task) and its abort; the public status, announced exactly when
// it changes; and whenIdle (§5.6).

import type { AgentCancelCause } from '../session/index.js'
import { Abort } from './context.js'

export type Phase = 'idle' | 'running' | 'maintenance'

export class Phases {
  phase: Phase = 'idle'
  /** the running activity's abort */
  current: Abort | undefined
  activity: Promise<void> | undefined
  private idleWaiters: Array<() => void> = []
  /** the public status last announced */
  private emitted: 'idle' | 'running' = 'idle'

  constructor(private readonly announceStatus: (status: 'idle' | 'running') => void) {}

  get status(): 'idle' | 'running' {
    return this.phase === 'running' ? 'running' : 'idle'
  }

  /** A phase other than idle, or an activity still settling. */
  get busy(): boolean {
    return this.phase !== 'idle' || !!this.activity
  }

  /** An aborted activity still converging (a cancel, not a disposal): waking input latches (§5.4). */
  get converging(): boolean {
    return this.phase !== 'idle' && !!this.current?.aborted && !this.current.disposing
  }

  /** A fresh abort for the next activity or turn (SPEC §5.3). */
  renew(): Abort {
    return (this.current = new Abort())
  }

  abort(cause: AgentCancelCause): void {
    this.current?.abort(cause)
  }

  /** agent/status exactly when the public status changes. */
  announce(): void {
    if (this.status === this.emitted) return
    this.emitted = this.status
    this.announceStatus(this.status)
  }

  /** Enters a phase and announces it; entering idle releases whenIdle(). */
  set(p: Phase): void {
    this.phase = p
    this.announce()
    if (p === 'idle') {
      const w = this.idleWaiters
      this.idleWaiters = []
      for (const r of w) r()
    }
  }

  /** Resolves once neither a driver nor maintenance runs. */
  whenIdle(): Promise<void> {
    if (this.phase === 'idle' && !this.activity) return Promise.resolve()
    return new Promise((r) => this.idleWaiters.push(r))
  }
}
