// The session row as SQL selects it and as the store returns it. The door exports the types only
// (through sessions.ts); the columns and the mapping stay inside store/.

import type { Inbox, JsonObject, LastTurn, RunState, UsageTotals } from '../session/index.js'

export interface SessionSpec {
  /** API.md §4: the agent version the session was made from (migration 0008); absent for an inline session */
  agent?: { id: string; version: number } | null
  model: string
  system: string
  tools: JsonObject[]
  /** API.md §12: the session's MCP servers (none when absent) */
  mcpServers?: JsonObject[]
  maxTokens?: number
  reasoningEffort?: string
  metadata: JsonObject
}

export interface SessionRow extends SessionSpec {
  mcpServers: JsonObject[]
  agent: { id: string; version: number } | null
  key: string
  tenantId: string
  id: string
  title: string | null
  createHash: string
  createdAt: number
  nextSeq: number
  lastTime: number
  updatedAt: number
  openTurn: number | null
  runState: RunState
  cancelPending: boolean
  wakeLatched: boolean
  leaseOwner: string | null
  leaseToken: number
  leaseExpiresAt: number | null
  usage: UsageTotals
  /** the latest turn/end (API.md §4 lastTurn), null before the first turn ends */
  lastTurn: LastTurn | null
  /** SPEC §19: the crash-interrupted turn a continuation is owed for, null when none (migration 0006) */
  continueTurn: number | null
  /** API.md §18: the subject that created it, null when a key or a token without subject did */
  owner: string | null
  /**
   * the pending input as the row was read, only where the reader asked for it (a delivery route's
   * authentication): intake plans its first, optimistic attempt on it
   */
  inbox?: Inbox
}

export const COLUMNS = `key, tenant_id, id, title, model, system, tools, max_tokens, reasoning_effort, metadata, create_hash, created_at,
  next_seq, last_time, updated_at, open_turn, run_state, cancel_pending, wake_latched, lease_owner, lease_token, lease_expires_at,
  input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, cost_usd, last_turn, continue_turn, mcp_servers, agent_id, agent_version, owner`

export type Raw = Record<string, unknown>

export function toRow(r: Raw): SessionRow {
  const row: SessionRow = {
    key: r.key as string,
    tenantId: r.tenant_id as string,
    id: r.id as string,
    title: (r.title as string | null) ?? null,
    model: r.model as string,
    system: r.system as string,
    tools: JSON.parse(r.tools as string),
    mcpServers: JSON.parse((r.mcp_servers as string | undefined) ?? '[]'),
    metadata: JSON.parse(r.metadata as string),
    createHash: r.create_hash as string,
    createdAt: Number(r.created_at),
    nextSeq: r.next_seq as number,
    lastTime: Number(r.last_time),
    updatedAt: Number(r.updated_at),
    openTurn: (r.open_turn as number | null) ?? null,
    runState: r.run_state as RunState,
    cancelPending: r.cancel_pending as boolean,
    wakeLatched: r.wake_latched as boolean,
    leaseOwner: (r.lease_owner as string | null) ?? null,
    leaseToken: Number(r.lease_token),
    leaseExpiresAt: r.lease_expires_at === null ? null : Number(r.lease_expires_at),
    usage: {
      inputTokens: Number(r.input_tokens),
      outputTokens: Number(r.output_tokens),
      cacheReadTokens: Number(r.cache_read_tokens),
      cacheWriteTokens: Number(r.cache_write_tokens),
      reasoningTokens: Number(r.reasoning_tokens),
      costUsd: Number(r.cost_usd),
    },
    lastTurn: r.last_turn ? (JSON.parse(r.last_turn as string) as LastTurn) : null,
    continueTurn: (r.continue_turn as number | null) ?? null,
    agent: r.agent_id ? { id: r.agent_id as string, version: r.agent_version as number } : null,
    owner: (r.owner as string | null) ?? null,
  }
  if (r.max_tokens !== null && r.max_tokens !== undefined) row.maxTokens = r.max_tokens as number
  if (r.reasoning_effort !== null && r.reasoning_effort !== undefined) row.reasoningEffort = r.reasoning_effort as string
  return row
}

