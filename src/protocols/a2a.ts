// A2A (API.md §17.4) as a view of the log: a task is a span, its contextId the session, its id
// `<session id>:<span id>`. The projection is pure — a span and its ops become a Task and the stream's
// updates — and the request handler answers @a2a-js/sdk's JSON-RPC transport handlers (v1.0 and v0.3
// names) from the fold of the session's log, with input through the native inbox entry and answers to
// pending calls. Nothing is kept between requests: any process answers any call, after any crash.

import crypto from 'node:crypto'
import { Role, TaskState, type AgentCard, type Message, type Part, type StreamResponse, type Task, type TaskPushNotificationConfig } from '@a2a-js/sdk'
import type { A2ARequestHandler } from '@a2a-js/sdk/server'
import { ContentTypeNotSupportedError, JsonRpcRequestMalformedError, RequestMalformedError, TaskNotCancelableError, TaskNotFoundError, UnsupportedOperationError } from '@a2a-js/sdk/errors'
import { ApiError } from '../errors.js'
import { InputError } from '../agent/index.js'
import { getSession, listSessions, readEvents, type AgentVersionRow, type Principal, type SessionRow } from '../store/index.js'
import type { ContentBlock } from '../session/index.js'
import { answerCall, requireWrite, sendFollowup } from './calls.js'
import { foldOptionsOf, waitSpan } from './outcome.js'
import { foldSpans, SpanFold } from './span.js'
import { watchSession } from './source.js'
import type { Span } from './items.js'
import type { A2aPush } from './a2a-push.js'
import { agentCard, parseTaskId, stateOf, taskIdOf, taskOf, TaskStream, unopenedTask } from './a2a-task.js'
import { toApiError, reaches, type HttpDeps } from '../http/index.js'

/** A part larger than this (its text, or its decoded bytes) is refused, before anything is written. */
export const MAX_PART_BYTES = 256 * 1024
/** A message with more parts than this is refused. */
export const MAX_PARTS = 64
/** How long a blocking SendMessage waits for its task to end or wait (A2A: until terminal or interrupted). */
export const BLOCKING_WAIT_MS = 10 * 60_000
/** A stream whose client reads slower than this many updates behind is ended (it resubscribes). */
const MAX_QUEUED = 10_000

// the projection (a2a-task.ts), for the routes and the tests through this one door
export { agentCard, parseTaskId, stateOf, taskIdOf, taskOf, TaskStream, unopenedTask } from './a2a-task.js'

// ---- input ----

/** An A2A message's parts as content blocks (text, data as JSON text, images); refusals say why. */
export function contentOf(parts: readonly Part[]): ContentBlock[] {
  if (!parts.length) throw new RequestMalformedError({ message: 'message.parts must not be empty' })
  if (parts.length > MAX_PARTS) throw new RequestMalformedError({ message: `a message has at most ${MAX_PARTS} parts` })
  return parts.map((p, i): ContentBlock => {
    const c = p.content
    const size = c?.$case === 'text' ? Buffer.byteLength(c.value) : c?.$case === 'raw' ? c.value.length : c?.$case === 'data' ? Buffer.byteLength(JSON.stringify(c.value ?? null)) : 0
    if (size > MAX_PART_BYTES) throw new RequestMalformedError({ message: `message.parts[${i}] is larger than ${MAX_PART_BYTES} bytes` })
    if (c?.$case === 'text') return { type: 'text', text: c.value }
    if (c?.$case === 'data') return { type: 'text', text: JSON.stringify(c.value ?? null) }
    if (c?.$case === 'raw' && /^image\/[a-z0-9.+-]+$/i.test(p.mediaType)) return { type: 'image', mimeType: p.mediaType, data: c.value.toString('base64') }
    if (c?.$case === 'url') throw new ContentTypeNotSupportedError({ message: `message.parts[${i}]: file URLs are not fetched; send the bytes (raw) of an image` })
    throw new ContentTypeNotSupportedError({ message: `message.parts[${i}]: ${c ? `${c.$case} parts of media type "${p.mediaType}"` : 'an empty part'} cannot be sent; text, data and images (raw, image/*) can` })
  })
}

/** What a message answering a wait says for one call: a decision, or a client result. */
interface CallAnswer {
  callId?: string
  decision?: 'allow' | 'deny'
  reason?: string
  result?: string
  isError?: boolean
}

/**
 * How a message answers the calls a task waits on (API.md §17.4 input-required): data parts
 * `{callId?, decision, reason?}` or `{callId?, result, isError?}`; without data, its text is the
 * decision ("allow" / "deny") of a single approval, or the result of a single client call.
 */
function answersOf(parts: readonly Part[], waits: Span['waits']): Array<CallAnswer & { callId: string }> {
  const data = parts.flatMap((p) => (p.content?.$case === 'data' && p.content.value && typeof p.content.value === 'object' && !Array.isArray(p.content.value) ? [p.content.value as Record<string, unknown>] : []))
  const only = waits.length === 1 ? waits[0].callId : undefined
  if (data.length) {
    return data.map((d, i) => {
      const callId = typeof d.callId === 'string' ? d.callId : only
      if (!callId) throw new RequestMalformedError({ message: `parts: data part ${i} needs a callId: the task waits on ${waits.length} calls` })
      const a: CallAnswer & { callId: string } = { callId }
      if (d.decision === 'allow' || d.decision === 'deny') a.decision = d.decision
      if (typeof d.reason === 'string') a.reason = d.reason
      if (d.result !== undefined) a.result = typeof d.result === 'string' ? d.result : JSON.stringify(d.result)
      if (d.isError === true) a.isError = true
      if (a.decision === undefined && a.result === undefined) throw new RequestMalformedError({ message: `parts: data part ${i} needs a decision ("allow" or "deny") or a result` })
      return a
    })
  }
  if (!only) throw new RequestMalformedError({ message: `the task waits on ${waits.length} calls: answer each with a data part {callId, decision | result}` })
  const text = parts.map((p) => (p.content?.$case === 'text' ? p.content.value : '')).join('')
  if (waits[0].kind === 'approval') {
    const t = text.trim().toLowerCase()
    if (t !== 'allow' && t !== 'deny') throw new RequestMalformedError({ message: 'the task waits for an approval: answer "allow" or "deny" (or a data part {decision, reason?})' })
    return [{ callId: only, decision: t }]
  }
  return [{ callId: only, result: text }]
}

/**
 * A push config given with the message (SendMessageConfiguration): its answer is the task, not the
 * config, so a secret made for it could never be shown — the client gives its own token there.
 */
function checkInlinePush(c: TaskPushNotificationConfig | undefined): void {
  if (c?.url && !c.token) throw new RequestMalformedError({ message: 'configuration.taskPushNotificationConfig.token is required: it is the signing secret of the notifications (or create the config with CreateTaskPushNotificationConfig, whose answer shows a new one)' })
}

// ---- errors ----

/** An agentd refusal in JSON-RPC's server-error range (forbidden, rate-limited, …), its code in the message. */
const refusal = (e: ApiError) => new JsonRpcRequestMalformedError({ message: `${e.code}: ${e.message}`, envelopeCode: -32000 })

/** Anything else thrown as an A2A error: nothing of an internal error's message leaves. */
function a2aError(e: unknown, log: HttpDeps['log']): Error {
  if (e instanceof Error && e.name.endsWith('Error') && 'toErrorInfo' in e) return e
  if (e instanceof InputError) return new RequestMalformedError({ message: e.message })
  const a = toApiError(e)
  if (a.code === 'bad-request') return new RequestMalformedError({ message: a.message })
  if (a.code === 'internal') {
    log.error({ err: e }, 'A2A request failed')
    return new Error('internal error')
  }
  return refusal(a)
}

const taskNotFound = (id: string) => new TaskNotFoundError({ message: `task ${id} not found` })

// ---- the request handler ----

export interface A2aDeps extends HttpDeps {
  push: A2aPush
}

/** The A2A methods for one principal and one agent, as @a2a-js/sdk's transport handlers call them. */
export class A2aView implements A2ARequestHandler {
  constructor(
    private readonly deps: A2aDeps,
    private readonly p: Principal,
    private readonly agent: AgentVersionRow,
    private readonly baseUrl: string,
    private readonly signal: AbortSignal,
  ) {}

  async getAgentCard(): Promise<AgentCard> {
    return agentCard(this.agent, this.baseUrl)
  }

  async getAuthenticatedExtendedAgentCard(): Promise<AgentCard> {
    throw new UnsupportedOperationError({ message: 'this agent has no extended card' })
  }

  /** A session of this agent the principal reaches, else undefined. */
  private async session(id: string): Promise<SessionRow | undefined> {
    const row = await getSession(this.deps.db, this.p.tenantId, id)
    if (!row || row.agent?.id !== this.agent.id || (this.p.grant && !reaches(this.p.grant, row))) return undefined
    return row
  }

  private async fold(row: SessionRow): Promise<SpanFold> {
    return foldSpans(await readEvents(this.deps.db, row.key), foldOptionsOf(row))
  }

  /** The task of `id`: its session and its span in the fold of the log now. */
  private async task(id: string): Promise<{ row: SessionRow; fold: SpanFold; span: Span }> {
    const ref = parseTaskId(id)
    const row = ref && (await this.session(ref.session))
    if (!ref || !row) throw taskNotFound(id)
    const fold = await this.fold(row)
    const span = fold.get(ref.span)
    if (!span) throw taskNotFound(id)
    return { row, fold, span }
  }

  private guard<T>(fn: () => Promise<T>): Promise<T> {
    return fn().catch((e: unknown) => {
      throw a2aError(e, this.deps.log)
    })
  }

  /**
   * Delivers a message (API.md §17.4): to the context it names (a session of this agent) or a new
   * session of the agent; an answer to the calls its task waits on when the session waits; else a
   * followup whose message id comes from `messageId` as from an Idempotency-Key. Answers the task's
   * session and span id.
   */
  private async deliver(m: Message | undefined): Promise<{ row: SessionRow; spanId: string }> {
    requireWrite(this.p)
    if (!m) throw new RequestMalformedError({ message: 'message is required' })
    if (!m.messageId) throw new RequestMalformedError({ message: 'message.messageId is required: it is the idempotency key' })
    if (m.role !== Role.ROLE_USER) throw new RequestMalformedError({ message: 'message.role must be ROLE_USER' })
    let row: SessionRow | undefined
    const ref = m.taskId ? parseTaskId(m.taskId) : undefined
    if (m.taskId && !ref) throw taskNotFound(m.taskId)
    if (ref && m.contextId && ref.session !== m.contextId) throw new RequestMalformedError({ message: `task ${m.taskId} is not in context ${m.contextId}` })
    const contextId = ref?.session ?? (m.contextId || undefined)
    if (contextId !== undefined) {
      row = await this.session(contextId)
      if (!row) throw ref ? taskNotFound(m.taskId) : new RequestMalformedError({ message: `context ${contextId} not found: give a context this agent started, or none for a new one` })
    }
    const content = row ? undefined : contentOf(m.parts)
    if (!row) {
      if (this.p.grant?.sessions) throw new ApiError('forbidden', 'this token reaches only the sessions it lists: give one of them as the context')
      // a new context's id comes from the message id, so a retried first message lands in the same
      // session and its followup is recognized there as a repeat (idempotency is per session)
      const owner = this.p.grant?.subject ?? null
      const id = `a2a-${crypto.createHash('sha256').update(`${owner ?? ''}\n${this.agent.id}\n${m.messageId}`).digest('hex').slice(0, 32)}`
      row = (await this.deps.sessions.create(this.p.tenantId, { id, agent: this.agent.id }, owner)).row
      const accepted = await sendFollowup(this.deps, row, content!, { idempotencyKey: `a2a:${m.messageId}` })
      return { row, spanId: SpanFold.inputId(accepted.seq) }
    }
    const fold = await this.fold(row)
    if (ref && !fold.get(ref.span)) throw taskNotFound(m.taskId)
    const waiting = fold.waiting
    if (waiting && (!ref || ref.span === waiting.span.id)) {
      // the answer opens the next span of the waiting turn (span.ts: w<seq of the wait>)
      for (const a of answersOf(m.parts, waiting.calls)) await answerCall(this.deps, row, a.callId, a)
      return { row, spanId: SpanFold.answerId(waiting.seq) }
    }
    if (ref) {
      const span = fold.get(ref.span)!
      if (span.ended) throw new UnsupportedOperationError({ message: `task ${m.taskId} is ${TaskState[stateOf(span)]}: send the message in its context without a taskId for a new task` })
    }
    const accepted = await sendFollowup(this.deps, row, contentOf(m.parts), { idempotencyKey: `a2a:${m.messageId}` })
    return { row, spanId: SpanFold.inputId(accepted.seq) }
  }

  sendMessage(params: Parameters<A2ARequestHandler['sendMessage']>[0]): Promise<Message | Task> {
    return this.guard(async () => {
      const cfg = params.configuration
      checkInlinePush(cfg?.taskPushNotificationConfig)
      const { row, spanId } = await this.deliver(params.message)
      if (cfg?.taskPushNotificationConfig?.url) await this.deps.push.create(this.p, this.agent.id, row, { ...cfg.taskPushNotificationConfig, taskId: taskIdOf(row.id, spanId) })
      const fold = await waitSpan(this.deps, row, spanId, cfg?.returnImmediately ? 0 : BLOCKING_WAIT_MS, this.signal)
      const span = fold.get(spanId)
      // an answer whose effect the log does not show yet (a client tool allowed to run waits for its
      // result without an event, span.ts): its task is accepted and not started
      if (!span) return unopenedTask(row.id, spanId)
      return taskOf(row.id, span, cfg?.historyLength)
    })
  }

  async *sendMessageStream(params: Parameters<A2ARequestHandler['sendMessageStream']>[0]): AsyncGenerator<StreamResponse, void, undefined> {
    const cfg = params.configuration
    const { row, spanId } = await this.guard(async () => {
      checkInlinePush(cfg?.taskPushNotificationConfig)
      return this.deliver(params.message)
    })
    if (cfg?.taskPushNotificationConfig?.url) await this.guard(() => this.deps.push.create(this.p, this.agent.id, row, { ...cfg.taskPushNotificationConfig!, taskId: taskIdOf(row.id, spanId) }))
    yield* this.follow(row, spanId)
  }

  async *resubscribe(params: Parameters<A2ARequestHandler['resubscribe']>[0]): AsyncGenerator<StreamResponse, void, undefined> {
    const { row, span } = await this.guard(() => this.task(params.id))
    yield* this.follow(row, span.id)
  }

  /** The task's updates from its start, then live until its span ends (API.md §17.4 SubscribeToTask). */
  private async *follow(row: SessionRow, spanId: string): AsyncGenerator<StreamResponse, void, undefined> {
    const stream = new TaskStream(row.id, spanId)
    const queue: StreamResponse[] = []
    let failed: Error | undefined
    let wake: (() => void) | undefined
    const fold = new SpanFold({ ...foldOptionsOf(row), onOp: (op) => queue.push(...stream.render(op)) })
    const poke = () => {
      const w = wake
      wake = undefined
      w?.()
    }
    const watch = watchSession(this.deps, row.key, -1, {
      event: (e) => {
        fold.event(e)
        poke()
      },
      frame: (f) => {
        fold.frame(f.event, f.data)
        poke()
      },
      fail: (e) => {
        failed = e
        poke()
      },
    })
    const onAbort = () => poke()
    this.signal.addEventListener('abort', onAbort, { once: true })
    try {
      await watch.start()
      for (;;) {
        while (queue.length) {
          // updates pile up while the client does not read (the route waits for its socket to drain)
          if (queue.length > MAX_QUEUED) throw new Error('the client reads too slowly: resubscribe')
          yield queue.shift()!
        }
        if (stream.done || this.signal.aborted) return
        if (failed) throw a2aError(failed, this.deps.log)
        await new Promise<void>((r) => (wake = r))
      }
    } finally {
      this.signal.removeEventListener('abort', onAbort)
      watch.close()
    }
  }

  getTask(params: Parameters<A2ARequestHandler['getTask']>[0]): Promise<Task> {
    return this.guard(async () => {
      const { row, span } = await this.task(params.id)
      return taskOf(row.id, span, params.historyLength)
    })
  }

  listTasks(params: Parameters<A2ARequestHandler['listTasks']>[0]): Promise<Awaited<ReturnType<A2ARequestHandler['listTasks']>>> {
    return this.guard(async () => {
      const size = Math.min(100, Math.max(1, params.pageSize ?? 50))
      const offset = params.pageToken ? Number(params.pageToken) : 0
      if (!Number.isInteger(offset) || offset < 0) throw new RequestMalformedError({ message: 'pageToken is not one this server gave' })
      let rows: SessionRow[]
      if (params.contextId) {
        const row = await this.session(params.contextId)
        rows = row ? [row] : []
      } else {
        // the caller's most recently active sessions of this agent (API.md §18: a token's own)
        const g = this.p.grant
        const filter = { agents: [this.agent.id], ...(g?.subject !== undefined ? { owner: g.subject } : {}), ...(g?.sessions ? { ids: g.sessions } : {}) }
        rows = (await listSessions(this.deps.db, this.p.tenantId, 50, undefined, filter)).sessions
      }
      let tasks: Array<{ at: number; task: Task }> = []
      for (const row of rows) {
        const fold = await this.fold(row)
        for (const span of fold.spans) tasks.push({ at: span.createdAt, task: taskOf(row.id, span, params.historyLength) })
      }
      if (params.status) tasks = tasks.filter((t) => t.task.status?.state === params.status)
      if (params.statusTimestampAfter) {
        const after = Date.parse(params.statusTimestampAfter)
        tasks = tasks.filter((t) => t.at >= after)
      }
      tasks.sort((a, b) => b.at - a.at)
      const page = tasks.slice(offset, offset + size)
      return { tasks: page.map((t) => t.task), nextPageToken: offset + size < tasks.length ? String(offset + size) : '', pageSize: size, totalSize: tasks.length }
    })
  }

  cancelTask(params: Parameters<A2ARequestHandler['cancelTask']>[0]): Promise<Task> {
    return this.guard(async () => {
      requireWrite(this.p)
      const { row, span } = await this.task(params.id)
      if (span.ended) throw new TaskNotCancelableError({ message: `task ${params.id} is ${TaskState[stateOf(span)]}` })
      if (span.status === 'queued' && span.opener.kind === 'input') {
        // input not claimed yet: withdrawn from the inbox (a cancelling removal ends its span)
        await this.deps.intake.removeFromInbox(row, span.opener.messageId).catch((e: unknown) => {
          if (!(e instanceof ApiError && e.code === 'queue-item-not-found')) throw e
        })
      }
      const now = (await this.fold(row)).get(span.id)!
      if (!now.ended) await this.deps.intake.cancel(row, false)
      const fold = await waitSpan(this.deps, row, span.id, 30_000, this.signal)
      return taskOf(row.id, fold.get(span.id)!)
    })
  }

  createTaskPushNotificationConfig(params: TaskPushNotificationConfig): Promise<TaskPushNotificationConfig> {
    return this.guard(async () => {
      requireWrite(this.p)
      const { row } = await this.task(params.taskId)
      return this.deps.push.create(this.p, this.agent.id, row, params)
    })
  }

  getTaskPushNotificationConfig(params: Parameters<A2ARequestHandler['getTaskPushNotificationConfig']>[0]): Promise<TaskPushNotificationConfig> {
    return this.guard(async () => {
      await this.task(params.taskId)
      const c = await this.deps.push.get(this.p, params.taskId, params.id)
      if (!c) throw new RequestMalformedError({ message: `no push notification config ${params.id} for task ${params.taskId}` })
      return c
    })
  }

  listTaskPushNotificationConfigs(params: Parameters<A2ARequestHandler['listTaskPushNotificationConfigs']>[0]): ReturnType<A2ARequestHandler['listTaskPushNotificationConfigs']> {
    return this.guard(async () => {
      await this.task(params.taskId)
      return { configs: await this.deps.push.list(this.p, params.taskId), nextPageToken: '' }
    })
  }

  deleteTaskPushNotificationConfig(params: Parameters<A2ARequestHandler['deleteTaskPushNotificationConfig']>[0]): Promise<void> {
    return this.guard(async () => {
      requireWrite(this.p)
      await this.task(params.taskId)
      if (!(await this.deps.push.delete(this.p, params.taskId, params.id))) throw new RequestMalformedError({ message: `no push notification config ${params.id} for task ${params.taskId}` })
    })
  }
}
