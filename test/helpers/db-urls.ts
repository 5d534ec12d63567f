// Where the tests find PostgreSQL: DATABASE_URL (set by .ci/run), else the machine's local server.

export const TEMPLATE_DB = 'agentd_test_tmpl'

/** The URL of the database CI gave us, or the local default. */
export function configuredUrl(): string {
  return process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test'
}

/** The same server, another database. */
export function baseUrl(database: string): string {
  const u = new URL(configuredUrl())
  u.pathname = `/${database}`
  return u.toString()
}

/** A connection for CREATE/DROP DATABASE: the configured database itself. */
export function adminUrl(): string {
  return configuredUrl()
}
