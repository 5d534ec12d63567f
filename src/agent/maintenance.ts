// Maintenance (SPEC §5.6): a task on an idle Agent between turns (manual compaction, compact.ts). The
// Agent is held in the maintenance phase, with its row's run state, while the task runs; a wake
// latched meanwhile fires afterwards.

import type { Logger } from 'pino'
import { errorChain, hasPending, type SessionState } from '../session/index.js'
import type { Loop } from './context.js'
import { commitDecision } from './log.js'
import type { Phases } from './phases.js'

/** Maintenance was asked of an Agent that is not idle (a turn or other maintenance runs). */
export class AgentBusyError extends Error {
  constructor() {
    super('maintenance needs an idle Agent')
    this.name = 'AgentBusyError'
  }
}

/** What maintenance needs of the Agent besides its phases. */
export interface Maintained {
  readonly log: Loop['log']
  readonly state: SessionState
  readonly disposed: boolean
  readonly logger: Logger
  wakeDurable(): Promise<void>
}

/** Runs task while idle as maintenance; throws AgentBusyError when the Agent is not idle. */
export async function runMaintenance<T>(run: Phases, a: Maintained, task: (signal: AbortSignal) => Promise<T>): Promise<T> {
  if (run.busy) throw new AgentBusyError()
  const abort = run.renew()
  run.set('maintenance')
  let done!: () => void
  run.activity = new Promise<void>((r) => (done = r))
  try {
    await a.log.commit(() => ({ patch: { runState: 'maintenance' } }))
    return await task(abort.signal)
  } finally {
    let latched = false
    try {
      const r = await commitDecision<boolean, 'wakeLatched'>(
        a.log,
        (u) => {
          const wanted = u.row.wakeLatched && hasPending(a.state.inbox) && !a.disposed
          return { patch: { runState: wanted ? 'wanted' : 'idle', wakeLatched: false, cancelPending: false }, value: wanted }
        },
        { reads: ['wakeLatched', 'inbox'] },
      )
      latched = r.value
    } catch (e) {
      a.logger.warn({ err: errorChain(e) }, 'could not end maintenance')
    }
    run.activity = undefined
    done()
    run.set('idle')
    if (latched) void a.wakeDurable()
  }
}
