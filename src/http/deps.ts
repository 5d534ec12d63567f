// What HTTP needs from the rest of the server, and the facts a route declares in its `config`
// (read by the auth, session-loading, body and OpenAPI plugins instead of matching URLs).

import type { FastifyInstance } from 'fastify'
import type { Logger } from 'pino'
import type { Config } from '../config.js'
import type { Agents, Intake, Sessions } from '../agent/index.js'
import type { Credentials } from '../credentials/index.js'
import type { Feeds, LiveFrame } from '../bus/index.js'
import type { Metrics } from '../metrics.js'
import type { Db, Principal, SessionRow } from '../store/index.js'
import type { Secrets, Tenancy } from '../tenancy/index.js'
import type { WebhookService } from '../webhooks/index.js'
import type { Listener } from './listener.js'

/** What HTTP needs from the rest of the server; nothing below http/ knows about HTTP. */
export interface HttpDeps {
  config: Config
  db: Db
  log: Logger
  intake: Intake
  sessions: Sessions
  /** the tenant's agents (API.md §16) */
  agents: Agents
  feeds: Feeds
  metrics: Metrics
  /** tenant limits and usage (API.md §15) */
  tenancy: Tenancy
  /** tenant secrets (API.md §13) */
  secrets: Secrets
  /** the tenant's webhooks (API.md §14) */
  webhooks?: WebhookService
  /** tokens, identity providers and origins (API.md §18) */
  credentials: Credentials
  /** the in-flight attempt's snapshot frame for late subscribers (API.md §6), if any */
  snapshot(sessionKey: string): LiveFrame | undefined
  /** the driver side: manual compaction, deletion, fork checks */
  driver: DriverControl
  ready(): Promise<boolean>
  /** calls fn when a tenant's limits changed in any process (null: anything may have; auth.ts drops cached principals) */
  onTenantChanged?(fn: (tenantId: string | null) => void): () => void
  /** the socket bound at the start of the process (listener.ts); none: an unbound one (tests inject) */
  listener?: Listener
  /** the client protocols' routes (API.md §17), registered under /v1 after the native ones; the server
   * passes src/protocols' plugins here, so http/ never imports the protocols built on it */
  protocols?: (v1: FastifyInstance, deps: HttpDeps) => Promise<void>
}

export interface DriverControl {
  /** POST …/compact: runs compaction as maintenance while idle (SPEC §12.7) */
  compact(row: SessionRow): Promise<{ compacted: boolean }>
  /** DELETE …: stops whatever runs for the session in any process */
  deleted(row: SessionRow): Promise<void>
  /**
   * PATCH of settings (API.md §4, §12): the session's driver, in whichever process, reads them again
   * before its next step; resolves once the poke has been sent to other processes
   */
  settingsChanged(key: string): Promise<void>
}

/** Facts of one route, in its `config`. */
export interface RouteFacts {
  /** who may call it (API.md §3): a tenant key, the admin token, or anyone (§8); set by the scope */
  auth?: 'tenant' | 'admin' | 'none'
  /** `?access_token=` stands in for the header (API.md §6: browsers' EventSource and WebSocket) */
  queryToken?: boolean
  /** exempt from the per-key rate limit (API.md §1: streams) */
  unlimited?: boolean
  /**
   * the scope a token needs (API.md §18): `read` (GET routes and streams) or `write` (input, answers,
   * cancel, creating and changing sessions); set by the scope from the method unless the route says
   */
  access?: 'read' | 'write'
  /** a tenant key only: a token is 403 (API.md §18: minting tokens, and the tenant's secrets, webhooks and usage) */
  keyOnly?: boolean
  /** the path parameter naming the agent the route is bound to (API.md §17): a token limited to agents must list it */
  agent?: string
  /** the route creates a session from its body's id and agent: a token limited to sessions or agents must list them */
  createsSession?: boolean
  /** `:id` is a session the caller reaches (its tenant's; a token's own, API.md §18), loaded into req.session before validation (404 otherwise) */
  session?: boolean
  /** with `session` (or `bodySession`): the session's pending input is read with it, for the delivery to plan on (intake.ts) */
  inbox?: boolean
  /** with `inbox`: the body names the session input goes to (the Responses route's conversation); the route reads it with session.ts sessionNamed */
  bodySession?: boolean
  /** every body field is optional, so no body at all reads as {} (API.md §10) */
  optionalBody?: boolean
  /** answers text/event-stream (openapi.json) */
  eventStream?: boolean
}

declare module 'fastify' {
  interface FastifySchema {
    /** one line for openapi.json */
    summary?: string
    /** the operation's name in openapi.json and in generated clients */
    operationId?: string
  }
  interface FastifyContextConfig extends RouteFacts {}
  interface FastifyRequest {
    principal?: Principal
    session?: SessionRow
    /** the session the auth hook read with the key (null: the tenant has none by that id) */
    preloadedSession?: SessionRow | null
    /**
     * set when the auth hook took the principal from its cache for a delivery to a session this
     * process drives (auth.ts): the delivery confirms the key in its statement (a token's, verified
     * already, needs none: keyId undefined); `confirm` reads the key and the session as the hook would
     * have (`named`: with the session a `bodySession` route's body names), before any other answer
     */
    deferredKey?: { keyId?: string; confirm(named?: string): Promise<void> }
  }
}
