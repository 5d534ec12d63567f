// The key-and-session lookups of concurrent requests to session routes share statements
// (store/tenants.ts AuthLookups, issue 16), and each request still gets exactly its own answer: its
// tenant's principal, its own session or none (another tenant's session is none), the inbox only
// where asked, and nothing at all for an unknown, revoked or wrongly completed key.

import crypto from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { insertSession, tenants, type Db } from '../../src/store/index.js'
import { countingDb, DB_KINDS, openTestDb } from '../helpers/db.js'

async function session(db: Db, tenantId: string, id: string): Promise<void> {
  await insertSession(db, { key: crypto.randomUUID(), tenantId, id, model: 'test/scripted', system: '', tools: [], metadata: {}, createHash: 'h', createdAt: 1_700_000_000_000 })
}

describe.each(DB_KINDS)('batched key lookups on %s', (kind) => {
  it('concurrent lookups share statements, and each gets its own principal, session and inbox', async () => {
    const t = await openTestDb(kind)
    try {
      const a = await tenants.createTenant(t.db, 'a')
      const b = await tenants.createTenant(t.db, 'b')
      const revoked = await tenants.createKey(t.db, a.tenant.id)
      expect(await tenants.revokeKey(t.db, revoked.keyId)).toBe(true)
      for (let i = 0; i < 5; i++) await session(t.db, a.tenant.id, `a-${i}`)
      await session(t.db, b.tenant.id, 'b-0')
      // a known prefix with another secret
      const forged = a.apiKey.replace(/.$/, (c) => (c === 'x' ? 'y' : 'x'))
      type Ask = { key: string; id: string; inbox: boolean; want: null | { tenant: string; session: string | null } }
      const asks: Ask[] = []
      for (let r = 0; r < 6; r++) {
        for (let i = 0; i < 5; i++) asks.push({ key: a.apiKey, id: `a-${i}`, inbox: (r + i) % 2 === 0, want: { tenant: a.tenant.id, session: `a-${i}` } })
        asks.push({ key: a.apiKey, id: 'b-0', inbox: true, want: { tenant: a.tenant.id, session: null } })
        asks.push({ key: b.apiKey, id: 'b-0', inbox: r % 2 === 0, want: { tenant: b.tenant.id, session: 'b-0' } })
        asks.push({ key: b.apiKey, id: 'a-1', inbox: false, want: { tenant: b.tenant.id, session: null } })
        asks.push({ key: revoked.apiKey, id: 'a-0', inbox: true, want: null })
        asks.push({ key: forged, id: 'a-0', inbox: false, want: null })
      }
      const c = countingDb(t.db)
      const out = await Promise.all(asks.map((q) => tenants.authenticateWithSession(c.db, q.key, q.id, { inbox: q.inbox })))
      expect(c.n()).toBeLessThan(asks.length / 4)
      for (const [i, q] of asks.entries()) {
        const r = out[i]
        if (q.want === null) {
          expect(r, `ask ${i}`).toBeNull()
          continue
        }
        expect(r?.principal.tenantId, `ask ${i}`).toBe(q.want.tenant)
        expect(r?.session?.id ?? null, `ask ${i}`).toBe(q.want.session)
        if (r?.session) expect(r.session.inbox, `ask ${i}`).toEqual(q.inbox ? { nextTurn: [], nextStep: [] } : undefined)
      }
      // a key revoked between two bursts is refused by the next one
      await tenants.revokeKey(t.db, b.keyId)
      const again = await Promise.all(Array.from({ length: 10 }, (_, i) => tenants.authenticateWithSession(c.db, i % 2 ? a.apiKey : b.apiKey, i % 2 ? 'a-0' : 'b-0')))
      expect(again.map((r) => r?.session?.id ?? null)).toEqual(Array.from({ length: 10 }, (_, i) => (i % 2 ? 'a-0' : null)))
    } finally {
      await t.drop()
    }
  })
})
