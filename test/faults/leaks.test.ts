// The secrets check of the fault suite can fail: a key planted in a log line, a row, a bytea column
// or a file of the data directory is reported, naming where but not the key; the generated key file
// may hold its own key and nothing else.

import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { LeakWatch, observeAnswer } from './lib/leaks.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { putSecret, startTarget, type Target } from './lib/target.js'

const kinds = ['pglite', 'pg'] as const
const apps: TestApp[] = []
const targets: Target[] = []
afterAll(async () => {
  for (const a of apps) await a.close()
  for (const t of targets) await t.close()
})

const rand = (p: string) => `${p}-${crypto.randomBytes(12).toString('hex')}`

describe('the fault suite secrets check', () => {
  it('reports a key in what a server printed, by source and line, without the key', async () => {
    const w = new LeakWatch()
    w.stop()
    const key = rand('key')
    w.add('api key', key)
    const s = w.stream('the server')
    s.write('{"msg":"fine"}\n')
    s.write(`{"msg":"auth","authorization":"Bearer ${key}"}\n`)
    const found = await w.check()
    expect(found).toEqual(['secret leaked: a api key in what the server printed, line 2 of 3'])
    expect(found.join('')).not.toContain(key)
    w.discard()
    // nothing planted: nothing found
    const clean = new LeakWatch()
    clean.stop()
    clean.add('api key', key)
    clean.print('the server', '{"msg":"fine"}\n')
    expect(await clean.check()).toEqual([])
    clean.discard()
  })

  it('learns every apiKey of the answers while it watches', async () => {
    const w = new LeakWatch()
    const key = rand('key')
    observeAnswer({ tenant: { id: 't' }, apiKey: key })
    w.stop()
    observeAnswer({ apiKey: rand('later') })
    expect(w.secretCount).toBe(1)
    w.print('p', `x ${key}`)
    expect(await w.check()).toHaveLength(1)
    w.discard()
  })

  it('reports a key in a file of the data directory, except the key file holding its own key', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leak-test-'))
    try {
        const w = new LeakWatch()
        w.stop()
        const own = rand('own')
        const other = rand('other')
        w.add('secret key', own)
        w.add('admin token', other)
        fs.writeFileSync(path.join(dir, 'secret-key'), `${own}\n`)
        w.keyFile(path.join(dir, 'secret-key'), own)
        fs.mkdirSync(path.join(dir, 'pgdata'))
        fs.writeFileSync(path.join(dir, 'pgdata', 'x'), other)
        expect(await w.check({ dataDirs: [dir] })).toEqual([])
        fs.appendFileSync(path.join(dir, 'secret-key'), other)
        fs.writeFileSync(path.join(dir, 'notes.log'), `own ${own}`)
        expect((await w.check({ dataDirs: [dir] })).sort()).toEqual(['secret leaked: a admin token in file secret-key of the data directory', 'secret leaked: a secret key in file notes.log of the data directory'])
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  })

  it.each(kinds)('reports a key planted in a row, naming table and column (%s)', async (kind) => {
    const app = await startTestApp({ kind })
    apps.push(app)
    const w = new LeakWatch()
    w.stop()
    const key = rand('planted')
    const hexed = rand('hexed')
    w.add('provider key', key)
    w.add('secret value', hexed)
    expect(await w.check({ db: app.testDb.db })).toEqual([])
    await app.testDb.db.query(`CREATE TABLE leak_probe (id int, note text, blob bytea)`)
    await app.testDb.db.query(`INSERT INTO leak_probe VALUES (1, 'nothing', NULL), (2, $1, NULL), (3, 'x, "y"', $2)`, [`a "quoted", ${key}`, Buffer.from(hexed)])
    const found = await w.check({ db: app.testDb.db })
    expect(found.sort()).toEqual(['secret leaked: a provider key in table leak_probe, row 2 of 3, column note', 'secret leaked: a secret value in table leak_probe, row 3 of 3, column blob'])
    expect(found.join('')).not.toContain(key)
  })

  it.each(kinds)('searches the spans a server exported (API.md §19): a turn with a secret tool header leaks none, even with contents captured; a key in a span is reported (%s)', async (kind) => {
    // tracing is the process's: one target exporting at a time (closed at the end of the test)
    const target = await startTarget(kind, {}, { traces: true })
    targets.push(target)
    try {
      const call = async (method: string, p: string, key: string, body?: unknown) => {
        const r = await fetch(target.url + p, { method, headers: { authorization: `Bearer ${key}`, ...(body ? { 'content-type': 'application/json' } : {}) }, body: body ? JSON.stringify(body) : undefined })
        return { status: r.status, body: (r.status === 204 ? undefined : await r.json()) as any }
      }
      const tenant = await call('POST', '/v1/admin/tenants', target.adminToken, { name: 'spans' })
      const apiKey: string = tenant.body.apiKey
      target.leaks.add('api key', apiKey)
      expect(await putSecret(target, apiKey, 'TOOL_KEY')).toBe(204)
      const session = await call('POST', '/v1/sessions', apiKey, { model: target.models.ref(), tools: [{ name: 'probe', description: 'probe', parameters: { type: 'object', properties: {} }, execution: { type: 'http', url: target.tools.url, headers: { 'x-key': 'secret:TOOL_KEY' } } }] })
      expect(session.status).toBe(201)
      const id: string = session.body.id
      target.models.script(id, { toolCalls: [{ id: 'c1', name: 'probe', arguments: {} }] }, { text: ['done'] })
      const typed = rand('typed-by-the-user')
      expect((await call('POST', `/v1/sessions/${id}/followup`, apiKey, { content: `remember ${typed}` })).status).toBe(202)
      for (let i = 0; ; i++) {
        const evs = (await call('GET', `/v1/sessions/${id}/events?limit=1000`, apiKey)).body.events as Array<{ type: string }>
        if (evs.some((e) => e.type === 'turn/end')) break
        if (i > 400) throw new Error('the turn did not end')
        await new Promise((r) => setTimeout(r, 25))
      }
      expect(target.tools.calls).toBe(1)
      expect(await target.leakCheck()).toEqual([])
      // what the user typed is a message content, captured on the chat span: as a key, it is found there
      target.leaks.add('token', typed)
      const found = await target.leakCheck()
      expect(found.filter((f) => f.includes('the exported spans')).length, found.join('\n')).toBeGreaterThan(0)
      for (const f of found.filter((f) => f.includes('the exported spans'))) expect(f).toMatch(/^secret leaked: a token in what the exported spans printed, line \d+ of \d+$/)
      expect(found.join('')).not.toContain(typed)
    } finally {
      targets.splice(targets.indexOf(target), 1)
      await target.close()
    }
  }, 90000)
})
