// The tenancy door (API.md §15): tenant limits, the budget check before every model attempt, the
// doorbells of running-session slots, tenant metrics, the usage report and the clock of its periods.
export { Tenancy, type TenancyOptions, type Tenant } from './tenancy.js'
export type { Limits } from './limits.js'
export type { Clock } from './clock.js'
export { Secrets, SECRET_NAME_RE, MAX_SECRET_BYTES, embeddedSecretKey, seal, open, type Resolved } from './secrets.js'
