// How agentd-chat shows things: one compact line per tool call, result and turn end. Pure functions,
// so the terminal client stays a thin loop around them.

import type { ContentBlock, Message, PendingCall, TurnEndReason } from '../index.js'

const oneLine = (s: string) => s.replace(/\s+/g, ' ').trim()

export function clip(s: string, max = 100): string {
  const t = oneLine(s)
  return t.length > max ? `${t.slice(0, max - 1)}…` : t
}

export function textOf(content: ContentBlock[] | string): string {
  if (typeof content === 'string') return content
  return content.map((b) => (b.type === 'text' ? b.text : b.type === 'tool-result' ? textOf(b.content) : b.type === 'image' ? '[image]' : '')).join('')
}

/** `⚙ name {"a":1}` */
export function toolCallLine(name: string, args: string): string {
  return `  ⚙ ${name} ${clip(args || '{}', 80)}`
}

/** `↳ name: text` or, for an error result, `✗ name: text` */
export function toolResultLine(name: string, content: ContentBlock[], isError: boolean): string {
  return `  ${isError ? '✗' : '↳'} ${name}: ${clip(textOf(content), 100) || '(empty)'}`
}

export function turnEndLine(reason: TurnEndReason): string {
  switch (reason.kind) {
    case 'completed':
      return '[completed]'
    case 'aborted':
      return reason.reason.kind === 'user' ? '[cancelled]' : `[aborted: ${reason.reason.kind}]`
    case 'error':
      return `[error ${reason.error.code}: ${clip(reason.error.message, 120)}]`
    case 'interrupted':
      return '[interrupted: the server restarted mid-answer]'
    default:
      return `[${reason.kind}]`
  }
}

export function pendingQuestion(call: PendingCall): string {
  const args = clip(call.rawArguments || '{}', 80)
  return call.kind === 'approval' ? `? allow ${call.name} ${args} [y/n] ` : `? ${call.name} ${args} is yours to answer: type its result (start with ! for an error) `
}

/**
 * The last messages of a history, for a session that is opened again: one line per text, tool call
 * and tool result, as they showed live (a tool call by its name and arguments, its result by the
 * call's name), never an empty `agent>` line.
 */
export function historyLines(messages: Message[], n = 6): string[] {
  const names = new Map<string, string>()
  for (const m of messages) if (m.role === 'assistant') for (const b of m.content) if (b.type === 'tool-call') names.set(b.id, b.name)
  const out: string[] = []
  for (const m of messages.slice(-n)) {
    if (m.role === 'system') continue
    if (m.role === 'assistant') {
      const text = textOf(m.content.filter((b) => b.type === 'text'))
      if (text.trim()) out.push(`agent> ${clip(text, 200)}`)
      for (const b of m.content) if (b.type === 'tool-call') out.push(toolCallLine(b.name, b.arguments))
    } else if (m.source.kind === 'tool') {
      const block = m.content[0]
      if (block?.type === 'tool-result') out.push(toolResultLine(names.get(block.toolCallId) ?? 'tool', block.content, block.isError))
    } else out.push(`you> ${clip(textOf(m.content), 200)}`)
  }
  return out
}

/** y/yes/allow → allow, n/no/deny → deny (an optional reason may follow), else undefined. */
export function parseDecision(line: string): { decision: 'allow' | 'deny'; reason?: string } | undefined {
  const m = /^\s*(y|yes|allow|n|no|deny)\b\s*(.*)$/i.exec(line)
  if (!m) return undefined
  const decision = /^(y|yes|allow)$/i.test(m[1]!) ? 'allow' : 'deny'
  return m[2] ? { decision, reason: m[2] } : { decision }
}

export const HELP = `Type a message and press Enter to send it (queued while a turn runs).
  /steer TEXT    add TEXT to the running turn
  /inject TEXT   add context without waking the agent
  /cancel        cancel the running turn (Ctrl-C does too)
  /inbox         show queued input
  /pending       show tool calls waiting for an answer
  /session       show the session id
  /quit          leave (Ctrl-D does too)`
