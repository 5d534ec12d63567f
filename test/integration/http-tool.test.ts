import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { checkToolUrl, parseToolHosts, type Resolver } from '../../src/tools/hosts.js'
import { callHttpTool, type HttpToolOutcome } from '../../src/tools/http.js'

// A local tool server; each path answers one way, and every request and connection it sees is recorded.
let server: http.Server
let port = 0
let connections = 0
const seen: Array<{ path: string; headers: http.IncomingHttpHeaders; body: string }> = []
let closedRequests: Array<Promise<void>> = []

const routes: Record<string, (req: http.IncomingMessage, res: http.ServerResponse) => void> = {
  '/string': (_req, res) => json(res, 200, { content: 'hello from the tool', extra: { ignored: true } }),
  '/blocks': (_req, res) =>
    json(res, 201, {
      content: [
        { type: 'text', text: 'a picture:', note: 'dropped' },
        { type: 'image', mimeType: 'image/png', data: 'iVBORw0KGgo=' },
        { type: 'image', url: 'https://example.com/cat.png' },
      ],
      isError: false,
    }),
  '/is-error': (_req, res) => json(res, 200, { content: [{ type: 'text', text: 'order not found' }], isError: true }),
  '/status-500': (_req, res) => json(res, 500, { content: 'boom' }),
  '/status-404': (_req, res) => {
    res.statusCode = 404
    res.end('nope')
  },
  '/redirect': (_req, res) => {
    res.writeHead(302, { location: 'http://169.254.169.254/' })
    res.end()
  },
  '/redirect-any': (req, res) => {
    // /redirect-any?status=307&to=http://… answers that redirect
    const q = new URL(req.url ?? '/', 'http://x').searchParams
    res.writeHead(Number(q.get('status')), { location: q.get('to') ?? '/' })
    res.end()
  },
  '/not-json': (_req, res) => {
    res.setHeader('content-type', 'application/json')
    res.end('{"content": "unterminated')
  },
  '/no-content': (_req, res) => json(res, 200, { result: 'x' }),
  '/bad-is-error': (_req, res) => json(res, 200, { content: 'x', isError: 'yes' }),
  '/bad-block': (_req, res) => json(res, 200, { content: [{ type: 'text', text: 5 }] }),
  '/bad-image': (_req, res) => json(res, 200, { content: [{ type: 'image', mimeType: 'image/png' }] }),
  '/other-block': (_req, res) => json(res, 200, { content: [{ type: 'tool-call', id: 'x', name: 'y', arguments: '{}' }] }),
  '/array': (_req, res) => json(res, 200, [{ type: 'text', text: 'x' }]),
  '/big': (_req, res) => json(res, 200, { content: 'x'.repeat(4096) }),
  '/slow': () => {
    // never answers
  },
  '/slow-body': (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.write('{"content": "half')
  },
  '/cut': (req, res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' })
    res.write('{"content": "')
    setTimeout(() => req.socket.destroy(), 20)
  },
}

function json(res: http.ServerResponse, status: number, value: unknown) {
  res.writeHead(status, { 'content-type': 'application/json' })
  res.end(JSON.stringify(value))
}

beforeAll(async () => {
  server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    closedRequests.push(new Promise((resolve) => res.on('close', () => resolve())))
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const path = req.url ?? '/'
      seen.push({ path, headers: req.headers, body: Buffer.concat(chunks).toString('utf8') })
      ;(routes[path.split('?')[0]!] ?? ((_q, s) => json(s, 200, { content: 'default' })))(req, res)
    })
  })
  server.on('connection', () => connections++)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  port = (server.address() as AddressInfo).port
})

afterAll(async () => {
  server.closeAllConnections()
  await new Promise((resolve) => server.close(resolve))
})

beforeEach(() => {
  seen.length = 0
  connections = 0
  closedRequests = []
})

const allowLocal = parseToolHosts('127.0.0.1')
const body = { sessionId: 'ses_1', callId: 'call_1', name: 'lookup_order', arguments: { id: 42 }, rawArguments: '{"id":42}' }

function call(path: string, extra: Partial<Parameters<typeof callHttpTool>[0]> = {}): Promise<HttpToolOutcome> {
  return callHttpTool({
    url: `http://127.0.0.1:${port}${path}`,
    body,
    signal: new AbortController().signal,
    policy: allowLocal,
    ...extra,
  })
}

function expectError(out: HttpToolOutcome, code: string, text: string | RegExp, name = 'ToolError') {
  expect(out.isError).toBe(true)
  expect(out.error).toEqual({ name, code })
  expect(out.content).toHaveLength(1)
  const block = out.content[0]!
  expect(block.type).toBe('text')
  const t = (block as { text: string }).text
  expect(t.startsWith('Error: ')).toBe(true)
  expect(t).not.toContain('\n')
  if (typeof text === 'string') expect(t).toBe(text)
  else expect(t).toMatch(text)
}

describe('http tool execution', () => {
  it('POSTs the call as JSON and turns string content into a text block', async () => {
    const out = await call('/string?x=1')
    expect(out).toEqual({ content: [{ type: 'text', text: 'hello from the tool' }], isError: false })
    expect(seen).toHaveLength(1)
    expect(seen[0]!.path).toBe('/string?x=1')
    expect(seen[0]!.headers['content-type']).toBe('application/json')
    expect(JSON.parse(seen[0]!.body)).toEqual(body)
  })

  it('passes validated content blocks through, dropping unknown fields', async () => {
    const out = await call('/blocks')
    expect(out).toEqual({
      content: [
        { type: 'text', text: 'a picture:' },
        { type: 'image', mimeType: 'image/png', data: 'iVBORw0KGgo=' },
        { type: 'image', url: 'https://example.com/cat.png' },
      ],
      isError: false,
    })
  })

  it('keeps a tool-reported isError as given, without an error code', async () => {
    const out = await call('/is-error')
    expect(out).toEqual({ content: [{ type: 'text', text: 'order not found' }], isError: true })
    expect(out.error).toBeUndefined()
  })

  it('turns a non-2xx answer into TOOL_HTTP_STATUS', async () => {
    expectError(await call('/status-500'), 'TOOL_HTTP_STATUS', 'Error: tool answered HTTP 500')
    expectError(await call('/status-404'), 'TOOL_HTTP_STATUS', 'Error: tool answered HTTP 404')
  })

  it('does not follow redirects', async () => {
    expectError(await call('/redirect'), 'TOOL_HTTP_STATUS', 'Error: tool answered HTTP 302')
    expect(seen).toHaveLength(1)
  })

  it.each(['/not-json', '/no-content', '/bad-is-error', '/bad-block', '/bad-image', '/other-block', '/array'])(
    'turns the malformed answer of %s into TOOL_BAD_RESULT',
    async (path) => {
      expectError(await call(path), 'TOOL_BAD_RESULT', 'Error: tool answered an invalid result')
    },
  )

  it('refuses an answer body beyond the cap', async () => {
    expectError(await call('/big', { maxResponseBytes: 1024 }), 'TOOL_BAD_RESULT', 'Error: tool answered an invalid result')
    expect((await call('/big', { maxResponseBytes: 8192 })).isError).toBe(false)
  })

  it('times out a tool that does not answer, and closes the request', async () => {
    const t0 = Date.now()
    expectError(await call('/slow', { timeoutMs: 150 }), 'TOOL_TIMEOUT', 'Error: tool call timed out after 150 ms')
    expect(Date.now() - t0).toBeLessThan(2000)
    await closedRequests[0]
  })

  it('counts the answer body in the timeout', async () => {
    expectError(await call('/slow-body', { timeoutMs: 150 }), 'TOOL_TIMEOUT', 'Error: tool call timed out after 150 ms')
    await closedRequests[0]
  })

  it('aborts the request at once on cancel', async () => {
    const ac = new AbortController()
    const pending = call('/slow', { signal: ac.signal })
    while (seen.length === 0) await new Promise((r) => setTimeout(r, 5))
    const t0 = Date.now()
    ac.abort()
    expectError(await pending, 'TOOL_ABORTED', 'Error: tool call aborted', 'AbortError')
    expect(Date.now() - t0).toBeLessThan(500)
    // the server sees the request closed
    await closedRequests[0]
  })

  it('does not send anything when already aborted', async () => {
    const ac = new AbortController()
    ac.abort()
    expectError(await call('/string', { signal: ac.signal }), 'TOOL_ABORTED', 'Error: tool call aborted', 'AbortError')
    expect(connections).toBe(0)
  })

  it('reports a connection failure as TOOL_ERROR', async () => {
    const s = http.createServer()
    await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve))
    const closedPort = (s.address() as AddressInfo).port
    await new Promise((resolve) => s.close(resolve))
    const out = await callHttpTool({ url: `http://127.0.0.1:${closedPort}/`, body, signal: new AbortController().signal, policy: allowLocal })
    expectError(out, 'TOOL_ERROR', /^Error: tool call failed: .*ECONNREFUSED/)
  })

  it('reports an answer cut short as TOOL_ERROR', async () => {
    expectError(await call('/cut'), 'TOOL_ERROR', /^Error: tool call failed: /)
  })

  it('reports an unresolvable name as TOOL_ERROR', async () => {
    const out = await call('', { url: `http://nowhere.invalid:${port}/`, policy: parseToolHosts('nowhere.invalid') })
    expectError(out, 'TOOL_ERROR', /^Error: tool call failed: .*nowhere\.invalid/)
  })
})

describe('http tool address guard', () => {
  it('refuses a loopback address that is not listed, before connecting', async () => {
    const out = await call('/string', { policy: parseToolHosts('10.0.0.0/8') })
    expectError(out, 'TOOL_ERROR', 'Error: tool address refused: 127.0.0.1 is a loopback address (not listed in AGENTD_TOOL_HOSTS)')
    expect(seen).toHaveLength(0)
    expect(connections).toBe(0)
  })

  it('allows localhost listed by name', async () => {
    const out = await call('', { url: `http://localhost:${port}/string`, policy: parseToolHosts('localhost') })
    expect(out).toEqual({ content: [{ type: 'text', text: 'hello from the tool' }], isError: false })
  })

  it('refuses localhost when only another port of it is listed', async () => {
    const out = await call('', { url: `http://localhost:${port}/string`, policy: parseToolHosts(`localhost:${port === 1 ? 2 : port - 1}`) })
    expectError(out, 'TOOL_ERROR', /^Error: tool address refused: localhost resolves to 127\.0\.0\.1, a loopback address/)
    expect(connections).toBe(0)
  })

  it('checks the address it actually connects to (DNS rebinding)', async () => {
    // tools.test answered a public address at session creation and the loopback address at call time
    let answer = ['93.184.216.34']
    const rebinding: Resolver = async (host) => {
      if (host !== 'tools.test') throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' })
      return answer
    }
    const url = `http://tools.test:${port}/string`
    const policy = parseToolHosts('')
    expect(await checkToolUrl(url, policy, rebinding)).toBeNull()
    answer = ['127.0.0.1']
    const out = await call('', { url, policy, resolve: rebinding })
    expectError(out, 'TOOL_ERROR', 'Error: tool address refused: tools.test resolves to 127.0.0.1, a loopback address (not listed in AGENTD_TOOL_HOSTS)')
    expect(connections).toBe(0)

    // a mix of allowed and refused answers is refused too
    answer = ['93.184.216.34', '::ffff:127.0.0.1']
    expectError(await call('', { url, policy, resolve: rebinding }), 'TOOL_ERROR', /IPv4-mapped form of 127\.0\.0\.1/)
    expect(connections).toBe(0)

    // and the socket goes to the checked address: the same resolver with 127.0.0.1 listed reaches our server
    answer = ['127.0.0.1']
    const ok = await call('', { url, policy: parseToolHosts('127.0.0.1'), resolve: rebinding })
    expect(ok).toEqual({ content: [{ type: 'text', text: 'hello from the tool' }], isError: false })
    expect(seen.map((s) => s.headers.host)).toEqual([`tools.test:${port}`])
  })

  it('DNS answering a public address first and a private one next: the creation check passes, the connect-time check refuses the second', async () => {
    // a rebinding name server: each lookup of the name gets the next answer (TTL 0)
    const answers = [['93.184.216.34'], ['10.0.0.7'], ['127.0.0.1']]
    let lookups = 0
    const dns: Resolver = async () => answers[Math.min(lookups++, answers.length - 1)]!
    const url = `http://rebind.test:${port}/string`
    const policy = parseToolHosts('')
    expect(await checkToolUrl(url, policy, dns)).toBeNull()
    expectError(await call('', { url, policy, resolve: dns }), 'TOOL_ERROR', /^Error: tool address refused: rebind\.test resolves to 10\.0\.0\.7, a private address/)
    expectError(await call('', { url, policy, resolve: dns }), 'TOOL_ERROR', /^Error: tool address refused: rebind\.test resolves to 127\.0\.0\.1, a loopback address/)
    expect(lookups).toBe(3)
    expect(connections).toBe(0)
    expect(seen).toHaveLength(0)
  })

  it('never follows a redirect, whatever its status, to a private address or an allowed one', async () => {
    const targets = ['http://127.0.0.1/', 'http://10.0.0.1/admin', 'http://[::1]/', 'http://169.254.169.254/latest/meta-data/', `http://127.0.0.1:${port}/string`]
    for (const status of [301, 302, 303, 307, 308]) {
      for (const to of targets) {
        seen.length = 0
        const out = await call(`/redirect-any?status=${status}&to=${encodeURIComponent(to)}`)
        expectError(out, 'TOOL_HTTP_STATUS', `Error: tool answered HTTP ${status}`)
        // the one request is the call itself: the Location was not requested
        expect(seen.map((x) => x.path.split('?')[0])).toEqual(['/redirect-any'])
      }
    }
  })

  it('refuses schemes other than http and https', async () => {
    expectError(await call('', { url: 'ftp://127.0.0.1/x' }), 'TOOL_ERROR', 'Error: tool call failed: unsupported URL scheme ftp:')
  })
})
