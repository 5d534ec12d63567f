// Where the tests find PostgreSQL: DATABASE_URL (set by .ci/run), else the machine's local server.
// Only the server matters: the suite creates the databases it uses (a migrated template and one per
// test file) through whichever database of that server it can connect to (see global-setup.ts).

import { inject } from 'vitest'

export const TEMPLATE_DB = 'agentd_test_tmpl'

declare module 'vitest' {
  export interface ProvidedContext {
    /** the URL global-setup.ts connected through to create databases */
    pgAdminUrl: string
  }
}

/** The URL CI gave us, or the local default. Its database need not exist. */
export function configuredUrl(): string {
  return process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test'
}

/** The same server, another database. */
export function baseUrl(database: string): string {
  const u = new URL(configuredUrl())
  u.pathname = `/${database}`
  return u.toString()
}

/** Where CREATE/DROP DATABASE may be sent from: the configured database, else the server's own ones. */
export function adminCandidates(): string[] {
  return [...new Set([configuredUrl(), baseUrl('postgres'), baseUrl('template1')])]
}

/** A connection for CREATE/DROP DATABASE inside a test file: the one the global setup found. */
export function adminUrl(): string {
  return inject('pgAdminUrl')
}

/** A URL fit for a message: the password, if any, is hidden. */
export function shownUrl(url: string): string {
  const u = new URL(url)
  if (u.password) u.password = '***'
  return u.toString()
}
