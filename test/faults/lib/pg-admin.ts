// Where the fault suite sends CREATE/DROP DATABASE. Inside vitest the global setup already found that
// connection (and provides it through `inject`); `npm run faults` runs outside vitest, where `inject`
// does not exist, so the suite looks for it the same way the global setup does: the configured
// database, else the server's own `postgres` or `template1`.

import { connectAdmin } from '../../helpers/global-setup.js'
import { adminCandidates } from '../../helpers/db-urls.js'

let found: Promise<string> | undefined

/** A URL of the configured PostgreSQL server that CREATE DATABASE may be sent through. */
export function faultsAdminUrl(): Promise<string> {
  found ??= (async () => {
    const { client, url } = await connectAdmin(adminCandidates())
    await client.end()
    return url
  })()
  found.catch(() => (found = undefined))
  return found
}
