// API.md §10 (errors) on one database (docs/testing.md): 415, malformed JSON, schema violations naming the field,
// 413 over a real socket, 404s, 422, refused tool URLs, lossless JSON — and nothing is written by any
// refused request: log, inbox, session object and table row counts are unchanged.

import http from 'node:http'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { expectValidLog } from '../helpers/invariants.js'

/** A raw request over node:http: fetch cannot be trusted with a body the server refuses early. */
function httpRaw(base: string, method: string, path: string, headers: Record<string, string>, body?: string | Buffer): Promise<{ status: number; body: any; text: string }> {
  const u = new URL(path, base)
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname + u.search, method, headers })
    let answered = false
    req.on('response', (res) => {
      answered = true
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (c: string) => (text += c))
      res.on('end', () => {
        let parsed: any
        try {
          parsed = JSON.parse(text)
        } catch {
          parsed = undefined
        }
        resolve({ status: res.statusCode ?? 0, body: parsed, text })
      })
      res.on('error', () => {})
    })
    req.on('error', (e) => {
      // an early answer followed by a reset still counts once 'response' fired
      setTimeout(() => {
        if (!answered) reject(e)
      }, 300)
    })
    if (body !== undefined) req.write(body)
    req.end()
  })
}

interface Snapshot {
  events: unknown[]
  inbox: unknown
  session: unknown
  counts: Record<string, number>
}

describe.each(APP_DB_KINDS)('bad input is refused and writes nothing on %s', (kind) => {
  let t: TestApp
  let sid: string
  const tables = ['tenants', 'api_keys', 'sessions', 'session_events', 'idempotency', 'pending_calls']
  const counts = async () => {
    const out: Record<string, number> = {}
    for (const tb of tables) out[tb] = (await t.app.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${tb}`)).rows[0].n
    return out
  }
  const snapshot = async (): Promise<Snapshot> => ({
    events: await t.events(sid),
    inbox: (await t.api('GET', `/v1/sessions/${sid}/inbox`)).body,
    session: (await t.api('GET', `/v1/sessions/${sid}`)).body,
    counts: await counts(),
  })
  const expectBadRequest = (r: { status: number; body: any; text: string }, field: string | RegExp, what: string) => {
    expect(r.status, `${what}: ${r.text}`).toBe(400)
    expect(r.body.error.code, what).toBe('bad-request')
    expect(typeof r.body.error.message).toBe('string')
    expect(Array.isArray(r.body.error.details), `${what}: details`).toBe(true)
    for (const d of r.body.error.details) {
      expect(typeof d.path).toBe('string')
      expect(typeof d.message).toBe('string')
    }
    const paths: string[] = r.body.error.details.map((d: any) => d.path)
    const hit = paths.some((p) => (typeof field === 'string' ? p.includes(field) : field.test(p)))
    expect(hit, `${what}: details ${JSON.stringify(r.body.error.details)} should name ${String(field)}`).toBe(true)
  }

  beforeAll(async () => {
    t = await startTestApp({ kind })
    const s = await t.createSession({ id: 'target', metadata: { keep: true } })
    sid = s.id
    t.models.script(sid, { text: ['done'] })
    await t.api('POST', `/v1/sessions/${sid}/followup`, { content: 'first' })
    await t.waitForTurnEnd(sid, 1)
    await t.waitIdle(sid)
    const inj = await t.api('POST', `/v1/sessions/${sid}/inject`, { content: 'parked', id: 'parked-1' })
    expect(inj.status).toBe(202)
  })
  afterAll(async () => {
    await t?.close()
  })

  it('415 unsupported-media-type for text/plain and form bodies', async () => {
    const before = await snapshot()
    const cases: Array<[string, string, string, string]> = [
      ['POST', '/v1/sessions', 'text/plain', JSON.stringify({ model: t.models.ref() })],
      ['POST', `/v1/sessions/${sid}/followup`, 'text/plain', JSON.stringify({ content: 'hi' })],
      ['POST', `/v1/sessions/${sid}/followup`, 'application/x-www-form-urlencoded', 'content=hi'],
      ['POST', `/v1/sessions/${sid}/inject`, 'multipart/form-data; boundary=x', '--x\r\nContent-Disposition: form-data; name="content"\r\n\r\nhi\r\n--x--\r\n'],
      ['POST', `/v1/sessions/${sid}/steer`, 'text/plain', 'hi'],
      ['PATCH', `/v1/sessions/${sid}`, 'text/plain', JSON.stringify({ title: 'x' })],
      ['POST', `/v1/sessions/${sid}/cancel`, 'application/x-www-form-urlencoded', 'keepInbox=true'],
      ['POST', `/v1/sessions/${sid}/fork`, 'text/plain', '{}'],
    ]
    for (const [m, p, ct, raw] of cases) {
      const r = await t.api(m, p, undefined, { raw, contentType: ct })
      expect(r.status, `${m} ${p} as ${ct}`).toBe(415)
      expect(r.body.error.code).toBe('unsupported-media-type')
    }
    expect(await snapshot()).toEqual(before)
  })

  it('malformed JSON is 400 bad-request', async () => {
    const before = await snapshot()
    for (const [m, p, raw] of [
      ['POST', '/v1/sessions', '{"model": '],
      ['POST', `/v1/sessions/${sid}/followup`, '{"content": "hi"'],
      ['POST', `/v1/sessions/${sid}/inject`, "{'content': 'hi'}"],
      ['POST', `/v1/sessions/${sid}/steer`, 'content=hi'],
      ['PATCH', `/v1/sessions/${sid}`, '{"title": "x",}'],
      ['POST', `/v1/sessions/${sid}/cancel`, '{'],
      ['POST', `/v1/sessions/${sid}/tool-results`, 'nope'],
    ] as Array<[string, string, string]>) {
      const r = await t.api(m, p, undefined, { raw })
      expect(r.status, `${m} ${p} ${raw}`).toBe(400)
      expect(r.body.error.code).toBe('bad-request')
    }
    expect(await snapshot()).toEqual(before)
  })

  it('an unknown field is 400 on every body route, naming the field', async () => {
    const before = await snapshot()
    const cases: Array<[string, string, Record<string, unknown>, string?]> = [
      ['POST', '/v1/sessions', { model: t.models.ref(), bogus: 1 }],
      ['POST', '/v1/sessions', { model: t.models.ref(), tools: [{ name: 'x', execution: { type: 'client' }, bogus: 1 }] }],
      ['POST', '/v1/sessions', { model: t.models.ref(), tools: [{ name: 'x', execution: { type: 'client', bogus: 1 } }] }],
      ['PATCH', `/v1/sessions/${sid}`, { title: 'x', bogus: 1 }],
      ['POST', `/v1/sessions/${sid}/fork`, { bogus: 1 }],
      ['POST', `/v1/sessions/${sid}/compact`, { bogus: 1 }],
      ['POST', `/v1/sessions/${sid}/followup`, { content: 'x', bogus: 1 }],
      ['POST', `/v1/sessions/${sid}/steer`, { content: 'x', bogus: 1 }],
      ['POST', `/v1/sessions/${sid}/inject`, { content: 'x', bogus: 1 }],
      ['POST', `/v1/sessions/${sid}/followup`, { content: [{ type: 'text', text: 'x', bogus: 1 }] }],
      ['POST', `/v1/sessions/${sid}/cancel`, { bogus: 1 }],
      ['POST', `/v1/sessions/${sid}/tool-results`, { callId: 'c1', content: 'x', bogus: 1 }],
      ['POST', `/v1/sessions/${sid}/approvals/c1`, { decision: 'allow', bogus: 1 }],
      ['POST', '/v1/admin/tenants', { name: 'x', bogus: 1 }, t.adminToken],
      ['POST', `/v1/admin/tenants/${t.tenantId}/keys`, { bogus: 1 }, t.adminToken],
    ]
    for (const [m, p, b, key] of cases) {
      const r = await t.api(m, p, b, key ? { key } : {})
      expectBadRequest(r, 'bogus', `${m} ${p} ${JSON.stringify(b)}`)
    }
    expect(await snapshot()).toEqual(before)
  })

  it('bad content is 400 naming content: a number, missing, an empty string, [], only empty texts, an unknown block type', async () => {
    const before = await snapshot()
    const bodies: unknown[] = [
      { content: 5 },
      {},
      { content: '' },
      { content: [] },
      { content: [{ type: 'text', text: '' }] },
      { content: [{ type: 'video', url: 'http://x' }] },
      { content: [{ type: 'text', text: 7 }] },
      { content: [{ type: 'text' }] },
      { content: ['just a string'] },
      { content: null },
      { content: { type: 'text', text: 'an object, not a list' } },
    ]
    for (const route of ['followup', 'steer', 'inject']) {
      for (const b of bodies) {
        const r = await t.api('POST', `/v1/sessions/${sid}/${route}`, b)
        expectBadRequest(r, 'content', `${route} ${JSON.stringify(b)}`)
      }
    }
    // tool results validate their content the same way
    for (const b of [{ callId: 'c1', content: 5 }, { callId: 'c1' }, { callId: 'c1', content: [{ type: 'video' }] }]) {
      expectBadRequest(await t.api('POST', `/v1/sessions/${sid}/tool-results`, b), 'content', `tool-results ${JSON.stringify(b)}`)
    }
    // a body that is not an object at all
    for (const raw of ['"hi"', '[]', '42', 'null']) {
      const r = await t.api('POST', `/v1/sessions/${sid}/followup`, undefined, { raw })
      expect(r.status, raw).toBe(400)
      expect(r.body.error.code).toBe('bad-request')
    }
    // a bad message id
    expectBadRequest(await t.api('POST', `/v1/sessions/${sid}/followup`, { content: 'x', id: '' }), 'id', 'empty id')
    expectBadRequest(await t.api('POST', `/v1/sessions/${sid}/followup`, { content: 'x', id: 5 }), 'id', 'numeric id')
    expect(await snapshot()).toEqual(before)
  })

  it('schema violations on create, patch, cancel, fork and approvals name the field', async () => {
    const before = await snapshot()
    const create: Array<[Record<string, unknown>, string]> = [
      [{ model: t.models.ref(), maxTokens: '4096' }, 'maxTokens'],
      [{ model: t.models.ref(), maxTokens: 0 }, 'maxTokens'],
      [{ model: t.models.ref(), maxTokens: 1.5 }, 'maxTokens'],
      [{ model: t.models.ref(), reasoningEffort: 'extreme' }, 'reasoningEffort'],
      [{ model: 5 }, 'model'],
      [{ model: t.models.ref(), system: 7 }, 'system'],
      [{ model: t.models.ref(), metadata: [1, 2] }, 'metadata'],
      [{ model: t.models.ref(), metadata: 'x' }, 'metadata'],
      [{ model: t.models.ref(), id: '' }, 'id'],
      [{ model: t.models.ref(), id: 'has space' }, 'id'],
      [{ model: t.models.ref(), tools: [{ name: 'bad name!', execution: { type: 'client' } }] }, 'name'],
      [{ model: t.models.ref(), tools: [{ name: '', execution: { type: 'client' } }] }, 'name'],
      [{ model: t.models.ref(), tools: [{ name: 'x'.repeat(65), execution: { type: 'client' } }] }, 'name'],
      [{ model: t.models.ref(), tools: [{ name: 'ok', execution: { type: 'shell' } }] }, 'execution'],
      [{ model: t.models.ref(), tools: [{ name: 'ok' }] }, 'execution'],
      [{ model: t.models.ref(), tools: [{ name: 'ok', execution: { type: 'client' }, concurrency: 'sometimes' }] }, 'concurrency'],
      [{ model: t.models.ref(), tools: [{ name: 'ok', execution: { type: 'client' }, approval: 'maybe' }] }, 'approval'],
      [{ model: t.models.ref(), tools: [{ name: 'ok', execution: { type: 'http' } }] }, 'url'],
      [{ model: t.models.ref(), tools: [{ name: 'ok', execution: { type: 'builtin' } }] }, 'name'],
      [{ model: t.models.ref(), tools: [{ name: 'ok', execution: { type: 'client' } }, { name: 'ok', execution: { type: 'client' } }] }, 'name'],
      [{ model: t.models.ref(), tools: 'none' }, 'tools'],
    ]
    for (const [b, field] of create) expectBadRequest(await t.api('POST', '/v1/sessions', b), field, `create ${JSON.stringify(b).slice(0, 120)}`)
    expectBadRequest(await t.api('PATCH', `/v1/sessions/${sid}`, { title: 5 }), 'title', 'patch title number')
    expectBadRequest(await t.api('PATCH', `/v1/sessions/${sid}`, { metadata: 'x' }), 'metadata', 'patch metadata string')
    expectBadRequest(await t.api('POST', `/v1/sessions/${sid}/cancel`, { keepInbox: 'yes' }), 'keepInbox', 'cancel keepInbox string')
    expectBadRequest(await t.api('POST', `/v1/sessions/${sid}/cancel`, { keepInbox: 1 }), 'keepInbox', 'cancel keepInbox number')
    expectBadRequest(await t.api('POST', `/v1/sessions/${sid}/fork`, { atSeq: 'x' }), 'atSeq', 'fork atSeq string')
    expectBadRequest(await t.api('POST', `/v1/sessions/${sid}/fork`, { atSeq: -1 }), 'atSeq', 'fork atSeq -1')
    expectBadRequest(await t.api('POST', `/v1/sessions/${sid}/fork`, { atSeq: 1.5 }), 'atSeq', 'fork atSeq 1.5')
    expectBadRequest(await t.api('POST', `/v1/sessions/${sid}/approvals/c1`, { decision: 'maybe' }), 'decision', 'approval decision unknown')
    expectBadRequest(await t.api('POST', `/v1/sessions/${sid}/approvals/c1`, {}), 'decision', 'approval decision missing')
    expectBadRequest(await t.api('POST', `/v1/sessions/${sid}/tool-results`, { content: 'x' }), 'callId', 'tool-results without callId')
    expectBadRequest(await t.api('POST', `/v1/sessions/${sid}/tool-results`, { callId: 'c1', content: 'x', isError: 'no' }), 'isError', 'tool-results isError string')
    expectBadRequest(await t.api('POST', '/v1/admin/tenants', {}, { key: t.adminToken }), 'name', 'tenant without name')
    expect(await snapshot()).toEqual(before)
  })

  it('limit and after out of range are 400 naming the parameter', async () => {
    const before = await snapshot()
    for (const q of ['limit=0', 'limit=5001', 'limit=abc', 'limit=-1', 'limit=1.5']) {
      expectBadRequest(await t.api('GET', `/v1/sessions/${sid}/events?${q}`), 'limit', `events ${q}`)
    }
    for (const q of ['after=abc', 'after=1.5', 'after=1e3', 'after=99999999999']) {
      expectBadRequest(await t.api('GET', `/v1/sessions/${sid}/events?${q}`), 'after', `events ${q}`)
    }
    for (const q of ['limit=0', 'limit=201', 'limit=x', 'limit=-5']) {
      expectBadRequest(await t.api('GET', `/v1/sessions?${q}`), 'limit', `list ${q}`)
    }
    expectBadRequest(await t.api('GET', '/v1/sessions?cursor=not-a-cursor'), 'cursor', 'list with a forged cursor')
    // the bounds themselves are fine
    expect((await t.api('GET', `/v1/sessions/${sid}/events?limit=5000`)).status).toBe(200)
    expect((await t.api('GET', `/v1/sessions/${sid}/events?limit=1&after=-1`)).body.events.length).toBe(1)
    expect((await t.api('GET', '/v1/sessions?limit=200')).status).toBe(200)
    expect((await t.api('GET', '/v1/sessions?limit=1')).status).toBe(200)
    expect(await snapshot()).toEqual(before)
  })

  it('every detail says what would have been right, with one path format, on every route', async () => {
    const before = await snapshot()
    const hook = await t.api('POST', '/v1/webhooks', { url: 'http://127.0.0.1:9/hook', events: ['turn.completed'] })
    expect(hook.status).toBe(201)
    const oneOf = (...xs: string[]) => `must be one of ${xs.map((x) => JSON.stringify(x)).join(', ')}`
    const admin = { key: t.adminToken }
    const cases: Array<[string, string, unknown, Array<[string, string]>, { key: string }?]> = [
      // a value outside a fixed set names the set
      ['GET', '/v1/usage?groupBy=week', undefined, [['querystring.groupBy', oneOf('day', 'model', 'session')]]],
      ['POST', `/v1/sessions/${sid}/approvals/c1`, { decision: 'yes' }, [['body.decision', oneOf('allow', 'deny')]]],
      ['POST', '/v1/sessions', { reasoningEffort: 'max' }, [['body.reasoningEffort', oneOf('minimal', 'low', 'medium', 'high', 'xhigh')]]],
      ['POST', '/v1/sessions', { tools: [{ name: 'ok', execution: { type: 'shell' }, approval: 'maybe' }] }, [['body.tools[0].execution.type', oneOf('http', 'client', 'builtin')], ['body.tools[0].approval', oneOf('never', 'always')]]],
      ['POST', '/v1/webhooks', { url: 'http://127.0.0.1:9/hook', events: ['turn.completed', 'turn.started'] }, [['body.events[1]', oneOf('turn.completed', 'turn.failed', 'turn.cancelled', 'turn.interrupted', 'session.requires_action')]]],
      // numbers name their bounds, whatever side was crossed
      ['GET', '/v1/sessions?limit=-1', undefined, [['querystring.limit', 'must be a whole number from 1 to 200 (default 50)']]],
      ['GET', '/v1/sessions?limit=201', undefined, [['querystring.limit', 'must be a whole number from 1 to 200 (default 50)']]],
      ['GET', `/v1/sessions/${sid}/events?limit=-1`, undefined, [['querystring.limit', 'must be a whole number from 1 to 5000 (default 500)']]],
      ['GET', `/v1/sessions/${sid}/events?limit=0`, undefined, [['querystring.limit', 'must be a whole number from 1 to 5000 (default 500)']]],
      ['GET', `/v1/sessions/${sid}/events?after=1.5`, undefined, [['querystring.after', 'must be an integer seq (-1, the default, reads from the start)']]],
      ['GET', `/v1/webhooks/${hook.body.id}/deliveries?limit=500`, undefined, [['querystring.limit', 'must be a whole number from 1 to 100 (default 20)']]],
      ['GET', `/v1/webhooks/${hook.body.id}/deliveries?limit=-3`, undefined, [['querystring.limit', 'must be a whole number from 1 to 100 (default 20)']]],
      ['POST', '/v1/sessions', { maxTokens: -5 }, [['body.maxTokens', 'must be an integer from 1 to 10000000']]],
      ['POST', '/v1/sessions', { maxTokens: 1.5 }, [['body.maxTokens', 'must be an integer']]],
      ['POST', `/v1/sessions/${sid}/fork`, { atSeq: -1 }, [['body.atSeq', 'must be an integer of at least 0']]],
      ['POST', '/v1/sessions', { tools: [{ name: 'ok', execution: { type: 'http', url: 'http://127.0.0.1:9/t', timeoutMs: 0 } }] }, [['body.tools[0].execution.timeoutMs', 'must be an integer from 1 to 3600000']]],
      ['PATCH', `/v1/admin/tenants/${t.tenantId}`, { limits: { maxRunningSessions: -1, costUsdPerMonth: 0 } }, [['body.limits.maxRunningSessions', 'must be an integer from 1 to 1000000'], ['body.limits.costUsdPerMonth', 'must be a number greater than 0 and at most 1000000000000']], admin],
      // lengths and list sizes
      ['PATCH', `/v1/sessions/${sid}`, { title: 'x'.repeat(501) }, [['body.title', 'must be at most 500 characters long']]],
      ['POST', '/v1/webhooks', { url: 'http://127.0.0.1:9/hook', events: [] }, [['body.events', 'must have 1 to 20 items']]],
      ['POST', '/v1/admin/tenants', { name: '' }, [['body.name', 'must be 1 to 200 characters long']], admin],
      // types, and unions that say their alternatives
      ['POST', `/v1/sessions/${sid}/cancel`, { keepInbox: 'yes' }, [['body.keepInbox', 'must be a boolean']]],
      ['POST', `/v1/sessions/${sid}/followup`, { content: 5 }, [['body.content', 'must be a string or an array']]],
      ['POST', `/v1/sessions/${sid}/followup`, { content: [5] }, [['body.content[0]', 'must be an object']]],
      ['PATCH', `/v1/sessions/${sid}`, { title: 5 }, [['body.title', 'must be a string or null']]],
      ['PATCH', `/v1/admin/tenants/${t.tenantId}`, { limits: { tokensPerDay: 'x' } }, [['body.limits.tokensPerDay', 'must be an integer or null']], admin],
      ['POST', '/v1/webhooks', { url: 5, events: ['turn.completed'] }, [['body.url', 'must be a string']]],
      // patterns say what they stand for
      ['POST', '/v1/sessions', { id: '-x' }, [['body.id', "must be letters, digits, '.', '_', ':' and '-', starting with a letter or digit"]]],
      ['POST', '/v1/sessions', { tools: [{ name: 'bad name!', execution: { type: 'client' } }] }, [['body.tools[0].name', "must be 1 to 64 letters, digits, '_' and '-'"]]],
      ['POST', '/v1/sessions', { mcpServers: [{ name: 'a b', url: 'http://127.0.0.1:9/mcp' }] }, [['body.mcpServers[0].name', "must be 1 to 32 letters, digits, '_' and '-', unique within the session (its tools are named <name>__<tool>)"]]],
      ['PUT', '/v1/secrets/lower', { value: 'x' }, [['params.name', "must be 1 to 64 upper-case letters, digits and '_'"]]],
      // the checks past the schema use the same paths
      ['POST', '/v1/webhooks', { url: 'http://10.1.2.3/hook', events: ['turn.completed'] }, [['body.url', '10.1.2.3 is a private address (not listed in AGENTD_TOOL_HOSTS)']]],
      ['POST', '/v1/sessions', { tools: [{ name: 'ok', execution: { type: 'http' } }] }, [['body.tools[0].execution.url', 'an http tool needs a url']]],
      ['POST', `/v1/sessions/${sid}/followup`, { content: [{ type: 'text', text: 5 }] }, [['body.content[0].text', 'text must be a string']]],
      ['POST', '/v1/sessions', { bogus: 1, tools: [{ name: 'ok', execution: { type: 'client', extra: 1 } }] }, [['body.bogus', 'unknown field'], ['body.tools[0].execution.extra', 'unknown field']]],
      ['POST', `/v1/sessions/${sid}/tool-results`, { content: 'x' }, [['body.callId', 'is required']]],
    ]
    const format = /^(body|querystring|params|headers)(\.[^.[\]]+|\[\d+\])*$/
    for (const [method, path, body, details, opts] of cases) {
      const what = `${method} ${path} ${JSON.stringify(body)?.slice(0, 100)}`
      const r = await t.api(method, path, body, opts)
      expect(r.status, `${what}: ${r.text}`).toBe(400)
      expect(r.body.error.details, what).toEqual(details.map(([p, message]) => ({ path: p, message })))
      for (const d of r.body.error.details) expect(d.path, what).toMatch(format)
      expect(r.body.error.message, what).toContain(details[0][1])
    }
    expect((await t.api('DELETE', `/v1/webhooks/${hook.body.id}`)).status).toBe(204)
    expect(await snapshot()).toEqual(before)
  })

  it('every pattern a request is checked against says in words what it wants', async () => {
    const doc = (await t.api('GET', '/openapi.json', undefined, { key: null })).body
    const patterns: string[] = []
    const walk = (v: unknown, where: string) => {
      if (!v || typeof v !== 'object') return
      const o = v as Record<string, unknown>
      if (typeof o.pattern === 'string') patterns.push(`${where}: ${typeof o.description === 'string' ? 'described' : `no description for ${o.pattern}`}`)
      for (const [k, x] of Object.entries(o)) walk(x, `${where}/${k}`)
    }
    walk(doc.paths, 'paths')
    walk(doc.components?.schemas, 'components')
    expect(patterns.length).toBeGreaterThan(5)
    expect(patterns.filter((p) => !p.endsWith('described'))).toEqual([])
  })

  it('a body over 1 MiB is 413 payload-too-large', async () => {
    const before = await snapshot()
    const big = JSON.stringify({ content: 'x'.repeat(1024 * 1024 + 16) })
    const headers = { authorization: `Bearer ${t.key}`, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(big)) }
    for (const [m, p] of [
      ['POST', `/v1/sessions/${sid}/followup`],
      ['POST', `/v1/sessions/${sid}/inject`],
      ['POST', '/v1/sessions'],
    ]) {
      const r = await httpRaw(t.url, m, p, headers, big)
      expect(r.status, `${m} ${p}: ${r.text.slice(0, 200)}`).toBe(413)
      expect(r.body.error.code).toBe('payload-too-large')
    }
    // a body just under the limit is not refused for its size
    const fits = JSON.stringify({ content: 'y'.repeat(1024 * 1024 - 64) })
    const ok = await httpRaw(t.url, 'PATCH', `/v1/sessions/${sid}`, { ...headers, 'content-length': String(Buffer.byteLength(fits)) }, fits)
    expect(ok.status).toBe(400) // `content` is not a PATCH field: refused by the schema, not by size
    expect(ok.body.error.code).toBe('bad-request')
    expect(await snapshot()).toEqual(before)
  })

  it('unknown sessions are 404 session-not-found, unknown routes 404 not-found', async () => {
    const before = await snapshot()
    for (const [m, p, b] of [
      ['GET', '/v1/sessions/nope', undefined],
      ['PATCH', '/v1/sessions/nope', { title: 'x' }],
      ['DELETE', '/v1/sessions/nope', undefined],
      ['POST', '/v1/sessions/nope/followup', { content: 'x' }],
      ['POST', '/v1/sessions/nope/inject', { content: 'x' }],
      ['GET', '/v1/sessions/nope/events', undefined],
      ['GET', '/v1/sessions/nope/inbox', undefined],
      ['DELETE', '/v1/sessions/nope/inbox/m1', undefined],
      ['POST', '/v1/sessions/nope/cancel', undefined],
      ['POST', '/v1/sessions/nope/fork', undefined],
      ['GET', '/v1/sessions/nope/stream', undefined],
    ] as Array<[string, string, unknown]>) {
      const r = await t.api(m, p, b)
      expect(r.status, `${m} ${p}`).toBe(404)
      expect(r.body.error.code, `${m} ${p}`).toBe('session-not-found')
    }
    for (const [m, p] of [
      ['GET', '/v1/nothing'],
      ['POST', `/v1/sessions/${sid}/nonsense`],
      ['GET', `/v1/sessions/${sid}/events/extra/path`],
      ['PUT', `/v1/sessions/${sid}`],
      ['GET', '/v2/sessions'],
    ]) {
      const r = await t.api(m, p)
      expect(r.status, `${m} ${p}`).toBe(404)
      expect(r.body.error.code, `${m} ${p}`).toBe('not-found')
    }
    expect(await snapshot()).toEqual(before)
  })

  it('an unknown model is 422 model-unavailable and creates nothing', async () => {
    const before = await snapshot()
    for (const model of ['nope/none', 'test/not-scripted', 'faux/not-echo']) {
      const r = await t.api('POST', '/v1/sessions', { id: 'never-created', model })
      expect(r.status, model).toBe(422)
      expect(r.body.error.code).toBe('model-unavailable')
    }
    expect((await t.api('GET', '/v1/sessions/never-created')).status).toBe(404)
    expect(await snapshot()).toEqual(before)
  })

  it('an http tool aimed at a link-local or private address is 400 at creation', async () => {
    const before = await snapshot()
    for (const url of ['http://169.254.169.254/latest/meta-data', 'http://10.0.0.1/hook', 'http://192.168.1.1:8080/x', 'http://[::ffff:169.254.169.254]/', 'http://0.0.0.0:9/']) {
      const r = await t.api('POST', '/v1/sessions', { id: 'never-created', model: t.models.ref(), tools: [{ name: 'hook', execution: { type: 'http', url } }] })
      expectBadRequest(r, /tools.*url|url/, `tool url ${url}`)
    }
    expect((await t.api('GET', '/v1/sessions/never-created')).status).toBe(404)
    expect(await snapshot()).toEqual(before)
  })

  it('-0 and 1e400 (Infinity) in metadata are 400: bodies are lossless JSON', async () => {
    const before = await snapshot()
    for (const raw of [
      `{"model":"${t.models.ref()}","id":"never-created","metadata":{"x":-0}}`,
      `{"model":"${t.models.ref()}","id":"never-created","metadata":{"x":1e400}}`,
      `{"model":"${t.models.ref()}","id":"never-created","metadata":{"deep":[1,{"y":-1e400}]}}`,
    ]) {
      const r = await t.api('POST', '/v1/sessions', undefined, { raw })
      expect(r.status, raw).toBe(400)
      expect(r.body.error.code).toBe('bad-request')
    }
    expect((await t.api('GET', '/v1/sessions/never-created')).status).toBe(404)
    for (const raw of ['{"metadata":{"x":-0}}', '{"metadata":{"x":1e400}}']) {
      const r = await t.api('PATCH', `/v1/sessions/${sid}`, undefined, { raw })
      expect(r.status, raw).toBe(400)
      expect(r.body.error.code).toBe('bad-request')
    }
    // plain 0 and large finite numbers are fine (on a throwaway session)
    const ok = await t.api('POST', '/v1/sessions', undefined, { raw: `{"model":"${t.models.ref()}","metadata":{"x":0,"y":1e300}}` })
    expect(ok.status).toBe(201)
    expect(ok.body.metadata).toEqual({ x: 0, y: 1e300 })
    expect(Object.is(ok.body.metadata.x, 0)).toBe(true)
    expect((await t.api('DELETE', `/v1/sessions/${ok.body.id}`)).status).toBe(204)
    const after = await snapshot()
    expect(after).toEqual(before)
  })

  it('the session is intact after all of it: valid log, same parked input, a followup still runs', async () => {
    const inbox = (await t.api('GET', `/v1/sessions/${sid}/inbox`)).body
    expect(inbox.nextStep.map((m: any) => m.id)).toEqual(['parked-1'])
    const sess = (await t.api('GET', `/v1/sessions/${sid}`)).body
    expect(sess.metadata).toEqual({ keep: true })
    expect(sess.title).toBeNull()
    t.models.script(sid, { text: ['second'] })
    expect((await t.api('POST', `/v1/sessions/${sid}/followup`, { content: 'again' })).status).toBe(202)
    const evs = await t.waitForTurnEnd(sid, 2)
    expectValidLog(evs)
    // turn 2 entered the parked context, then the prompt: the model saw exactly what was accepted
    const req = t.models.requestsOf(sid)[1]
    const texts = req.context.messages.filter((m) => m.role === 'user').map((m) => (typeof m.content === 'string' ? m.content : (m.content as Array<{ text?: string }>).map((b) => b.text).join('')))
    expect(texts).toEqual(['first', 'parked', 'again'])
  })
})
