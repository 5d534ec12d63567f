// The tool scheduler (SPEC §11.4–§11.8): barriers and a rolling pool in model order, prepares in
// model order that never overlap, commits in model order, and cancellation that starts nothing new.
// It orchestrates only; the Agent supplies the effects (appends, hooks, bodies) through ToolHost.

export interface ToolCallPlan {
  callId: string
  name: string
  /** the JSON text of the call's tool-call block, as logged in tool/call */
  rawArguments: string
  /** SPEC §11.2: '' → {}, parseable → the value, else the raw string */
  arguments: unknown
  index: number
}

export type PrepareDecision = { kind: 'allow' } | { kind: 'deny'; reason: string } | { kind: 'aborted' }

export interface ToolHost<O> {
  /** SPEC §11.3: exactly true from isConcurrencySafe (or a parallel ToolSpec); re-read per call */
  isParallel(plan: ToolCallPlan): boolean
  /** the pool size, re-read per group (a positive integer) */
  maxParallel(): number
  readonly signal: AbortSignal
  /** append tool/call (SPEC §11.5 step 1) */
  appendCall(plan: ToolCallPlan): Promise<number>
  /** pre-execute waterfall and approval waits (step 2) */
  prepare(plan: ToolCallPlan, callSeq: number): Promise<PrepareDecision>
  /** the tools/execute waterfall around the body (step 3); never throws for tool failures */
  execute(plan: ToolCallPlan, callSeq: number): Promise<O>
  /** the outcome of a call that did not run: denied, or aborted before dispatch */
  notRun(plan: ToolCallPlan, decision: Exclude<PrepareDecision, { kind: 'allow' }>): O
  /**
   * post-process and append tool/result (SPEC §11.6); reports concludesTurn. `last`: the batch's
   * final call, whose result is the batch's last write (nothing runs after it but the step's end)
   */
  commit(plan: ToolCallPlan, callSeq: number, outcome: O, last: boolean): Promise<{ concludes: boolean }>
  /** SPEC §11.8: tool/call then an aborted-before-dispatch tool/result for a call never started */
  abortUnstarted(plan: ToolCallPlan): Promise<void>
}

interface Entry<O> {
  plan: ToolCallPlan
  /** settles when the call's outcome is known (not yet committed) */
  settled: Promise<{ callSeq: number; outcome: O }>
}

export async function runToolBatch<O>(calls: ToolCallPlan[], host: ToolHost<O>): Promise<{ concludes: boolean }> {
  let concludes = false
  let failure: { error: unknown } | undefined
  let prepareChain: Promise<unknown> = Promise.resolve()
  let commitChain: Promise<void> = Promise.resolve()
  let inFlight = 0
  let wakeSlot: (() => void) | undefined
  const started: Entry<O>[] = []

  const fail = (e: unknown) => {
    if (!failure) failure = { error: e }
    wakeSlot?.()
  }

  const start = (plan: ToolCallPlan) => {
    inFlight++
    // append and prepare run in model order; execution runs concurrently
    const prepared = prepareChain.then(async () => {
      if (failure) throw failure.error
      const callSeq = await host.appendCall(plan)
      if (host.signal.aborted) return { callSeq, decision: { kind: 'aborted' } as PrepareDecision }
      return { callSeq, decision: await host.prepare(plan, callSeq) }
    })
    prepareChain = prepared.catch(() => {})
    const settled = prepared.then(async ({ callSeq, decision }) => ({
      callSeq,
      outcome: decision.kind === 'allow' ? await host.execute(plan, callSeq) : host.notRun(plan, decision),
    }))
    settled.then(
      () => {
        inFlight--
        wakeSlot?.()
      },
      (e) => {
        inFlight--
        fail(e)
      },
    )
    const entry: Entry<O> = { plan, settled }
    started.push(entry)
    commitChain = commitChain.then(async () => {
      if (failure) return
      try {
        const { callSeq, outcome } = await settled
        const c = await host.commit(plan, callSeq, outcome, plan === calls[calls.length - 1])
        if (c.concludes) concludes = true
      } catch (e) {
        fail(e)
      }
    })
  }

  const slotFree = () =>
    new Promise<void>((resolve) => {
      const check = () => {
        if (inFlight < host.maxParallel() || failure || host.signal.aborted) {
          wakeSlot = undefined
          host.signal.removeEventListener('abort', check)
          resolve()
        }
      }
      wakeSlot = check
      host.signal.addEventListener('abort', check, { once: true })
      check()
    })

  let i = 0
  while (i < calls.length && !failure && !host.signal.aborted) {
    if (!host.isParallel(calls[i])) {
      // an exclusive call runs alone: after every earlier result committed, before any later start
      start(calls[i++])
      await commitChain
      continue
    }
    start(calls[i++])
    while (i < calls.length && !failure && !host.signal.aborted) {
      if (!host.isParallel(calls[i])) break // becomes the next barrier once the pool drains
      await slotFree()
      if (failure || host.signal.aborted) break
      // reclassified right before it starts: an earlier result may have changed the registry
      if (!host.isParallel(calls[i])) break
      start(calls[i++])
    }
    await commitChain
  }
  // started calls are always awaited and committed in order, cancelled or not
  await commitChain
  await Promise.allSettled(started.map((e) => e.settled))
  if (failure) throw failure.error
  if (host.signal.aborted) for (; i < calls.length; i++) await host.abortUnstarted(calls[i])
  return { concludes }
}

/** SPEC §11.2 argument parsing. */
export function parseToolArguments(raw: string): unknown {
  if (raw === '') return {}
  try {
    return JSON.parse(raw)
  } catch {
    return raw
  }
}
