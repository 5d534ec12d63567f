// The driver's view of its session log and its ONE way to append: a unit is built once against the
// folded state, written in one statement conditioned on the row as this driver last saw it (or under
// the session row lock), fenced by the lease token, and published after commit (DESIGN.md §3, SPEC
// §2.4, §3.1.4).

import type { Logger } from 'pino'
import { deepFreeze, LogError, type Draft, type SessionEvent, type SessionState, type Undo } from '../session/index.js'
import { appendConditional, lockLean, readEvents, stamp, writeEvents, type Db, type LeanRow, type Queryable, type RowPatch, type SideRow, type StoredEvent } from '../store/index.js'
import type { KeyedMutex } from './locks.js'
import type { Publisher } from './publish.js'
import { mirror } from './mirror.js'

/** The session row's flags a unit may decide on (its declared inputs, `reads`). */
export type RowFlag = 'runState' | 'cancelPending' | 'wakeLatched'
const ROW_FLAGS: readonly RowFlag[] = ['runState', 'cancelPending', 'wakeLatched']

/**
 * What a unit may decide on besides its own drafts: row flags, and the inbox — the only part of the
 * folded state that others append to while a driver holds the lease (deliveries, removals and a
 * cancel's clearing splice it, intake.ts). A unit that splices the inbox or decides on what it holds
 * declares 'inbox'.
 */
export type UnitInput = RowFlag | 'inbox'

/**
 * A unit's declared inputs changed between its build and its commit (an optimistic append lost the
 * race to a delivery or a cancel): nothing of it was written, the log has folded what the others
 * wrote, and the unit goes back to its caller to be decided again (commitDecision).
 */
export class StaleUnitError extends Error {
  constructor(readonly sessionId: string, readonly changed: readonly UnitInput[]) {
    super(`the unit's inputs (${changed.join(', ')}) of session ${sessionId} changed before it committed`)
    this.name = 'StaleUnitError'
  }
}

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
  /**
   * what the build decides on: row flags (the fast append is conditional on them, SPEC §5.5) and
   * the inbox; when one changed before the unit committed, commit throws StaleUnitError
   */
  reads?: readonly (F | 'inbox')[]
  /** the build runs under the row lock (the fast path is not tried): its inputs cannot change */
  locked?: boolean
  publish?: boolean
  beforePublish?: (value: T, events: StoredEvent[]) => void
  /** publishes the unit in consecutive pieces of these sizes, each `after` once its piece is published (a settlement's end frame precedes the tool/call of its unit, SPEC §9.2) */
  segments?: () => Array<{ count: number; after?: (events: StoredEvent[]) => void }>
}

/** The one way the driver appends: a fenced unit, published after commit (SessionLog, and the Agent's wrapper of it). */
export interface UnitLog {
  commit<T = void, F extends RowFlag = never>(build: Build<T, F>, opts?: CommitOpts<T, F>): Promise<CommitResult<T>>
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

/** A unit as its build left it: drafts stamped where the build saw the log and folded, its side rows, patch and value. */
interface Built<T> {
  added: SessionEvent[]
  side: SideRow[]
  out: { patch?: RowPatch; value?: T }
  undos: Undo[]
  /** the row flags the build saw */
  known: LeanRow | undefined
}

function undo(undos: Undo[]): void {
  for (let i = undos.length - 1; i >= 0; i--) undos[i]()
  undos.length = 0
}

/**
 * A unit that decides on declared inputs (`reads`): committed once; when its inputs changed before
 * it committed (StaleUnitError: nothing written, the log caught up), the caller's decision is made
 * again, once, under the row lock, where they cannot change. Its build leaves nothing outside itself
 * but through its value and its patch, so the second decision simply replaces the first.
 */
export async function commitDecision<T = void, F extends RowFlag = never>(log: UnitLog, build: Build<T, F>, opts: CommitOpts<T, F> = {}): Promise<CommitResult<T>> {
  try {
    return await log.commit(build, opts)
  } catch (e) {
    if (!(e instanceof StaleUnitError)) throw e
    return log.commit(build, { ...opts, locked: true })
  }
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
   * Commits one unit. `build` runs ONCE: it adds drafts through the builder (each stamped and folded
   * at once) and may return a row patch and a value. Throwing anywhere — in build, on validation, in
   * the database — leaves the folded state exactly as before. Returns the committed events, already
   * published, and the row flags the unit saw (the caller reacts to a cancel request or a wake).
   *
   * The unit is first appended optimistically, conditional on the row being where this driver last
   * saw it. When another writer moved it meanwhile (a delivery, a cancel), the row is locked and what
   * they wrote is folded; if the unit's declared inputs (`reads`) are as its build saw them, the same
   * drafts are stamped again after those events (references to the unit's own events follow them),
   * else nothing is written and StaleUnitError goes back to the caller (commitDecision).
   */
  async commit<T = void, F extends RowFlag = never>(build: Build<T, F>, opts: CommitOpts<T, F> = {}): Promise<CommitResult<T>> {
    if (this.d.publisher.isPublishing(this.key)) throw new LogError('a session/event observer may not append to the session it observes (SPEC §3.1.5)')
    return this.d.mutex.run(this.key, async () => {
      // the fast path needs the declared flags as last seen; a unit that declared it needs the
      // locked row, or that reads flags of a row not seen yet, builds under the lock
      const reads = opts.reads ?? []
      const fast = !opts.locked && (reads.every((r) => r === 'inbox') || this.row !== undefined)
      const result = fast ? await this.commitBuilt(this.runBuild(build, reads, this.row, []), reads) : await this.commitLocked(build, reads)
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

  /** Runs a build once against the folded state and `row`; a throw undoes its folds. */
  private runBuild<T, F extends RowFlag>(build: Build<T, F>, reads: readonly (F | 'inbox')[], row: LeanRow | undefined, undos: Undo[]): Built<T> {
    const b: Built<T> = { added: [], side: [], out: {}, undos, known: row }
    try {
      b.out = build(this.builder(b, row, reads)) ?? {}
    } catch (e) {
      undo(undos)
      throw e
    }
    return b
  }

  /**
   * A builder that stamps and folds each draft at once, collecting the undos and the side rows; its
   * `row` holds the declared flags of `row` only.
   */
  private builder<F extends RowFlag>(b: Built<unknown>, row: LeanRow | undefined, reads: readonly (F | 'inbox')[]): UnitBuilder<F> {
    // the declared flags; reading another is a mistake of the unit, not a silent `undefined`
    const flags = {} as Pick<LeanRow, F>
    for (const f of ROW_FLAGS) {
      const declared = (reads as readonly UnitInput[]).includes(f)
      const value = declared ? row![f] : undefined
      Object.defineProperty(flags, f, {
        enumerable: declared,
        get: () => {
          if (!declared) throw new LogError(`a unit read the row's ${f} without declaring it (reads)`)
          return value
        },
      })
    }
    const inbox = (reads as readonly UnitInput[]).includes('inbox')
    return {
      row: Object.freeze(flags),
      side: (r) => void b.side.push(r),
      add: (draft, o) => {
        if (draft.type === 'agent/inbox/spliced' && !inbox) throw new LogError("a unit that splices the inbox declares it reads the inbox (reads: ['inbox'])")
        const time = Math.max(o?.time ?? Date.now(), this.state.lastTime)
        const [e] = stamp({ nextSeq: this.state.nextSeq, lastTime: this.state.lastTime }, [draft], time)
        b.undos.push(this.state.apply(deepFreezeData(e)))
        b.added.push(e)
        return e
      },
    }
  }

  /** The optimistic append of a built unit; when the row moved, the unit is committed under its lock. */
  private async commitBuilt<T, F extends RowFlag>(b: Built<T>, reads: readonly (F | 'inbox')[]): Promise<CommitResult<T>> {
    if (!b.added.length) {
      // nothing to write (an empty claim, an admission with nothing new): no round trip at all — the
      // folded inbox it decided on is the log as of some seq, and deciding nothing then is deciding
      // it now; one that read row flags, or a row patch or side rows alone, go under the lock
      const patch = b.out.patch ?? {}
      if (!Object.values(patch).some((v) => v !== undefined) && reads.every((r) => r === 'inbox') && !b.side.length && this.row) return { events: [], value: b.out.value as T, row: this.row }
      return this.commitMoved(b, reads)
    }
    let r
    try {
      const known = b.known
      const flagReads = reads.filter((f): f is F => f !== 'inbox')
      const flags = flagReads.length && known ? Object.fromEntries(flagReads.map((f) => [f, known[f]])) : undefined
      const m = mirror(this.state, b.added, b.out.patch)
      r = await appendConditional(this.d.db, this.key, { nextSeq: b.added[0].seq, lease: this.lease, flags }, b.added, m.patch, [...b.side, ...m.side])
    } catch (e) {
      undo(b.undos)
      throw e
    }
    if (!r) {
      undo(b.undos)
      return this.commitMoved(b, reads)
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
    return { events: r.events, value: b.out.value as T, row }
  }

  /**
   * A built unit whose optimistic append found the row moved (or that only moves the row): under the
   * row lock, what others wrote is folded; then the unit is written as built, stamped after it, or
   * — when an input it declared changed — not at all (StaleUnitError).
   */
  private commitMoved<T, F extends RowFlag>(b: Built<T>, reads: readonly (F | 'inbox')[]): Promise<CommitResult<T>> {
    return this.underLock((row, caught, undos) => {
      const changed = reads.filter((r) => (r === 'inbox' ? caught.some((e) => e.type === 'agent/inbox/spliced') : b.known === undefined || b.known[r] !== row[r]))
      if (changed.length) {
        this.row = row
        throw new StaleUnitError(this.id, changed)
      }
      return { ...this.restamp(b, undos), out: b.out }
    })
  }

  /** A unit built under the row lock, on the row as it is: its inputs cannot change before it commits. */
  private commitLocked<T, F extends RowFlag>(build: Build<T, F>, reads: readonly (F | 'inbox')[]): Promise<CommitResult<T>> {
    return this.underLock((row, _caught, undos) => this.runBuild(build, reads, row, undos))
  }

  /**
   * The unit's drafts, stamped again after the events others wrote meanwhile and folded; a reference
   * to an event of the unit itself (a tool/result's source call, a replacement's range, a webhook's
   * seq) moves with it, one to an earlier event stays.
   */
  private restamp(b: Built<unknown>, undos: Undo[]): { added: SessionEvent[]; side: SideRow[] } {
    if (!b.added.length) return { added: [], side: b.side }
    const first = b.added[0].seq
    const delta = this.state.nextSeq - first
    if (delta === 0) {
      for (const e of b.added) undos.push(this.state.apply(e))
      return { added: b.added, side: b.side }
    }
    const at = (seq: number) => (seq >= first ? seq + delta : seq)
    const added = b.added.map((e) => {
      const moved: SessionEvent = { ...e, seq: e.seq + delta, time: Math.max(e.time, this.state.lastTime) }
      if (e.sourceEventSeqs) moved.sourceEventSeqs = e.sourceEventSeqs.map(at)
      if (typeof e.surfaceOp === 'object') moved.surfaceOp = { ...e.surfaceOp, start: at(e.surfaceOp.start), end: at(e.surfaceOp.end) }
      undos.push(this.state.apply(moved))
      return moved
    })
    const side = b.side.map((r) => (r.kind === 'webhook' ? { ...r, event: { ...r.event, seq: at(r.event.seq) } } : r))
    return { added, side }
  }

  /**
   * One unit under the session row's lock, in one transaction: what others wrote meanwhile is folded
   * first, then `unit` gives the folded drafts to write (a built unit stamped again, or a build run on
   * the row as it is), written with their mirror. Returns the row as it is after them; a throw anywhere
   * undoes the folds of the unit's drafts (`undos`), those of the others' events stay.
   */
  private async underLock<T>(unit: (row: LeanRow, caught: StoredEvent[], undos: Undo[]) => { added: SessionEvent[]; side: SideRow[]; out: { patch?: RowPatch; value?: T } }): Promise<CommitResult<T>> {
    const undos: Undo[] = []
    try {
      return await this.d.db.transaction(async (tx) => {
        const row = this.check(await lockLean(tx, this.key))
        const caught = await this.catchUp(tx, row)
        const { added, side, out } = unit(row, caught, undos)
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
      undo(undos)
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
