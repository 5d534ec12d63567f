// The tool pipeline of SPEC §11 with a fake tool host: a journal of the driver's effects (tool/call,
// pending rows, waits, results), hooks as a plain waterfall, builtins in a fake registry. Planning
// and classification (§11.2–§11.3), model-order appends and commits (§11.4–§11.6), errors as results
// (§11.7, §18.13), approvals and client calls (§18.10), post-processing and contexts (§11.6),
// cancellation (§11.8) and a scheduler failure that starts nothing more (§11.7).

import { describe, expect, it } from 'vitest'
import type { ContentBlock, ToolCallBlock } from '../../src/session/index.js'
import { parseToolHosts, runToolCalls, type FinishedCall, type ToolEffects, type ToolEnv, type ToolSpec } from '../../src/tools/index.js'
import type { RegisteredTool } from '../../src/tools/index.js'
import { gate } from '../helpers/scripted.js'

type Listener = (payload: any, next: (p?: unknown) => Promise<any>) => unknown

/** A waterfall as hooks/ runs it: first listener outermost, `next()` runs the rest down to the default. */
function fakeHooks(listeners: Record<string, Listener[]> = {}): ToolEnv['hooks'] {
  return {
    count: (name) => listeners[name]?.length ?? 0,
    async runWaterfall<T>(name: string, payload: unknown, innermost: (p: any) => T | Promise<T>): Promise<T> {
      const chain = listeners[name] ?? []
      const run = async (i: number, p: unknown): Promise<T> => (i < chain.length ? ((await chain[i](p, (q) => run(i + 1, q ?? p))) as T) : innermost(p))
      return run(0, payload)
    },
  }
}

const call = (id: string, name: string, args: unknown = {}): ToolCallBlock => ({ type: 'tool-call', id, name, arguments: typeof args === 'string' ? args : JSON.stringify(args) })
const builtin = (name: string, execute: RegisteredTool['execute'], more: Partial<RegisteredTool> = {}): RegisteredTool => ({ name, description: name, parameters: { type: 'object', properties: {} }, plugin: 'test-plugin', execute, ...more })
const specOf = (t: RegisteredTool | string, more: Partial<ToolSpec> = {}): ToolSpec => ({ name: typeof t === 'string' ? t : t.name, execution: { type: 'builtin' }, ...more })
const text = (f: FinishedCall) => f.outcome.content.map((b) => (b as { text?: string }).text).join('')

interface Host {
  env: ToolEnv
  fx: ToolEffects
  journal: string[]
  results: Map<string, FinishedCall>
  notified: Array<{ name: string; payload: any }>
  warned: string[]
  abort: AbortController
}

/**
 * A fake driver. `answers` by `callId:kind` (or `callId` for any kind); the journal shows the pending
 * row a tool/call carries, a row written later (`pending:`) and each wait, as the driver does them:
 * a row already open as the kind asked for is not written again.
 */
function host(o: { tools?: RegisteredTool[]; specs?: ToolSpec[]; listeners?: Record<string, Listener[]>; answers?: Record<string, unknown>; maxParallel?: number; commit?: (callId: string) => Promise<void> | void } = {}): Host {
  const journal: string[] = []
  const results = new Map<string, FinishedCall>()
  const notified: Host['notified'] = []
  const warned: string[] = []
  const abort = new AbortController()
  const tools = new Map((o.tools ?? []).map((t) => [t.name, t]))
  let seq = 100
  const rows = new Map<string, 'client' | 'approval'>()
  const env: ToolEnv = {
    sessionId: 'ses_test',
    signal: abort.signal,
    specs: o.specs ?? (o.tools ?? []).map((t) => specOf(t)),
    registry: { get: (name) => tools.get(name) },
    hooks: fakeHooks(o.listeners),
    handle: (plugin) => ({ handleOf: plugin ?? 'agentd' }),
    bind: (p) => p,
    policy: parseToolHosts(''),
    maxParallel: () => o.maxParallel ?? 10,
    notify: (name, payload) => void notified.push({ name, payload }),
    log: { warn: (_o, msg) => void warned.push(msg) },
  }
  const fx: ToolEffects = {
    async appendCall(p, { client, approval }) {
      const row = client ? 'client' : approval ? 'approval' : undefined
      if (row) rows.set(p.callId, row)
      journal.push(`call:${p.callId}${row ? ` (${row})` : ''}`)
      return seq++
    },
    async openPending(p, _callSeq, kind) {
      if (rows.get(p.callId) === kind) return
      rows.set(p.callId, kind)
      journal.push(`pending:${p.callId}:${kind}`)
    },
    async waitAnswer(callId, kind) {
      journal.push(`wait:${callId}:${kind}`)
      return o.answers?.[`${callId}:${kind}`] ?? o.answers?.[callId]
    },
    async commitResult(p, callSeq, f) {
      await o.commit?.(p.callId)
      journal.push(`result:${p.callId}@${callSeq}`)
      results.set(p.callId, f)
    },
    async abortUnstarted(p, outcome) {
      journal.push(`aborted:${p.callId}`)
      results.set(p.callId, { outcome, contexts: [] })
    },
  }
  return { env, fx, journal, results, notified, warned, abort }
}

describe('runToolCalls: planning, order and classification (SPEC §11.2–§11.6)', () => {
  it('parses arguments ("" → {}, JSON → value, else the raw text), appends and commits in model order, citing each tool/call', async () => {
    const seen: unknown[] = []
    const echo = builtin('echo', (args) => {
      seen.push(args)
      return { content: 'ok' }
    })
    const h = host({ tools: [echo] })
    await runToolCalls([call('c1', 'echo', ''), call('c2', 'echo', { a: 1 }), call('c3', 'echo', 'not json')], h.env, h.fx)
    expect(seen).toEqual([{}, { a: 1 }, 'not json'])
    expect(h.journal).toEqual(['call:c1', 'result:c1@100', 'call:c2', 'result:c2@101', 'call:c3', 'result:c3@102'])
  })

  it('parallel builtins run at once, but results still commit in model order', async () => {
    const first = gate()
    const order: string[] = []
    const par = builtin(
      'par',
      async (args: any) => {
        if (args.n === 1) await first.promise
        order.push(`body:${args.n}`)
        if (args.n === 2) first.open()
        return { content: `r${args.n}` }
      },
      { isConcurrencySafe: () => true },
    )
    const h = host({ tools: [par] })
    await runToolCalls([call('c1', 'par', { n: 1 }), call('c2', 'par', { n: 2 })], h.env, h.fx)
    expect(order).toEqual(['body:2', 'body:1'])
    expect(h.journal).toEqual(['call:c1', 'call:c2', 'result:c1@100', 'result:c2@101'])
  })

  it('only an isConcurrencySafe answering exactly true is parallel: a truthy value or a throw runs exclusive', async () => {
    /** the most bodies of the batch that ran at once; each holds for a macrotask */
    const overlap = async (isConcurrencySafe: () => unknown) => {
      let running = 0
      let most = 0
      const body = async () => {
        most = Math.max(most, ++running)
        await new Promise((r) => setImmediate(r))
        running--
        return { content: 'x' }
      }
      const h = host({ tools: [builtin('t', body, { isConcurrencySafe })] })
      await runToolCalls([call('a', 't'), call('b', 't'), call('c', 't')], h.env, h.fx)
      return most
    }
    expect(await overlap(() => true)).toBe(3)
    expect(await overlap(() => 'yes')).toBe(1)
    expect(await overlap(() => 1)).toBe(1)
    expect(await overlap(() => {
      throw new Error('no')
    })).toBe(1)
  })

  it('a concluding result makes the batch conclude (SPEC §11.6)', async () => {
    const h = host({ tools: [builtin('done', () => ({ content: 'bye', concludesTurn: true })), builtin('more', () => ({ content: 'x' }))] })
    expect(await runToolCalls([call('c1', 'more')], h.env, h.fx)).toEqual({ concludes: false })
    expect(await runToolCalls([call('c2', 'more'), call('c3', 'done')], h.env, h.fx)).toEqual({ concludes: true })
  })
})

describe('runToolCalls: errors become results (SPEC §11.7, §18.13)', () => {
  it('unknown tools, throwing bodies and invalid results are isError results with one-line Error: texts', async () => {
    const h = host({
      tools: [builtin('boom', () => { throw new Error('it broke\n  badly') }), builtin('bad', () => ({ content: 42 }) as never)],
      specs: [specOf('boom'), specOf('bad'), specOf('gone')],
    })
    await runToolCalls([call('c1', 'nosuch'), call('c2', 'boom'), call('c3', 'bad'), call('c4', 'gone')], h.env, h.fx)
    const r = (id: string) => h.results.get(id)!.outcome
    expect(r('c1')).toMatchObject({ isError: true, error: { name: 'ToolError', code: 'UNKNOWN_TOOL' } })
    expect(r('c2')).toMatchObject({ isError: true, error: { name: 'ToolError', code: 'TOOL_ERROR' } })
    expect(text(h.results.get('c2')!)).toBe('Error: it broke badly')
    expect(r('c3')).toMatchObject({ isError: true, error: { code: 'TOOL_BAD_RESULT' } })
    // a builtin whose plugin left: its spec remains, the registry has nothing
    expect(r('c4')).toMatchObject({ isError: true, error: { code: 'UNKNOWN_TOOL' } })
    expect(h.journal.filter((l) => l.startsWith('result:'))).toHaveLength(4)
  })

  it('a denial by tools/pre-execute is a TOOL_DENIED result that is still post-processed; a throwing policy denies', async () => {
    const ran: string[] = []
    const posted: string[] = []
    const h = host({
      tools: [builtin('t', () => void ran.push('ran') as never)],
      listeners: {
        'tools/pre-execute': [(p, next) => (p.call.callId === 'c1' ? { kind: 'deny', reason: 'not today' } : p.call.callId === 'c2' ? Promise.reject(new Error('policy down')) : next())],
        'tools/post-execute': [(p, next) => (posted.push(p.call.callId), next())],
      },
    })
    await runToolCalls([call('c1', 't'), call('c2', 't')], h.env, h.fx)
    expect(ran).toEqual([])
    expect(posted).toEqual(['c1', 'c2'])
    expect(h.results.get('c1')!.outcome).toMatchObject({ isError: true, error: { code: 'TOOL_DENIED' } })
    expect(text(h.results.get('c1')!)).toBe('Error: tool call denied: not today')
    expect(text(h.results.get('c2')!)).toBe('Error: tool call denied: the tool policy failed: policy down')
  })
})

describe('runToolCalls: approvals and client calls (SPEC §11.5, §18.10)', () => {
  it('approval "always" asks: the pending row rides with tool/call, then the answer decides', async () => {
    const t = builtin('t', () => ({ content: 'ran' }))
    const h = host({ tools: [t], specs: [specOf(t, { approval: 'always' })], answers: { c1: { decision: 'allow' }, c2: { decision: 'deny', reason: 'no way' } } })
    await runToolCalls([call('c1', 't'), call('c2', 't')], h.env, h.fx)
    expect(h.journal).toEqual(['call:c1 (approval)', 'wait:c1:approval', 'result:c1@100', 'call:c2 (approval)', 'wait:c2:approval', 'result:c2@101'])
    expect(text(h.results.get('c1')!)).toBe('ran')
    expect(text(h.results.get('c2')!)).toBe('Error: tool call denied: no way')
  })

  it('with a tools/pre-execute listener the ask is not certain: the approval row is written after tool/call, when the listener asks', async () => {
    const t = builtin('t', () => ({ content: 'ran' }))
    const h = host({ tools: [t], specs: [specOf(t, { approval: 'always' })], listeners: { 'tools/pre-execute': [(_p, next) => next()] }, answers: { c1: { decision: 'allow' } } })
    await runToolCalls([call('c1', 't')], h.env, h.fx)
    expect(h.journal).toEqual(['call:c1', 'pending:c1:approval', 'wait:c1:approval', 'result:c1@100'])
    expect(text(h.results.get('c1')!)).toBe('ran')
  })

  it('an approval the turn cancelled before an answer resolves deny with a reason saying so', async () => {
    const t = builtin('t', () => ({ content: 'ran' }))
    const h = host({ tools: [t], specs: [specOf(t, { approval: 'always' })] })
    await runToolCalls([call('c1', 't')], h.env, h.fx)
    expect(text(h.results.get('c1')!)).toBe('Error: tool call denied: the turn was cancelled before an approver answered')
  })

  it('a client call: its tool/call carries the pending row, the body is the answer', async () => {
    const h = host({ specs: [{ name: 'ui', execution: { type: 'client' } }], answers: { c1: { content: [{ type: 'text', text: 'picked' }], isError: false } } })
    await runToolCalls([call('c1', 'ui'), call('c2', 'ui')], h.env, h.fx)
    expect(h.journal).toEqual(['call:c1 (client)', 'wait:c1:client', 'result:c1@100', 'call:c2 (client)', 'wait:c2:client', 'result:c2@101'])
    expect(text(h.results.get('c1')!)).toBe('picked')
    // no answer (the turn was cancelled): aborted
    expect(h.results.get('c2')!.outcome).toMatchObject({ isError: true, error: { name: 'AbortError', code: 'TOOL_ABORTED' } })
  })

  it('a client call with approval "always": the approver first, then the client is asked on the same call; a denial never asks the client', async () => {
    const ui: ToolSpec = { name: 'ui', execution: { type: 'client' }, approval: 'always' }
    const picked = { content: [{ type: 'text', text: 'picked' }], isError: false }
    const h = host({ specs: [ui], answers: { 'c1:approval': { decision: 'allow' }, 'c1:client': picked, 'c2:approval': { decision: 'deny', reason: 'not this one' }, 'c2:client': picked } })
    await runToolCalls([call('c1', 'ui'), call('c2', 'ui')], h.env, h.fx)
    expect(h.journal).toEqual(['call:c1 (approval)', 'wait:c1:approval', 'pending:c1:client', 'wait:c1:client', 'result:c1@100', 'call:c2 (approval)', 'wait:c2:approval', 'result:c2@101'])
    expect(text(h.results.get('c1')!)).toBe('picked')
    expect(h.results.get('c2')!.outcome).toMatchObject({ isError: true, error: { code: 'TOOL_DENIED' } })
  })

  it('with a tools/pre-execute listener a client call is asked only once the listener allowed it, and not at all after a denial or a cancel', async () => {
    const picked = { content: [{ type: 'text', text: 'picked' }], isError: false }
    let h: Host
    const policy: Listener = async (p, next) => {
      if (p.call.callId === 'c2') return { kind: 'deny', reason: 'no' }
      if (p.call.callId === 'c3') h.abort.abort()
      return next()
    }
    h = host({ specs: [{ name: 'ui', execution: { type: 'client' } }], listeners: { 'tools/pre-execute': [policy] }, answers: { c1: picked, c3: picked } })
    await runToolCalls([call('c1', 'ui'), call('c2', 'ui'), call('c3', 'ui'), call('c4', 'ui')], h.env, h.fx)
    expect(h.journal).toEqual(['call:c1', 'pending:c1:client', 'wait:c1:client', 'result:c1@100', 'call:c2', 'result:c2@101', 'call:c3', 'result:c3@102', 'aborted:c4'])
    expect(text(h.results.get('c1')!)).toBe('picked')
    expect(h.results.get('c2')!.outcome).toMatchObject({ isError: true, error: { code: 'TOOL_DENIED' } })
    expect(h.results.get('c3')!.outcome).toMatchObject({ isError: true, error: { name: 'AbortError', code: 'TOOL_ABORTED' } })
  })
})

describe('runToolCalls: post-processing and contexts (SPEC §11.6)', () => {
  it('post-execute may replace or block; finalizeContent rewrites accepted content; tools/result carries the final result', async () => {
    const h = host({
      tools: [
        builtin('a', () => ({ content: 'raw a' }), { finalizeContent: (c: ContentBlock[]) => [...c, { type: 'text', text: ' +final' }] }),
        builtin('b', () => ({ content: 'raw b' })),
      ],
      listeners: {
        'tools/post-execute': [async (p, next) => (p.call.name === 'b' ? { kind: 'block', reason: 'secret' } : { ...(await next()), content: 'replaced' })],
      },
    })
    await runToolCalls([call('c1', 'a'), call('c2', 'b')], h.env, h.fx)
    expect(text(h.results.get('c1')!)).toBe('replaced +final')
    expect(text(h.results.get('c2')!)).toBe('Error: tool result blocked: secret')
    expect(h.notified.map((n) => [n.name, n.payload.call.callId, n.payload.result.content[0].text])).toEqual([
      ['tools/result', 'c1', 'replaced'],
      ['tools/result', 'c2', 'Error: tool result blocked: secret'],
    ])
  })

  it('additionalContexts become messages from the tool\'s plugin; one that is not a valid message is dropped with a warning', async () => {
    const h = host({ tools: [builtin('t', () => ({ content: 'r', additionalContexts: ['first', { content: 'second', id: 'ctx-2' }, { content: 7 } as never] }))] })
    await runToolCalls([call('c1', 't')], h.env, h.fx)
    const f = h.results.get('c1')!
    expect(f.contexts.map((m) => [m.id.startsWith('msg_') ? 'msg_…' : m.id, m.content, m.source])).toEqual([
      ['msg_…', [{ type: 'text', text: 'first' }], { kind: 'plugin', plugin: 'test-plugin' }],
      ['ctx-2', [{ type: 'text', text: 'second' }], { kind: 'plugin', plugin: 'test-plugin' }],
    ])
    expect(h.warned).toEqual(['an additional context was not a valid message; dropped'])
  })
})

describe('runToolCalls: cancellation and scheduler failure (SPEC §11.7–§11.8)', () => {
  it('a cancel starts nothing new: the running call is awaited and committed, every unstarted one closes aborted before dispatch', async () => {
    const running = gate()
    const release = gate()
    const h = host({
      tools: [
        builtin('slow', async () => {
          running.open()
          await release.promise
          return { content: 'finished' }
        }),
        builtin('next', () => ({ content: 'never' })),
      ],
    })
    const done = runToolCalls([call('c1', 'slow'), call('c2', 'next'), call('c3', 'next')], h.env, h.fx)
    await running.promise
    h.abort.abort()
    release.open()
    await done
    expect(h.journal).toEqual(['call:c1', 'result:c1@100', 'aborted:c2', 'aborted:c3'])
    expect(text(h.results.get('c1')!)).toBe('finished')
    expect(h.results.get('c2')!.outcome).toMatchObject({ isError: true, error: { name: 'AbortError', code: 'TOOL_ABORTED_BEFORE_DISPATCH' } })
  })

  it('a failed commit stops further starts; started calls are awaited; nothing is invented; the failure is rethrown', async () => {
    const held = gate()
    const started: string[] = []
    const failed = gate()
    const par = builtin(
      'par',
      async (args: any) => {
        started.push(args.k)
        if (args.k === 'c') await held.promise
        return { content: args.k }
      },
      { isConcurrencySafe: () => true },
    )
    const excl = builtin('excl', () => void started.push('d') as never)
    const h = host({
      tools: [par, excl],
      commit: (callId) => {
        if (callId !== 'c2') return
        failed.open()
        throw new Error('the commit of c2 failed')
      },
    })
    let settled = false
    const done = runToolCalls([call('c1', 'par', { k: 'a' }), call('c2', 'par', { k: 'b' }), call('c3', 'par', { k: 'c' }), call('c4', 'excl')], h.env, h.fx).finally(() => (settled = true))
    done.catch(() => {})
    // the probe: c2's commit has failed; c3 is still held, so the batch cannot have ended
    await failed.promise
    await new Promise((r) => setImmediate(r))
    expect(settled).toBe(false)
    held.open()
    await expect(done).rejects.toThrow('the commit of c2 failed')
    expect(started).toEqual(['a', 'b', 'c'])
    expect(h.journal).toEqual(['call:c1', 'call:c2', 'call:c3', 'result:c1@100'])
  })
})
