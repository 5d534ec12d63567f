// The store's door: the Db interface and its adapters, migrations, and the repositories.
export * from './db.js'
export * from './migrate.js'
export * as tenants from './tenants.js'
export type { Principal, Tenant } from './tenants.js'
export * from './sessions.js'
export * from './events.js'
export * from './idempotency.js'
export * from './pending.js'
