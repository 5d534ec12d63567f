// `GET /v1/ui/:agentId/chat/:id/messages` (API.md §17.2): the session's history as `UIMessage`s, for
// useChat's initial `messages`: the span fold's ops through the same renderer the stream uses, reduced
// to messages the way the AI SDK's client reduces a stream. Each turn is one assistant message with the
// id its stream starts with, so a page that loads the history and then resumes the open turn replaces
// that message instead of adding a second one.

import type { SessionEvent } from '../session/index.js'
import { kindsOf, SpanFold } from './span.js'
import { endParts, serverRun, uiMessageId, UiRenderer, userParts, type UiChunk } from './ui-render.js'

export interface UIMessage {
  id: string
  role: 'user' | 'assistant'
  parts: Array<Record<string, unknown>>
}

/** Folds content parts into the parts of one assistant message, as the AI SDK's client does. */
export class PartsReducer {
  readonly parts: Array<Record<string, any>> = []
  private readonly text = new Map<string, Record<string, any>>()
  private readonly tools = new Map<string, Record<string, any>>()

  add(c: UiChunk): void {
    switch (c.type) {
      case 'start-step':
        this.parts.push({ type: 'step-start' })
        return
      case 'text-start':
      case 'reasoning-start': {
        // the AI SDK keeps a reasoning part's id, not a text part's
        const p: Record<string, any> = c.type === 'text-start' ? { type: 'text', text: '', state: 'streaming' } : { type: 'reasoning', id: c.id, text: '', state: 'streaming' }
        this.text.set(c.id as string, p)
        this.parts.push(p)
        return
      }
      case 'text-delta':
      case 'reasoning-delta': {
        const p = this.text.get(c.id as string)
        if (p) p.text += c.delta as string
        return
      }
      case 'text-end':
      case 'reasoning-end': {
        const p = this.text.get(c.id as string)
        if (p) p.state = 'done'
        return
      }
      case 'tool-input-start':
        this.tool(c)
        return
      case 'tool-input-available': {
        const p = this.tool(c)
        p.state = 'input-available'
        p.input = c.input
        return
      }
      case 'tool-input-error': {
        const p = this.tool(c)
        p.state = 'output-error'
        p.input = c.input
        p.errorText = c.errorText
        return
      }
      case 'tool-approval-request': {
        const p = this.tools.get(c.toolCallId as string)
        if (p) {
          p.state = 'approval-requested'
          p.approval = { id: c.approvalId }
        }
        return
      }
      case 'tool-output-available':
      case 'tool-output-error': {
        const p = this.tools.get(c.toolCallId as string)
        if (!p) return
        if (c.type === 'tool-output-available') {
          p.state = 'output-available'
          p.output = c.output
        } else {
          p.state = 'output-error'
          p.errorText = c.errorText
        }
        return
      }
      case 'steering-message':
        this.parts.push({ type: 'steering-message', id: c.id, parts: c.parts })
        return
    }
  }

  private tool(c: UiChunk): Record<string, any> {
    let p = this.tools.get(c.toolCallId as string)
    if (!p) {
      p = { type: 'dynamic-tool', toolName: c.toolName, toolCallId: c.toolCallId, state: 'input-streaming', input: undefined }
      if (c.providerExecuted) p.providerExecuted = true
      this.tools.set(c.toolCallId as string, p)
      this.parts.push(p)
    }
    return p
  }
}

/**
 * The history of a log (its events in seq order, then the snapshot of the attempt in flight): user
 * messages as they were admitted, each turn as one assistant message; a turn that waits on an approval
 * shows it `approval-requested`.
 */
export function uiHistory(events: readonly SessionEvent[], tools: unknown, snapshot?: { event: string; data: unknown }): UIMessage[] {
  const messages: UIMessage[] = []
  const byRoot = new Map<string, { message: UIMessage; reducer: PartsReducer }>()
  const assistant = (root: string) => {
    let a = byRoot.get(root)
    if (!a) {
      a = { message: { id: uiMessageId(root), role: 'assistant', parts: [] }, reducer: new PartsReducer() }
      byRoot.set(root, a)
      messages.push(a.message)
    }
    return a
  }
  const r = new UiRenderer({
    userMessage(root, m) {
      // the turn's first step may be announced before its input: the input goes before the answer
      const user: UIMessage = { id: m.id, role: 'user', parts: userParts(m.content) }
      const a = byRoot.get(root)
      const at = a ? messages.indexOf(a.message) : -1
      if (at >= 0) messages.splice(at, 0, user)
      else messages.push(user)
    },
    content(root, chunk) {
      const a = assistant(root)
      a.reducer.add(chunk)
      a.message.parts = a.reducer.parts
    },
    spanEnd(root, span) {
      // a wait on an approval shows on the tool part
      for (const c of endParts(span)) if (c.type === 'tool-approval-request') assistant(root).reducer.add(c)
    },
  }, serverRun(tools))
  const fold = new SpanFold({ toolKind: kindsOf(tools as never), onOp: (op) => r.op(op) })
  for (const e of events) {
    fold.event(e)
    const span = e.type === 'step/start' ? fold.open : undefined
    if (span && span.status === 'in_progress') r.step(span)
  }
  if (snapshot) fold.frame(snapshot.event, snapshot.data)
  return messages
}
