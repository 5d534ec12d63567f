// Tenant secrets (API.md §13): values sealed with AES-256-GCM under the deployment's key, a random
// 96-bit nonce per value and the tenant and name as additional data. Plain values leave this file
// only through resolve(), when a tool call is prepared; nothing here logs a value or puts one in an error.

import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { parseSecretKey } from '../config.js'
import { ApiError } from '../errors.js'
import { secrets as store, type Db, type SealedSecret, type SecretInfo } from '../store/index.js'

export const SECRET_NAME_RE = /^[A-Z0-9_]{1,64}$/
export const MAX_SECRET_BYTES = 16 * 1024
const KEY_FILE = 'secret-key'

/**
 * The embedded database's key: read from AGENTD_DATA_DIR/secret-key, or generated there (mode 0600)
 * on the first start. A file that does not hold a key stops the start rather than being replaced.
 */
export function embeddedSecretKey(dataDir: string): Buffer {
  const file = path.join(dataDir, KEY_FILE)
  fs.mkdirSync(dataDir, { recursive: true })
  try {
    fs.writeFileSync(file, `${crypto.randomBytes(32).toString('base64')}\n`, { mode: 0o600, flag: 'wx' })
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e
  }
  const key = parseSecretKey(fs.readFileSync(file, 'utf8'))
  if (typeof key === 'string') throw new Error(`${file} does not hold a secret key: it ${key}`)
  return key
}

const aad = (tenantId: string, name: string) => Buffer.from(`${tenantId}\u0000${name}`, 'utf8')

export function seal(key: Buffer, tenantId: string, name: string, value: string): SealedSecret {
  const nonce = crypto.randomBytes(12)
  const c = crypto.createCipheriv('aes-256-gcm', key, nonce)
  c.setAAD(aad(tenantId, name))
  const body = Buffer.concat([c.update(value, 'utf8'), c.final()])
  return { nonce, ciphertext: Buffer.concat([body, c.getAuthTag()]) }
}

/** The value, or undefined when the row does not open under this key (another key, a moved row). */
export function open(key: Buffer, tenantId: string, name: string, s: SealedSecret): string | undefined {
  if (s.ciphertext.length < 16) return undefined
  try {
    const d = crypto.createDecipheriv('aes-256-gcm', key, s.nonce)
    d.setAAD(aad(tenantId, name))
    d.setAuthTag(s.ciphertext.subarray(s.ciphertext.length - 16))
    return Buffer.concat([d.update(s.ciphertext.subarray(0, s.ciphertext.length - 16)), d.final()]).toString('utf8')
  } catch {
    return undefined
  }
}

/** What resolving a call's secret references found: the values, and the names that are not usable. */
export interface Resolved {
  values: Map<string, string>
  /** names with no secret of the tenant, or one that does not decrypt with the current key */
  missing: string[]
}

export class Secrets {
  constructor(private readonly o: { db: Db; key?: Buffer }) {}

  get available(): boolean {
    return this.o.key !== undefined
  }

  private key(): Buffer {
    if (!this.o.key) throw new ApiError('secrets-unavailable', 'tenant secrets need AGENTD_SECRET_KEY on this deployment (32 bytes, base64)')
    return this.o.key
  }

  async put(tenantId: string, name: string, value: string): Promise<void> {
    const key = this.key()
    await store.putSecret(this.o.db, tenantId, name, seal(key, tenantId, name, value), Date.now())
  }

  async list(tenantId: string): Promise<SecretInfo[]> {
    this.key()
    return store.listSecrets(this.o.db, tenantId)
  }

  async delete(tenantId: string, name: string): Promise<boolean> {
    this.key()
    return store.deleteSecret(this.o.db, tenantId, name)
  }

  /** The tenant's values of `names` (API.md §13: at call preparation); without a key every name is missing. */
  async resolve(tenantId: string, names: readonly string[]): Promise<Resolved> {
    const wanted = [...new Set(names)]
    const values = new Map<string, string>()
    if (!wanted.length) return { values, missing: [] }
    if (!this.o.key) return { values, missing: wanted }
    const rows = await store.readSecrets(this.o.db, tenantId, wanted)
    for (const [name, sealed] of rows) {
      const v = open(this.o.key, tenantId, name, sealed)
      if (v !== undefined) values.set(name, v)
    }
    return { values, missing: wanted.filter((n) => !values.has(n)) }
  }
}
