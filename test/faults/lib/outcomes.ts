// What a part asserts after a fault, in one place: every answer counted and checked (no 5xx but the
// documented 503, §10's shape, Retry-After where §10 wants it), the process alive, nothing changed by
// what was refused, and no accepted input lost or duplicated in the logs (which also pass §15).

import { violations as logViolations } from '../../helpers/invariants.js'
import type { SessionEvent } from '../../../src/session/index.js'
import { errorShapeViolation } from './contract.js'
import { wireRequest, type WireAnswer } from './wire.js'

export interface AnswerRule {
  /** 503 unavailable (with Retry-After) is the documented answer while the database is away */
  allow503?: boolean
  /** the statuses this request must get */
  expect?: number[]
  head?: boolean
}

export class Outcomes {
  readonly problems: string[] = []
  readonly statuses = new Map<number, number>()
  /** accepted inputs, by session: the message ids a 2xx answer (or an ack) gave back */
  readonly accepted = new Map<string, Set<string>>()
  noAnswer = 0
  sent = 0

  /** the server asked; a part whose processes restart on new ports points it at a live one */
  constructor(public url: string) {}

  problem(p: string): void {
    this.problems.push(p)
  }

  /** Counts and checks one answer; returns it. */
  answer(what: string, ans: WireAnswer, rule: AnswerRule = {}): WireAnswer {
    this.sent++
    if (ans.error) {
      this.noAnswer++
      this.problem(`${what}: no whole answer (${ans.error})`)
      return ans
    }
    this.statuses.set(ans.status, (this.statuses.get(ans.status) ?? 0) + 1)
    const retryAfter = (ans.headers['retry-after'] as string | undefined) ?? null
    if (ans.status >= 500 && !(rule.allow503 && ans.status === 503)) this.problem(`${what}: ${ans.status} ${ans.text.slice(0, 200)}`)
    const shape = errorShapeViolation(ans.status, ans.body, { head: rule.head, retryAfter })
    if (shape) this.problem(`${what}: ${shape}`)
    if (rule.expect && !rule.expect.includes(ans.status)) this.problem(`${what}: expected ${rule.expect.join('|')}, got ${ans.status} ${ans.text.slice(0, 200)}`)
    return ans
  }

  /** Records an accepted input of a session (its messageId). */
  accept(session: string, messageId: string): void {
    const set = this.accepted.get(session) ?? new Set<string>()
    set.add(messageId)
    this.accepted.set(session, set)
  }

  get acceptedCount(): number {
    let n = 0
    for (const s of this.accepted.values()) n += s.size
    return n
  }

  /** The process answers /healthz 200 (within 15 s: a loaded test machine is slow, a dead process never answers). */
  async alive(what: string): Promise<boolean> {
    const h = await wireRequest(this.url, { method: 'GET', path: '/healthz', timeoutMs: 15000 })
    if (h.status !== 200) this.problem(`${what}: /healthz answered ${h.status || h.error}`)
    return h.status === 200
  }

  /** headSeq of each session: what "nothing changed" is compared against. */
  async heads(auth: string, sessions: string[]): Promise<Map<string, number>> {
    const out = new Map<string, number>()
    for (const id of sessions) {
      const r = await wireRequest(this.url, { method: 'GET', path: `/v1/sessions/${encodeURIComponent(id)}`, headers: { authorization: auth } })
      out.set(id, typeof r.body?.headSeq === 'number' ? r.body.headSeq : -2)
    }
    return out
  }

  /** Refused requests wrote nothing: every session's headSeq is what it was. */
  async unchanged(what: string, auth: string, before: Map<string, number>): Promise<void> {
    const after = await this.heads(auth, [...before.keys()])
    for (const [id, seq] of before) if (after.get(id) !== seq) this.problem(`${what}: session ${id} moved from headSeq ${seq} to ${after.get(id)}`)
  }

  /** A session's whole log, paged. */
  async log(auth: string, id: string): Promise<SessionEvent[]> {
    const events: SessionEvent[] = []
    let after = -1
    for (;;) {
      const r = await wireRequest(this.url, { method: 'GET', path: `/v1/sessions/${encodeURIComponent(id)}/events?after=${after}&limit=5000`, headers: { authorization: auth }, timeoutMs: 30000 })
      const page: SessionEvent[] = r.body?.events ?? []
      if (r.status !== 200) {
        this.problem(`reading the log of ${id}: ${r.status || r.error}`)
        return events
      }
      events.push(...page)
      if (page.length < 5000) return events
      after = page[page.length - 1].seq
    }
  }

  /**
   * Every accepted input is in its session's log exactly once (inserted by one splice), and every
   * log passes SPEC §15. Returns the counts for the summary.
   */
  async noLoss(auth: string, sessions: string[] = [...this.accepted.keys()]): Promise<{ lost: number; duplicated: number; events: number; violations: number }> {
    let lost = 0
    let duplicated = 0
    let events = 0
    let violations = 0
    for (const id of sessions) {
      const t0 = Date.now()
      const log = await this.log(auth, id)
      if (process.env.FAULTS_DEBUG) process.stderr.write(`noLoss ${id}: ${log.length} events in ${Date.now() - t0} ms\n`)
      events += log.length
      const inserted = new Map<string, number>()
      for (const e of log) {
        if (e.type !== 'agent/inbox/spliced') continue
        for (const m of ((e.data as { inserted?: Array<{ id: string }> }).inserted ?? [])) inserted.set(m.id, (inserted.get(m.id) ?? 0) + 1)
      }
      for (const m of this.accepted.get(id) ?? []) {
        const n = inserted.get(m) ?? 0
        if (n === 0) {
          lost++
          this.problem(`session ${id}: accepted input ${m} is not in the log`)
        } else if (n > 1) {
          duplicated++
          this.problem(`session ${id}: accepted input ${m} inserted ${n} times`)
        }
      }
      for (const v of logViolations(log)) {
        violations++
        this.problem(`session ${id}: §15: ${v}`)
      }
    }
    return { lost, duplicated, events, violations }
  }

  /** Status rows for a part's summary table. */
  statusRows(): Array<[string, number]> {
    const byClass = (lo: number, hi: number) => [...this.statuses].filter(([s]) => s >= lo && s < hi).reduce((n, [, c]) => n + c, 0)
    return [
      ['requests answered', [...this.statuses.values()].reduce((a, b) => a + b, 0)],
      ['2xx', byClass(200, 300)],
      ['4xx', byClass(400, 500)],
      ['5xx', byClass(500, 600)],
      ...[...this.statuses].sort(([x], [y]) => x - y).map(([s, c]) => [`  status ${s}`, c] as [string, number]),
      ['no whole answer', this.noAnswer],
    ]
  }
}
