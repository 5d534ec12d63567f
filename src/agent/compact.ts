// Manual compaction (SPEC §12.7, POST …/compact): maintenance of an idle Agent by the compaction
// plugin's Compactor, in the process that holds the session — this one, or another asked over the
// bus's commands. When nobody holds it, this process takes it, compacts and, in an api process (which
// renews no leases), hands it back at once.

import crypto from 'node:crypto'
import type { Commands } from '../bus/index.js'
import { ApiError } from '../errors.js'
import { errorChain } from '../session/index.js'
import type { SessionRow } from '../store/index.js'
import type { Agent } from './agent.js'
import { AgentBusyError } from './maintenance.js'

/** Manual compaction of an idle Agent, as the compaction plugin provides it: whether the surface changed. */
export type Compactor = (agent: Agent) => Promise<boolean>

/** The sessions this process holds, as manual compaction reaches them (worker/host.ts). */
export interface SessionHolder {
  agent(key: string): Agent | undefined
  claim(key: string): Promise<Agent | null>
  drop(key: string, o: { release: boolean }): Promise<void>
}

export interface ManualCompactionOptions {
  holder: SessionHolder
  commands: Commands
  /** the loaded compaction plugin's Compactor; none: nothing is compacted */
  compactor: () => Compactor | undefined
  /** an api process: a session taken to compact it is handed back at once */
  transient: boolean
}

const COMPACT = 'compact'
const busy = (message: string) => new ApiError('session-busy', message)
const IDLE_ONLY = 'a turn is running; compaction runs while idle'

export class ManualCompaction {
  constructor(private readonly o: ManualCompactionOptions) {}

  /** Serves other processes' (and this one's) compaction commands for the sessions held here. */
  serve(): () => void {
    return this.o.commands.serve((c) => {
      const agent = c.kind === COMPACT ? this.o.holder.agent(c.sessionKey) : undefined
      return agent ? this.compactHeld(agent) : undefined
    })
  }

  /** Compacts the session where it is held, or takes it to; `compacted` when its surface changed. */
  async compact(row: SessionRow): Promise<{ compacted: boolean }> {
    const out = await this.o.commands.run({ id: crypto.randomUUID(), kind: COMPACT, sessionKey: row.key })
    if (out.ok) return { compacted: out.result === true }
    if (out.reason === 'error') throw new ApiError(out.error.code === 'session-busy' ? 'session-busy' : 'internal', out.error.message)
    if (out.reason === 'timeout') throw new ApiError('unavailable', 'the process driving this session did not finish the compaction in time')
    const agent = await this.o.holder.claim(row.key)
    if (!agent) throw busy('another process drives this session right now; try again')
    try {
      return { compacted: await this.compactHeld(agent) }
    } finally {
      if (this.o.transient) await this.o.holder.drop(row.key, { release: true })
    }
  }

  private async compactHeld(agent: Agent): Promise<boolean> {
    if (agent.busy) throw busy(IDLE_ONLY)
    if (agent.state.openCompaction) throw busy('a compaction is in progress')
    const compact = this.o.compactor()
    if (!compact) return false
    try {
      return await compact(agent)
    } catch (e) {
      if (e instanceof AgentBusyError) throw busy(IDLE_ONLY)
      throw new ApiError('internal', `compaction failed: ${errorChain(e)}`)
    }
  }
}
