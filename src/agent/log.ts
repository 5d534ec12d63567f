// The driver's view of its session log and its ONE way to append: a unit is built against the
// folded state under the session row lock, fenced by the lease token, written in the same
// transaction, and published after commit (DESIGN.md §3, SPEC §2.4, §3.1.4).

import type { Logger } from 'pino'
import { deepFreeze, lastTurnOf, ledgerEntries, LogError, sumUsage, type Draft, type SessionEvent, type SessionState, type Undo } from '../session/index.js'
import { appendConditional, lockLean, readEvents, stamp, writeEvents, type Db, type LeanRow, type Queryable, type RowPatch, type SideRow, type StoredEvent, type WebhookEventType } from '../store/index.js'
import type { KeyedMutex } from './locks.js'
import type { Publisher } from './publish.js'

/** The session row's flags a unit may decide on (its declared inputs, `reads`). */
export type RowFlag = 'runState' | 'cancelPending' | 'wakeLatched'
const ROW_FLAGS: readonly RowFlag[] = ['runState', 'cancelPending', 'wakeLatched']

/** The stored copy is deep-frozen (SPEC §3.1.5); drafts are frozen as they join a unit. */
function deepFreezeData(e: SessionEvent): SessionEvent {
  deepFreeze(e.data)
  return e
}

/** The lease this driver holds; every append checks it (SPEC §2.2). */
export interface Lease {
  owner: string
  token: number
}

export class LeaseLostError extends Error {
  constructor(readonly sessionId: string, readonly reason: 'lost' | 'deleted') {
    super(reason === 'deleted' ? `session ${sessionId} was deleted` : `the lease of session ${sessionId} was lost`)
    this.name = 'LeaseLostError'
  }
}

/**
 * Builds a unit: each add() stamps, validates and folds the draft at once, so later drafts see it;
 * side() names a row that must exist exactly when the unit is durable (store/ writes it in the
 * unit's statement or transaction, DESIGN.md §3).
 */
export interface UnitBuilder<F extends RowFlag = never> {
  add(d: Draft, opts?: { time?: number }): SessionEvent
  side(row: SideRow): void
  /**
   * The row flags the unit declared it reads (`reads`): on the fast path as this driver last saw
   * them, the append conditional on them; under the lock as they are. Nothing else of the row.
   */
  readonly row: Readonly<Pick<LeanRow, F>>
}

/** A unit's build: its drafts through the builder, and a row patch and a value. */
export type Build<T, F extends RowFlag = never> = (u: UnitBuilder<F>) => { patch?: RowPatch; value?: T } | void

/** How a unit commits: its declared inputs, and its publication. */
export interface CommitOpts<T, F extends RowFlag = never> {
  /** the row flags the build decides on: the fast append is conditional on them (SPEC §5.5) */
  reads?: readonly F[]
  /** the build needs the locked row (the fast path is not tried) */
  locked?: boolean
  publish?: boolean
  beforePublish?: (value: T, events: StoredEvent[]) => void
  /** publishes the unit in consecutive pieces of these sizes, each `after` once its piece is published (a settlement's end frame precedes the tool/call of its unit, SPEC §9.2) */
  segments?: () => Array<{ count: number; after?: (events: StoredEvent[]) => void }>
}

export interface CommitResult<T> {
  events: StoredEvent[]
  value: T
  row: LeanRow
}

export interface SessionLogDeps {
  db: Db
  publisher: Publisher
  mutex: KeyedMutex
  log: Logger
  onAppend?: (n: number) => void
}

/**
 * What follows from a unit's events, whichever path writes them (the driver's units, crash repair):
 * the row's mirror of them (open turn, inbox projection, usage, last turn) and the side rows they imply (the
 * tenant's usage ledger, running-session slots, webhook deliveries of turn ends). `state` has the events folded already.
 */
export function mirror(state: SessionState, added: readonly SessionEvent[], patch: RowPatch = {}): { patch: RowPatch; side: SideRow[] } {
  const p: RowPatch = { ...patch }
  const side: SideRow[] = []
  for (const e of added) {
    if (e.type === 'turn/start') {
      p.openTurn = (e.data as { turn: number }).turn
      side.push({ kind: 'slot-take' })
    } else if (e.type === 'turn/end') {
      p.openTurn = null
      side.push({ kind: 'slot-free' })
      const hook = turnEndWebhook(e)
      if (hook) side.push(hook)
    } else if (e.type === 'agent/inbox/spliced') p.inbox = state.inbox
  }
  const usage = sumUsage(added)
  if (usage) p.usage = usage
  const lastTurn = lastTurnOf(added)
  if (lastTurn) p.lastTurn = lastTurn
  const entries = ledgerEntries(added, () => {
    const c = state.latestHeader?.header.config
    return c ? `${c.provider}/${c.model}` : undefined
  })
  if (entries.length) side.push({ kind: 'usage', entries })
  return { patch: p, side }
}

/** API.md §14: the webhook type each turn end reason reports (a blocked turn reports none). */
const TURN_END_WEBHOOK: Record<string, WebhookEventType | undefined> = {
  completed: 'turn.completed',
  'max-tokens': 'turn.completed',
  error: 'turn.failed',
  aborted: 'turn.cancelled',
  interrupted: 'turn.interrupted',
}

function turnEndWebhook(e: SessionEvent): SideRow | undefined {
  const data = e.data as { turn: number; reason: { kind: string } }
  const type = TURN_END_WEBHOOK[data.reason.kind]
  return type && { kind: 'webhook', event: { type, turn: data.turn, seq: e.seq, time: e.time, extra: { reason: data.reason } } }
}

export class SessionLog {
  /** the latest row flags this driver saw (cancel_pending, wake_latched, run_state) */
  row: LeanRow | undefined

  constructor(
    private readonly d: SessionLogDeps,
    readonly key: string,
    readonly id: string,
    readonly state: SessionState,
    public lease: Lease,
    /** the session's tenant: commit observers learn it with each publication */
    readonly tenantId?: string,
  ) {}

  /** Folds events other processes committed (splices of deliveries, cancels, removals). */
  private async catchUp(tx: Queryable, row: LeanRow): Promise<StoredEvent[]> {
    if (row.nextSeq <= this.state.nextSeq) return []
    const events = await readEvents(tx, this.key, this.state.headSeq)
    for (const e of events) this.state.apply(e)
    return events
  }

  private check(row: LeanRow | undefined): LeanRow {
    if (!row) throw new LeaseLostError(this.id, 'deleted')
    if (row.leaseOwner !== this.lease.owner || row.leaseToken !== this.lease.token) throw new LeaseLostError(this.id, 'lost')
    return row
  }

  /**
   * Commits one unit. `build` adds drafts through the builder (each folded at once) and may return
   * a row patch and a value. Throwing anywhere — in build, on validation, in the database — leaves
   * the folded state exactly as before. Returns the committed events, already published, and the row
   * flags the unit saw (the caller reacts to a cancel request or a wake).
   */
  async commit<T = void, F extends RowFlag = never>(build: Build<T, F>, opts: CommitOpts<T, F> = {}): Promise<CommitResult<T>> {
    if (this.d.publisher.isPublishing(this.key)) throw new LogError('a session/event observer may not append to the session it observes (SPEC §3.1.5)')
    return this.d.mutex.run(this.key, async () => {
      // the fast path: one fenced statement, conditional on the flags the unit reads as last seen; a
      // unit that declared it needs the locked row, that reads flags of a row not seen yet, or that
      // found the row moved or the lease gone, takes the locked path
      const reads = opts.reads ?? []
      const fast = !opts.locked && (!reads.length || this.row !== undefined)
      const result = (fast ? await this.commitFast(build, reads) : null) ?? (await this.commitLocked(build, reads))
      this.row = result.row
      this.d.onAppend?.(result.events.length)
      opts.beforePublish?.(result.value, result.events)
      if (opts.publish !== false) {
        const ref = { key: this.key, id: this.id, tenantId: this.tenantId }
        const pieces = opts.segments?.() ?? [{ count: result.events.length }]
        let at = 0
        for (const { count, after } of pieces) {
          const piece = result.events.slice(at, (at += count))
          if (piece.length) this.d.publisher.committed(ref, piece)
          after?.(piece)
        }
        if (at < result.events.length) this.d.publisher.committed(ref, result.events.slice(at))
      }
      return result
    })
  }

  /**
   * A builder that stamps and folds each draft at once, collecting the undos and the side rows; its
   * `row` holds the declared flags of `row` only.
   */
  private builder<F extends RowFlag>(undos: Undo[], added: SessionEvent[], side: SideRow[], row: LeanRow | undefined, reads: readonly F[]): UnitBuilder<F> {
    // the declared flags; reading another is a mistake of the unit, not a silent `undefined`
    const flags = {} as Pick<LeanRow, F>
    for (const f of ROW_FLAGS) {
      const declared = (reads as readonly RowFlag[]).includes(f)
      const value = declared ? row![f] : undefined
      Object.defineProperty(flags, f, {
        enumerable: declared,
        get: () => {
          if (!declared) throw new LogError(`a unit read the row's ${f} without declaring it (reads)`)
          return value
        },
      })
    }
    return {
      row: Object.freeze(flags),
      side: (r) => void side.push(r),
      add: (draft, o) => {
        const time = Math.max(o?.time ?? Date.now(), this.state.lastTime)
        const [e] = stamp({ nextSeq: this.state.nextSeq, lastTime: this.state.lastTime }, [draft], time)
        undos.push(this.state.apply(deepFreezeData(e)))
        added.push(e)
        return e
      },
    }
  }

  private async commitFast<T, F extends RowFlag>(build: Build<T, F>, reads: readonly F[]): Promise<CommitResult<T> | null> {
    const undos: Undo[] = []
    const added: SessionEvent[] = []
    const side: SideRow[] = []
    const undo = () => {
      for (let i = undos.length - 1; i >= 0; i--) undos[i]()
    }
    let out: { patch?: RowPatch; value?: T }
    const known = this.row
    try {
      out = build(this.builder(undos, added, side, known, reads)) ?? {}
    } catch (e) {
      undo()
      throw e
    }
    if (!added.length) {
      undo()
      // nothing to write (an empty claim, an admission with nothing new): no round trip at all; a
      // row patch or side rows alone take the locked path
      const patch = out.patch ?? {}
      if (!Object.values(patch).some((v) => v !== undefined) && !reads.length && !side.length && this.row) return { events: [], value: out.value as T, row: this.row }
      return null
    }
    let r
    try {
      const flags = reads.length && known ? Object.fromEntries(reads.map((f) => [f, known[f]])) : undefined
      const m = mirror(this.state, added, out.patch)
      r = await appendConditional(this.d.db, this.key, { nextSeq: added[0].seq, lease: this.lease, flags }, added, m.patch, [...side, ...m.side])
    } catch (e) {
      undo()
      throw e
    }
    if (!r) {
      undo()
      return null
    }
    const row: LeanRow = {
      key: this.key,
      nextSeq: this.state.nextSeq,
      lastTime: this.state.lastTime,
      updatedAt: this.state.lastTime,
      runState: r.runState,
      cancelPending: r.cancelPending,
      wakeLatched: r.wakeLatched,
      leaseOwner: this.lease.owner,
      leaseToken: this.lease.token,
      openTurn: this.state.openTurn,
    }
    return { events: r.events, value: out.value as T, row }
  }

  private async commitLocked<T, F extends RowFlag>(build: Build<T, F>, reads: readonly F[]): Promise<CommitResult<T>> {
    const undos: Undo[] = []
    try {
      return await this.d.db.transaction(async (tx) => {
        const row = this.check(await lockLean(tx, this.key))
        await this.catchUp(tx, row)
        const added: SessionEvent[] = []
        const side: SideRow[] = []
        const out = build(this.builder(undos, added, side, row, reads)) ?? {}
        const { patch, side: derived } = mirror(this.state, added, out.patch)
        const events = await writeEvents(tx, { key: this.key, nextSeq: this.state.nextSeq - added.length, lastTime: row.lastTime }, added, patch, [...side, ...derived])
        const next: LeanRow = { ...row, nextSeq: this.state.nextSeq, lastTime: this.state.lastTime }
        if (patch.runState !== undefined) next.runState = patch.runState
        if (patch.cancelPending !== undefined) next.cancelPending = patch.cancelPending
        if (patch.wakeLatched !== undefined) next.wakeLatched = patch.wakeLatched
        if (patch.openTurn !== undefined) next.openTurn = patch.openTurn
        return { events, value: out.value as T, row: next }
      })
    } catch (e) {
      for (let i = undos.length - 1; i >= 0; i--) undos[i]()
      throw e
    }
  }

  /**
   * Folds events this process committed for the session (intake deliveries) without a read; returns
   * false when they do not continue the state (the caller syncs instead).
   */
  async foldLocal(events: readonly StoredEvent[]): Promise<boolean> {
    return this.d.mutex.run(this.key, async () => {
      const fresh = events.filter((e) => e.seq >= this.state.nextSeq)
      if (!fresh.length) return true
      if (fresh[0].seq !== this.state.nextSeq) return false
      for (const e of fresh) this.state.apply(e)
      return true
    })
  }

  /**
   * Reads what others committed and the row flags, without appending (a doorbell or a poke). No
   * lock: the row is read first, so every event below its next_seq is committed and readable.
   */
  async sync(): Promise<LeanRow> {
    return this.d.mutex.run(this.key, async () => {
      const row = this.check(await lockLean(this.d.db, this.key, false))
      await this.catchUp(this.d.db, row)
      this.row = row
      return row
    })
  }
}
