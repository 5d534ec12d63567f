// `GET /v1/ui/:agentId/chat/:id/messages` (API.md §17.2): the session's history as `UIMessage`s, for
// useChat's initial `messages`. It is the same fold the stream uses (render.ts), its parts reduced to
// messages the way the AI SDK's client reduces a stream: each turn is one assistant message whose id
// the turn's stream starts with, so a page that loads the history and then resumes the open turn
// replaces that message instead of adding a second one.

import { turnMessageId, UiRenderer, userParts, type LogEvent, type UiChunk } from './render.js'

export interface UIMessage {
  id: string
  role: 'user' | 'assistant'
  parts: Array<Record<string, unknown>>
}

/** Folds content parts into the parts of one assistant message. */
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
      case 'tool-input-start': {
        const p: Record<string, any> = { type: 'dynamic-tool', toolName: c.toolName, toolCallId: c.toolCallId, state: 'input-streaming', input: undefined }
        if (c.providerExecuted) p.providerExecuted = true
        this.tools.set(c.toolCallId as string, p)
        this.parts.push(p)
        return
      }
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
      case 'tool-output-available': {
        const p = this.tools.get(c.toolCallId as string)
        if (p) {
          p.state = 'output-available'
          p.output = c.output
        }
        return
      }
      case 'tool-output-error': {
        const p = this.tools.get(c.toolCallId as string)
        if (p) {
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
 * The history of a log (its events in seq order, plus the chunks of the attempt in flight): user
 * messages as they were admitted, each turn as one assistant message; a turn that waits on an approval
 * shows it as `approval-requested` (`approvals` lists the calls that wait for one).
 */
export function uiHistory(events: readonly LogEvent[], serverTool: (name: string) => boolean, live: { snapshot?: { event: string; data: unknown } } = {}, approvals: readonly string[] = []): UIMessage[] {
  const messages: UIMessage[] = []
  let current: { message: UIMessage; reducer: PartsReducer } | null = null
  const r = new UiRenderer(serverTool, {
    turnStart(turn) {
      current = null
      void turn
    },
    userMessage(_turn, m) {
      // the turn's first step opened before its input was logged: the input goes before its answer
      const user: UIMessage = { id: m.id, role: 'user', parts: userParts(m.content) }
      const at = current ? messages.indexOf((current as { message: UIMessage }).message) : -1
      if (at >= 0) messages.splice(at, 0, user)
      else messages.push(user)
    },
    content(turn, chunk) {
      if (!current) {
        current = { message: { id: turnMessageId(turn), role: 'assistant', parts: [] }, reducer: new PartsReducer() }
        messages.push(current.message)
      }
      current.reducer.add(chunk)
      current.message.parts = current.reducer.parts
    },
  })
  for (const e of events) r.durable(e)
  if (live.snapshot) r.live(live.snapshot)
  const c = current as { message: UIMessage; reducer: PartsReducer } | null
  if (c && r.turnOpen) for (const callId of approvals) c.reducer.add({ type: 'tool-approval-request', approvalId: callId, toolCallId: callId })
  return messages
}
