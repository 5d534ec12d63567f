// What a start checks before it writes anything: the settings whose syntax loadConfig accepted but
// whose meaning needs more than the environment — the models file, the default and compaction models,
// the tool host list. Each failure is a ConfigError naming its variable, so a bad value stops the start
// with one line (main.ts) and leaves the data directory and the database untouched.

import { ConfigError, type Config } from './config.js'
import { createLlmService, ModelConfigError, type LlmService, type LlmServiceOptions } from './llm/index.js'
import { PluginLoadError } from './plugins/index.js'
import type { Db } from './store/index.js'
import { parseToolHosts, type HostPolicy } from './tools/index.js'

export interface Checked {
  llm: LlmService
  toolPolicy: HostPolicy
}

export function preflight(config: Config, llmOptions: Partial<LlmServiceOptions> = {}): Checked {
  let llm: LlmService
  try {
    llm = createLlmService({ modelsFile: config.modelsFile, defaultModel: config.defaultModel, ...llmOptions })
  } catch (e) {
    if (e instanceof ModelConfigError) throw new ConfigError(`${e.variable}: ${oneLine(e.message)}`)
    throw e
  }
  // the compaction plugin prepares its calls on this route (SPEC §18.13): it must resolve like a session's model
  if (config.compactionModel && !llm.resolveModel(config.compactionModel)) {
    throw new ConfigError(`AGENTD_COMPACTION_MODEL: ${JSON.stringify(config.compactionModel)} does not resolve (want provider/modelId from the models file, pi-ai's catalogue or faux/echo)`)
  }
  let toolPolicy: HostPolicy
  try {
    toolPolicy = parseToolHosts(config.toolHosts)
  } catch (e) {
    // parseToolHosts names AGENTD_TOOL_HOSTS itself
    throw new ConfigError(oneLine((e as Error).message))
  }
  return { llm, toolPolicy }
}

/** A server plugin that cannot be loaded is a bad AGENTD_PLUGINS entry; anything else passes through. */
export function pluginConfigError(e: unknown): unknown {
  return e instanceof PluginLoadError ? new ConfigError(`AGENTD_PLUGINS: ${oneLine(e.message)}`) : e
}

/**
 * PostgreSQL answers, or the start stops with one line naming DATABASE_URL and the host it points at
 * (never the URL itself: it may carry a password), before any migration runs.
 */
export async function reachDatabase(db: Db, url: string): Promise<void> {
  try {
    await db.query('SELECT 1')
  } catch (e) {
    throw new ConfigError(`DATABASE_URL: cannot connect to PostgreSQL at ${databaseHost(url)} (${connectProblem(e)})`)
  }
}

/** host:port of a PostgreSQL URL, as pg reads it (no host: the local socket) */
function databaseHost(url: string): string {
  const u = new URL(url)
  const host = u.hostname || u.searchParams.get('host') || 'the local socket'
  return `${host}:${u.port || '5432'}`
}

/** Why a connection failed, in words; the driver's own message for what the server said. */
function connectProblem(e: unknown): string {
  const cause = ((e as { cause?: unknown })?.cause ?? e) as NodeJS.ErrnoException & { code?: string }
  switch (cause?.code) {
    case 'ECONNREFUSED':
      return 'connection refused: nothing listens there'
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return 'the host name does not resolve'
    case 'ETIMEDOUT':
      return 'no answer in time'
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
      return 'the host cannot be reached'
  }
  const message = oneLine(String(cause?.message ?? cause))
  return /timeout/i.test(message) ? 'no answer in time' : message
}

const oneLine = (s: string) => s.split('\n')[0]!.trim()
