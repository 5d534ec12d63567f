// Tenant secrets' sealing (API.md §13): AES-256-GCM with a fresh nonce per value, bound to its tenant and
// name; the key's parsing; header values and their secret references; scrubbing of echoed values.

import pino from 'pino'
import { describe, expect, it } from 'vitest'
import { LOG_REDACT } from '../../src/app.js'
import { parseSecretKey } from '../../src/config.js'
import { open, seal } from '../../src/tenancy/secrets.js'
import { headerProblem, resolveHeaders, scrub, secretNames } from '../../src/tools/headers.js'

const key = Buffer.alloc(32, 1)

describe('secret sealing', () => {
  it('opens what it sealed, never shows the value in the sealed form, and uses a new nonce each time', () => {
    const a = seal(key, 't1', 'TOKEN', 'hunter2-value')
    const b = seal(key, 't1', 'TOKEN', 'hunter2-value')
    expect(open(key, 't1', 'TOKEN', a)).toBe('hunter2-value')
    expect(a.nonce.equals(b.nonce)).toBe(false)
    expect(a.ciphertext.equals(b.ciphertext)).toBe(false)
    expect(a.ciphertext.includes(Buffer.from('hunter2'))).toBe(false)
  })

  it('does not open under another key, for another tenant or name, or when tampered with', () => {
    const s = seal(key, 't1', 'TOKEN', 'v')
    expect(open(Buffer.alloc(32, 2), 't1', 'TOKEN', s)).toBeUndefined()
    expect(open(key, 't2', 'TOKEN', s)).toBeUndefined()
    expect(open(key, 't1', 'OTHER', s)).toBeUndefined()
    const bad = { nonce: s.nonce, ciphertext: Buffer.from(s.ciphertext) }
    bad.ciphertext[0] ^= 1
    expect(open(key, 't1', 'TOKEN', bad)).toBeUndefined()
  })

  it('AGENTD_SECRET_KEY is 32 bytes of base64', () => {
    expect(parseSecretKey(Buffer.alloc(32, 9).toString('base64'))).toEqual(Buffer.alloc(32, 9))
    expect(parseSecretKey(Buffer.alloc(16).toString('base64'))).toMatch(/32 bytes/)
    expect(parseSecretKey('not base64!')).toBe('must be base64')
  })
})

describe('header values', () => {
  it('literals or secret:NAME; anything else is refused with the header named', () => {
    expect(headerProblem('authorization', 'secret:TOKEN')).toBeNull()
    expect(headerProblem('x-plain', 'literal value')).toBeNull()
    expect(headerProblem('x-a', 'secret:lower')).toMatch(/x-a/)
    expect(headerProblem('bad header', 'v')).toMatch(/not a header name/)
    expect(headerProblem('x-a', 5)).toMatch(/must be a string/)
    expect(headerProblem('x-a', 'a\r\nb')).toMatch(/CR, LF/)
    expect(headerProblem('Content-Length', '5')).toMatch(/set by the server/)
    expect(headerProblem('mcp-session-id', 'x')).toMatch(/set by the server/)
    expect(secretNames({ a: 'secret:A', b: 'b', c: 'secret:C' })).toEqual(['A', 'C'])
  })

  it('resolves references, names every missing secret, and scrubs values from texts', async () => {
    const resolver = async (names: readonly string[]) => ({ values: new Map(names.filter((n) => n === 'A').map((n) => [n, 'value-a'])), missing: names.filter((n) => n !== 'A') })
    expect(await resolveHeaders({ authorization: 'secret:A', x: 'y' }, resolver)).toEqual({ headers: { authorization: 'value-a', x: 'y' }, secrets: ['value-a'] })
    await expect(resolveHeaders({ a: 'secret:A', b: 'secret:B', c: 'secret:C' }, resolver)).rejects.toThrow('secrets B, C are not set for this tenant')
    expect(scrub('server said value-a twice: value-a', ['value-a'])).toBe('server said [secret] twice: [secret]')
  })
})

describe('log redaction, the second fence', () => {
  it('censors header sets and value fields wherever they appear', () => {
    const lines: string[] = []
    const log = pino({ level: 'info', redact: LOG_REDACT }, { write: (l: string) => void lines.push(l) })
    log.info({ headers: { authorization: 'Bearer leaked-1' }, server: { headers: { 'x-key': 'leaked-2' } }, value: 'leaked-3', secret: { value: 'leaked-4' } }, 'a careless line')
    expect(lines).toHaveLength(1)
    expect(lines[0]).not.toMatch(/leaked/)
    expect(lines[0]).toContain('[redacted]')
  })
})
