// A token's delivery to a session this process drives (API.md §18, as issue 16 did it for keys): once
// the process has read the session for a token and knows its owner, a followup of the owner's token
// reads nothing — the append is the one statement. Anything the memory cannot vouch for — another
// subject, a session deleted and made again under the same id by someone else, a token limited to other
// sessions — reads the session first and answers 404 as before.

import crypto from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Db } from '../../src/store/index.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { APP_DB_KINDS } from '../helpers/db.js'
import { expectValidLog } from '../helpers/invariants.js'

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

/** the read of a session by a token (store getSession) */
const SESSION_READ = /FROM sessions WHERE tenant_id = \$1 AND id = \$2/

describe.each(APP_DB_KINDS)('a token’s deliveries to a session this process drives (%s)', (kind) => {
  let t: TestApp
  let texts: string[]
  const mint = async (body: Record<string, unknown>) => (await t.api('POST', '/v1/tokens', body)).body.token as string
  beforeAll(async () => {
    const r = recording()
    texts = r.texts
    t = await startTestApp({ kind, wrapDb: r.wrap, env: { AGENTD_SECRET_KEY: crypto.randomBytes(32).toString('base64') } })
  })
  afterAll(async () => {
    await t?.close()
  })

  it('the owner’s followups read nothing once the session is known; the turns run as usual', async () => {
    const owner = await mint({ scopes: ['read', 'write'], subject: 'fast-user' })
    const made = await t.api('POST', '/v1/sessions', { model: t.models.ref() }, { key: owner })
    const id = made.body.id as string
    t.models.script(id, { text: ['one'] }, { text: ['two'] }, { text: ['three'] })
    expect((await t.api('POST', `/v1/sessions/${id}/followup`, { content: 'first' }, { key: owner })).status).toBe(202)
    await t.waitForTurnEnd(id, 1)
    await t.waitIdle(id)
    for (const [i, content] of ['second', 'third'].entries()) {
      const from = texts.length
      const r = await t.api('POST', `/v1/sessions/${id}/followup`, { content }, { key: owner })
      expect(r.status).toBe(202)
      expect(texts.slice(from).filter((x) => SESSION_READ.test(x))).toEqual([])
      const log = await t.waitForTurnEnd(id, i + 2)
      expect(log.find((e) => e.seq === r.body.seq)?.type).toBe('agent/inbox/spliced')
      await t.waitIdle(id)
    }
    expectValidLog(await t.events(id))
  })

  it('another subject, a token limited to other sessions, and a session made again under the same id are read first and answered 404', async () => {
    const owner = await mint({ scopes: ['read', 'write'], subject: 'first-owner' })
    const made = await t.api('POST', '/v1/sessions', { id: 'reused-id', model: t.models.ref() }, { key: owner })
    expect(made.status).toBe(201)
    t.models.script('reused-id', { text: ['for the first owner'] })
    expect((await t.api('POST', '/v1/sessions/reused-id/followup', { content: 'mine' }, { key: owner })).status).toBe(202)
    await t.waitForTurnEnd('reused-id', 1)
    await t.waitIdle('reused-id')
    for (const stranger of [await mint({ scopes: ['read', 'write'], subject: 'second-owner' }), await mint({ scopes: ['read', 'write'], sessions: ['elsewhere'] })]) {
      const from = texts.length
      const r = await t.api('POST', '/v1/sessions/reused-id/followup', { content: 'not mine' }, { key: stranger })
      expect(r.status).toBe(404)
      expect(r.body.error.code).toBe('session-not-found')
      // the token limited to other sessions is refused from memory; the other subject after a read
      expect(texts.slice(from).filter((x) => /INSERT INTO session_events|agent\/inbox/.test(x))).toEqual([])
    }
    // deleted, and made again under the same id by another subject, while this process may still drive it
    expect((await t.api('DELETE', '/v1/sessions/reused-id', undefined, { key: owner })).status).toBe(204)
    const second = await mint({ scopes: ['read', 'write'], subject: 'second-owner' })
    expect((await t.api('POST', '/v1/sessions', { id: 'reused-id', model: t.models.ref() }, { key: second })).status).toBe(201)
    t.models.script('reused-id', { text: ['for the second owner'] })
    // driven here again, woken by the tenant's key: no token has read the new session yet
    expect((await t.api('POST', '/v1/sessions/reused-id/followup', { content: 'theirs' })).status).toBe(202)
    await t.waitForTurnEnd('reused-id', 1)
    const r = await t.api('POST', '/v1/sessions/reused-id/followup', { content: 'the first owner again' }, { key: owner })
    expect(r.status).toBe(404)
    const log = await t.events('reused-id')
    expect(JSON.stringify(log)).not.toContain('the first owner again')
    expectValidLog(log)
  })
})
