// Scaffolding for tests of the loop through the real server: a test plugin whose listeners and tools
// each session can script (Ctl), and a harness around startTestApp that records loop requests, runs
// the reconstruction check (SPEC §8.10) and gives HTTP/SSE shortcuts per session.

import { expect } from 'vitest'
import { openSse, startTestApp, type TestApp } from './app.js'
import { gate as makeGate } from './scripted.js'
import { expectValidLog, reconstructionCheck } from './invariants.js'
import type { Ev } from './events.js'
import { LOOP_REQUEST, type Agent } from '../../src/agent/index.js'
import type { Context } from '../../src/hooks/index.js'
import type { Db } from '../../src/store/index.js'

/** Per-session behaviour of the test plugin's listeners (absent: delegate). */
export interface Ctl {
  preStep?: (p: any, next: (p?: unknown) => Promise<any>) => unknown
  request?: (p: any, next: (p?: unknown) => Promise<any>) => unknown
  assemble?: (a: any, next: (p?: unknown) => Promise<any>, c: any) => unknown
  /** keep the test-* plugin sections (other sessions never see them) */
  sections?: boolean
  turnStopping?: (p: any) => unknown
  preExecute?: (p: any, next: (p?: unknown) => Promise<any>) => unknown
  tool?: (name: string, args: any, tc: any) => unknown
  sessionStart?: (p: any) => unknown
}

export interface Harness {
  t: TestApp
  problems: string[]
  /** loop requests the reconstruction check examined */
  seen: { n: number }
  ctl: Map<string, Ctl>
  /** agentd-level loop requests (role 'system' messages included), per session */
  loopRequests: Map<string, any[]>
  key(id: string): Promise<string>
  agent(id: string): Promise<Agent>
  post(id: string, route: string, body?: unknown): Promise<any>
  sse(id: string): Promise<Awaited<ReturnType<typeof openSse>>>
  log(id: string): Promise<Ev[]>
  /** The session's log after the SPEC §15 checker ran on it, asserting the reconstruction check stayed clean. */
  checked(id: string): Promise<Ev[]>
}

export interface HarnessOptions {
  /** concurrency-safe test tools registered beside `work` and `conclude` (e.g. ['par']) */
  parallelTools?: string[]
  /** further server plugins, installed after the test plugin */
  plugins?: Array<(root: Context, db: Db) => void>
}

/**
 * The `test-ctl` plugin: waterfall listeners on agent/pre-step, agent/request, tools/pre-execute and
 * system-prompt/assemble (which drops test-* sections unless the session's Ctl keeps them), serial
 * agent/turn-stopping, an agent/session-start observer, a recorder of loop requests on llm/stream,
 * and the tools `work`, `conclude` (concludesTurn) and any `parallelTools` (concurrency-safe).
 */
export function testPlugin(ctl: Map<string, Ctl>, loopRequests: Map<string, any[]>, parallelTools: string[] = []) {
  return (root: Context) => {
    root.plugin({
      name: 'test-ctl',
      apply(ctx: any) {
        const wf = (hook: string, k: 'preStep' | 'request' | 'preExecute') =>
          ctx.hooks.waterfall(hook, (p: any, next: any) => {
            const h = ctl.get(p.agent.id)?.[k]
            return h ? h(p, next) : next()
          })
        wf('agent/pre-step', 'preStep')
        wf('agent/request', 'request')
        wf('tools/pre-execute', 'preExecute')
        ctx.hooks.waterfall('system-prompt/assemble', (a: any, next: any, c: any) => {
          const entry = ctl.get(c.agent.id)
          if (!entry?.sections) a.sections = a.sections.filter((s: any) => !String(s.name).startsWith('test-'))
          return entry?.assemble ? entry.assemble(a, next, c) : next()
        })
        ctx.hooks.serial('agent/turn-stopping', (p: any) => ctl.get(p.agent.id)?.turnStopping?.(p))
        ctx.hooks.waterfall('llm/stream', (req: any, next: any) => {
          if (req[LOOP_REQUEST]) {
            const l = loopRequests.get(req.sessionId) ?? []
            l.push(req)
            loopRequests.set(req.sessionId, l)
          }
          return next()
        })
        ctx.on('agent/session-start', (p: any) => ctl.get(p.agent.id)?.sessionStart?.(p))
        for (const name of ['work', 'conclude', ...parallelTools]) {
          ctx.tools.register({
            name,
            description: `the ${name} tool`,
            parameters: { type: 'object', properties: {} },
            isConcurrencySafe: () => parallelTools.includes(name),
            execute: (args: any, tc: any) => {
              const h = ctl.get(tc.sessionId)?.tool
              if (h) return h(name, args, tc)
              return name === 'conclude' ? { content: 'concluded', concludesTurn: true } : { content: `${name} ok` }
            },
          })
        }
      },
    })
  }
}

/** Starts the app (models `scripted` and `other`) with the reconstruction check and the test plugin. */
export async function harness(kind: 'pg' | 'pglite', o: HarnessOptions = {}): Promise<Harness> {
  const problems: string[] = []
  const seen = { n: 0 }
  const ctl = new Map<string, Ctl>()
  const loopRequests = new Map<string, any[]>()
  const t = await startTestApp({
    kind,
    models: [{ id: 'scripted' }, { id: 'other' }],
    plugins: [(root, db) => reconstructionCheck(db, problems, seen)(root), (root) => testPlugin(ctl, loopRequests, o.parallelTools)(root), ...(o.plugins ?? [])],
  })
  const keys = new Map<string, string>()
  const h: Harness = {
    t,
    problems,
    seen,
    ctl,
    loopRequests,
    async key(id) {
      let k = keys.get(id)
      if (!k) {
        const r = await t.app.db.query<{ key: string }>('SELECT key FROM sessions WHERE id = $1', [id])
        k = r.rows[0].key
        keys.set(id, k)
      }
      return k
    },
    async agent(id) {
      const key = await h.key(id)
      return (t.app.host!.agent(key) ?? (await t.app.host!.claim(key)))!
    },
    async post(id, route, body) {
      const r = await t.api('POST', `/v1/sessions/${id}/${route}`, body)
      expect(r.status, `${route}: ${r.text}`).toBe(202)
      return r.body
    },
    async sse(id) {
      const s = await openSse(`${t.url}/v1/sessions/${id}/stream`, { authorization: `Bearer ${t.key}` })
      await s.waitFor((f) => f.event === 'stream/ready')
      return s
    },
    log: (id) => t.events(id) as Promise<Ev[]>,
    async checked(id) {
      const evs = await h.log(id)
      expectValidLog(evs as any)
      expect(h.problems).toEqual([])
      expect(h.seen.n).toBeGreaterThan(0)
      return evs
    },
  }
  return h
}

/** A per-session journal of lines and named gates, for test plugins whose tools log and wait. */
export class Journal {
  readonly journal = new Map<string, string[]>()
  readonly gates = new Map<string, ReturnType<typeof makeGate>>()

  log(session: string, line: string): void {
    const l = this.journal.get(session) ?? []
    l.push(line)
    this.journal.set(session, l)
  }

  lines(session: string): string[] {
    return this.journal.get(session) ?? []
  }

  /** The gate `key` of a session, created closed on first use. */
  gate(session: string, key: string) {
    const k = `${session}:${key}`
    let g = this.gates.get(k)
    if (!g) this.gates.set(k, (g = makeGate()))
    return g
  }
}
