// What any process accepts for a session, each as ONE transaction under the session row lock
// (SPEC §2.2, §18.4): deliveries, inbox removals, cancels and answers to pending tool calls. The
// driver, wherever it runs, learns of them through the bus and the row.

import crypto from 'node:crypto'
import { ApiError, sessionNotFound } from '../errors.js'
import { applySplice, canonicalJson, findPending, InboxError, planClear, planDelivery, planSplice, type DeliveryRoute, type Draft, type Inbox, type SessionEvent, type UserMessage } from '../session/index.js'
import { answerPending, appendConditional, findIdempotency, readForIntake, stamp, writeEvents, type Db, type LeanRow, type Queryable, type RowPatch, type SessionRow, type SideRow, type StoredEvent } from '../store/index.js'
import type { KeyedMutex } from './locks.js'
import { stampTraceparent } from '../tracing/index.js'
import type { Publisher } from './publish.js'

export interface Accepted {
  messageId: string
  seq: number
}

export interface IntakeDeps {
  db: Db
  publisher: Publisher
  mutex: KeyedMutex
  /** the Agents this process drives: notification payloads carry their handles */
  agents?: LocalAgents
}

/** The Agents driven in this process, by session key (the worker host). */
export interface LocalAgents {
  agent(key: string): { handle(plugin?: string): unknown } | undefined
  /** the Agent of session `id` while this process drives it: deliveries to it plan on its log (deliverLocal) */
  local?(id: string): { key: string; tenantId: string; localRow(): (LeanRow & { inbox: Inbox }) | undefined } | undefined
}

export const bodyHash = (route: string, body: unknown) => crypto.createHash('sha256').update(`${route}\n${canonicalJson(body)}`).digest('hex')

/** A delivery (API.md §5): what goes into a session's inbox, by whichever route (Intake.deliver). */
export interface Delivery {
  /** the session: its row as read (with its inbox, when read with it), or only its id when nothing was read for the request */
  session: SessionRow | UnreadSession
  route: DeliveryRoute
  message: UserMessage
  /** the client named the message (API.md §5): its idempotency record rides with the delivery */
  idempotency?: { bodyHash: string }
}

/** A session a request names but did not read, nor (keyId) the key it came with. */
export interface UnreadSession {
  id: string
  tenantId: string
  /** the request's API key, confirmed in the delivery's own statement (none: a token, verified already) */
  keyId?: string
  /** reads what was skipped, as the request's authentication would have (401, 404): the session's row */
  load(): Promise<SessionRow>
}

const isUnread = (s: SessionRow | UnreadSession): s is UnreadSession => typeof (s as UnreadSession).load === 'function'

interface Locked<T> {
  result: T
  events?: StoredEvent[]
  /** after commit and publication (live notifications, wakes) */
  after?: () => void
}

/** API.md §5: a named message's idempotency record rides with its splice (the delivery's first event). */
function idempotencyRow(message: UserMessage, route: DeliveryRoute, idempotency: { bodyHash: string } | undefined, events: readonly SessionEvent[]): SideRow[] {
  return idempotency ? [{ kind: 'idempotency', messageId: message.id, route, bodyHash: idempotency.bodyHash, seq: events[0].seq }] : []
}

export class Intake {
  constructor(private readonly d: IntakeDeps) {}

  /** Runs one locked transaction for a session; publishes its events after commit, in seq order. */
  private async locked<T>(key: string, id: string, fn: (tx: Queryable, row: LeanRow & { inbox: Inbox }) => Promise<Locked<T>>): Promise<T> {
    if (this.d.publisher.isPublishing(key)) throw new Error('a session/event observer may not append to the session it observes (SPEC §3.1.5)')
    return this.d.mutex.run(key, () => this.lockedTx(key, id, fn))
  }

  /** The transaction of locked(), for a caller that holds the session's mutex already. */
  private async lockedTx<T>(key: string, id: string, fn: (tx: Queryable, row: LeanRow & { inbox: Inbox }) => Promise<Locked<T>>): Promise<T> {
    const out = await this.d.db.transaction(async (tx) => {
      const row = await readForIntake(tx, key, true)
      if (!row) throw sessionNotFound(id)
      return fn(tx, row)
    })
    if (out.events?.length) this.d.publisher.committed({ key, id }, out.events)
    out.after?.()
    return out.result
  }

  private notify(key: string, id: string, name: string, payload: Record<string, unknown>): void {
    const agent = this.d.agents?.agent(key)
    this.d.publisher.live({ key, id }, name, payload, agent ? (plugin: string) => agent.handle(plugin || 'agentd') : undefined)
  }

  /**
   * The one entry into a session's inbox (API.md §5, SPEC §4.4), whatever the route: the native input
   * routes, the WebSocket's ops and the client protocols (§17) all come here. With `idempotency` (the
   * client named the message), the same id and body answer the original {messageId, seq}; another body
   * or route is 409.
   *
   * How many statements it takes is decided here, and nowhere else:
   * - a session named by id only (nothing was read for the request) that this process drives: ONE
   *   statement, planned on the driver's folded log and the row flags it last saw instead of reading
   *   the row, conditioned besides the seq and the flags on the request's key still existing unrevoked
   *   (side row 'key-live'; API.md §3: a revoked key is refused at once although nothing was read).
   *   Anything off — not driven here, another tenant's, a stale view, the key gone, a replay of a named
   *   message — and `load` reads what was skipped (the key, the session), then as below;
   * - a row read with its inbox: one statement, planned on it (a row that moved since fails the
   *   append's condition and is read again); a row without: an optimistic read, then one append;
   * - when optimism keeps losing races: the same delivery under the row lock.
   */
  async deliver(d: Delivery): Promise<Accepted & { replayed: boolean }> {
    // API.md §19: the request queueing it travels with the durable input, for the turn that claims it
    const message = stampTraceparent(d.message)
    let row = d.session
    if (isUnread(row)) {
      const local = await this.deliverLocal(row, d.route, message, d.idempotency)
      if (local) return local
      row = await row.load()
    }
    return this.deliverRow(row, d.route, message, d.idempotency)
  }

  /** A delivery to a session as read: optimistic, then locked. */
  private async deliverRow(row: SessionRow, route: DeliveryRoute, message: UserMessage, idempotency?: { bodyHash: string }): Promise<Accepted & { replayed: boolean }> {
    const { key, id } = row
    if (this.d.publisher.isPublishing(key)) throw new Error('a session/event observer may not append to the session it observes (SPEC §3.1.5)')
    let preloaded = row.inbox ? { ...row, inbox: structuredClone(row.inbox) } : undefined
    return this.d.mutex.run(key, async () => {
      for (let attempt = 0; attempt < 3; attempt++) {
        const snap = preloaded ?? (await readForIntake(this.d.db, key))
        preloaded = undefined
        if (!snap) throw sessionNotFound(id)
        if (idempotency) {
          const rec = await findIdempotency(this.d.db, key, message.id)
          if (rec) return this.replay(rec, route, idempotency)
        }
        const done = await this.appendDelivery(key, id, snap, route, message, idempotency)
        if (done) return done // else the row moved meanwhile, or a concurrent delivery took the id: read again
      }
      return this.deliverLocked(row, route, message, idempotency)
    })
  }

  /** Whether this process drives session `id` of this tenant (a delivery naming it by id may take one statement). */
  drivesLocally(sessionId: string, tenantId: string): boolean {
    return this.localKey(sessionId, tenantId) !== undefined
  }

  /** The key of session `id` of this tenant while this process drives it (a deleted and recreated id has another). */
  localKey(sessionId: string, tenantId: string): string | undefined {
    const agent = this.d.agents?.local?.(sessionId)
    return agent?.tenantId === tenantId ? agent.key : undefined
  }

  /** The one-statement delivery of deliver(), planned on the driver's view; null when anything is off. */
  private async deliverLocal(s: UnreadSession, route: DeliveryRoute, message: UserMessage, idempotency?: { bodyHash: string }): Promise<(Accepted & { replayed: boolean }) | null> {
    const agent = this.d.agents?.local?.(s.id)
    if (!agent || agent.tenantId !== s.tenantId) return null
    const { key } = agent
    if (this.d.publisher.isPublishing(key)) throw new Error('a session/event observer may not append to the session it observes (SPEC §3.1.5)')
    return this.d.mutex.run(key, async () => {
      const snap = agent.localRow()
      if (!snap) return null
      // a replay answers from the record, with no statement to confirm the key in: the usual path
      if (idempotency && (await findIdempotency(this.d.db, key, message.id))) return null
      return this.appendDelivery(key, s.id, snap, route, message, idempotency, s.keyId === undefined ? [] : [{ kind: 'key-live', keyId: s.keyId }])
    })
  }

  /**
   * One optimistic delivery planned on `snap`: its append is conditioned on the seq and flags read
   * (and on the guards of `side`), then published. Null when the row moved since, a guard failed, or a
   * concurrent delivery with the same id won the idempotency record.
   */
  private async appendDelivery(key: string, id: string, snap: LeanRow & { inbox: Inbox }, route: DeliveryRoute, message: UserMessage, idempotency: { bodyHash: string } | undefined, side: SideRow[] = []): Promise<(Accepted & { replayed: false }) | null> {
    const plan = this.deliveryOf(snap, route, message)
    const events = stamp(snap, plan.drafts)
    let r
    try {
      r = await appendConditional(this.d.db, key, { nextSeq: snap.nextSeq, flags: { runState: snap.runState, cancelPending: snap.cancelPending } }, events, plan.patch, [...idempotencyRow(message, route, idempotency, events), ...side])
    } catch (e) {
      if ((e as { code?: string }).code === '23505' && idempotency) return null
      throw e
    }
    if (!r) return null
    this.d.publisher.committed({ key, id }, r.events)
    plan.after(key, id)
    return { messageId: message.id, seq: r.events[0].seq, replayed: false }
  }

  private replay(rec: { messageId: string; route: string; bodyHash: string; seq: number }, route: DeliveryRoute, idempotency: { bodyHash: string }): Accepted & { replayed: boolean } {
    if (rec.route !== route || rec.bodyHash !== idempotency.bodyHash) throw new ApiError('idempotency-conflict', `message id ${rec.messageId} was used before with another ${rec.route !== route ? 'route' : 'body'}`)
    return { messageId: rec.messageId, seq: rec.seq, replayed: true }
  }

  /** The splice, row patch and after-commit work of a delivery, from the row as read (SPEC §4.4, §18.4). */
  private deliveryOf(snap: LeanRow & { inbox: Inbox }, route: DeliveryRoute, message: UserMessage) {
    const inbox = snap.inbox
    let plan
    try {
      plan = planDelivery(inbox, route, message, { idle: snap.runState === 'idle', maintenance: snap.runState === 'maintenance', cancelling: snap.cancelPending })
    } catch (e) {
      if (e instanceof InboxError) throw new ApiError('idempotency-conflict', `message id ${message.id} is already pending`)
      throw e
    }
    applySplice(inbox, plan.splice)
    const wake = plan.flags.runState === 'wanted'
    return {
      drafts: [{ type: 'agent/inbox/spliced', data: plan.splice as unknown as Draft['data'] }] as Draft[],
      patch: { inbox, ...plan.flags } satisfies RowPatch,
      after: (key: string, id: string) => {
        this.notify(key, id, 'agent/inbox/inserted', { message })
        // the commit's doorbell lets a running driver fold the splice; an idle one needs a wake
        if (wake) this.d.publisher.bus.doorbells.wake(key)
      },
    }
  }

  /** The same delivery under the row lock, when optimism keeps losing races. */
  private async deliverLocked(row: SessionRow, route: DeliveryRoute, message: UserMessage, idempotency?: { bodyHash: string }): Promise<Accepted & { replayed: boolean }> {
    const { key, id } = row
    return this.lockedTx<Accepted & { replayed: boolean }>(key, id, async (tx, locked) => {
      if (idempotency) {
        const rec = await findIdempotency(tx, key, message.id)
        if (rec) return { result: this.replay(rec, route, idempotency) }
      }
      const plan = this.deliveryOf(locked, route, message)
      const stamped = stamp(locked, plan.drafts)
      const events = await writeEvents(tx, locked, stamped, plan.patch, idempotencyRow(message, route, idempotency, stamped))
      return { result: { messageId: message.id, seq: events[0].seq, replayed: false }, events, after: () => plan.after(key, id) }
    })
  }

  /** DELETE …/inbox/:messageId: a cancelling removal (SPEC §4.3); 409 once claimed or gone. */
  async removeFromInbox(row: SessionRow, messageId: string): Promise<void> {
    const { key, id } = row
    await this.locked(key, id, async (tx, locked) => {
      const inbox = locked.inbox
      const at = findPending(inbox, messageId)
      if (!at) throw new ApiError('queue-item-not-found', `message ${messageId} is not pending`)
      const data = planSplice(inbox, at.target, at.index, 1, [], 'canceled')!
      applySplice(inbox, data)
      const events = await writeEvents(tx, locked, stamp(locked, [{ type: 'agent/inbox/spliced', data: data as unknown as Draft['data'] }]), { inbox })
      return {
        result: undefined,
        events,
        after: () => {
          this.notify(key, id, 'agent/inbox/discarded', { message: at.message })
          this.d.publisher.bus.doorbells.poke(key)
        },
      }
    })
  }

  /**
   * POST …/cancel (SPEC §5.5, §18.4): clears the inbox unless keepInbox (and resets the latch), and
   * sets cancel_pending while anything runs. Answers whether something was running.
   */
  async cancel(row: SessionRow, keepInbox: boolean): Promise<{ cancelled: boolean }> {
    const { key, id } = row
    return this.locked(key, id, async (tx, locked) => {
      const cancelled = locked.runState !== 'idle'
      const patch: RowPatch = {}
      const drafts: Draft[] = []
      const discarded: UserMessage[] = []
      if (!keepInbox) {
        const inbox = locked.inbox
        for (const d of planClear(inbox)) {
          discarded.push(...applySplice(inbox, d))
          drafts.push({ type: 'agent/inbox/spliced', data: d as unknown as Draft['data'] })
        }
        if (drafts.length) patch.inbox = inbox
        if (locked.wakeLatched) patch.wakeLatched = false
      }
      if (cancelled && !locked.cancelPending) patch.cancelPending = true
      const events = await writeEvents(tx, locked, stamp(locked, drafts), patch)
      return {
        result: { cancelled },
        events,
        after: () => {
          for (const message of discarded) this.notify(key, id, 'agent/inbox/discarded', { message })
          this.d.publisher.bus.doorbells.poke(key)
        },
      }
    })
  }

  /** POST …/tool-results and …/approvals/:callId (API.md §7, SPEC §18.10). */
  async answer(row: SessionRow, callId: string, kind: 'client' | 'approval', answer: unknown): Promise<void> {
    const { key, id } = row
    await this.locked(key, id, async (tx) => {
      const ok = await answerPending(tx, key, callId, kind, answer)
      if (!ok) throw new ApiError('tool-call-not-pending', `no ${kind === 'client' ? 'client tool call' : 'approval'} ${callId} is pending`)
      return { result: undefined, after: () => this.d.publisher.bus.doorbells.poke(key) }
    })
  }
}
