// A local identity provider for tests (API.md §18): an HTTP server serving a JSON Web Key Set whose keys
// the test adds and withdraws, and end-user tokens signed with them by jose.

import crypto from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWK, type JWTPayload } from 'jose'

export interface IdpKey {
  kid: string
  alg: string
  privateKey: CryptoKey
  publicJwk: JWK
}

export interface Idp {
  issuer: string
  jwksUrl: string
  /** requests for the key set so far */
  readonly fetches: number
  keys: IdpKey[]
  /** a new key, served from now on */
  addKey(alg?: 'RS256' | 'ES256' | 'EdDSA'): Promise<IdpKey>
  /** the key is no longer served */
  removeKey(kid: string): void
  /** a token signed with `key` (default the first served one), with iss and exp unless claims override them */
  sign(claims: JWTPayload, o?: { key?: IdpKey; header?: Record<string, unknown> }): Promise<string>
  close(): Promise<void>
}

export async function startIdp(name = 'idp'): Promise<Idp> {
  let fetches = 0
  const keys: IdpKey[] = []
  const server = http.createServer((req, res) => {
    if (req.url !== '/jwks.json') {
      res.writeHead(404).end()
      return
    }
    fetches++
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: keys.map((k) => k.publicJwk) }))
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const issuer = `${base}/${name}/`
  const idp: Idp = {
    issuer,
    jwksUrl: `${base}/jwks.json`,
    get fetches() {
      return fetches
    },
    keys,
    async addKey(alg = 'RS256') {
      const { publicKey, privateKey } = await generateKeyPair(alg, { extractable: true })
      const kid = crypto.randomBytes(6).toString('hex')
      const key = { kid, alg, privateKey, publicJwk: { ...(await exportJWK(publicKey)), kid, alg, use: 'sig' } }
      keys.push(key)
      return key
    },
    removeKey(kid) {
      const i = keys.findIndex((k) => k.kid === kid)
      if (i >= 0) keys.splice(i, 1)
    },
    async sign(claims, o = {}) {
      const key = o.key ?? keys[0]
      const now = Math.floor(Date.now() / 1000)
      return new SignJWT({ iss: issuer, iat: now, exp: now + 300, ...claims }).setProtectedHeader({ alg: key.alg, kid: key.kid, typ: 'JWT', ...(o.header ?? {}) }).sign(key.privateKey)
    },
    close: () =>
      new Promise<void>((r) => {
        server.close(() => r())
        server.closeAllConnections()
      }),
  }
  await idp.addKey()
  return idp
}

/** base64url of a JSON value, for hand-made tokens */
export const b64 = (v: unknown) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url')
