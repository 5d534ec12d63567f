// SPEC §16.7 and §11 tool execution through the real loop on one database (docs/testing.md): the rolling pool and its
// cap (C9), barriers (C10), reclassification (C11), model-order commits and hooks, context order
// (C12), abort handling, quiescence after a scheduler failure, canonical tool order; http, client and
// builtin tools, approvals (API.md §4, §7), unknown tools, argument parsing (§11.2) and `meta`.

import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp } from '../helpers/app.js'
import { expectValidLog, reconstructionCheck } from '../helpers/invariants.js'
import { d, ofType, turnEnd, types } from '../helpers/events.js'
import { Journal } from '../helpers/loop.js'
import { sleep, until } from '../helpers/wait.js'
import { loadConfig, ConfigError } from '../../src/config.js'
import type { SessionEvent, StreamChunk } from '../../src/session/index.js'

const callOf = (e: SessionEvent) => (e.type === 'tool/call' ? d(e).callId : d(e).message?.source?.callId)
const resultOf = (evs: SessionEvent[], callId: string) => evs.find((e) => e.type === 'tool/result' && callOf(e) === callId)!
const resultText = (e: SessionEvent) => d(e).message.content[0].content.map((b: any) => b.text).join('')
const seqOf = (evs: SessionEvent[], type: string, callId: string) => evs.find((e) => e.type === type && callOf(e) === callId)!.seq

/**
 * The test plugin: one builtin tool `probe` whose arguments script it (key, parallel, delay, hold,
 * abortable, flip, gatedBy, throw, text, meta, contexts), a second builtin `zeta_tool` for ordering,
 * hook recorders and a custom llm/stream source.
 */
class Probe extends Journal {
  readonly inflight = new Map<string, number>()
  readonly maxInflight = new Map<string, number>()
  readonly flags = new Set<string>()
  readonly received = new Map<string, unknown>()
  readonly postThrows = new Set<string>()
  readonly custom = new Map<string, Array<(req: any) => AsyncIterable<StreamChunk>>>()

  plugin() {
    return (root: any) =>
      root.plugin({
        name: 'test-tools',
        apply: (ctx: any) => {
          ctx.tools.register({
            name: 'probe',
            description: 'a scriptable test tool',
            parameters: { type: 'object', properties: { key: { type: 'string' } } },
            isConcurrencySafe: (args: any) => {
              if (args?.gatedBy) return !this.flags.has(args.gatedBy)
              return args?.parallel === true
            },
            execute: async (args: any, { signal, sessionId, callId }: { signal: AbortSignal; sessionId: string; callId: string }) => {
              this.received.set(`${sessionId}:${callId}`, args)
              const key = typeof args === 'object' && args && 'key' in args ? String(args.key) : callId
              this.log(sessionId, `start:${key}`)
              const n = (this.inflight.get(sessionId) ?? 0) + 1
              this.inflight.set(sessionId, n)
              this.maxInflight.set(sessionId, Math.max(n, this.maxInflight.get(sessionId) ?? 0))
              try {
                if (args?.delay) await sleep(args.delay)
                if (args?.hold) {
                  const g = this.gate(sessionId, key).promise
                  if (args.abortable) {
                    await Promise.race([
                      g,
                      new Promise((_, reject) => {
                        const fail = () => reject(new DOMException('aborted', 'AbortError'))
                        if (signal.aborted) fail()
                        signal.addEventListener('abort', fail, { once: true })
                      }),
                    ])
                  } else await g
                }
                if (args?.flip) this.flags.add(args.flip)
                if (args?.throw) throw new Error(args.throw)
                const out: Record<string, unknown> = { content: args?.text ?? `done ${key}` }
                if (args?.meta !== undefined) out.meta = args.meta
                if (args?.contexts) out.additionalContexts = args.contexts
                return out
              } finally {
                this.inflight.set(sessionId, (this.inflight.get(sessionId) ?? 1) - 1)
                this.log(sessionId, `end:${key}`)
              }
            },
          })
          ctx.tools.register({
            name: 'zeta_tool',
            description: 'sorted last',
            parameters: { type: 'object', properties: {} },
            execute: async () => ({ content: 'zeta' }),
          })
          ctx.hooks.waterfall('tools/pre-execute', async (p: any, next: () => Promise<unknown>) => {
            this.log(p.agent.id, `pre:${p.call.callId}`)
            return next()
          })
          ctx.hooks.waterfall('tools/post-execute', async (p: any, next: () => Promise<unknown>) => {
            this.log(p.agent.id, `post:${p.call.callId}`)
            if (this.postThrows.has(p.call.callId)) throw new Error('post-processing exploded')
            return next()
          })
          ctx.hooks.waterfall('llm/stream', async (req: any, next: () => Promise<unknown>) => {
            const q = this.custom.get(req.sessionId)
            if (q?.length) return q.shift()!(req)
            return next()
          })
          ctx.on('session/event', (e: any) => this.log(e.sessionId, `event:${e.type}`))
          // after post-processing, right before the result's commit (SPEC §11.6)
          ctx.on('tools/result', (p: any) => this.log(p.agent.id, `result:${p.call.callId}`))
        },
      })
  }
}

/** A stream a listener serves itself: one tool call whose arguments text is given verbatim. */
function toolCallStream(calls: Array<{ id: string; name: string; args: string }>) {
  return () =>
    (async function* () {
      let i = 0
      for (const c of calls) {
        yield { type: 'block-start', index: i, blockType: 'tool-call' } as StreamChunk
        yield { type: 'tool-call-delta', index: i, id: c.id, name: c.name, argumentsDelta: c.args } as StreamChunk
        yield { type: 'block-end', index: i, block: { type: 'tool-call', id: c.id, name: c.name, arguments: c.args } } as StreamChunk
        i++
      }
      yield { type: 'usage', usage: { inputTokens: 1, outputTokens: 1 } } as StreamChunk
      yield { type: 'finish', reason: { kind: 'tool-calls' } } as StreamChunk
    })()
}

describe('AGENTD_MAX_PARALLEL_TOOL_CALLS (SPEC §11.4)', () => {
  it('invalid caps are rejected at start; valid ones are taken', () => {
    for (const bad of ['0', 'x', '-1', '1.5', '2x']) expect(() => loadConfig({ AGENTD_MAX_PARALLEL_TOOL_CALLS: bad }), bad).toThrow(ConfigError)
    expect(() => loadConfig({ AGENTD_MAX_PARALLEL_TOOL_CALLS: '0' })).toThrow(/AGENTD_MAX_PARALLEL_TOOL_CALLS/)
    expect(loadConfig({ AGENTD_MAX_PARALLEL_TOOL_CALLS: '1' }).maxParallelToolCalls).toBe(1)
    expect(loadConfig({ AGENTD_MAX_PARALLEL_TOOL_CALLS: '3' }).maxParallelToolCalls).toBe(3)
    expect(loadConfig({}).maxParallelToolCalls).toBe(10)
  })
})

describe.each(APP_DB_KINDS)('SPEC §16.7 tools on %s', (kind) => {
  let t: TestApp
  const probe = new Probe()
  const problems: string[] = []
  let toolServer: http.Server
  let toolUrl = ''
  const toolRequests: Array<{ path: string; body: any; closed: boolean }> = []

  beforeAll(async () => {
    toolServer = http.createServer((req, res) => {
      let raw = ''
      req.on('data', (c) => (raw += c))
      req.on('end', () => {
        const rec = { path: req.url ?? '', body: JSON.parse(raw || 'null'), closed: false }
        toolRequests.push(rec)
        res.on('close', () => {
          if (!res.writableFinished) rec.closed = true
        })
        const json = (status: number, body: unknown) => {
          res.writeHead(status, { 'content-type': 'application/json' })
          res.end(JSON.stringify(body))
        }
        if (rec.path === '/status') return json(503, { content: 'unavailable' })
        if (rec.path === '/bad') return json(200, { result: 'not the shape' })
        if (rec.path === '/hang') return // never answers
        return json(200, { content: `ok ${JSON.stringify(rec.body.arguments)}` })
      })
    })
    await new Promise<void>((r) => toolServer.listen(0, '127.0.0.1', r))
    toolUrl = `http://127.0.0.1:${(toolServer.address() as AddressInfo).port}`
    t = await startTestApp({
      kind,
      env: { AGENTD_MAX_PARALLEL_TOOL_CALLS: '2', AGENTD_RATE_LIMIT_PER_MIN: '1000000' },
      plugins: [(root, db) => reconstructionCheck(db, problems)(root), (root) => probe.plugin()(root)],
    })
  })
  afterAll(async () => {
    await t?.close()
    toolServer?.closeAllConnections()
    await new Promise((r) => toolServer?.close(r))
  })

  const post = (id: string, route: string, body?: unknown) => t.api('POST', `/v1/sessions/${id}/${route}`, body)
  const probeTool = (extra: Record<string, unknown> = {}) => ({ name: 'probe', execution: { type: 'builtin' }, ...extra })
  const call = (id: string, args: Record<string, unknown>) => ({ id, name: 'probe', arguments: args })

  it('C9: the rolling pool holds at most maxParallelToolCalls; results commit and hooks run in model order', async () => {
    const s = await t.createSession({ system: 'P', tools: [probeTool()] })
    const delays = [150, 10, 80, 10, 40]
    t.models.script(s.id, { toolCalls: delays.map((delay, i) => call(`c${i + 1}`, { key: `k${i + 1}`, parallel: true, delay })) }, { text: ['done'] })
    await post(s.id, 'followup', { content: 'go' })
    const evs = await t.waitForTurnEnd(s.id, 1)
    expect(probe.maxInflight.get(s.id)).toBe(2)
    const ids = ['c1', 'c2', 'c3', 'c4', 'c5']
    expect(ofType(evs, 'tool/result').map(callOf)).toEqual(ids)
    expect(ofType(evs, 'tool/call').map(callOf)).toEqual(ids)
    // TC1 and TC2 before any result; TC3 only once one of them settled
    const firstResult = ofType(evs, 'tool/result')[0].seq
    expect(seqOf(evs, 'tool/call', 'c2')).toBeLessThan(firstResult)
    const j = probe.lines(s.id)
    expect(j.indexOf('end:k2')).toBeLessThan(j.indexOf('start:k3'))
    // call 2 finished before call 1, yet its result commits after call 1's
    expect(j.indexOf('end:k2')).toBeLessThan(j.indexOf('end:k1'))
    expect(j.filter((l) => l.startsWith('pre:'))).toEqual(ids.map((c) => `pre:${c}`))
    expect(j.filter((l) => l.startsWith('post:'))).toEqual(ids.map((c) => `post:${c}`))
    for (const c of ids) expect(resultOf(evs, c).sourceEventSeqs).toEqual([seqOf(evs, 'tool/call', c)])
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'completed' })
    expectValidLog(evs)
    expect(problems).toEqual([])
  })

  it('cap 1 is serial', async () => {
    // the cap is deployment-wide and re-read per group (SPEC §11.4): set this deployment's to 1
    // (the env parsing of AGENTD_MAX_PARALLEL_TOOL_CALLS is checked above; a second app costs seconds)
    const before = t.app.config.maxParallelToolCalls
    t.app.config.maxParallelToolCalls = 1
    try {
      const s = await t.createSession({ system: 'P', tools: [probeTool()] })
      t.models.script(s.id, { toolCalls: [1, 2, 3].map((i) => call(`c${i}`, { key: `k${i}`, parallel: true, delay: 30 })) }, { text: ['done'] })
      await post(s.id, 'followup', { content: 'go' })
      const evs = await t.waitForTurnEnd(s.id, 1)
      expect(probe.maxInflight.get(s.id)).toBe(1)
      expect(probe.lines(s.id).filter((l) => /^(start|end):/.test(l))).toEqual(['start:k1', 'end:k1', 'start:k2', 'end:k2', 'start:k3', 'end:k3'])
      expect(ofType(evs, 'tool/result').map(callOf)).toEqual(['c1', 'c2', 'c3'])
      expectValidLog(evs)
    } finally {
      t.app.config.maxParallelToolCalls = before
    }
  })

  it('C10: barriers: for [parallel, exclusive, parallel], B starts after A is done and C after B', async () => {
    const s = await t.createSession({ system: 'P', tools: [probeTool()] })
    t.models.script(s.id, { toolCalls: [call('a', { key: 'A', parallel: true, delay: 60 }), call('b', { key: 'B', delay: 60 }), call('c', { key: 'C', parallel: true, delay: 10 })] }, { text: ['done'] })
    await post(s.id, 'followup', { content: 'go' })
    const evs = await t.waitForTurnEnd(s.id, 1)
    expect(probe.lines(s.id).filter((l) => /^(start|end):/.test(l))).toEqual(['start:A', 'end:A', 'start:B', 'end:B', 'start:C', 'end:C'])
    expect(seqOf(evs, 'tool/call', 'b')).toBeGreaterThan(seqOf(evs, 'tool/result', 'a'))
    expect(seqOf(evs, 'tool/call', 'c')).toBeGreaterThan(seqOf(evs, 'tool/result', 'b'))
    expectValidLog(evs)
  })

  it('C11: reclassification: a call made exclusive by an earlier result does not start in the pool; it runs afterwards as a barrier', async () => {
    const s = await t.createSession({ system: 'P', tools: [probeTool()] })
    const flag = `lock-${s.id}`
    t.models.script(s.id, {
      toolCalls: [
        call('c1', { key: 'one', parallel: true, hold: true, flip: flag }),
        call('c2', { key: 'two', parallel: true, hold: true }),
        call('c3', { key: 'three', gatedBy: flag }),
      ],
    }, { text: ['done'] })
    await post(s.id, 'followup', { content: 'go' })
    await until('calls 1 and 2 to run', () => probe.lines(s.id).includes('start:one') && probe.lines(s.id).includes('start:two'))
    // call 1 ends and flips the flag: call 3 is now exclusive and must wait for call 2
    probe.gate(s.id, 'one').open()
    await t.waitFor(s.id, (e) => e.type === 'tool/result' && callOf(e) === 'c1')
    probe.gate(s.id, 'two').open()
    const evs = await t.waitForTurnEnd(s.id, 1)
    const j = probe.lines(s.id)
    expect(j.indexOf('end:two')).toBeLessThan(j.indexOf('start:three'))
    expect(seqOf(evs, 'tool/call', 'c3')).toBeGreaterThan(seqOf(evs, 'tool/result', 'c2'))
    expect(ofType(evs, 'tool/result').map(callOf)).toEqual(['c1', 'c2', 'c3'])
    expectValidLog(evs)
  })

  it('C12: contexts of two tools enter step 2 as user messages in model order, after both results', async () => {
    const s = await t.createSession({ system: 'P', tools: [probeTool()] })
    t.models.script(s.id, {
      toolCalls: [call('c1', { key: 'a', parallel: true, delay: 40, contexts: ['context one'] }), call('c2', { key: 'b', parallel: true, contexts: [{ content: 'context two' }] })],
    }, { text: ['done'] })
    await post(s.id, 'followup', { content: 'go' })
    const evs = await t.waitForTurnEnd(s.id, 1)
    const users = ofType(evs, 'user/message').slice(1)
    expect(users.map((e) => d(e).content[0].text)).toEqual(['context one', 'context two'])
    for (const u of users) {
      expect(d(u).source).toEqual({ kind: 'plugin', plugin: 'test-tools' })
      expect(u.seq).toBeGreaterThan(seqOf(evs, 'tool/result', 'c2'))
    }
    // they enter at step 2, after its step/start
    const step2 = evs.find((e) => e.type === 'step/start' && d(e).step === 2)!
    expect(users[0].seq).toBeGreaterThan(step2.seq)
    const req2 = t.models.requestsOf(s.id)[1]
    expect(req2.context.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'toolResult', 'toolResult', 'user', 'user'])
    expectValidLog(evs)
    expect(problems).toEqual([])
  })

  it('abort handling: a running builtin that honours its signal ends TOOL_ABORTED and the turn aborted', async () => {
    const s = await t.createSession({ system: 'P', tools: [probeTool()] })
    t.models.script(s.id, { toolCalls: [call('c1', { key: 'wait', hold: true, abortable: true })] })
    await post(s.id, 'followup', { content: 'go' })
    await until('the tool to run', () => probe.lines(s.id).includes('start:wait'))
    await post(s.id, 'cancel', {})
    const evs = await t.waitForTurnEnd(s.id, 1)
    const r = resultOf(evs, 'c1')
    expect(d(r).error).toEqual({ name: 'AbortError', code: 'TOOL_ABORTED' })
    expect(d(r).message.content[0]).toMatchObject({ isError: true, content: [{ type: 'text', text: 'Error: tool call aborted' }] })
    expect(types(evs).slice(-4)).toEqual(['tool/call', 'tool/result', 'step/end', 'turn/end'])
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'aborted', reason: { kind: 'user' } })
    expectValidLog(evs)
  })

  it('quiescence after a scheduler failure: no further starts, started calls are awaited, no invented results, the turn ends error', async () => {
    // the failure: call 2's additional context reuses the id call 1's context made pending, so the
    // commit of call 2's result fails (SPEC §4.2 step 3) — a failure of the scheduler, not of a tool
    const s = await t.createSession({ system: 'P', tools: [probeTool()] })
    const dup = `dup-${s.id}`
    t.models.script(s.id, {
      toolCalls: [
        call('c1', { key: 'a', parallel: true, contexts: [{ content: 'x', id: dup }] }),
        call('c2', { key: 'b', parallel: true, hold: true, contexts: [{ content: 'y', id: dup }] }),
        call('c3', { key: 'c', parallel: true, hold: true }),
        call('c4', { key: 'd' }),
      ],
    })
    await post(s.id, 'followup', { content: 'go' })
    await until('calls b and c to run', () => probe.lines(s.id).includes('start:b') && probe.lines(s.id).includes('start:c'))
    probe.gate(s.id, 'b').open()
    await t.waitFor(s.id, (e) => e.type === 'tool/result' && callOf(e) === 'c1')
    // the probe: call 2 reached its commit, which fails on the duplicate context id without a
    // database round trip; call c is held, so the turn cannot have ended
    await until('call 2 to reach its commit', () => probe.lines(s.id).includes('result:c2'))
    expect(types(await t.events(s.id))).not.toContain('turn/end')
    probe.gate(s.id, 'c').open()
    const evs = await t.waitForTurnEnd(s.id, 1)
    const j = probe.lines(s.id)
    expect(j).not.toContain('start:d')
    expect(j.indexOf('end:c')).toBeLessThan(j.indexOf('event:turn/end'))
    expect(ofType(evs, 'tool/call').map(callOf)).toEqual(['c1', 'c2', 'c3'])
    expect(ofType(evs, 'tool/result').map(callOf)).toEqual(['c1'])
    expect(types(evs).slice(-2)).toEqual(['step/end', 'turn/end'])
    const reason = d(turnEnd(evs, 1)).reason
    expect(reason.kind).toBe('error')
    expect(reason.error.message).toContain(dup)
    expectValidLog(evs)
  })

  it('a throwing tools/post-execute listener becomes an isError TOOL_ERROR result and the turn goes on', async () => {
    const s = await t.createSession({ system: 'P', tools: [probeTool()] })
    const callId = `pt-${s.id}`
    probe.postThrows.add(callId)
    t.models.script(s.id, { toolCalls: [call(callId, { key: 'p' })] }, { text: ['ok'] })
    await post(s.id, 'followup', { content: 'go' })
    const evs = await t.waitForTurnEnd(s.id, 1)
    const r = resultOf(evs, callId)
    expect(d(r).error).toEqual({ name: 'ToolError', code: 'TOOL_ERROR' })
    expect(resultText(r)).toMatch(/^Error: /)
    expect(resultText(r)).toContain('post-processing exploded')
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'completed' })
    expect(ofType(evs, 'step/start')).toHaveLength(2)
    expectValidLog(evs)
  })

  it('the header lists tools in canonical (name) order whatever the session order', async () => {
    const s = await t.createSession({
      system: 'P',
      tools: [
        { name: 'zeta_tool', execution: { type: 'builtin' } },
        { name: 'mid', description: 'client', execution: { type: 'client' } },
        { name: 'alpha', description: 'http', parameters: { type: 'object', properties: {} }, execution: { type: 'http', url: `${toolUrl}/ok` } },
        probeTool(),
      ],
    })
    t.models.script(s.id, { text: ['hi'] })
    await post(s.id, 'followup', { content: 'go' })
    const evs = await t.waitForTurnEnd(s.id, 1)
    const header = d(ofType(evs, 'request/header')[0]).header
    expect(header.tools.map((x: any) => x.name)).toEqual(['alpha', 'mid', 'probe', 'zeta_tool'])
    expect(t.models.requestsOf(s.id)[0].context.tools?.map((x) => x.name)).toEqual(['alpha', 'mid', 'probe', 'zeta_tool'])
    expectValidLog(evs)
    expect(problems).toEqual([])
  })

  it('http tools: non-2xx → TOOL_HTTP_STATUS, bad shape → TOOL_BAD_RESULT, timeout → TOOL_TIMEOUT, each an "Error: " result the model sees', async () => {
    const httpTool = (name: string, path: string, timeoutMs?: number) => ({ name, description: name, parameters: { type: 'object', properties: {} }, execution: { type: 'http', url: `${toolUrl}${path}`, ...(timeoutMs ? { timeoutMs } : {}) } })
    const s = await t.createSession({ system: 'P', tools: [httpTool('status', '/status'), httpTool('bad', '/bad'), httpTool('slow', '/hang', 200), httpTool('fine', '/ok')] })
    t.models.script(s.id, {
      toolCalls: [
        { id: 'h1', name: 'status', arguments: {} },
        { id: 'h2', name: 'bad', arguments: {} },
        { id: 'h3', name: 'slow', arguments: {} },
        { id: 'h4', name: 'fine', arguments: { q: 1 } },
      ],
    }, { text: ['seen'] })
    await post(s.id, 'followup', { content: 'go' })
    const evs = await t.waitForTurnEnd(s.id, 1)
    const expectError = (callId: string, code: string, text: string) => {
      const r = resultOf(evs, callId)
      expect(d(r).error).toEqual({ name: 'ToolError', code })
      expect(d(r).message.content[0].isError).toBe(true)
      expect(resultText(r)).toBe(text)
    }
    expectError('h1', 'TOOL_HTTP_STATUS', 'Error: tool answered HTTP 503')
    expectError('h2', 'TOOL_BAD_RESULT', 'Error: tool answered an invalid result')
    expectError('h3', 'TOOL_TIMEOUT', 'Error: tool call timed out after 200 ms')
    const ok = resultOf(evs, 'h4')
    expect(d(ok).error).toBeUndefined()
    expect(resultText(ok)).toBe('ok {"q":1}')
    // the POST body of API.md §4
    const sent = toolRequests.find((r) => r.body?.callId === 'h4' && r.body?.sessionId === s.id)!
    expect(sent.body).toEqual({ sessionId: s.id, callId: 'h4', name: 'fine', arguments: { q: 1 }, rawArguments: '{"q":1}' })
    // the model sees all four results next step
    const req2 = t.models.requestsOf(s.id)[1]
    const results = req2.context.messages.filter((m) => m.role === 'toolResult') as any[]
    expect(results.map((m) => [m.toolCallId, m.isError])).toEqual([['h1', true], ['h2', true], ['h3', true], ['h4', false]])
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'completed' })
    expectValidLog(evs)
    expect(problems).toEqual([])
  })

  it('a cancel aborts a running http call: TOOL_ABORTED, and the tool server sees the request go away', async () => {
    const s = await t.createSession({ system: 'P', tools: [{ name: 'slow', description: 'slow', parameters: { type: 'object', properties: {} }, execution: { type: 'http', url: `${toolUrl}/hang` } }] })
    t.models.script(s.id, { toolCalls: [{ id: 'h1', name: 'slow', arguments: {} }] })
    await post(s.id, 'followup', { content: 'go' })
    const sent = await until('the http call', () => toolRequests.find((r) => r.body?.sessionId === s.id))
    await post(s.id, 'cancel', {})
    const evs = await t.waitForTurnEnd(s.id, 1)
    expect(d(resultOf(evs, 'h1')).error).toEqual({ name: 'AbortError', code: 'TOOL_ABORTED' })
    expect(resultText(resultOf(evs, 'h1'))).toBe('Error: tool call aborted')
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'aborted', reason: { kind: 'user' } })
    await until('the request to close', () => sent.closed)
    expectValidLog(evs)
  })

  it('client tools (API.md §7): pending once the tools/pre-execute listener allowed the call, answered by POST tool-results; a second answer is 409', async () => {
    const s = await t.createSession({ system: 'P', tools: [{ name: 'ask_user', description: 'asks', parameters: { type: 'object', properties: { q: { type: 'string' } } }, execution: { type: 'client' } }] })
    t.models.script(s.id, { toolCalls: [{ id: 'k1', name: 'ask_user', arguments: { q: 'colour?' } }] }, { text: ['thanks'] })
    await post(s.id, 'followup', { content: 'go' })
    await t.waitFor(s.id, (e) => e.type === 'tool/call')
    // this app has a tools/pre-execute listener: the client is asked after it, not with the tool/call
    const pending = await until('the client call to be pending', async () => {
      const p = await t.api('GET', `/v1/sessions/${s.id}/pending`)
      return p.body.toolCalls.length ? p : undefined
    })
    expect(probe.lines(s.id)).toContain('pre:k1')
    expect(pending.status).toBe(200)
    expect(pending.body).toEqual({ toolCalls: [{ callId: 'k1', name: 'ask_user', arguments: { q: 'colour?' }, rawArguments: '{"q":"colour?"}', kind: 'client' }] })
    const a = await post(s.id, 'tool-results', { callId: 'k1', content: 'blue' })
    expect(a.status).toBe(202)
    const again = await post(s.id, 'tool-results', { callId: 'k1', content: 'red' })
    expect(again.status).toBe(409)
    expect(again.body.error.code).toBe('tool-call-not-pending')
    const evs = await t.waitForTurnEnd(s.id, 1)
    const r = resultOf(evs, 'k1')
    expect(d(r).message.content[0]).toEqual({ type: 'tool-result', toolCallId: 'k1', isError: false, content: [{ type: 'text', text: 'blue' }] })
    expect(d(r).error).toBeUndefined()
    expect((await t.api('GET', `/v1/sessions/${s.id}/pending`)).body).toEqual({ toolCalls: [] })
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'completed' })
    const late = await post(s.id, 'tool-results', { callId: 'k1', content: 'green' })
    expect(late.status).toBe(409)
    expectValidLog(evs)
    expect(problems).toEqual([])
  })

  it('a cancel settles a waiting client call with TOOL_ABORTED and clears it from pending', async () => {
    const s = await t.createSession({ system: 'P', tools: [{ name: 'ask_user', description: 'asks', parameters: { type: 'object', properties: {} }, execution: { type: 'client' } }] })
    t.models.script(s.id, { toolCalls: [{ id: 'k1', name: 'ask_user', arguments: {} }] })
    await post(s.id, 'followup', { content: 'go' })
    await t.waitFor(s.id, (e) => e.type === 'tool/call')
    await post(s.id, 'cancel', {})
    const evs = await t.waitForTurnEnd(s.id, 1)
    const r = resultOf(evs, 'k1')
    expect(d(r).error).toEqual({ name: 'AbortError', code: 'TOOL_ABORTED' })
    expect(resultText(r)).toBe('Error: tool call aborted')
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'aborted', reason: { kind: 'user' } })
    expect((await t.api('GET', `/v1/sessions/${s.id}/pending`)).body).toEqual({ toolCalls: [] })
    expect((await post(s.id, 'tool-results', { callId: 'k1', content: 'late' })).status).toBe(409)
    expectValidLog(evs)
  })

  it('approval "always": the call waits as pending kind approval; a denial becomes a TOOL_DENIED result the model sees', async () => {
    const s = await t.createSession({ system: 'P', tools: [probeTool({ approval: 'always' })] })
    t.models.script(s.id, { toolCalls: [call('v1', { key: 'guarded' })] }, { text: ['understood'] })
    await post(s.id, 'followup', { content: 'go' })
    await t.waitFor(s.id, (e) => e.type === 'tool/call')
    const pending = await until('the approval to be pending', async () => {
      const p = await t.api('GET', `/v1/sessions/${s.id}/pending`)
      return p.body.toolCalls.length ? p.body : undefined
    })
    expect(pending.toolCalls).toEqual([{ callId: 'v1', name: 'probe', arguments: { key: 'guarded' }, rawArguments: '{"key":"guarded"}', kind: 'approval' }])
    expect(probe.lines(s.id)).not.toContain('start:guarded')
    expect((await post(s.id, 'approvals/v1', { decision: 'deny', reason: 'not today' })).status).toBe(202)
    expect((await post(s.id, 'approvals/v1', { decision: 'allow' })).status).toBe(409)
    const evs = await t.waitForTurnEnd(s.id, 1)
    const r = resultOf(evs, 'v1')
    expect(d(r).error).toEqual({ name: 'ToolError', code: 'TOOL_DENIED' })
    expect(resultText(r)).toBe('Error: tool call denied: not today')
    expect(probe.lines(s.id)).not.toContain('start:guarded')
    // a denial is still post-processed (SPEC §11.5)
    expect(probe.lines(s.id)).toContain('post:v1')
    const req2 = t.models.requestsOf(s.id)[1]
    const tr = req2.context.messages.find((m) => m.role === 'toolResult') as any
    expect(tr.isError).toBe(true)
    expect(JSON.stringify(tr.content)).toContain('tool call denied: not today')
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'completed' })
    expectValidLog(evs)
  })

  it('approval "always": an allow runs the tool', async () => {
    const s = await t.createSession({ system: 'P', tools: [probeTool({ approval: 'always' })] })
    t.models.script(s.id, { toolCalls: [call('v1', { key: 'guarded', text: 'ran' })] }, { text: ['ok'] })
    await post(s.id, 'followup', { content: 'go' })
    await until('the approval to be pending', async () => (await t.api('GET', `/v1/sessions/${s.id}/pending`)).body.toolCalls.length === 1)
    expect((await post(s.id, 'approvals/v1', { decision: 'allow' })).status).toBe(202)
    const evs = await t.waitForTurnEnd(s.id, 1)
    expect(resultText(resultOf(evs, 'v1'))).toBe('ran')
    expect(d(resultOf(evs, 'v1')).error).toBeUndefined()
    expect(probe.lines(s.id)).toContain('start:guarded')
    expectValidLog(evs)
  })

  const askUser = { name: 'ask_user', description: 'asks', parameters: { type: 'object', properties: { q: { type: 'string' } } }, execution: { type: 'client' }, approval: 'always' }
  const pendingOf = async (id: string) => (await t.api('GET', `/v1/sessions/${id}/pending`)).body.toolCalls as Array<{ callId: string; kind: string }>

  it('a client tool with approval "always" (API.md §4, §7): the approver first; once allowed the same call is pending as kind client, and the posted result ends it', async () => {
    const s = await t.createSession({ system: 'P', tools: [askUser] })
    t.models.script(s.id, { toolCalls: [{ id: 'k1', name: 'ask_user', arguments: { q: 'colour?' } }] }, { text: ['thanks'] })
    await post(s.id, 'followup', { content: 'go' })
    await until('the approval to be pending', async () => (await pendingOf(s.id)).length === 1)
    expect(await pendingOf(s.id)).toEqual([{ callId: 'k1', name: 'ask_user', arguments: { q: 'colour?' }, rawArguments: '{"q":"colour?"}', kind: 'approval' }])
    // the client is not asked before the approver allowed the call
    expect((await post(s.id, 'tool-results', { callId: 'k1', content: 'too early' })).status).toBe(409)
    expect((await post(s.id, 'approvals/k1', { decision: 'allow' })).status).toBe(202)
    await until('the client call to be pending', async () => (await pendingOf(s.id))[0]?.kind === 'client')
    expect(await pendingOf(s.id)).toEqual([{ callId: 'k1', name: 'ask_user', arguments: { q: 'colour?' }, rawArguments: '{"q":"colour?"}', kind: 'client' }])
    expect((await t.api('GET', `/v1/sessions/${s.id}`)).body.status).toBe('running')
    expect((await post(s.id, 'approvals/k1', { decision: 'allow' })).status).toBe(409)
    expect((await post(s.id, 'tool-results', { callId: 'k1', content: 'blue' })).status).toBe(202)
    expect((await post(s.id, 'tool-results', { callId: 'k1', content: 'red' })).status).toBe(409)
    const evs = await t.waitForTurnEnd(s.id, 1)
    const r = resultOf(evs, 'k1')
    expect(d(r).message.content[0]).toEqual({ type: 'tool-result', toolCallId: 'k1', isError: false, content: [{ type: 'text', text: 'blue' }] })
    expect(d(r).error).toBeUndefined()
    expect(r.sourceEventSeqs).toEqual([seqOf(evs, 'tool/call', 'k1')])
    // one tool/call, one tool/result: the approval and the client's wait are phases of the same call
    expect(ofType(evs, 'tool/call').map(callOf)).toEqual(['k1'])
    expect(ofType(evs, 'tool/result').map(callOf)).toEqual(['k1'])
    const tr = t.models.requestsOf(s.id)[1].context.messages.find((m) => m.role === 'toolResult') as any
    expect(tr).toMatchObject({ toolCallId: 'k1', isError: false, content: [{ type: 'text', text: 'blue' }] })
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'completed' })
    expect(await pendingOf(s.id)).toEqual([])
    expect((await post(s.id, 'tool-results', { callId: 'k1', content: 'late' })).status).toBe(409)
    expectValidLog(evs)
    expect(problems).toEqual([])
  })

  it('a client tool with approval "always", denied: TOOL_DENIED, and the client is never asked', async () => {
    const s = await t.createSession({ system: 'P', tools: [askUser] })
    t.models.script(s.id, { toolCalls: [{ id: 'k1', name: 'ask_user', arguments: {} }] }, { text: ['understood'] })
    await post(s.id, 'followup', { content: 'go' })
    await until('the approval to be pending', async () => (await pendingOf(s.id)).length === 1)
    expect((await post(s.id, 'approvals/k1', { decision: 'deny', reason: 'not now' })).status).toBe(202)
    const evs = await t.waitForTurnEnd(s.id, 1)
    const r = resultOf(evs, 'k1')
    expect(d(r).error).toEqual({ name: 'ToolError', code: 'TOOL_DENIED' })
    expect(resultText(r)).toBe('Error: tool call denied: not now')
    expect((await post(s.id, 'tool-results', { callId: 'k1', content: 'late' })).status).toBe(409)
    expect(await pendingOf(s.id)).toEqual([])
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'completed' })
    expectValidLog(evs)
  })

  it('a client tool with approval "always": a cancel while the allowed call waits for the client settles it TOOL_ABORTED', async () => {
    const s = await t.createSession({ system: 'P', tools: [askUser] })
    t.models.script(s.id, { toolCalls: [{ id: 'k1', name: 'ask_user', arguments: {} }] })
    await post(s.id, 'followup', { content: 'go' })
    await until('the approval to be pending', async () => (await pendingOf(s.id)).length === 1)
    expect((await post(s.id, 'approvals/k1', { decision: 'allow' })).status).toBe(202)
    await until('the client call to be pending', async () => (await pendingOf(s.id))[0]?.kind === 'client')
    await post(s.id, 'cancel', {})
    const evs = await t.waitForTurnEnd(s.id, 1)
    expect(d(resultOf(evs, 'k1')).error).toEqual({ name: 'AbortError', code: 'TOOL_ABORTED' })
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'aborted', reason: { kind: 'user' } })
    expect(await pendingOf(s.id)).toEqual([])
    expect((await post(s.id, 'tool-results', { callId: 'k1', content: 'late' })).status).toBe(409)
    expectValidLog(evs)
  })

  it('a cancel while an approval is pending resolves it deny: TOOL_DENIED, and the tool never runs', async () => {
    const s = await t.createSession({ system: 'P', tools: [probeTool({ approval: 'always' })] })
    t.models.script(s.id, { toolCalls: [call('v1', { key: 'guarded' })] })
    await post(s.id, 'followup', { content: 'go' })
    await until('the approval to be pending', async () => (await t.api('GET', `/v1/sessions/${s.id}/pending`)).body.toolCalls.length === 1)
    await post(s.id, 'cancel', {})
    const evs = await t.waitForTurnEnd(s.id, 1)
    const r = resultOf(evs, 'v1')
    expect(d(r).error).toEqual({ name: 'ToolError', code: 'TOOL_DENIED' })
    expect(resultText(r)).toMatch(/^Error: tool call denied: /)
    expect(probe.lines(s.id)).not.toContain('start:guarded')
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'aborted', reason: { kind: 'user' } })
    expect((await t.api('GET', `/v1/sessions/${s.id}/pending`)).body).toEqual({ toolCalls: [] })
    expectValidLog(evs)
  })

  it('an unknown tool name from the model becomes an UNKNOWN_TOOL error result and the turn continues', async () => {
    const s = await t.createSession({ system: 'P', tools: [probeTool()] })
    t.models.script(s.id, { toolCalls: [{ id: 'u1', name: 'no_such_tool', arguments: {} }] }, { text: ['sorry'] })
    await post(s.id, 'followup', { content: 'go' })
    const evs = await t.waitForTurnEnd(s.id, 1)
    const r = resultOf(evs, 'u1')
    expect(d(r).error).toEqual({ name: 'ToolError', code: 'UNKNOWN_TOOL' })
    expect(d(r).message.content[0].isError).toBe(true)
    expect(resultText(r)).toMatch(/^Error: /)
    expect(ofType(evs, 'step/start')).toHaveLength(2)
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'completed' })
    expectValidLog(evs)
  })

  it('a throwing builtin becomes a TOOL_ERROR result carrying the message', async () => {
    const s = await t.createSession({ system: 'P', tools: [probeTool()] })
    t.models.script(s.id, { toolCalls: [call('e1', { key: 'boom', throw: 'the body exploded' })] }, { text: ['noted'] })
    await post(s.id, 'followup', { content: 'go' })
    const evs = await t.waitForTurnEnd(s.id, 1)
    const r = resultOf(evs, 'e1')
    expect(d(r).error).toEqual({ name: 'ToolError', code: 'TOOL_ERROR' })
    expect(resultText(r)).toMatch(/^Error: .*the body exploded/)
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'completed' })
    expectValidLog(evs)
  })

  it("argument parsing (SPEC §11.2): '' gives {}, text that is not JSON is handed over as the raw string", async () => {
    const s = await t.createSession({ system: 'P', tools: [probeTool()] })
    probe.custom.set(s.id, [toolCallStream([{ id: 'a1', name: 'probe', args: '' }, { id: 'a2', name: 'probe', args: '{not json' }])])
    t.models.script(s.id, { text: ['ok'] })
    await post(s.id, 'followup', { content: 'go' })
    const evs = await t.waitForTurnEnd(s.id, 1)
    expect(probe.received.get(`${s.id}:a1`)).toEqual({})
    expect(probe.received.get(`${s.id}:a2`)).toBe('{not json')
    expect(ofType(evs, 'tool/call').map((e) => d(e).arguments)).toEqual(['', '{not json'])
    expect(d(turnEnd(evs, 1)).reason).toEqual({ kind: 'completed' })
    expectValidLog(evs)
  })

  it('`meta` from a builtin persists in tool/result', async () => {
    const s = await t.createSession({ system: 'P', tools: [probeTool()] })
    const meta = { rows: [1, 2, 3], source: { db: 'orders' }, ok: true, none: null }
    t.models.script(s.id, { toolCalls: [call('m1', { key: 'm', meta })] }, { text: ['ok'] })
    await post(s.id, 'followup', { content: 'go' })
    const evs = await t.waitForTurnEnd(s.id, 1)
    expect(d(resultOf(evs, 'm1')).meta).toEqual(meta)
    // meta is log-only: the model's tool result carries the content alone
    const tr = t.models.requestsOf(s.id)[1].context.messages.find((m) => m.role === 'toolResult') as any
    expect(JSON.stringify(tr)).not.toContain('orders')
    expectValidLog(evs)
  })
})
