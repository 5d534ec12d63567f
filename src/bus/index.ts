// The bus's door: the in-process hub, the PostgreSQL transport and the subscriber feeds.
export * from './local.js'
export { PgBus, type PgBusOptions } from './pg.js'
export * from './feed.js'
export { LiveAttempts, type TrackedAttempt } from './attempts.js'
