// What a loop instance keeps between steps and attempts, each with its one owner: the session's
// settings as the driver uses them (API.md §4, §12), and the request series (SPEC §8.7–§8.8). The
// parts of a turn read them and move them through these methods only.

import type { StoredSettings } from '../store/index.js'
import type { McpServerSpec, ToolSpec } from '../tools/index.js'

/**
 * The session's settings as the driver uses them: the row's as of attach, read again before a step
 * that follows a poke (API.md §4: PATCH changes them and pokes; SessionSettings).
 */
export interface AgentSpec {
  model: string
  system: string
  tools: ToolSpec[]
  /** API.md §12 */
  mcpServers?: McpServerSpec[]
  /** API.md §16: the agent the session was made from (the turn span's gen_ai.agent.*) */
  agent?: { id: string; version: number; name?: string }
  maxTokens?: number
  reasoningEffort?: string
}

/**
 * The session's settings: the row's as of attach, read again before a step once they may have
 * changed — after attach, after every poke or reset of the session's doorbell (PATCH pokes) — not
 * before every step. The step then renders and admits them through the loop's own machinery.
 */
export class SessionSettings {
  private stale = true

  constructor(
    private current: AgentSpec,
    private readonly read: () => Promise<StoredSettings | undefined>,
    /** the session's MCP servers follow the settings (API.md §12) */
    private readonly servers: (specs: McpServerSpec[]) => void,
  ) {}

  /** The settings the current step was proposed with (replaced, never mutated, between steps). */
  get spec(): AgentSpec {
    return this.current
  }

  /** The row's settings may differ from `spec` now. */
  poke(): void {
    this.stale = true
  }

  /**
   * Before a step is proposed: the settings as they stand now, when they may have changed. The flag
   * is cleared before the read, so a poke during it makes the next step read again. Resolves whether
   * the request config changed (model, maxTokens, reasoningEffort: a config proposed afresh, §7.5).
   * A session deleted meanwhile keeps what it had (the driver learns it from its next commit).
   */
  async refresh(): Promise<boolean> {
    if (!this.stale) return false
    this.stale = false
    let row: StoredSettings | undefined
    try {
      row = await this.read()
    } catch (e) {
      this.stale = true
      throw e
    }
    if (!row) return false
    const was = this.current
    const spec: AgentSpec = { model: row.model, system: row.system, tools: row.tools as unknown as ToolSpec[], mcpServers: row.mcpServers as unknown as McpServerSpec[] }
    if (was.agent) spec.agent = was.agent
    if (row.maxTokens !== undefined) spec.maxTokens = row.maxTokens
    if (row.reasoningEffort !== undefined) spec.reasoningEffort = row.reasoningEffort
    this.current = spec
    this.servers(spec.mcpServers!)
    return spec.model !== was.model || spec.maxTokens !== was.maxTokens || spec.reasoningEffort !== was.reasoningEffort
  }
}

/** What a loop instance remembers between attempts (SPEC §8.7–§8.8). */
export class Series {
  /** whether this instance logged a request/header yet */
  headerLogged = false
  /**
   * API.md §4: the model, maxTokens or reasoningEffort changed since the last committed admission, so
   * the next attempt proposes its config from the settings, as a loop instance's first request does
   * (SPEC §7.5), and its header is a 'change'
   */
  configChanged = false

  /** `capturedGeneration`: replaceGeneration as of attach, then as of the last committed admission */
  constructor(public capturedGeneration: number) {}

  /** Whether the next attempt proposes its config afresh (the first of the instance, or after a change). */
  get fresh(): boolean {
    return !this.headerLogged || this.configChanged
  }

  /** Once an admission committed: the instance's state moves to it. */
  admitted(generation: number): void {
    this.headerLogged = true
    this.configChanged = false
    this.capturedGeneration = generation
  }
}
