// One attempt of a step (SPEC §8.1): A1 the request config (agent/request), A2 prepareCall, A3
// synchronous admission as ONE unit (admission.ts plans it), then A4: the frozen request, dispatch
// through llm/stream, live frames while it streams (§9.2), and settlement as exactly one
// assistant/message or assistant/attempt (§9.3, §18.1).

import { assembleBlocks, assertLosslessJson, deepFreeze, errorChain, interruptedPrefix, newMessageId, type AssistantMessage, type ContentBlock, type Draft, type Json, type LlmCallConfig, type LlmFailure, type StreamChunk } from '../session/index.js'
import type { TrackedAttempt } from '../bus/index.js'
import { LlmError, type LlmRequest, type PreparedCall, type RetryPolicy } from '../llm/index.js'
import { planAdmission, proposeConfig, type Proposal } from './admission.js'
import { FatalAppend, type TurnContext } from './context.js'
import { AbortedError, TurnLlmError } from './errors.js'
import { LeaseLostError } from './log.js'
import type { Part } from './unit.js'
import { addFirstCall, callCommitted, type AppendedCall } from './tool-effects.js'
import type { AttemptTrace } from '../tracing/index.js'

/** Process-local marker of loop requests (SPEC §7.6). */
export const LOOP_REQUEST = Symbol.for('agentd.loopRequest')

/** How an attempt ended: a settled message, or a terminal failure for agent/request-error (§10.1). */
export type AttemptOutcome =
  | { kind: 'message'; message: AssistantMessage; finish: string; /** its first call's tool/call, written with it */ appended?: AppendedCall }
  | { kind: 'failed'; failure: LlmFailure; provider: string; retryPolicy?: RetryPolicy }

export async function runAttempt(tc: TurnContext, proposal: Proposal, attempt: number): Promise<AttemptOutcome> {
  const { loop } = tc
  // A1: the request config
  const proposed = proposeConfig(loop.settings.spec, loop.state, !loop.series.fresh)
  const config = deepFreeze(structuredClone(await tc.hooks.runWaterfall<LlmCallConfig>('agent/request', { agent: loop.handle(), turn: tc.turn, step: tc.step, signal: tc.signal }, () => proposed, { bind: loop.bind }))) as LlmCallConfig
  if (!config || typeof config.provider !== 'string' || !config.provider || typeof config.model !== 'string' || !config.model) throw new Error('the request config lacks provider or model')
  tc.abort.check()
  // A2: prepare the call (NO_ADAPTER continues unprepared for an llm/stream listener, §8.3)
  let prepared: PreparedCall | undefined
  try {
    prepared = await loop.services.llm.prepareCall(config, tc.signal)
  } catch (e) {
    if (!(e instanceof LlmError && e.failure.code === 'NO_ADAPTER')) throw e
  }
  tc.abort.check()
  // A3: synchronous admission, ONE unit (SPEC §2.4)
  const used = prepared?.config ?? config
  // a barrier: the request is derived from what is durable (SPEC §8.9); a staged step/start rides in it
  await tc.unit.close({
    build: (u) => {
      for (const d of planAdmission({ state: loop.state, proposal, attempt, turn: tc.turn, step: tc.step, config: used, prepared, series: loop.series })) u.add(d)
    },
  })
  // instance state moves only once the unit committed
  loop.series.admitted(loop.state.replaceGeneration)
  tc.abort.check()
  // API.md §15: the tenant's budget, after admission and before anything reaches the provider; a
  // refusal ends the turn like a model failure, the admitted events kept (as a cancel here, SPEC §8.2)
  if (loop.services.tenancy) {
    const refused = await loop.services.tenancy.checkBudget(loop.tenantId)
    tc.abort.check()
    if (refused) throw new TurnLlmError(refused)
  }
  // the frozen request, derived from the log (SPEC §8.9)
  const header = loop.state.latestHeader!.header
  const request = Object.freeze({ ...header.config, messages: Object.freeze(loop.state.deriveMessages()), ...(header.tools ? { tools: header.tools } : {}), sessionId: loop.id, signal: tc.signal, [LOOP_REQUEST]: true }) as unknown as LlmRequest
  // API.md §19: the attempt's `chat` span, active while the model is called (its traceparent)
  const traced = tc.trace.attempt({ provider: used.provider, model: used.model, step: tc.step, attempt, ...(used.maxTokens !== undefined ? { maxTokens: used.maxTokens } : {}) })
  traced.input(() => request.messages)
  try {
    return await traced.within(() => dispatch(tc, request, prepared, used, proposal, traced))
  } catch (e) {
    // ends the span unless dispatch did (the first end wins)
    traced.end({ failure: { code: tc.signal.aborted ? 'ABORTED' : e instanceof TurnLlmError ? e.failure.code : 'UNKNOWN' } })
    throw e
  }
}

/** The adapter's stream with its throws turned into a finish error chunk (SPEC §18.1). */
async function* adapterStream(prepared: PreparedCall | undefined, request: LlmRequest): AsyncGenerator<StreamChunk> {
  if (!prepared) {
    yield { type: 'finish', reason: { kind: 'error', failure: { code: 'NO_ADAPTER', message: `no adapter serves ${request.provider}/${request.model}` } } }
    return
  }
  try {
    for await (const c of prepared.stream(request)) {
      yield c
      if (c.type === 'finish') return
    }
  } catch (e) {
    const aborted = request.signal.aborted
    yield { type: 'finish', reason: { kind: aborted ? 'aborted' : 'error', failure: { code: aborted ? 'ABORTED' : e instanceof LlmError ? e.failure.code : 'UNKNOWN', message: errorChain(e) } } }
  }
}

/** A started attempt's live side: its stream in the process's tracker, and its frames (SPEC §9.1–§9.2). */
class LiveAttempt {
  readonly chunks: StreamChunk[] = []
  /** hrtime of the dispatch and of the first delta (metrics) */
  readonly started = process.hrtime.bigint()
  firstToken: bigint | undefined
  private readonly tracked: TrackedAttempt
  private index = 0

  constructor(private readonly tc: TurnContext, readonly attemptId: string) {
    const revision = tc.loop.nextRevision()
    this.tracked = tc.loop.services.attempts.open(tc.loop.key, { attemptId, revision, turn: tc.turn, step: tc.step })
    this.frame({ kind: 'start', attemptId, revision, turn: tc.turn, step: tc.step })
  }

  private frame(data: Record<string, unknown>): void {
    this.tc.notify('agent/assistant-stream', { frame: data }, data)
  }

  /** The compact stream so far, as the settlement stores it. */
  get stream() {
    return this.tracked.records
  }

  chunk(chunk: StreamChunk): void {
    const time = Date.now()
    const revision = this.tc.loop.nextRevision()
    this.tracked.push(time, chunk, revision)
    if (this.firstToken === undefined && chunk.type.endsWith('-delta')) this.firstToken = process.hrtime.bigint()
    this.chunks.push(chunk)
    this.frame({ kind: 'chunk', attemptId: this.attemptId, revision, index: this.index++, time, chunk })
  }

  /** Exactly one end per started attempt: committed (after publication) or abandoned. */
  end(outcome: Record<string, unknown>): void {
    const revision = this.tc.loop.nextRevision()
    this.tracked.close()
    this.frame({ kind: 'end', attemptId: this.attemptId, revision, index: this.index, outcome })
  }
}

/** Reads the stream until its finish chunk, an iteration error or the turn's abort. */
async function consume(source: AsyncIterable<StreamChunk>, signal: AbortSignal, live: LiveAttempt): Promise<{ finished: boolean; iterError?: unknown }> {
  const it = source[Symbol.asyncIterator]()
  let finished = false
  let onAbort: (() => void) | undefined
  const aborted = new Promise<'aborted'>((resolve) => {
    if (signal.aborted) resolve('aborted')
    else signal.addEventListener('abort', (onAbort = () => resolve('aborted')), { once: true })
  })
  try {
    for (;;) {
      const r = await Promise.race([it.next(), aborted])
      if (r === 'aborted' || r.done) break
      assertLosslessJson(r.value as unknown, 'chunk')
      live.chunk(r.value)
      if (r.value.type === 'finish') {
        finished = true
        break
      }
    }
    return { finished }
  } catch (e) {
    return { finished, iterError: e }
  } finally {
    if (onAbort) signal.removeEventListener('abort', onAbort)
    if (!finished) void Promise.resolve(it.return?.()).catch(() => {})
  }
}

/** A4: dispatch, stream and settle; the table of SPEC §9.3, row by row. */
async function dispatch(tc: TurnContext, request: LlmRequest, prepared: PreparedCall | undefined, config: LlmCallConfig, proposal: Proposal, traced: AttemptTrace): Promise<AttemptOutcome> {
  const { turn, step, signal } = tc
  const attemptId = `${tc.loop.id}:${tc.loop.state.nextSeq}`
  // a throw from an llm/stream listener: no frames at all, a turn error
  const source = await tc.hooks.runWaterfall<AsyncIterable<StreamChunk>>('llm/stream', request, (req: LlmRequest) => adapterStream(prepared, req))
  const live = new LiveAttempt(tc, attemptId)
  const { finished, iterError } = await consume(source, signal, live)
  const assembled = assembleBlocks(live.chunks)
  const success = finished && (assembled.finish?.kind === 'stop' || assembled.finish?.kind === 'tool-calls' || assembled.finish?.kind === 'max-tokens')
  traced.end({
    ...(assembled.finish ? { finish: assembled.finish.kind } : {}),
    ...(assembled.usage ? { usage: assembled.usage } : {}),
    ...(success ? { output: () => assembled.content } : { failure: { code: signal.aborted ? 'ABORTED' : (failureOf(assembled.finish)?.code ?? 'UNKNOWN') } }),
  })
  const { provider, model } = config
  /**
   * The settlement as a part of the open unit. `then` is what rides after it (the first call); `open`
   * leaves it staged for the step's end (turn.ts endStep), as nothing foreign runs between them.
   */
  const settle = async (type: 'assistant/message' | 'assistant/attempt', data: Record<string, unknown>, then?: Part, open = false) => {
    // the end frame follows the settlement's publication and precedes what rode in its unit
    let ended = false
    const draft: Draft = type === 'assistant/message' ? { type, data: data as Json, surfaceOp: 'append' } : { type, data: data as Json }
    const part: Part = {
      build: (u) => void u.add(draft),
      published: (events) => {
        ended = true
        live.end({ kind: 'committed', eventType: type, seq: events[events.length - 1].seq })
      },
      committed: () => {
        tc.loop.services.metrics?.attempts.inc({ outcome: type === 'assistant/message' ? 'message' : 'attempt' })
        tc.loop.services.metrics?.attemptSettled({ provider, outcome: success ? 'ok' : signal.aborted ? 'aborted' : 'error' }, live.started, live.firstToken)
      },
      failed: () => {
        if (!ended) live.end({ kind: 'abandoned' })
      },
    }
    tc.unit.stage(part)
    if (open) return
    try {
      await tc.unit.close(then)
    } catch (e) {
      if (e instanceof LeaseLostError) throw new FatalAppend(e)
      if (iterError || (!success && !signal.aborted)) throw new AggregateError([iterError ?? new Error(failureOf(assembled.finish)?.message ?? 'stream failed'), e], 'the stream failed and its settlement was rejected', { cause: iterError })
      throw e
    }
  }
  const stream = live.stream
  const usage = assembled.usage ? { usage: assembled.usage } : {}
  if (iterError && !signal.aborted) {
    // an llm/stream listener's iterator threw: the attempt settles, then the turn fails (no recovery)
    await settle('assistant/attempt', { turn, step, stream })
    throw iterError
  }
  if (!success && signal.aborted) {
    // cancelled: the visible prefix becomes an interrupted message, else an attempt
    const prefix = interruptedPrefix(assembled.content)
    if (prefix.length) await settle('assistant/message', { turn, step, message: assistant(prefix, provider, model, undefined), stream, ...usage, interrupted: true })
    else await settle('assistant/attempt', { turn, step, stream })
    throw new AbortedError(tc.abort.cause)
  }
  if (!success) {
    await settle('assistant/attempt', { turn, step, stream })
    const failure = failureOf(assembled.finish) ?? { code: 'UNKNOWN', message: 'the stream ended without a finish' }
    return { kind: 'failed', failure, provider, retryPolicy: prepared?.retryPolicy }
  }
  const message = assistant(assembled.content, provider, model, assembled.replayState)
  const finish = assembled.finish!.kind
  // a message with calls: a barrier, its first call's tool/call riding with it (the call starts at
  // once, tool-effects.ts addFirstCall); without calls the step ends right after and nothing foreign
  // runs between them (SPEC §6.2): it stays open for the step's end (turn.ts endStep)
  const calls = message.content.some((b) => b.type === 'tool-call')
  // the call's seq is the one its tool/call was committed at
  let appended: AppendedCall | undefined
  const firstCall: Part = {
    build: (u) => void (appended = addFirstCall(tc, u, message, proposal.mcpTools)),
    committed: (events) => void (appended &&= { ...appended, seq: events[0].seq }),
  }
  await settle('assistant/message', { turn, step, message, stream, ...usage }, calls ? firstCall : undefined, !calls)
  if (appended) callCommitted(tc, appended)
  return { kind: 'message', message, finish, ...(appended ? { appended } : {}) }
}

function assistant(content: ContentBlock[], provider: string, model: string, replayState: Json | undefined): AssistantMessage {
  return { id: newMessageId(), role: 'assistant', content, source: { kind: 'model', provider, model, ...(replayState !== undefined ? { replayState } : {}) } }
}

function failureOf(f: ReturnType<typeof assembleBlocks>['finish']): LlmFailure | undefined {
  return f && (f.kind === 'error' || f.kind === 'aborted') ? f.failure : undefined
}
