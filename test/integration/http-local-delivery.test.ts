// A delivery to a session this process drives, by a key the process authenticated before (issue 16):
// the auth hook takes the principal from its cache and reads nothing, intake plans on the driver's
// folded log, and ONE statement appends the splice on condition that the seq, the flags and the key
// (exists, not revoked) all hold (http/auth.ts PrincipalCache, agent/intake.ts deliver, store
// side row 'key-live'). Anything off — a revoked key, a stale view, another tenant, an error of any
// kind — reads the key and the session as before, so every answer stays what API.md §3 and §10 say.

import crypto from 'node:crypto'
import { afterEach, describe, expect, it } from 'vitest'
import type { Db } from '../../src/store/index.js'
import { appendConditional, readForIntake, stamp } from '../../src/store/index.js'
import { applySplice, planDelivery, toUserMessage } from '../../src/session/index.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { APP_DB_KINDS } from '../helpers/db.js'
import { userTexts, type Ev } from '../helpers/events.js'
import { expectValidLog } from '../helpers/invariants.js'
import { until } from '../helpers/wait.js'

/** The server's database, remembering every statement text it is sent. */
function recording(): { wrap: (db: Db) => Db; texts: string[] } {
  const texts: string[] = []
  const wrap = (db: Db): Db =>
    new Proxy(db, {
      get(target, p) {
        if (p === 'query') return <T>(sql: string, params?: unknown[]) => (texts.push(sql), target.query<T>(sql, params))
        if (p === 'transaction') return <R>(fn: (tx: Pick<Db, 'query'>) => Promise<R>) => target.transaction((tx) => fn({ query: (sql, params) => (texts.push(sql), tx.query(sql, params)) }))
        const v = Reflect.get(target, p)
        return typeof v === 'function' ? v.bind(target) : v
      },
    })
  return { wrap, texts }
}

const KEY_LOOKUP = /auth_key_id/
const KEY_GUARD = /FROM api_keys k WHERE k\.id = /

let t: TestApp | undefined
afterEach(async () => {
  await t?.close()
  t = undefined
})

describe.each(APP_DB_KINDS)('deliveries to a session this process drives (%s)', (kind) => {
  async function start(): Promise<{ t: TestApp; texts: string[] }> {
    const r = recording()
    t = await startTestApp({ kind, wrapDb: r.wrap })
    return { t, texts: r.texts }
  }

  /** A session this process drives, after one turn on `first` (whose delivery read the key). */
  async function drivenSession(t: TestApp, ...answers: string[]): Promise<{ id: string }> {
    const s = await t.createSession()
    t.models.script(s.id, ...answers.map((a) => ({ text: [a] })))
    expect((await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'first' })).status).toBe(202)
    await t.waitForTurnEnd(s.id, 1)
    await t.waitIdle(s.id)
    return s
  }

  it('a followup by a known key reads no key: its one append confirms the key; the turn runs as usual', async () => {
    const { t, texts } = await start()
    const s = await t.createSession()
    t.models.script(s.id, { text: ['one'] }, { text: ['two'] }, { text: ['three'] })
    // the first delivery reads the key (and the process does not drive the session yet)
    expect((await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'first' })).status).toBe(202)
    await t.waitForTurnEnd(s.id, 1)
    await t.waitIdle(s.id)
    for (const [i, content] of ['second', 'third'].entries()) {
      const from = texts.length
      const r = await t.api('POST', `/v1/sessions/${s.id}/followup`, { content })
      expect(r.status).toBe(202)
      const sent = texts.slice(from)
      // no key lookup at all, and the delivery's own statement carries the key's condition
      expect(sent.filter((x) => KEY_LOOKUP.test(x))).toEqual([])
      expect(sent.filter((x) => KEY_GUARD.test(x)).length).toBe(1)
      const log = await t.waitForTurnEnd(s.id, i + 2)
      expect(log.find((e) => e.seq === r.body.seq)?.type).toBe('agent/inbox/spliced')
      await t.waitIdle(s.id)
    }
    const log = (await t.events(s.id)) as Ev[]
    expectValidLog(log)
    expect(userTexts(log)).toEqual(['first', 'second', 'third'])
  })

  it('a revoked key is refused at once though the process knows it, whatever else is wrong with the request, and writes nothing', async () => {
    const { t, texts } = await start()
    const s = await drivenSession(t, 'one', 'two')
    // the first request after the revocation is each of these, with a key the process knows
    const cases: Array<[string, { body?: unknown; raw?: string; contentType?: string }]> = [
      ['followup', { body: { content: 'after revoke' } }],
      ['steer', { body: { content: 'after revoke' } }],
      ['inject', { body: { content: 'after revoke', id: 'msg_named_after_revoke' } }],
      // errors the hook would not have reached with a revoked key: 401 all the same
      ['followup', { body: { content: 5 } }],
      ['followup', { body: { content: 'x', unknown: true } }],
      ['followup', { raw: '{"content": "no end' }],
      ['followup', { raw: 'content=x', contentType: 'application/x-www-form-urlencoded' }],
    ]
    const before = (await t.events(s.id)).length
    let injects = 0
    for (const [route, c] of cases) {
      const added = await t.api('POST', `/v1/admin/tenants/${t.tenantId}/keys`, {}, { key: t.adminToken })
      const k: string = added.body.apiKey
      // the key's first delivery reads it; the second goes by the cache
      for (let i = 0; i < 2; i++) {
        const from = texts.length
        expect((await t.api('POST', `/v1/sessions/${s.id}/inject`, { content: `known ${injects++}` }, { key: k })).status).toBe(202)
        expect(texts.slice(from).some((x) => KEY_LOOKUP.test(x))).toBe(i === 0)
      }
      expect((await t.api('DELETE', `/v1/admin/keys/${added.body.keyId}`, undefined, { key: t.adminToken })).status).toBe(204)
      const r = await t.api('POST', `/v1/sessions/${s.id}/${route}`, c.body, { key: k, raw: c.raw, contentType: c.contentType })
      expect(r.status, `${route} ${JSON.stringify(c)}`).toBe(401)
      expect(r.body.error.code).toBe('unauthorized')
    }
    // nothing of those was written; the tenant's first key delivers as before
    expect((await t.events(s.id)).length).toBe(before + injects)
    expect((await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'by the first key' })).status).toBe(202)
    const log = (await t.waitForTurnEnd(s.id, 2)) as Ev[]
    expectValidLog(log)
    expect(userTexts(log)).toEqual(['first', ...Array.from({ length: injects }, (_, i) => `known ${i}`), 'by the first key'])
  })

  it('POST /v1/responses on a conversation, by a known key: the key and the session in one read, then the delivery; a revoked key is 401', async () => {
    const { t, texts } = await start()
    const s = await drivenSession(t, 'one', 'two')
    const from = texts.length
    const r = await t.api('POST', '/v1/responses', { conversation: s.id, input: 'second' })
    expect(r.status).toBe(200)
    expect(r.body.status).toBe('completed')
    const sent = texts.slice(from)
    // one statement read the key, and it read the session with it: no read of the session alone
    const keyReads = sent.filter((x) => KEY_LOOKUP.test(x))
    expect(keyReads.length).toBe(1)
    expect(keyReads[0]).toMatch(/JOIN sessions s ON/)
    expect(sent.filter((x) => /FROM sessions WHERE tenant_id = \$1 AND id = \$2/.test(x))).toEqual([])
    // a revoked key the process knows is refused before anything is written, in OpenAI's error shape
    const added = await t.api('POST', `/v1/admin/tenants/${t.tenantId}/keys`, {}, { key: t.adminToken })
    const k: string = added.body.apiKey
    expect((await t.api('POST', `/v1/sessions/${s.id}/inject`, { content: 'known' }, { key: k })).status).toBe(202)
    expect((await t.api('DELETE', `/v1/admin/keys/${added.body.keyId}`, undefined, { key: t.adminToken })).status).toBe(204)
    const before = (await t.events(s.id)).length
    for (const body of [{ conversation: s.id, input: 'after revoke' }, { conversation: 'no-such-conversation', input: 'x' }, { input: 'a new one' }, { conversation: s.id, input: 5 }]) {
      const refused = await t.api('POST', '/v1/responses', body, { key: k })
      expect(refused.status, JSON.stringify(body)).toBe(401)
      expect(refused.body.error.type).toBe('authentication_error')
    }
    expect((await t.events(s.id)).length).toBe(before)
  })

  it('errors of a delivery by a known, valid key are the usual ones', async () => {
    const { t } = await start()
    const s = await t.createSession()
    t.models.script(s.id, { text: ['one'] })
    expect((await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'first', id: 'msg_first' })).status).toBe(202)
    await t.waitForTurnEnd(s.id, 1)
    await t.waitIdle(s.id)
    const bad = await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 5 })
    expect(bad.status).toBe(400)
    expect(bad.body.error.code).toBe('bad-request')
    // a named message: the same body again is a replay with the first answer, another body a conflict
    const named = await t.api('POST', `/v1/sessions/${s.id}/inject`, { content: 'named', id: 'msg_named' })
    expect(named.status).toBe(202)
    const again = await t.api('POST', `/v1/sessions/${s.id}/inject`, { content: 'named', id: 'msg_named' })
    expect(again.status).toBe(202)
    expect(again.body).toEqual(named.body)
    const other = await t.api('POST', `/v1/sessions/${s.id}/inject`, { content: 'other', id: 'msg_named' })
    expect(other.status).toBe(409)
    expect(other.body.error.code).toBe('idempotency-conflict')
    expect((await t.events(s.id)).filter((e) => e.type === 'agent/inbox/spliced' && JSON.stringify(e.data).includes('msg_named')).length).toBe(1)
  })

  it("another tenant's key never reaches the session through the cache: 404, as when it is read", async () => {
    const { t } = await start()
    const s = await t.createSession()
    t.models.script(s.id, { text: ['one'] })
    expect((await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'mine' })).status).toBe(202)
    await t.waitForTurnEnd(s.id, 1)
    const other = await t.api('POST', '/v1/admin/tenants', { name: 'other' }, { key: t.adminToken })
    const kb: string = other.body.apiKey
    const sb = await t.api('POST', '/v1/sessions', { model: t.models.ref() }, { key: kb })
    t.models.script(sb.body.id, { text: ['theirs'] })
    // kb is known to the process, which drives kb's session too
    expect((await t.api('POST', `/v1/sessions/${sb.body.id}/followup`, { content: 'theirs' }, { key: kb })).status).toBe(202)
    await until("the other tenant's turn ended", async () => (await t.api('GET', `/v1/sessions/${sb.body.id}`, undefined, { key: kb })).body.status === 'idle' && (await t.api('GET', `/v1/sessions/${sb.body.id}/events`, undefined, { key: kb })).text.includes('turn/end'))
    expect((await t.api('POST', `/v1/sessions/${sb.body.id}/inject`, { content: 'theirs again' }, { key: kb })).status).toBe(202)
    const r = await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'not yours' }, { key: kb })
    expect(r.status).toBe(404)
    expect(r.body.error.code).toBe('session-not-found')
    expect(userTexts((await t.events(s.id)) as Ev[])).toEqual(['mine'])
  })

  it('a view the driver has not caught up with fails the append; the delivery reads the row and every message arrives once, in order', async () => {
    const { t, texts } = await start()
    const s = await drivenSession(t, 'one', 'two')
    // another writer appends a context injection the driver here never hears of (as another process's
    // accepted delivery whose doorbell is still on its way)
    const db = t.app.db
    const key = (await db.query<{ key: string }>('SELECT key FROM sessions WHERE id = $1', [s.id])).rows[0].key
    const row = (await readForIntake(db, key))!
    const injected = toUserMessage({ content: 'from elsewhere' }, { kind: 'user' })
    const plan = planDelivery(row.inbox, 'inject', injected, { idle: true, maintenance: false, cancelling: false })
    applySplice(row.inbox, plan.splice)
    const moved = await appendConditional(db, key, { nextSeq: row.nextSeq }, stamp(row, [{ type: 'agent/inbox/spliced', data: plan.splice as never }]), { inbox: row.inbox })
    expect(moved).not.toBeNull()
    const from = texts.length
    const r = await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'second' })
    expect(r.status).toBe(202)
    // the cached attempt failed its condition, then the key and the row were read
    const sent = texts.slice(from)
    expect(sent.some((x) => KEY_GUARD.test(x))).toBe(true)
    expect(sent.some((x) => KEY_LOOKUP.test(x))).toBe(true)
    expect(r.body.seq).toBe(row.nextSeq + 1)
    const log = (await t.waitForTurnEnd(s.id, 2)) as Ev[]
    expectValidLog(log)
    expect(userTexts(log)).toEqual(['first', 'from elsewhere', 'second'])
  })

  it("a tenant's changed requestsPerMin applies to keys the process knows at once", async () => {
    const { t } = await start()
    const s = await drivenSession(t, 'one')
    expect((await t.api('PATCH', `/v1/admin/tenants/${t.tenantId}`, { limits: { requestsPerMin: 1 } }, { key: t.adminToken })).status).toBe(200)
    const inject = () => t.api('POST', `/v1/sessions/${s.id}/inject`, { content: crypto.randomUUID() })
    expect((await inject()).status).toBe(202)
    const limited = await inject()
    expect(limited.status).toBe(429)
    expect(limited.body.error.code).toBe('rate-limited')
  })
})
