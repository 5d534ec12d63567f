// The credentials door (API.md §18): tokens for browsers and end users — agentd's own, signed with
// keys it keeps and rotates, and those of tenants' identity providers — and tenants' origins.
export { Credentials, type AuthPatch, type CredentialsOptions } from './credentials.js'
export { DEFAULT_TTL_SECONDS, ISSUER, MAX_TOKEN_LENGTH, SCOPES, type MintRequest } from './tokens.js'
export { MAX_TTL_SECONDS } from './signing-keys.js'
export { IDP_LEEWAY_SECONDS, MAX_SUBJECT_LENGTH } from './providers.js'
