// API.md §3: on the embedded database, the first start creates tenant `default` and shows its key once;
// every later start says where that key is kept, without showing it. API.md §16: it also creates the
// tenant's agent `default`, so the client protocols answer out of the box.

import fs from 'node:fs'
import path from 'node:path'
import type { Logger } from 'pino'
import type { Agents } from './agent/index.js'
import { agents as agentStore, tenants, type Db } from './store/index.js'

export const API_KEY_FILE = 'api-key'

/** Creates tenant `default` when there is no tenant yet; returns its key then, else undefined. */
export async function ensureEmbeddedTenant(db: Db, dataDir: string, log: Logger, out: NodeJS.WritableStream = process.stdout): Promise<string | undefined> {
  const file = path.join(dataDir, API_KEY_FILE)
  if ((await tenants.countTenants(db)) > 0) {
    if (fs.existsSync(file)) out.write(`agentd: the API key of tenant "default" is in ${file}\n`)
    else log.warn({ file }, 'the api-key file is gone; create a tenant key through the admin routes (set AGENTD_ADMIN_TOKEN)')
    return undefined
  }
  const t = await tenants.createTenant(db, 'default')
  fs.mkdirSync(dataDir, { recursive: true })
  fs.writeFileSync(file, `${t.apiKey}\n`, { mode: 0o600 })
  // one block, so nothing can come between the words and the key; it refers to no other line
  out.write(`\nagentd: created tenant "default". Its API key, shown only this once and kept in ${file}:\n\n    ${t.apiKey}\n\n`)
  log.info({ file }, 'created tenant "default"; its API key was shown once and is kept in the api-key file')
  return t.apiKey
}

/** The agent the embedded database starts with (API.md §16), created as this POST /v1/agents body would. */
export const DEFAULT_AGENT = { id: 'default', name: 'Default', description: 'the agent the embedded database starts with: faux/echo, no tools', model: 'faux/echo' }

/**
 * Creates agent `default` in tenant `default` unless that id was ever used there: on the first start,
 * and on the first start of a data directory made before agents existed; a deleted one stays deleted.
 */
export async function ensureDefaultAgent(db: Db, agents: Agents): Promise<void> {
  const tenantId = await tenants.firstTenantNamed(db, 'default')
  if (!tenantId || (await agentStore.agentIdUsed(db, tenantId, DEFAULT_AGENT.id))) return
  await agents.create(tenantId, DEFAULT_AGENT)
}
