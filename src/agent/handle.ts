// The Agent handle plugins see as `payload.agent` (API.md §11): one per plugin, so its deliveries
// default to that plugin as their source, and hook payloads rebound to the listening plugin's own.

import type { AgentCancelCause, DeliveryRoute, MessageInput } from '../session/index.js'
import type { Accepted } from './intake.js'

export interface AgentHandle {
  readonly id: string
  readonly status: 'idle' | 'running'
  followup(m: MessageInput): Promise<Accepted>
  steer(m: MessageInput): Promise<Accepted>
  inject(m: MessageInput): Promise<Accepted>
  cancel(opts?: { keepInbox?: boolean; reason?: string }): Promise<{ cancelled: boolean }>
  whenIdle(): Promise<void>
}

/** What a handle calls: the Agent. */
export interface HandleTarget {
  readonly id: string
  readonly status: 'idle' | 'running'
  send(m: MessageInput, route: DeliveryRoute, plugin: string): Promise<Accepted>
  cancel(cause: AgentCancelCause, o: { keepInbox?: boolean }): Promise<{ cancelled: boolean }>
  whenIdle(): Promise<void>
}

/** The hidden link from a handle to its Agent (agentOf). */
export const AGENT = Symbol.for('agentd.agent')

export class Handles {
  private readonly byPlugin = new Map<string, AgentHandle>()

  constructor(private readonly target: HandleTarget) {}

  /** The handle of `plugin`; its deliveries default to source {kind:'plugin', plugin}. */
  of(plugin = 'agentd'): AgentHandle {
    let h = this.byPlugin.get(plugin)
    if (h) return h
    const t = this.target
    h = {
      id: t.id,
      get status() {
        return t.status
      },
      followup: (m) => t.send(m, 'followup', plugin),
      steer: (m) => t.send(m, 'steer', plugin),
      inject: (m) => t.send(m, 'inject', plugin),
      cancel: (o) => t.cancel(o?.reason ? { kind: 'hook', reason: o.reason } : { kind: 'user' }, { keepInbox: o?.keepInbox }),
      whenIdle: () => t.whenIdle(),
    }
    Object.defineProperty(h, AGENT, { value: t, enumerable: false })
    this.byPlugin.set(plugin, h)
    return h
  }

  /** A notification's handle per listening plugin ('' is agentd's own). */
  readonly forPlugin = (plugin: string) => this.of(plugin || 'agentd')

  /** Rebinds `agent` in a hook payload to the listening plugin's handle. */
  readonly bind = (payload: unknown, plugin: string) => {
    const p = payload as Record<string, unknown>
    return p && typeof p === 'object' && 'agent' in p ? { ...p, agent: this.of(plugin) } : payload
  }
}
