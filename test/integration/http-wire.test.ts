// API.md §10 over the whole surface, route by route as openapi.json lists them (a route added later
// is covered without touching this file), at the wire: every answer ≥ 400 is §10's shape with a §10
// code, text PostgreSQL cannot store is 400 wherever it appears, a body on a route that takes none is
// 400, malformed HTTP gets a §10 answer, and no early answer resets the connection of a client that is
// still sending: a connection the server closes is closed in stages (a FIN, then the rest of the body
// read and dropped), never reset. Nothing refused changes anything.
//
// On the embedded database only: every refusal here is the HTTP layer's, made before the store is
// reached, and what the store does with such text is tested on both databases (store-append), so
// walking every route on both only doubled the time (it was the suite's sixth-longest file).

import http from 'node:http'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { errorPaths, errorShapeViolation, shapeViolation } from '../faults/lib/contract.js'
import { operations, type Operation } from '../faults/lib/operations.js'
import { parseAnswers, rawExchange, rawSequence, rawUpload, wireRequest, type WireAnswer } from '../faults/lib/wire.js'

describe.each(['pglite'] as const)('the error path at the wire on %s', (kind) => {
  let t: TestApp
  let sid: string
  let ops: Operation[]
  const tables = ['tenants', 'api_keys', 'sessions', 'session_events', 'idempotency', 'pending_calls']
  const counts = async () => {
    const out: Record<string, number> = {}
    for (const tb of tables) out[tb] = (await t.app.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${tb}`)).rows[0].n
    return out
  }
  const fill = (template: string, over: Record<string, string> = {}) =>
    template.replace(/\{(\w+)\}/g, (_m, name: string) => over[name] ?? ({ id: sid, tenantId: t.tenantId, keyId: '00000000-0000-4000-8000-000000000000', file: 'console.js' } as Record<string, string>)[name] ?? 'x1')
  const auth = (op: Operation): Record<string, string> => (op.security === 'apiKey' ? { authorization: `Bearer ${t.key}` } : op.security === 'adminToken' ? { authorization: `Bearer ${t.adminToken}` } : {})
  /** API.md §17: a protocol's errors take its own shape (JSON-RPC for A2A and MCP, OpenAI's for Responses); `what` starts with the method and route */
  const routeOf = (what: string): [string, string] => {
    const m = /^([A-Z]+) (\S+)/.exec(what)
    return m ? [m[1], m[2]] : ['', '']
  }
  const expectShape = (r: WireAnswer, what: string) => {
    expect(r.error, `${what}: the request got a whole answer`).toBeUndefined()
    const violation = shapeViolation(...routeOf(what), r.status, r.body, { retryAfter: (r.headers['retry-after'] as string) ?? null })
    expect(violation, `${what}: ${r.status} ${r.text.slice(0, 300)}`).toBeUndefined()
  }
  const expectBadRequest = (r: WireAnswer, path: string | RegExp, what: string) => {
    expectShape(r, what)
    expect(r.status, `${what}: ${r.text.slice(0, 300)}`).toBe(400)
    const paths = errorPaths(...routeOf(what), r.body)
    expect(paths.some((p) => (typeof path === 'string' ? p === path : path.test(p))), `${what}: ${JSON.stringify(r.body.error)} names ${String(path)}`).toBe(true)
  }

  // plugin deliveries through the Agent handle meet the same rule as HTTP input (API.md §11)
  const pluginTried: string[] = []
  beforeAll(async () => {
    t = await startTestApp({
      kind,
      plugins: [
        (root) => {
          ;(root as any).hooks.serial('agent/turn-stopping', async ({ agent }: { agent: { id: string; inject(m: unknown): Promise<unknown> } }) => {
            if (agent.id !== 'plugin-input') return
            for (const bad of ['a\u0000b', { content: [{ type: 'text', text: 'lone \ud800' }] }, { content: 'fine', id: 'id\u0000' }, { content: 'fine', source: { kind: 'plugin', note: '\udfff' } }]) {
              try {
                await agent.inject(bad)
                pluginTried.push('accepted')
              } catch (e) {
                pluginTried.push((e as Error).message)
              }
            }
          })
        },
      ],
    })
    sid = (await t.createSession({ id: 'wired' })).id
    ops = operations(await (await fetch(`${t.url}/openapi.json`)).json())
    expect(ops.length).toBeGreaterThan(20)
  })
  afterAll(async () => {
    await t?.close()
  })

  it('a NUL or a lone surrogate in any path parameter or query value of any route is 400 naming it; nothing is written', async () => {
    const before = await counts()
    const events = await t.events(sid)
    for (const op of ops) {
      for (const bad of ['%00', 'a%00b', '%ED%A0%80x']) {
        for (const name of [...op.template.matchAll(/\{(\w+)\}/g)].map((m) => m[1])) {
          const r = await wireRequest(t.url, { method: op.method, path: fill(op.template, { [name]: bad }), headers: auth(op) })
          // a surrogate's UTF-8-looking bytes are not UTF-8: the URL itself is refused
          expectBadRequest(r, bad.includes('%ED') ? /^(url|params\.)/ : `params.${name}`, `${op.method} ${op.template} with ${name}=${bad}`)
        }
      }
      for (const q of ['after=%00', 'probe=x%00', 'limit=%00', 'access_token=%00']) {
        const r = await wireRequest(t.url, { method: op.method, path: `${fill(op.template)}?${q}`, headers: auth(op) })
        expectBadRequest(r, `querystring.${q.split('=')[0]}`, `${op.method} ${op.template}?${q}`)
      }
    }
    expect(await counts()).toEqual(before)
    expect(await t.events(sid)).toEqual(events)
  })

  it('a NUL or a lone surrogate anywhere in a JSON body (values and keys, any depth) is 400 naming it', async () => {
    const before = await counts()
    const bodyOps = ops.filter((o) => o.body)
    expect(bodyOps.length).toBeGreaterThan(8)
    const bodies: Array<[string, RegExp]> = [
      ['{"content":"a\\u0000b"}', /^body/],
      ['{"content":"\\ud800"}', /^body/],
      ['{"metadata":{"deep":[{"x":"\\udfff"}]}}', /^body\.metadata\.deep\[0\]\.x$/],
      ['{"metadata":{"k\\u0000":1}}', /^body\.metadata$/],
      ['{"\\ud83d":1}', /^body$/],
    ]
    for (const op of bodyOps) {
      for (const [raw, path] of bodies) {
        const r = await wireRequest(t.url, { method: op.method, path: fill(op.template), headers: { ...auth(op), 'content-type': 'application/json' }, body: raw })
        expectBadRequest(r, path, `${op.method} ${op.template} ${raw}`)
      }
      // a paired surrogate (an emoji) is fine text: whatever the route says, it is not about storage
      const ok = await wireRequest(t.url, { method: op.method, path: fill(op.template), headers: { ...auth(op), 'content-type': 'application/json' }, body: '{"metadata":{"x":"\\ud83d\\ude00"}}' })
      expectShape(ok, `${op.method} ${op.template} with an emoji`)
      expect(JSON.stringify(ok.body ?? {})).not.toMatch(/NUL|surrogate/)
    }
    // the one exception the probe above may have made: a create with metadata only is a new session
    const made = (await t.app.db.query<{ id: string }>(`SELECT id FROM sessions WHERE id <> 'wired'`)).rows
    for (const row of made) expect((await t.api('DELETE', `/v1/sessions/${row.id}`)).status).toBe(204)
    const after = await counts()
    expect({ ...after, session_events: before.session_events }).toEqual({ ...before, tenants: after.tenants, api_keys: after.api_keys })
  })

  it('every body route refuses other content types (415), malformed JSON and bytes that are not UTF-8 (400)', async () => {
    const before = await counts()
    for (const op of ops.filter((o) => o.body)) {
      const where = `${op.method} ${op.template}`
      for (const ct of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/jsonx']) {
        const r = await wireRequest(t.url, { method: op.method, path: fill(op.template), headers: { ...auth(op), 'content-type': ct }, body: '{}' })
        expectShape(r, `${where} as ${ct}`)
        expect(r.status, `${where} as ${ct}`).toBe(415)
      }
      for (const raw of ['{', '{"a":1,}', 'nul', '"\\x"']) {
        const r = await wireRequest(t.url, { method: op.method, path: fill(op.template), headers: { ...auth(op), 'content-type': 'application/json' }, body: raw })
        expectBadRequest(r, 'body', `${where} ${raw}`)
      }
      const r = await wireRequest(t.url, { method: op.method, path: fill(op.template), headers: { ...auth(op), 'content-type': 'application/json' }, body: Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d]) })
      expectBadRequest(r, 'body', `${where} with bytes that are not UTF-8`)
    }
    expect(await counts()).toEqual(before)
  })

  it('a body on a route that takes none is 400, whatever the method; the route does not run', async () => {
    const before = await counts()
    for (const op of ops.filter((o) => !o.body && !o.websocket)) {
      for (const [ct, body] of [['application/json', '{}'], ['application/json', '{"x":1}'], ['text/plain', 'hello']]) {
        const r = await wireRequest(t.url, { method: op.method, path: fill(op.template), headers: { ...auth(op), 'content-type': ct }, body })
        expectBadRequest(r, 'body', `${op.method} ${op.template} with a ${ct} body`)
      }
    }
    expect(await counts()).toEqual(before)
    expect((await t.api('GET', `/v1/sessions/${sid}`)).status).toBe(200)
  })

  it('router and HTTP-parser errors are §10 answers: bad percent-encoding, over-long parameters, unknown routes and methods, no Host, garbage', async () => {
    expectBadRequest(await wireRequest(t.url, { method: 'POST', path: '/v1/sessions/%ZZ/inject', headers: { authorization: `Bearer ${t.key}`, 'content-type': 'application/json' }, body: '{"content":"x"}' }), 'url', 'a malformed escape')
    expectBadRequest(await wireRequest(t.url, { method: 'GET', path: `/v1/sessions/${'a'.repeat(5000)}`, headers: { authorization: `Bearer ${t.key}` } }), 'params', 'an over-long id')
    // the longest id a session may have is addressable
    const long = 'L'.repeat(200)
    expect((await t.api('POST', '/v1/sessions', { id: long })).status).toBe(201)
    expect((await t.api('GET', `/v1/sessions/${long}`)).body.id).toBe(long)
    expect((await t.api('DELETE', `/v1/sessions/${long}`)).status).toBe(204)
    for (const [method, path] of [['GET', '/nothing'], ['PUT', '/healthz'], ['DELETE', '/openapi.json'], ['OPTIONS', '/v1/sessions'], ['PROPFIND', '/v1/sessions'], ['POST', '/v1/nothing'], ['GET', '/v2/sessions']]) {
      for (const headers of [{}, { authorization: `Bearer ${t.key}` }] as Array<Record<string, string>>) {
        const r = await wireRequest(t.url, { method, path, headers: { ...headers, 'content-type': 'application/json' }, body: method === 'GET' ? undefined : 'not even json' })
        expectShape(r, `${method} ${path}`)
        expect(r.status, `${method} ${path}`).toBe(404)
        expect(r.body.error.code).toBe('not-found')
      }
    }
    const cases: Array<[string, string]> = [
      ['no Host', 'GET /healthz HTTP/1.1\r\n\r\n'],
      ['not HTTP', 'HELLO THERE\r\n\r\n'],
      ['a bad header', 'GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n'],
      ['both lengths', 'POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n{}\r\n'],
      // over the 32 KiB of headers a server takes (room for a token of 8 KiB and more, API.md §18)
      ['headers too large', `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'b'.repeat(40000)}\r\n\r\n`],
      ['a bad chunk', 'POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n{}\r\n0\r\n\r\n'],
    ]
    for (const [what, bytes] of cases) {
      const x = await rawExchange(t.url, bytes, 1000)
      const answers = parseAnswers(x.data)
      expect(answers.length, `${what}: an answer (${JSON.stringify(x.data.slice(0, 200))})`).toBeGreaterThan(0)
      for (const a of answers) expect(errorShapeViolation(a.status, a.json), `${what}: ${a.body}`).toBeUndefined()
      // the bad chunk comes after a request that was answered (401: no key) before it
      expect(answers.at(-1)!.status, what).toBe(400)
      expect(x.reset, `${what}: the connection was not reset`).toBe(false)
    }
    // garbage pipelined after a good request: the good one is answered, then the garbage gets §10
    const x = await rawExchange(t.url, `GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGARBAGE\r\n\r\n${'z'.repeat(200000)}`)
    const answers = parseAnswers(x.data)
    expect(answers.map((a) => a.status)).toEqual([200, 400])
    expect(errorShapeViolation(400, answers[1].json)).toBeUndefined()
    expect(x.reset).toBe(false)
  })

  it('no early answer resets a client still sending its body; the kept-alive connection serves the next request', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
    try {
      const big = Buffer.alloc(6 * 1024 * 1024, 'a')
      const json = { 'content-type': 'application/json' }
      const early: Array<[string, string, string, Record<string, string>, number]> = [
        ['no key', 'POST', `/v1/sessions/${sid}/inject`, json, 401],
        ['over the limit by its length', 'POST', `/v1/sessions/${sid}/inject`, { ...json, authorization: `Bearer ${t.key}` }, 413],
        ['a wrong content type', 'POST', `/v1/sessions/${sid}/inject`, { 'content-type': 'text/plain', authorization: `Bearer ${t.key}` }, 415],
        ['an unknown route', 'POST', '/v1/nothing', json, 404],
        ['a route that takes no body', 'DELETE', `/v1/sessions/${sid}`, { ...json, authorization: `Bearer ${t.key}` }, 400],
        ['a body on GET', 'GET', '/healthz', json, 400],
        ['an unknown session', 'POST', '/v1/sessions/nope/inject', { ...json, authorization: `Bearer ${t.key}` }, 413],
      ]
      for (const [what, method, path, headers, status] of early) {
        for (const pieces of [1, 64]) {
          for (let i = 0; i < 3; i++) {
            const r = await wireRequest(t.url, { method, path, headers, body: big, pieces, agent })
            expect(r.error, `${what} (${pieces} pieces): no answer`).toBeUndefined()
            expect(r.lateError, `${what} (${pieces} pieces): the connection broke after the answer`).toBeUndefined()
            expect(r.status, what).toBe(status)
            expectShape(r, what)
          }
        }
        // at the socket: the answer comes before the body is sent, the rest of the body is skipped, and the
        // same connection answers the next request (node:http's client itself does not reuse a
        // connection whose answer came early, so this is checked on a raw one)
        const head = Object.entries({ host: 'x', 'content-length': String(big.length), ...headers }).map(([k, v]) => `${k}: ${v}\r\n`).join('')
        const x = await rawSequence(t.url, [`${method} ${path} HTTP/1.1\r\n${head}\r\n`, big, 'GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n'])
        expect(x.answers.map((a) => a.status), `${what}: both answers on one connection`).toEqual([status, 200])
        expect(x.answeredBeforeBody, `${what}: answered before the body was sent`).toBe(true)
        expect(x.reset, what).toBe(false)
      }
      // a chunked body over the limit is cut off at the limit and answered the same way
      const r = await wireRequest(t.url, { method: 'POST', path: `/v1/sessions/${sid}/inject`, headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked', authorization: `Bearer ${t.key}` }, body: big, pieces: 100, agent })
      expect([r.status, r.error, r.lateError]).toEqual([413, undefined, undefined])
      // and fetch, as most clients send: a whole answer every time
      for (let i = 0; i < 10; i++) {
        const res = await fetch(`${t.url}/v1/sessions/${sid}/inject`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${t.key}` }, body: big.toString() })
        expect(res.status).toBe(413)
        expect(((await res.json()) as any).error.code).toBe('payload-too-large')
      }
    } finally {
      agent.destroy()
    }
    expect((await t.events(sid)).length).toBe(0)
  })

  it('requests a fuzz run saw reset are answered, and the connection closed with a FIN: GETs with a body, JSON strings with CR LF, NUL and .. in the path', async () => {
    const before = await counts()
    const auth = `authorization: Bearer ${t.key}\r\n`
    const json = 'content-type: application/json\r\n'
    const pad = JSON.stringify({ pad: 'p'.repeat(64 * 1024) })
    // [what, request line and headers, body, status, code]
    const kinds: Array<[string, string, string, number, string]> = [
      ['GET /metrics with {}', `GET /metrics HTTP/1.1\r\nHost: x\r\n${json}`, '{}', 400, 'bad-request'],
      ['GET /openapi.json with {}', `GET /openapi.json HTTP/1.1\r\nHost: x\r\n${json}`, '{}', 400, 'bad-request'],
      ['GET …/messages with {}', `GET /v1/sessions/${sid}/messages HTTP/1.1\r\nHost: x\r\n${auth}${json}`, '{}', 400, 'bad-request'],
      ['GET /metrics with 64 KiB', `GET /metrics HTTP/1.1\r\nHost: x\r\n${json}`, pad, 400, 'bad-request'],
      ['GET …/messages with 64 KiB', `GET /v1/sessions/${sid}/messages HTTP/1.1\r\nHost: x\r\n${auth}${json}`, pad, 400, 'bad-request'],
      ['a JSON string with CR LF to an unknown session', `POST /v1/sessions/nope/followup HTTP/1.1\r\nHost: x\r\n${auth}${json}`, '"line one\\r\\nline two"', 404, 'session-not-found'],
      ['a JSON string with raw CR LF', `POST /v1/sessions/${sid}/followup HTTP/1.1\r\nHost: x\r\n${auth}${json}`, '"line one\r\nline two"', 400, 'bad-request'],
      ['a JSON string with escaped CR LF', `POST /v1/sessions/${sid}/followup HTTP/1.1\r\nHost: x\r\n${auth}${json}`, '"line one\\r\\nline two"', 400, 'bad-request'],
      ['a NUL in the path', `POST /v1/sessions/a\u0000b/followup HTTP/1.1\r\nHost: x\r\n${auth}${json}`, pad, 400, 'bad-request'],
      ['.. in the path', `POST /v1/sessions/../sessions/${sid}/followup HTTP/1.1\r\nHost: x\r\n${auth}${json}`, pad, 404, 'not-found'],
      ['.. as the session id', `GET /v1/sessions/../messages HTTP/1.1\r\nHost: x\r\n${auth}${json}`, '{}', 400, 'bad-request'],
    ]
    const problems: string[] = []
    for (const [what, head, body, status, code] of kinds) {
      for (const connection of ['close', 'keep-alive']) {
        const r = await rawUpload(t.url, `${head}connection: ${connection}\r\ncontent-length: ${Buffer.byteLength(body, 'latin1')}\r\n\r\n`, body)
        const where = `${what} (connection: ${connection})`
        const answer = r.answers[0]
        if (r.answers.length !== 1 || answer.status !== status || answer.json?.error?.code !== code) problems.push(`${where}: answers ${JSON.stringify(r.answers.map((a) => `${a.status} ${a.body.slice(0, 100)}`))}, want one ${status} ${code}`)
        else if (errorShapeViolation(status, answer.json)) problems.push(`${where}: ${errorShapeViolation(status, answer.json)}`)
        if (r.reset) problems.push(`${where}: reset (${r.reset})`)
        else if (!r.fin) problems.push(`${where}: no FIN`)
        if (!r.bodySent) problems.push(`${where}: the client could not send its whole body`)
      }
    }
    expect(problems).toEqual([])
    expect(await counts()).toEqual(before)
  })

  it('a resume point past any seq a log can hold reads as past the end, not as a database error', async () => {
    for (const after of ['2147483647', '2147483648', '9999999999']) {
      const r = await wireRequest(t.url, { method: 'GET', path: `/v1/sessions/${sid}/events?after=${after}`, headers: { authorization: `Bearer ${t.key}` } })
      expect([r.status, r.body?.events]).toEqual([200, []])
    }
  })

  it('a plugin delivering text PostgreSQL cannot store through the Agent handle is refused, and nothing is logged', async () => {
    const s = await t.createSession({ id: 'plugin-input' })
    t.models.script(s.id, { text: ['ok'] })
    expect((await t.api('POST', `/v1/sessions/${s.id}/followup`, { content: 'go' })).status).toBe(202)
    const evs = await t.waitForTurnEnd(s.id, 1)
    expect(pluginTried).toHaveLength(4)
    for (const m of pluginTried) expect(m).toMatch(/NUL|surrogate/)
    expect(evs.filter((e) => e.type === 'user/message')).toHaveLength(1)
    expect((await t.api('GET', `/v1/sessions/${s.id}/inbox`)).body).toEqual({ nextTurn: [], nextStep: [] })
  })
})
