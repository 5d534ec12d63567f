// Composition: config → store, bus, hooks (cordis root), llm, tools, plugins, worker host, http.

import pino, { type Logger } from 'pino'
import type { FastifyInstance } from 'fastify'
import type { Config } from './config.js'
import { Agents, Intake, KeyedMutex, ManualCompaction, Publisher, Sessions, SystemPromptService, errorChain, type AgentDeps } from './agent/index.js'
import { Feeds, LiveAttempts, LocalHub, PgBus, type Bus, type LiveFrame } from './bus/index.js'
import { Credentials } from './credentials/index.js'
import { createRoot, type Context } from './hooks/index.js'
import { buildHttp, Listener, VERSION, type DriverControl } from './http/index.js'
import { Metrics } from './metrics.js'
import { protocolRoutes } from './protocols/index.js'
import type { LlmService, LlmServiceOptions } from './llm/index.js'
import { compactorOf, loadBuiltinPlugins, loadServerPlugins } from './plugins/index.js'
import { deliveriesWritten, migrate, openDb, pruneIdempotency, schemaCurrent, type Db, type SessionRow } from './store/index.js'
import { checkToolUrl, ToolRegistry } from './tools/index.js'
import { WorkerHost } from './worker/index.js'
import { Secrets, Tenancy, embeddedSecretKey, type Clock } from './tenancy/index.js'
import { Deliverer, WebhookService, type DelivererOptions } from './webhooks/index.js'
import { ensureDefaultAgent, ensureEmbeddedTenant } from './embedded-tenant.js'
import { pluginConfigError, preflight, reachDatabase } from './preflight.js'
import { startTracing } from './tracing/index.js'

export interface App {
  config: Config
  log: Logger
  db: Db
  bus: Bus
  root: Context
  llm: LlmService
  intake: Intake
  sessions: Sessions
  agents: Agents
  publisher: Publisher
  metrics: Metrics
  tenancy: Tenancy
  secrets: Secrets
  webhooks: WebhookService
  credentials: Credentials
  deliverer?: Deliverer
  host?: WorkerHost
  http?: FastifyInstance
  /** the listening address, when listening */
  url?: string
  /** the key printed on the first embedded start */
  firstKey?: string
  close(): Promise<void>
}

/**
 * pino's redaction, a second fence behind code that never logs a secret (API.md §1, §13): request
 * headers and any field that names a secret value or a header set are censored wherever they appear.
 */
export const LOG_REDACT = {
  paths: ['headers', '*.headers', 'req.headers.authorization', 'value', '*.value', 'secret', '*.secret', 'apiKey', '*.apiKey', 'authorization', '*.authorization'],
  censor: '[redacted]',
}

export interface StartOptions {
  log?: Logger
  /** listen on config.host:config.port (default true) */
  listen?: boolean
  /** an already open database (tests) */
  db?: Db
  /** options for the model service beyond the config (tests: extra pi-ai models) */
  llm?: Partial<LlmServiceOptions>
  /** plugins applied after the built-in ones and AGENTD_PLUGINS (tests) */
  plugins?: Array<(root: Context) => void>
  /** the clock of tenant budget periods (tests move it across a UTC day or month) */
  clock?: Clock
  /** MCP tools/call timeout (tests; default 30 s) */
  mcpCallTimeoutMs?: number
  /** the webhook deliverer's schedule and timing (tests shrink them); deliver: false starts none */
  webhooks?: Partial<DelivererOptions> & { deliver?: boolean }
  /** PostgreSQL bus presence heartbeat (tests shrink it; default 5 s) */
  busHeartbeatMs?: number
  /** PostgreSQL bus window that coalesces doorbells and pokes (tests widen it; default 50 ms) */
  busWindowMs?: number
  /** tokens (API.md §18): the clock of their keys and expiry, how long an identity provider's key set is cached, the least time between key reloads (tests) */
  credentials?: { clock?: () => number; jwksCacheMaxAgeMs?: number; keyReloadIntervalMs?: number }
}

export async function startApp(config: Config, o: StartOptions = {}): Promise<App> {
  const log = o.log ?? pino({ level: config.logLevel, base: { pid: process.pid }, redact: LOG_REDACT })
  // the whole configuration, models file and plugins included, is checked before anything is written
  const { llm, toolPolicy } = preflight(config, { log, ...(o.llm ?? {}) })
  // the port next, still before anything is written: a busy one stops the start here, and from here
  // on it is this process's, so no other start can take it while this one opens its database
  const listener = o.listen !== false ? new Listener(config) : undefined
  await listener?.bind(config.port, config.host)
  const metrics = new Metrics()
  const root = createRoot()
  let opened: Db | undefined
  const cleanup: Array<() => Promise<void> | void> = []
  try {
    // API.md §19: registered before anything that makes spans; shut down (flushing its spans) last
    if (config.tracing) {
      const tracing = startTracing(config.tracing, VERSION)
      cleanup.push(() => tracing.shutdown().catch((e) => log.warn({ err: errorChain(e) }, 'the last spans could not be exported')))
    }
    root.provide('tools', undefined, true)
    root.plugin(ToolRegistry)
    root.provide('systemPrompt', undefined, true)
    root.plugin(SystemPromptService)
    // what built-in plugins reach through the root: the model service and the logger
    root.provide('llm', llm, true)
    root.provide('log', log, true)
    loadBuiltinPlugins(root, config.builtinPlugins, { compaction: { model: config.compactionModel } })
    await loadServerPlugins(root, config.plugins).catch((e) => Promise.reject(pluginConfigError(e)))
    for (const p of o.plugins ?? []) p(root)

    const db = o.db ?? (opened = await openDb({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, prepare: config.pgPrepare }))
    if (config.databaseUrl && !o.db) await reachDatabase(db, config.databaseUrl)
    await migrate(db)
    let firstKey: string | undefined
    if (!config.databaseUrl && !o.db) firstKey = await ensureEmbeddedTenant(db, config.dataDir, log)
    // API.md §13: the embedded database keeps its own key next to it; PostgreSQL needs AGENTD_SECRET_KEY
    const secretKey = config.secretKey ?? (config.databaseUrl ? undefined : embeddedSecretKey(config.dataDir))
    const secrets = new Secrets({ db, key: secretKey })

    let bus: Bus
    if (config.databaseUrl && db.kind === 'pg') {
      const pgBus = new PgBus({ url: config.databaseUrl, db, log, ...(o.busHeartbeatMs ? { heartbeatMs: o.busHeartbeatMs } : {}), ...(o.busWindowMs ? { windowMs: o.busWindowMs } : {}) })
      await pgBus.start()
      bus = pgBus
    } else bus = new LocalHub()
    cleanup.push(() => bus.close())

    // API.md §18: signing keys are sealed like secrets, so without a key agentd mints no token
    const credentials = new Credentials({ db, invalidations: bus.invalidations, secretKey, rotationDays: config.tokenKeyRotationDays, policy: toolPolicy, ...(o.credentials ?? {}) })
    cleanup.push(() => credentials.close())

    const publisher = new Publisher(bus, root, log)
    const mutex = new KeyedMutex()
    const registry = (root as unknown as { tools: ToolRegistry }).tools
    const sessions = new Sessions({
      db,
      publisher,
      mutex,
      models: llm,
      tools: { builtin: (name) => registry.get(name), checkUrl: (url) => checkToolUrl(url, toolPolicy) },
    })
    const agents = new Agents({ db, sessions })
    if (!config.databaseUrl && !o.db) await ensureDefaultAgent(db, agents)
    const feeds = new Feeds(bus.live, db)
    const attempts = new LiveAttempts(bus.live)
    cleanup.push(() => attempts.close())

    // API.md §15: budgets before every model attempt, slot doorbells and tenant metrics after commits
    const tenancy = new Tenancy({ db, invalidations: bus.invalidations, doorbells: bus.doorbells, log, metrics, clock: o.clock, running: () => runningTenants(host) })
    cleanup.push(publisher.observe((s, events) => tenancy.committed(s.tenantId, events)))
    // a token's principal carries its tenant's requestsPerMin, as a key's does
    cleanup.push(tenancy.onLimitsChanged((tenantId) => credentials.forget(tenantId)))

    const agentDeps: AgentDeps = {
      sessionLog: { db, publisher, mutex, log, onAppend: (n) => metrics.appends.inc({}, n) },
      log,
      root,
      llm,
      toolPolicy,
      metrics,
      maxParallelToolCalls: () => config.maxParallelToolCalls,
      attempts,
      tenancy,
      continueAfterCrash: config.continueAfterCrash,
      secrets,
      ...(o.mcpCallTimeoutMs ? { mcpCallTimeoutMs: o.mcpCallTimeoutMs } : {}),
    }
    const host = new WorkerHost({ db, doorbells: bus.doorbells, publisher, mutex, log, metrics, leaseTtlMs: config.leaseTtlMs, idleReleaseMs: config.idleReleaseMs, agentDeps })
    metrics.gauge('agentd_leases_held', 'Session leases this process holds: the sessions it drives', () => host.size)
    metrics.gauge('agentd_sessions_running', 'Sessions this process drives whose driver is running', () => host.running)
    // notifications of deliveries carry the Agent handle when this process drives the session
    const intake = new Intake({ db, publisher, mutex, agents: host })

    // idempotency records are kept at least 24 hours (API.md §5); older ones go, hourly
    const prune = setInterval(() => void pruneIdempotency(db, 25 * 3600 * 1000).catch(() => {}), 3600 * 1000)
    prune.unref()
    cleanup.push(() => clearInterval(prune))

    // SPEC §12.7: the holder of a session serves compaction requests from any process
    const compaction = new ManualCompaction({ holder: host, commands: bus.commands, compactor: () => compactorOf(root), transient: config.role === 'api' })
    cleanup.push(compaction.serve())

    // API.md §14: a deliverer in every process that drives sessions; commits here that wrote
    // deliveries wake it (their committed events carry the count, so a tenant without webhooks costs no look at the
    // outbox per turn), other processes' are found by its poll
    const deliverer = config.role !== 'api' && o.webhooks?.deliver !== false ? new Deliverer({ db, log, metrics, policy: toolPolicy, options: o.webhooks }) : undefined
    if (deliverer) {
      deliverer.start()
      cleanup.push(() => deliverer.stop())
      cleanup.push(publisher.observe((_s, events) => {
        if (deliveriesWritten(events)) deliverer.wake()
      }))
    }
    const webhooks = new WebhookService({ db, policy: toolPolicy, wake: () => deliverer?.wake() })

    const driver: DriverControl = {
      compact: (row: SessionRow) => compaction.compact(row),
      deleted: async (row: SessionRow) => {
        host.deleted(row.key)
        bus.doorbells.poke(row.key)
        tenancy.deleted(row.tenantId)
      },
      settingsChanged: (key: string) => bus.doorbells.pokeNow(key),
    }
    // the process's one tracker of streaming attempts: the driver's own when it runs here
    const snapshot = (key: string): LiveFrame | undefined => attempts.snapshot(key)

    const app: App = {
      config,
      log,
      db,
      bus,
      root,
      llm,
      intake,
      sessions,
      agents,
      publisher,
      metrics,
      tenancy,
      secrets,
      webhooks,
      credentials,
      deliverer,
      host,
      firstKey,
      async close() {
        await app.http?.close()
        await host.stop(config.shutdownGraceMs)
        for (const c of cleanup.reverse()) await c()
        await root.scope.dispose?.()
        if (!o.db) await db.close()
      },
    }
    app.http = await buildHttp({
      protocols: protocolRoutes,
      config,
      db,
      log,
      intake,
      sessions,
      agents,
      feeds,
      metrics,
      tenancy,
      secrets,
      webhooks,
      credentials,
      snapshot,
      driver,
      ready: () => schemaCurrent(db),
      onTenantChanged: (fn) => tenancy.onLimitsChanged(fn),
      listener,
    })
    if (o.listen !== false) {
      app.url = await app.http.listen({ port: config.port, host: config.host })
      log.info({ url: app.url, role: config.role, database: db.kind, node: process.version }, 'agentd listening')
    }
    // drivers start once the process serves: a takeover (crash repair, then the continuation of
    // SPEC §19) is then visible to clients of this process from its first event. An api process drives
    // nothing on its own; it only takes a session briefly for maintenance.
    if (config.role !== 'api') host.start()
    return app
  } catch (e) {
    for (const c of cleanup.reverse()) await Promise.resolve(c()).catch(() => {})
    await opened?.close().catch(() => {})
    await listener?.close()
    throw e
  }
}

/** The tenant of each session this process's drivers run a turn for (agentd_tenant_running_sessions). */
function* runningTenants(host: WorkerHost): Iterable<string> {
  for (const a of host.agents()) if (a.state.openTurn !== null) yield a.tenantId
}
