// run(): send one message and wait for the end of the turn that took it. The turn is recognised from
// the durable log (its `user/message` carries our id; a claim frame names the turn early), a crash
// continuation is followed (`turn/start {continues}`, SPEC §19), and calls waiting for this client are
// answered through the caller's handlers: client tools by name, approvals through `approve`.

import type { AgentdClient, SendOptions } from './client.js'
import { newIdempotencyKey } from './keys.js'
import { AgentdError } from './errors.js'
import type { Accepted, ApprovalInput, ContentBlock, InputContent, Message, PendingCall, SessionEvent, StreamFrame, ToolResultInput, TurnEndReason } from './types.js'
import { isEvent } from './types.js'

/** What a client tool answers: text, content blocks, or both with an error flag. A throw is an error result. */
export type ClientToolAnswer = string | ContentBlock[] | { content: string | ContentBlock[]; isError?: boolean }
export type ClientToolHandler = (args: unknown, call: PendingCall) => ClientToolAnswer | Promise<ClientToolAnswer>
export type ApprovalAnswer = boolean | 'allow' | 'deny' | { decision: 'allow' | 'deny'; reason?: string }
export type ApprovalHandler = (call: PendingCall) => ApprovalAnswer | Promise<ApprovalAnswer>

export interface RunOptions extends SendOptions {
  /** every frame of the stream, as it arrives (the partial answer streams through here) */
  onFrame?: (frame: StreamFrame) => void
  /** handlers of `client` tools, by tool name */
  tools?: Record<string, ClientToolHandler>
  /** decides calls waiting for approval; without it they wait for someone else */
  approve?: ApprovalHandler
  /** `steer` delivers into the running turn instead (default `followup`) */
  route?: 'followup' | 'steer'
  /** how often to look at GET …/pending while the turn has calls without a result (default 500 ms) */
  pendingPollMs?: number
}

export interface RunResult {
  messageId: string
  /** seq of the splice that stored the message */
  seq: number
  /** the turn that ended last: the first one, or the continuation that carried it on */
  turn: number
  /** every turn that worked on it: the first, then any crash continuations */
  turns: number[]
  reason: TurnEndReason
  /** the message entered the history (false: it was claimed by a turn that never admitted it, or discarded) */
  admitted: boolean
  /** the model-visible messages of those turns, in order */
  messages: Message[]
  /** every durable event from the first turn's start to the last turn's end */
  events: SessionEvent[]
}

const SURFACE = new Set(['system/message', 'user/message', 'assistant/message', 'tool/result'])

export function messageOf(e: SessionEvent): Message | undefined {
  if (!SURFACE.has(e.type)) return undefined
  return (e.type === 'user/message' ? e.data : (e.data as { message: Message }).message) as Message
}

/** A queue that merges the stream's frames with timer ticks, so the loop can wake without a frame. */
function merged(stream: AsyncIterable<StreamFrame>, tickMs: number) {
  const items: Array<StreamFrame | 'tick'> = []
  let wake: (() => void) | undefined
  let ended = false
  let failure: unknown
  const push = (x: StreamFrame | 'tick') => {
    items.push(x)
    wake?.()
  }
  void (async () => {
    try {
      for await (const f of stream) push(f)
    } catch (e) {
      failure = e
    } finally {
      ended = true
      wake?.()
    }
  })()
  const timer = setInterval(() => push('tick'), tickMs)
  return {
    async *[Symbol.asyncIterator](): AsyncGenerator<StreamFrame | 'tick'> {
      try {
        for (;;) {
          while (items.length) yield items.shift()!
          if (ended) {
            if (failure) throw failure
            return
          }
          await new Promise<void>((r) => (wake = r))
          wake = undefined
        }
      } finally {
        clearInterval(timer)
      }
    },
  }
}

export async function runTurn(client: AgentdClient, sessionId: string, content: InputContent, o: RunOptions = {}): Promise<RunResult> {
  const stop = new AbortController()
  const onAbort = () => stop.abort(o.signal!.reason)
  o.signal?.addEventListener('abort', onAbort, { once: true })
  if (o.signal?.aborted) stop.abort(o.signal.reason)
  try {
    const start = await client.sessions.get(sessionId, { signal: stop.signal })
    const stream = client.stream(sessionId, { after: start.headSeq, signal: stop.signal })
    // our own message id unless the caller chose a key: then the answer tells it
    const sendOpts: SendOptions = o.id !== undefined || o.idempotencyKey !== undefined ? o : { ...o, id: newIdempotencyKey() }
    let accepted: Accepted | undefined
    let openTurn: number | null = null
    let current: number | null = null
    const turns: number[] = []
    const turnStart = new Map<number, number>()
    let admitted = false
    let interrupted: { turn: number; reason: TurnEndReason; seq: number } | null = null
    const handled = new Set<string>()
    let callsOpen = 0

    const follow = (turn: number) => {
      current = turn
      if (!turns.includes(turn)) turns.push(turn)
    }

    /** the number of the turn open at the head, read backwards from the log */
    const findOpenTurn = async (before: number): Promise<number | null> => {
      for (let after = before - 500; ; after -= 500) {
        const page = await client.events(sessionId, { after: Math.max(-1, after), limit: Math.min(500, before - Math.max(-1, after)), signal: stop.signal })
        for (const e of [...page.events].reverse()) {
          if (isEvent(e, 'turn/start')) {
            turnStart.set(e.data.turn, e.seq)
            return e.data.turn
          }
          if (isEvent(e, 'turn/end')) return null
        }
        if (after <= -1) return null
      }
    }

    // each waiting call is answered once: a handler runs once, its answer is posted until it lands
    const answers = new Map<string, Promise<{ kind: 'approval'; body: ApprovalInput } | { kind: 'client'; body: ToolResultInput }>>()
    const posting = new Set<string>()
    const answerPending = async () => {
      if (!o.tools && !o.approve) return
      const calls = await client.pending(sessionId, { signal: stop.signal }).catch(() => [] as PendingCall[])
      for (const call of calls) {
        const key = `${call.kind}:${call.callId}`
        if (posting.has(key)) continue
        let answer = answers.get(key)
        if (!answer) {
          const handler = call.kind === 'client' ? o.tools?.[call.name] : undefined
          if (call.kind === 'approval' && o.approve) answer = Promise.resolve().then(() => o.approve!(call)).then(toDecision, (e) => ({ decision: 'deny' as const, reason: errorText(e) })).then((body) => ({ kind: 'approval' as const, body }))
          else if (handler) answer = Promise.resolve().then(() => handler(call.arguments, call)).then(toResult(call.callId), (e) => ({ callId: call.callId, content: `Error: ${errorText(e)}`, isError: true })).then((body) => ({ kind: 'client' as const, body }))
          else continue
          answers.set(key, answer)
        }
        posting.add(key)
        void answer
          .then((a) => (a.kind === 'approval' ? client.decide(sessionId, call.callId, a.body, { signal: stop.signal }) : client.submitToolResult(sessionId, a.body, { signal: stop.signal })))
          .catch((e) => {
            // settled by someone else or by a cancel: done; anything else is tried again on the next look
            if (!(e instanceof AgentdError && (e.code === 'tool-call-not-pending' || e.code === 'session-not-found'))) posting.delete(key)
          })
      }
    }

    const finish = async (turn: number, reason: TurnEndReason, endSeq: number): Promise<RunResult> => {
      if (!turns.includes(turn)) turns.push(turn)
      const first = turnStart.get(turns[0]!) ?? endSeq
      const events: SessionEvent[] = []
      for await (const e of client.allEvents(sessionId, { after: first - 1, signal: stop.signal })) {
        if (e.seq > endSeq) break
        events.push(e)
      }
      const messages = events.map(messageOf).filter((m): m is Message => m !== undefined)
      return { messageId: accepted!.messageId, seq: accepted!.seq, turn, turns, reason, admitted, messages, events }
    }

    for await (const f of merged(stream, o.pendingPollMs ?? 500)) {
      if (f === 'tick') {
        if (callsOpen > 0) void answerPending()
        if (interrupted) {
          // no continuation is coming once the session is idle (a server without SPEC §19, or one that declined)
          const s = await client.sessions.get(sessionId, { signal: stop.signal })
          if (s.status === 'idle' && current === interrupted.turn) return await finish(interrupted.turn, interrupted.reason, interrupted.seq)
        }
        continue
      }
      o.onFrame?.(f)
      if (f.event === 'stream/ready' && !accepted) {
        accepted = await client.send(o.route ?? 'followup', sessionId, content, { ...sendOpts, signal: stop.signal })
        continue
      }
      if (f.event === 'agent/inbox/claimed' && accepted && current === null && f.data.message.id === accepted.messageId) follow(f.data.turn)
      if (f.event !== 'session/event') continue
      const e = f.data
      if (isEvent(e, 'turn/start')) {
        openTurn = e.data.turn
        turnStart.set(e.data.turn, e.seq)
        if (interrupted && e.data.continues === interrupted.turn) {
          follow(e.data.turn)
          interrupted = null
        }
      } else if (isEvent(e, 'user/message') && accepted && e.data.id === accepted.messageId) {
        admitted = true
        if (current === null) follow(openTurn ?? (await findOpenTurn(e.seq)) ?? -1)
      } else if (isEvent(e, 'tool/call') && e.data.turn === current) {
        callsOpen++
        void answerPending()
      } else if (isEvent(e, 'tool/result') && e.data.turn === current) {
        callsOpen = Math.max(0, callsOpen - 1)
      } else if (isEvent(e, 'turn/end')) {
        openTurn = null
        callsOpen = 0
        if (e.data.turn === current) {
          if (e.data.reason.kind !== 'interrupted') return await finish(e.data.turn, e.data.reason, e.seq)
          interrupted = { turn: e.data.turn, reason: e.data.reason, seq: e.seq }
        } else if (current === null && accepted && e.seq > accepted.seq && (await consumedWithoutAdmission(client, sessionId, accepted.messageId, e.seq, stop.signal))) {
          follow(e.data.turn)
          return await finish(e.data.turn, e.data.reason, e.seq)
        }
      }
    }
    throw new AgentdError({ status: 0, code: 'network-error', message: `the stream of ${sessionId} ended before the turn did` })
  } finally {
    o.signal?.removeEventListener('abort', onAbort)
    stop.abort()
  }
}

/**
 * After a turn ended without our message in it: was the message used up (claimed by that turn and
 * never admitted — e.g. blocked — or discarded by a cancel)? Not if it is still queued, nor if a later
 * turn has started that may hold it; turns start before they claim, so reading the inbox first and
 * the log second cannot miss one.
 */
async function consumedWithoutAdmission(client: AgentdClient, sessionId: string, messageId: string, endSeq: number, signal: AbortSignal): Promise<boolean> {
  const inbox = await client.inbox(sessionId, { signal })
  if ([...inbox.nextTurn, ...inbox.nextStep].some((m) => m.id === messageId)) return false
  for await (const e of client.allEvents(sessionId, { after: endSeq, signal })) {
    if (e.type === 'turn/start' || (e.type === 'user/message' && (e.data as { id: string }).id === messageId)) return false
  }
  return true
}

const errorText = (e: unknown) => (e instanceof Error ? e.message : String(e))

function toDecision(a: ApprovalAnswer): ApprovalInput {
  if (a === true || a === 'allow') return { decision: 'allow' }
  if (a === false || a === 'deny') return { decision: 'deny' }
  return a
}

const toResult = (callId: string) => (a: ClientToolAnswer): ToolResultInput => {
  if (typeof a === 'string' || Array.isArray(a)) return { callId, content: a }
  return { callId, content: a.content, ...(a.isError ? { isError: true } : {}) }
}
