// Environment → one typed, validated Config (API.md §1). A bad value stops the start with a message
// that names the variable.

import path from 'node:path'

export type Role = 'all' | 'api' | 'worker'

export interface Config {
  port: number
  host: string
  databaseUrl?: string
  /** AGENTD_PG_PREPARE: named prepared statements on PostgreSQL (off behind a pooler in transaction mode) */
  pgPrepare: boolean
  dataDir: string
  role: Role
  adminToken?: string
  modelsFile?: string
  defaultModel?: string
  maxParallelToolCalls: number
  leaseTtlMs: number
  idleReleaseMs: number
  builtinPlugins: string[]
  toolHosts?: string
  compactionModel?: string
  plugins: string[]
  rateLimitPerMin: number
  logLevel: string
  bodyLimit: number
  /** SIGTERM grace for running turns before their Agents are disposed */
  shutdownGraceMs: number
  /** SPEC §19: crash continuations in a row before the crash-loop limit stops them; 0 turns them off */
  continueAfterCrash: number
  /** AGENTD_SECRET_KEY (API.md §13): 32 bytes that seal tenant secrets */
  secretKey?: Buffer
  /** how long a client may take to send a whole request (headers and body); past it the request is cut */
  requestTimeoutMs: number
  /** how long an SSE subscriber may keep its socket full before it is cut as a slow consumer */
  slowConsumerMs: number
  /** AGENTD_TOKEN_KEY_ROTATION_DAYS (API.md §18): how long a key signs agentd's tokens */
  tokenKeyRotationDays: number
  /** AGENTD_CORS_ORIGINS (API.md §18): origins whose browsers may call; empty answers no preflight */
  corsOrigins: string[]
  /** API.md §19: OpenTelemetry traces; absent (nothing registered, nothing exported) unless an OTLP endpoint is set */
  tracing?: TracingConfig
}

/** API.md §19: where and how spans are exported (the standard OTEL_* variables, read here once). */
export interface TracingConfig {
  /** the traces URL: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as given, or OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces */
  url: string
  protocol: 'http/protobuf' | 'http/json'
  /** OTEL_EXPORTER_OTLP_(TRACES_)HEADERS: sent to the collector, never logged */
  headers: Record<string, string>
  /** OTEL_SERVICE_NAME (default agentd) */
  serviceName: string
  /** OTEL_BSP_SCHEDULE_DELAY: ms between two batch exports (the SDK's default 5000) */
  scheduleDelayMs?: number
  /** OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: message contents on the chat and tool spans */
  captureContent: boolean
}

export class ConfigError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'ConfigError'
  }
}

const BUILTIN_PLUGINS = ['llm-retry', 'compaction', 'tool-result-pruner']
const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']

function int(env: NodeJS.ProcessEnv, name: string, dflt: number, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const raw = env[name]
  if (raw === undefined || raw === '') return dflt
  if (!/^\d+$/.test(raw.trim())) throw new ConfigError(`${name} must be a whole number, got ${JSON.stringify(raw)}`)
  const v = Number(raw.trim())
  if (v < min || v > max) throw new ConfigError(`${name} must be between ${min} and ${max}, got ${v}`)
  return v
}

/** AGENTD_SECRET_KEY as 32 bytes, or the reason it is not. */
export function parseSecretKey(raw: string): Buffer | string {
  const s = raw.trim()
  if (!/^[A-Za-z0-9+/_-]+={0,2}$/.test(s)) return 'must be base64'
  const key = Buffer.from(s.replace(/-/g, '+').replace(/_/g, '/'), 'base64')
  return key.length === 32 ? key : `must be 32 bytes in base64, got ${key.length} bytes`
}

/** An origin as browsers send it in `Origin`: scheme, host and port, nothing after them. */
export function isOrigin(s: string): boolean {
  try {
    const u = new URL(s)
    return (u.protocol === 'http:' || u.protocol === 'https:') && u.origin === s
  } catch {
    return false
  }
}

/**
 * API.md §19: tracing is on when an OTLP endpoint is set (for all signals or for traces) and neither
 * OTEL_SDK_DISABLED nor OTEL_TRACES_EXPORTER=none turns it off. Only the HTTP protocols are built in.
 */
export function tracingConfig(env: NodeJS.ProcessEnv): TracingConfig | undefined {
  const traces = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim()
  const endpoint = traces || env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim()
  if (!endpoint) return undefined
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return undefined
  const exporter = env.OTEL_TRACES_EXPORTER?.trim().toLowerCase()
  if (exporter === 'none') return undefined
  if (exporter && exporter !== 'otlp') throw new ConfigError(`OTEL_TRACES_EXPORTER must be otlp or none, got ${JSON.stringify(env.OTEL_TRACES_EXPORTER)}`)
  // the endpoint may carry credentials: it is not repeated
  const endpointName = traces ? 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT' : 'OTEL_EXPORTER_OTLP_ENDPOINT'
  if (!URL.canParse(endpoint) || !/^https?:$/.test(new URL(endpoint).protocol)) throw new ConfigError(`${endpointName} must be an http:// or https:// URL`)
  const url = traces ? endpoint : `${endpoint.replace(/\/+$/, '')}/v1/traces`
  const rawProtocol = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL || env.OTEL_EXPORTER_OTLP_PROTOCOL
  const protocol = (rawProtocol || 'http/protobuf').trim()
  if (protocol !== 'http/protobuf' && protocol !== 'http/json') throw new ConfigError(`${env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ? 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL' : 'OTEL_EXPORTER_OTLP_PROTOCOL'} must be http/protobuf or http/json (grpc is not built in: send over HTTP, to a collector if need be), got ${JSON.stringify(rawProtocol)}`)
  const headersName = env.OTEL_EXPORTER_OTLP_TRACES_HEADERS ? 'OTEL_EXPORTER_OTLP_TRACES_HEADERS' : 'OTEL_EXPORTER_OTLP_HEADERS'
  const headers: Record<string, string> = {}
  for (const pair of list(env.OTEL_EXPORTER_OTLP_TRACES_HEADERS || env.OTEL_EXPORTER_OTLP_HEADERS)) {
    const eq = pair.indexOf('=')
    // the value is not repeated: it is usually the collector's credential
    if (eq <= 0) throw new ConfigError(`${headersName} must be key=value pairs separated by commas`)
    try {
      headers[decodeURIComponent(pair.slice(0, eq).trim())] = decodeURIComponent(pair.slice(eq + 1).trim())
    } catch {
      throw new ConfigError(`${headersName}: a malformed percent-encoding`)
    }
  }
  const capture = (env.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT ?? '').trim().toLowerCase()
  if (capture !== '' && capture !== 'true' && capture !== 'false') throw new ConfigError(`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT must be true or false, got ${JSON.stringify(env.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT)}`)
  const delay = env.OTEL_BSP_SCHEDULE_DELAY?.trim() ? int(env, 'OTEL_BSP_SCHEDULE_DELAY', 5000, 1, 3_600_000) : undefined
  return { url, protocol, headers, serviceName: env.OTEL_SERVICE_NAME?.trim() || 'agentd', ...(delay !== undefined ? { scheduleDelayMs: delay } : {}), captureContent: capture === 'true' }
}

const list = (raw: string | undefined) => (raw ?? '').split(',').map((s) => s.trim()).filter(Boolean)

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const role = (env.AGENTD_ROLE || 'all') as Role
  if (!['all', 'api', 'worker'].includes(role)) throw new ConfigError(`AGENTD_ROLE must be all, api or worker, got ${JSON.stringify(env.AGENTD_ROLE)}`)
  const builtin = env.AGENTD_BUILTIN_PLUGINS === undefined ? BUILTIN_PLUGINS : list(env.AGENTD_BUILTIN_PLUGINS)
  for (const b of builtin) if (!BUILTIN_PLUGINS.includes(b)) throw new ConfigError(`AGENTD_BUILTIN_PLUGINS: unknown built-in plugin ${JSON.stringify(b)} (known: ${BUILTIN_PLUGINS.join(', ')})`)
  const logLevel = env.LOG_LEVEL || 'info'
  if (!LOG_LEVELS.includes(logLevel)) throw new ConfigError(`LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}, got ${JSON.stringify(logLevel)}`)
  const databaseUrl = env.DATABASE_URL || undefined
  if (databaseUrl && !/^postgres(ql)?:\/\//.test(databaseUrl)) throw new ConfigError('DATABASE_URL must be a postgres:// or postgresql:// URL')
  // the URL is not repeated: it may carry a password
  if (databaseUrl && !URL.canParse(databaseUrl)) throw new ConfigError('DATABASE_URL is not a valid URL')
  if (role !== 'all' && !databaseUrl) throw new ConfigError(`AGENTD_ROLE=${role} needs DATABASE_URL: the embedded database belongs to a single process that runs both the API and the drivers`)
  const pgPrepare = env.AGENTD_PG_PREPARE || 'on'
  if (pgPrepare !== 'on' && pgPrepare !== 'off') throw new ConfigError(`AGENTD_PG_PREPARE must be on or off, got ${JSON.stringify(env.AGENTD_PG_PREPARE)}`)
  const compactionModel = env.AGENTD_COMPACTION_MODEL || undefined
  if (compactionModel && !compactionModel.includes('/')) throw new ConfigError('AGENTD_COMPACTION_MODEL must be provider/modelId')
  const corsOrigins = list(env.AGENTD_CORS_ORIGINS)
  for (const o of corsOrigins) if (!isOrigin(o)) throw new ConfigError(`AGENTD_CORS_ORIGINS: ${JSON.stringify(o)} is not an origin (scheme://host[:port], nothing after it, e.g. https://app.example.com)`)
  const tracing = tracingConfig(env)
  let secretKey: Buffer | undefined
  if (env.AGENTD_SECRET_KEY) {
    const k = parseSecretKey(env.AGENTD_SECRET_KEY)
    // the reason only: the variable's value is a secret
    if (typeof k === 'string') throw new ConfigError(`AGENTD_SECRET_KEY ${k}`)
    secretKey = k
  }
  return {
    port: int(env, 'PORT', 8080, 0, 65535),
    host: env.HOST || '127.0.0.1',
    databaseUrl,
    pgPrepare: pgPrepare === 'on',
    dataDir: path.resolve(env.AGENTD_DATA_DIR || './.agentd'),
    role,
    adminToken: env.AGENTD_ADMIN_TOKEN || undefined,
    modelsFile: env.AGENTD_MODELS || undefined,
    defaultModel: env.AGENTD_DEFAULT_MODEL || undefined,
    maxParallelToolCalls: int(env, 'AGENTD_MAX_PARALLEL_TOOL_CALLS', 10, 1, 1000),
    leaseTtlMs: int(env, 'AGENTD_LEASE_TTL_MS', 15000, 500),
    idleReleaseMs: int(env, 'AGENTD_IDLE_RELEASE_MS', 30000, 0),
    builtinPlugins: builtin,
    toolHosts: env.AGENTD_TOOL_HOSTS || undefined,
    compactionModel,
    plugins: list(env.AGENTD_PLUGINS),
    rateLimitPerMin: int(env, 'AGENTD_RATE_LIMIT_PER_MIN', 1200, 1),
    logLevel,
    bodyLimit: 1024 * 1024,
    shutdownGraceMs: int(env, 'AGENTD_SHUTDOWN_GRACE_MS', 10000, 0),
    continueAfterCrash: int(env, 'AGENTD_CONTINUE_AFTER_CRASH', 2, 0, 100),
    ...(secretKey ? { secretKey } : {}),
    requestTimeoutMs: int(env, 'AGENTD_REQUEST_TIMEOUT_MS', 30000, 100, 3_600_000),
    slowConsumerMs: int(env, 'AGENTD_SLOW_CONSUMER_MS', 30000, 100, 3_600_000),
    tokenKeyRotationDays: int(env, 'AGENTD_TOKEN_KEY_ROTATION_DAYS', 30, 1, 365),
    corsOrigins: [...new Set(corsOrigins)],
    ...(tracing ? { tracing } : {}),
  }
}
