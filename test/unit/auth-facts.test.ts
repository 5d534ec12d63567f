// What a token may do, decided from a route's facts (API.md §18; src/http/auth.ts tokenRefusal and
// reaches): the pure part of the one auth hook. Agent-bound routes (the client protocols of API.md §17,
// which declare `agent`) have no route here yet, so their fact is held to its rule at this level.

import { describe, expect, it } from 'vitest'
import { reaches, sessionFilter, tokenRefusal } from '../../src/http/auth.js'
import type { Grant, SessionRow } from '../../src/store/index.js'

const grant = (g: Partial<Grant> = {}): Grant => ({ scopes: ['read', 'write'], expiresAt: Date.now() + 60_000, bucket: 'b', ...g })
const refusal = (...args: Parameters<typeof tokenRefusal>) => {
  const e = tokenRefusal(...args)
  return e && { status: e.status, code: e.code }
}
const row = (id: string, owner: string | null, agent: string | null = null) => ({ id, owner, agent: agent ? { id: agent, version: 1 } : null }) as SessionRow

describe('tokenRefusal', () => {
  it('a key (no grant) may do anything', () => {
    expect(refusal(undefined, { access: 'write', keyOnly: true, agent: 'agentId' }, { agentId: 'x' })).toBeUndefined()
  })

  it('a key-only route is 403 for any token; a missing scope is 403; write is assumed when a route says nothing', () => {
    expect(refusal(grant(), { access: 'read', keyOnly: true })).toEqual({ status: 403, code: 'forbidden' })
    expect(refusal(grant({ scopes: ['read'] }), { access: 'write' })).toEqual({ status: 403, code: 'forbidden' })
    expect(refusal(grant({ scopes: ['read'] }), {})).toEqual({ status: 403, code: 'forbidden' })
    expect(refusal(grant({ scopes: ['write'] }), { access: 'read' })).toEqual({ status: 403, code: 'forbidden' })
    expect(refusal(grant({ scopes: ['read'] }), { access: 'read' })).toBeUndefined()
    expect(refusal(grant({ scopes: ['write'] }), { access: 'write' })).toBeUndefined()
  })

  it('an agent-bound route: a token limited to agents reaches only those (404 as a missing agent); one without the limit reaches any', () => {
    const facts = { access: 'write' as const, agent: 'agentId' }
    expect(refusal(grant({ agents: ['support'] }), facts, { agentId: 'support' })).toBeUndefined()
    expect(refusal(grant({ agents: ['support'] }), facts, { agentId: 'billing' })).toEqual({ status: 404, code: 'not-found' })
    expect(refusal(grant(), facts, { agentId: 'billing' })).toBeUndefined()
    // the scope is judged first: a read-only token learns nothing of which agents exist
    expect(refusal(grant({ scopes: ['read'], agents: ['support'] }), facts, { agentId: 'billing' })).toEqual({ status: 403, code: 'forbidden' })
  })
})

describe('reaches and sessionFilter', () => {
  it('a subject reaches only what it owns; a session list only its ids; both together both', () => {
    expect(reaches(grant({ subject: 'u1' }), row('a', 'u1'))).toBe(true)
    expect(reaches(grant({ subject: 'u1' }), row('a', 'u2'))).toBe(false)
    expect(reaches(grant({ subject: 'u1' }), row('a', null))).toBe(false)
    expect(reaches(grant({ sessions: ['a'] }), row('a', null))).toBe(true)
    expect(reaches(grant({ sessions: ['a'] }), row('b', null))).toBe(false)
    expect(reaches(grant({ sessions: ['a'], subject: 'u1' }), row('a', 'u2'))).toBe(false)
    expect(reaches(grant(), row('any', 'whoever'))).toBe(true)
    expect(sessionFilter({ tenantId: 't', grant: grant({ subject: 'u1', sessions: ['a'] }) })).toEqual({ owner: 'u1', ids: ['a'] })
    expect(sessionFilter({ tenantId: 't', keyId: 'k' })).toEqual({})
  })

  it('a token limited to agents reaches and lists the sessions made from them, and no inline session (API.md §16, §18)', () => {
    const g = grant({ agents: ['support'] })
    expect(reaches(g, row('a', null, 'support'))).toBe(true)
    expect(reaches(g, row('a', null, 'sales'))).toBe(false)
    expect(reaches(g, row('a', null))).toBe(false)
    // with a subject too, both must hold
    expect(reaches(grant({ agents: ['support'], subject: 'u1' }), row('a', 'u2', 'support'))).toBe(false)
    expect(sessionFilter({ tenantId: 't', grant: g })).toEqual({ agents: ['support'] })
  })
})
