// The keys agentd signs its tokens with (API.md §18): Ed25519, kept in the database with the private
// half sealed under AGENTD_SECRET_KEY as tenant secrets are, rotated every AGENTD_TOKEN_KEY_ROTATION_DAYS.
// A retired key verifies until the last token it signed has expired. Every process reads the same
// rows: a process that makes a key says so over the bus, and one that meets an unknown kid reads the
// keys again, at most once per reload interval.

import crypto from 'node:crypto'
import { exportJWK, generateKeyPair, importJWK, type CryptoKey, type JWK } from 'jose'
import type { Invalidations } from '../bus/index.js'
import { ApiError } from '../errors.js'
import { signingKeys, type Db, type SigningKeyRow } from '../store/index.js'
import { open, seal } from '../tenancy/index.js'

/** The longest token lifetime (API.md §18 ttlSeconds): how long a retired key keeps verifying. */
export const MAX_TTL_SECONDS = 86_400
/** the bus topic that tells every process to read the keys again */
export const KEYS_TOPIC = 'signing-keys'
export const ALG = 'EdDSA'
/** how long the keys read are trusted, invalidations aside: a key another process made shows in this
 * process's key set within it even if its announcement was lost (a process killed before its NOTIFY) */
const KEYS_TRUST_MS = 60_000


export interface SigningKeysOptions {
  db: Db
  invalidations: Invalidations
  /** seals the private halves; without it agentd mints no token (API.md §13's rule for secrets) */
  secretKey?: Buffer
  /** how long a key signs (AGENTD_TOKEN_KEY_ROTATION_DAYS) */
  rotationMs: number
  clock: () => number
  /** the least time between two reads of the keys caused by an unknown kid (default 1 s) */
  reloadIntervalMs?: number
}

interface Held {
  row: SigningKeyRow
  jwk: JWK
  publicKey: CryptoKey
  /** opened on first use for signing; null when it does not open under this deployment's key */
  privateKey?: CryptoKey | null
}

// the sealed JWK's additional data: the row's kid, so a row's ciphertext moved to another kid does not open
const SEAL_SCOPE = 'signing-key'

export class SigningKeys {
  private ring = new Map<string, Held>()
  /** the ring is to be read again before its next use (another process made a key, or never read) */
  private stale = true
  private loading?: Promise<void>
  private lastLoad = Number.NEGATIVE_INFINITY
  private readonly off: () => void

  constructor(private readonly o: SigningKeysOptions) {
    this.off = o.invalidations.on((topic) => {
      if (topic === null || topic === KEYS_TOPIC) this.stale = true
    })
  }

  close(): void {
    this.off()
  }

  get canSign(): boolean {
    return this.o.secretKey !== undefined
  }

  /** Reads the keys that still verify; concurrent callers share one read. */
  private load(): Promise<void> {
    this.loading ??= (async () => {
      this.stale = false
      this.lastLoad = this.o.clock()
      try {
        await this.replace(await signingKeys.readSigningKeys(this.o.db, this.o.clock()))
      } catch (e) {
        this.stale = true
        throw e
      }
    })().finally(() => (this.loading = undefined))
    return this.loading
  }

  private async replace(rows: SigningKeyRow[]): Promise<void> {
    const next = new Map<string, Held>()
    for (const row of rows) {
      const had = this.ring.get(row.kid)
      if (had) next.set(row.kid, had)
      else {
        const jwk = JSON.parse(row.publicJwk) as JWK
        next.set(row.kid, { row, jwk, publicKey: (await importJWK(jwk, ALG)) as CryptoKey })
      }
    }
    this.ring = next
  }

  private async fresh(): Promise<void> {
    if (this.stale || this.loading || this.o.clock() - this.lastLoad > KEYS_TRUST_MS) await this.load()
  }

  /** GET /.well-known/jwks.json: the public keys that verify now, newest first. */
  async jwks(): Promise<{ keys: JWK[] }> {
    await this.fresh()
    const now = this.o.clock()
    return { keys: [...this.ring.values()].filter((k) => k.row.expiresAt > now).map((k) => ({ ...k.jwk, kid: k.row.kid, alg: ALG, use: 'sig' })) }
  }

  /**
   * The key that verifies tokens of `kid`, or undefined. A kid this process does not know makes it
   * read the keys again, at most once per reload interval: a forged kid cannot make it read more
   * often (a key another process made is announced over the bus, which marks the ring stale).
   */
  async verifier(kid: string): Promise<CryptoKey | undefined> {
    await this.fresh()
    let held = this.ring.get(kid)
    if (!held) {
      if (this.loading) await this.loading
      else if (this.o.clock() - this.lastLoad >= (this.o.reloadIntervalMs ?? 1000)) await this.load()
      held = this.ring.get(kid)
    }
    return held && held.row.expiresAt > this.o.clock() ? held.publicKey : undefined
  }

  /** The key to sign with now: the newest that signs and opens, made when there is none. */
  async signer(): Promise<{ kid: string; privateKey: CryptoKey }> {
    const secretKey = this.o.secretKey
    if (!secretKey) throw new ApiError('secrets-unavailable', "agentd's own tokens need AGENTD_SECRET_KEY on this deployment (32 bytes, base64): their signing keys are kept sealed with it")
    await this.fresh()
    const usable = async (): Promise<{ kid: string; privateKey: CryptoKey } | undefined> => {
      const now = this.o.clock()
      for (const h of [...this.ring.values()].sort((a, b) => b.row.createdAt - a.row.createdAt)) {
        if (h.row.retireAt <= now) continue
        if (h.privateKey === undefined) {
          const jwk = open(secretKey, SEAL_SCOPE, h.row.kid, h.row.sealed)
          h.privateKey = jwk === undefined ? null : ((await importJWK(JSON.parse(jwk) as JWK, ALG)) as CryptoKey)
        }
        if (h.privateKey) return { kid: h.row.kid, privateKey: h.privateKey }
      }
      return undefined
    }
    const found = await usable()
    if (found) return found
    // none signs now (first use, or rotation is due), or none opens under this key: one is made, once
    // between all processes; a key that does not open is outlived by the new one
    const now = this.o.clock()
    const unopened = [...this.ring.values()].filter((h) => h.privateKey === null).reduce((m, h) => Math.max(m, h.row.retireAt), now)
    const rows = await signingKeys.addSigningKey(this.o.db, now, unopened, () => this.make(secretKey, now))
    await this.replace(rows)
    this.lastLoad = now
    await this.o.invalidations.invalidate(KEYS_TOPIC)
    const made = await usable()
    if (!made) throw new Error('no signing key opens under AGENTD_SECRET_KEY after making one')
    return made
  }

  private async make(secretKey: Buffer, now: number): Promise<SigningKeyRow> {
    const { publicKey, privateKey } = await generateKeyPair(ALG, { crv: 'Ed25519', extractable: true })
    const kid = crypto.randomBytes(12).toString('base64url')
    const retireAt = now + this.o.rotationMs
    return {
      kid,
      publicJwk: JSON.stringify(await exportJWK(publicKey)),
      sealed: seal(secretKey, SEAL_SCOPE, kid, JSON.stringify(await exportJWK(privateKey))),
      createdAt: now,
      retireAt,
      // a token signed at retireAt lives at most MAX_TTL_SECONDS; a minute more for the slowest answer
      expiresAt: retireAt + MAX_TTL_SECONDS * 1000 + 60_000,
    }
  }
}
