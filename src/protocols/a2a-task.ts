// A2A's view of spans (API.md §17.4), pure: a task is a span, its contextId the session, its id
// `<session id>:<span id>`; a span and its ops become a Task and the stream's updates; an agent version
// becomes the agent card. The request handler (a2a.ts) answers from these.

import { Role, TaskState, type AgentCard, type Artifact, type Message, type Part, type StreamResponse, type Task } from '@a2a-js/sdk'
import type { AgentVersionRow } from '../store/index.js'
import type { ContentBlock, UserMessage } from '../session/index.js'
import type { Span, SpanOp } from './items.js'
import { finalText, pendingOf } from './outcome.js'

// ---- ids ----

/** A task's id: the session and the span (span ids never hold ':', session ids may). */
export const taskIdOf = (sessionId: string, spanId: string) => `${sessionId}:${spanId}`

export function parseTaskId(id: string): { session: string; span: string } | undefined {
  const at = id.lastIndexOf(':')
  if (at <= 0) return undefined
  const span = id.slice(at + 1)
  return /^[iwt][0-9]{1,10}$/.test(span) ? { session: id.slice(0, at), span } : undefined
}

// ---- the pure projection ----

const part = (text: string): Part => ({ content: { $case: 'text', value: text }, metadata: undefined, filename: '', mediaType: '' })
const dataPart = (value: unknown): Part => ({ content: { $case: 'data', value }, metadata: undefined, filename: '', mediaType: 'application/json' })

function partsOf(content: readonly ContentBlock[]): Part[] {
  return content.flatMap((b): Part[] => {
    if (b.type === 'text') return [part(b.text)]
    if (b.type === 'image' && b.data !== undefined) return [{ content: { $case: 'raw', value: Buffer.from(b.data, 'base64') }, metadata: undefined, filename: '', mediaType: b.mimeType ?? '' }]
    if (b.type === 'image' && b.url !== undefined) return [{ content: { $case: 'url', value: b.url }, metadata: undefined, filename: '', mediaType: b.mimeType ?? '' }]
    return []
  })
}

const message = (role: Role, messageId: string, contextId: string, taskId: string, parts: Part[]): Message => ({ messageId, contextId, taskId, role, parts, metadata: undefined, extensions: [], referenceTaskIds: [] })

/** A user message of the span's input, as A2A history shows it (its id is the one agentd stored). */
const userMessage = (m: UserMessage, contextId: string, taskId: string) => message(Role.ROLE_USER, m.id, contextId, taskId, partsOf(m.content))

/** The state of a span: queued is submitted, a wait is input-required, a max-tokens end completes. */
export function stateOf(span: Span): TaskState {
  if (!span.ended) return span.status === 'queued' ? TaskState.TASK_STATE_SUBMITTED : TaskState.TASK_STATE_WORKING
  if (span.waits.length) return TaskState.TASK_STATE_INPUT_REQUIRED
  if (span.status === 'failed') return TaskState.TASK_STATE_FAILED
  if (span.status === 'cancelled') return TaskState.TASK_STATE_CANCELED
  return TaskState.TASK_STATE_COMPLETED
}

/**
 * The agent's message of an ended span's status: its final text, what it waits for (with a data part
 * naming the calls, which a message answers), or why it failed.
 */
function endMessage(span: Span, contextId: string, taskId: string): Message | undefined {
  const id = `${taskId}:status`
  if (span.waits.length) {
    const pending = pendingOf(span)
    const said = pending.map((c) => `${c.kind === 'approval' ? 'approval of' : 'the result of'} ${c.name}(${c.arguments}) [${c.callId}]`).join('; ')
    return message(Role.ROLE_AGENT, id, contextId, taskId, [part(`waiting for ${said}`), dataPart({ pending })])
  }
  if (span.status === 'failed') return message(Role.ROLE_AGENT, id, contextId, taskId, [part(`${span.error?.code ?? 'failed'}: ${span.error?.message ?? 'the turn failed'}`)])
  if (span.status === 'cancelled') return undefined
  const text = finalText(span)
  return text !== undefined ? message(Role.ROLE_AGENT, id, contextId, taskId, [part(text)]) : undefined
}

const statusOf = (span: Span, contextId: string, taskId: string) => ({ state: stateOf(span), message: span.ended ? endMessage(span, contextId, taskId) : undefined, timestamp: new Date(span.createdAt).toISOString() })

/** A text item of the span as an artifact (its id is the item's). */
const artifactOf = (id: string, text: string, status: string): Artifact => ({ artifactId: id, name: 'answer', description: '', parts: [part(text)], metadata: { status }, extensions: [] })

/** The Task a span is now (GetTask, ListTasks, a blocking SendMessage's answer). */
export function taskOf(sessionId: string, span: Span, historyLength?: number): Task {
  const taskId = taskIdOf(sessionId, span.id)
  let history = span.input.map((m) => userMessage(m, sessionId, taskId))
  if (historyLength !== undefined) history = historyLength <= 0 ? [] : history.slice(-historyLength)
  const artifacts = span.items.flatMap((i) => (i.type === 'text' ? [artifactOf(i.id, i.text, i.status)] : []))
  return { id: taskId, contextId: sessionId, status: statusOf(span, sessionId, taskId), artifacts, history, metadata: { turn: span.turn } }
}

/** The task of an accepted answer whose span has not opened yet: working, nothing to show. */
export function unopenedTask(sessionId: string, spanId: string): Task {
  const taskId = taskIdOf(sessionId, spanId)
  return { id: taskId, contextId: sessionId, status: { state: TaskState.TASK_STATE_WORKING, message: undefined, timestamp: undefined }, artifacts: [], history: [], metadata: undefined }
}

/**
 * The stream of one task: the ops of its span as A2A updates, the same on every read (the task when it
 * is announced, then status and artifact updates; text arrives as artifact chunks). Ops of other spans
 * yield nothing. `done` once the span ended.
 */
export class TaskStream {
  done = false
  private readonly started = new Set<string>()
  constructor(readonly sessionId: string, readonly spanId: string) {}

  render(op: SpanOp): StreamResponse[] {
    if (op.span.id !== this.spanId || this.done) return []
    const span = op.span
    const taskId = taskIdOf(this.sessionId, span.id)
    const contextId = this.sessionId
    const status = (state: TaskState, msg?: Message): StreamResponse => ({ payload: { $case: 'statusUpdate', value: { taskId, contextId, status: { state, message: msg, timestamp: undefined }, metadata: undefined } } })
    const chunk = (id: string, text: string, append: boolean, lastChunk: boolean, meta?: Record<string, unknown>): StreamResponse => ({ payload: { $case: 'artifactUpdate', value: { taskId, contextId, artifact: { artifactId: id, name: 'answer', description: '', parts: [part(text)], metadata: meta, extensions: [] }, append, lastChunk, metadata: undefined } } })
    switch (op.op) {
      case 'span-open': {
        const task: Task = { id: taskId, contextId, status: { state: span.status === 'queued' ? TaskState.TASK_STATE_SUBMITTED : TaskState.TASK_STATE_WORKING, message: undefined, timestamp: new Date(span.createdAt).toISOString() }, artifacts: [], history: span.input.map((m) => userMessage(m, contextId, taskId)), metadata: undefined }
        return [{ payload: { $case: 'task', value: task } }]
      }
      case 'span-start':
        return [status(TaskState.TASK_STATE_WORKING)]
      case 'input':
        return op.opening ? [] : [status(TaskState.TASK_STATE_WORKING, userMessage(op.message, contextId, taskId))]
      case 'delta': {
        if (op.item.type !== 'text') return []
        const append = this.started.has(op.item.id)
        this.started.add(op.item.id)
        return [chunk(op.item.id, op.delta, append, false)]
      }
      case 'item-done': {
        if (op.item.type !== 'text') return []
        const append = this.started.has(op.item.id)
        this.started.add(op.item.id)
        return [chunk(op.item.id, append ? '' : op.item.text, append, true, { status: op.item.status })]
      }
      case 'span-end':
        this.done = true
        return [status(stateOf(span), endMessage(span, contextId, taskId))]
      default:
        return []
    }
  }
}

// ---- the card ----

/** The v1.0 agent card of an agent (API.md §17.4), with its JSON-RPC endpoint for v1.0 and v0.3 clients. */
export function agentCard(agent: AgentVersionRow, baseUrl: string): AgentCard {
  const url = `${baseUrl}/v1/a2a/${encodeURIComponent(agent.id)}`
  return {
    name: agent.name,
    description: agent.description ?? '',
    supportedInterfaces: [
      { url, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '1.0' },
      { url, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '0.3' },
    ],
    provider: undefined,
    version: String(agent.version),
    capabilities: { streaming: true, pushNotifications: true, extensions: [], extendedAgentCard: false },
    securitySchemes: { bearer: { scheme: { $case: 'httpAuthSecurityScheme', value: { description: 'an agentd API key or token', scheme: 'Bearer', bearerFormat: '' } } } } as unknown as AgentCard['securitySchemes'],
    securityRequirements: [{ schemes: { bearer: { list: [] } } }],
    defaultInputModes: ['text/plain', 'application/json', 'image/png', 'image/jpeg', 'image/gif', 'image/webp'],
    defaultOutputModes: ['text/plain'],
    skills: [{ id: agent.id, name: agent.name, description: agent.description ?? agent.name, tags: [], examples: [], inputModes: [], outputModes: [], securityRequirements: [] }],
    signatures: [],
  }
}
