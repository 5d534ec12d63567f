// The AI SDK UI message stream (API.md §17.2) as a projection of a session: a fold over its durable
// events and the live `agent/assistant-stream` frames of the attempt in flight, which renders each turn
// as one assistant UI message. It holds no state beyond what the log and the live chunks give: a settled
// attempt renders to the same chunks its live chunks did (the compact stream records of SPEC §9.4
// expand to the very chunks that were streamed), so a replayed turn and a live one agree chunk for
// chunk. Which turn, and which part of it, a client is sent is the stream's business (stream.ts).

/** One UI message stream part, as `ai`'s `UIMessageChunk` spells it. */
export type UiChunk = { type: string } & Record<string, unknown>

/** A durable event as the feed carries it. */
export interface LogEvent {
  seq: number
  type: string
  data: any
}

/** What the renderer tells its stream, in log order. */
export interface RenderSink {
  /** a root turn (not a crash continuation) opened; `messageId` names its assistant UI message */
  turnStart?(turn: number, messageId: string): void
  /** a user message the turn admitted with its claim (step 1) */
  userMessage?(turn: number, message: { id: string; content: any[] }): void
  /** the tool/result of a call is about to be rendered (its chunk follows as content) */
  result?(turn: number, callId: string): void
  /** a content part of the turn's message */
  content(turn: number, chunk: UiChunk): void
  /** a tool/call was logged: the turn may now wait on a client or an approval */
  called?(turn: number): void
  /** the turn ended for good (an `interrupted` end waits for its continuation instead) */
  turnEnd?(turn: number, reason: { kind: string; [k: string]: unknown }): void
}

/** The assistant UI message id of a turn: stable, so a resumed stream and `…/messages` agree. */
export const turnMessageId = (turn: number) => `agentd-turn-${turn}`

/** Tool arguments as the UI shows them: the parsed JSON, or the text itself when it does not parse. */
export function parseInput(text: string): unknown {
  if (text.trim() === '') return {}
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}

/** The text of content blocks (what a tool returned, a user typed). */
export const blockText = (content: unknown): string =>
  Array.isArray(content) ? content.map((b: any) => (b?.type === 'text' && typeof b.text === 'string' ? b.text : '')).join('') : typeof content === 'string' ? content : ''

/** Expands SPEC §9.4's compact stream records to the chunks they were made of, in order. */
export function expandStream(records: readonly any[]): any[] {
  const out: any[] = []
  for (const r of records) {
    if (r.type === 'chunk') out.push(r.chunk)
    else if (r.type === 'text-chunks') for (const text of r.texts) out.push({ type: 'text-delta', index: r.index, text })
    else if (r.type === 'reasoning-chunks') for (const text of r.texts) out.push({ type: 'reasoning-delta', index: r.index, text })
    else if (r.type === 'tool-call-chunks')
      r.args.forEach((argumentsDelta: string, i: number) => out.push({ type: 'tool-call-delta', index: r.index, id: r.id, ...(i === 0 && r.name !== undefined ? { name: r.name } : {}), argumentsDelta }))
  }
  return out
}

interface Attempt {
  /** chunks rendered so far (the live frames' `index` continues from here) */
  rendered: number
  /** the attempt's blocks: kind, and for tool calls the call id and name once known */
  blocks: Map<number, { kind: string; id?: string; name?: string; started: boolean; open: boolean }>
  done: boolean
  turn?: number
  step?: number
  /** the prefix of its parts' ids: turn, step and the attempt's place in the step, live or settled alike */
  pid: string
}

/**
 * The fold. `serverTool(name)` says whether a tool runs on the server (http, builtin, MCP: its parts
 * are `providerExecuted`, so `useChat` runs no `onToolCall` for it) or is a `client` tool.
 */
export class UiRenderer {
  /** the root turn being rendered, null between turns */
  turn: number | null = null
  /** the content parts of the current root turn so far (a resumed stream replays them) */
  parts: UiChunk[] = []
  /** tool calls of the current turn that have no result yet */
  readonly openCalls = new Set<string>()
  private step = 0
  private stepOpen = false
  private interrupted = false
  /** settled attempts per `turn.step` */
  private readonly settledIn = new Map<string, number>()
  /** attempts seen live and not settled yet, in the order they started (a session runs one at a time) */
  private readonly attempts = new Map<string, Attempt>()

  constructor(
    private readonly serverTool: (name: string) => boolean,
    private readonly sink: RenderSink,
  ) {}

  get turnOpen(): boolean {
    return this.turn !== null
  }

  private emit(chunk: UiChunk): void {
    if (this.turn === null) return
    this.parts.push(chunk)
    this.sink.content(this.turn, chunk)
  }

  /** A durable event, in seq order. */
  durable(e: LogEvent): void {
    const d = e.data ?? {}
    switch (e.type) {
      case 'turn/start': {
        if (d.continues !== undefined && this.interrupted && this.turn === d.continues) {
          // SPEC §19: a crash continuation is the same span as the turn it continues
          this.interrupted = false
          return
        }
        this.closeStep()
        this.turn = d.turn
        this.parts = []
        this.openCalls.clear()
        this.interrupted = false
        this.step = 0
        this.sink.turnStart?.(d.turn, turnMessageId(d.turn))
        return
      }
      case 'step/start':
        this.step = d.step
        this.stepOpen = true
        this.emit({ type: 'start-step' })
        return
      case 'step/end':
        this.closeStep()
        return
      case 'user/message': {
        if (this.turn === null || d.source?.kind === 'tool') return
        if (this.step <= 1 && !this.parts.some((p) => p.type !== 'start-step')) this.sink.userMessage?.(this.turn, { id: d.id, content: d.content })
        else this.emit({ type: 'steering-message', id: d.id, parts: userParts(d.content) })
        return
      }
      case 'assistant/message':
      case 'assistant/attempt':
        this.settle(d.turn, d.step, d.stream ?? [], e.type === 'assistant/attempt')
        return
      case 'tool/call':
        if (this.turn === null) return
        this.openCalls.add(d.callId)
        this.sink.called?.(this.turn)
        return
      case 'tool/result': {
        if (this.turn === null) return
        const block = d.message?.content?.[0] ?? {}
        const callId: string = block.toolCallId ?? d.message?.source?.callId
        this.openCalls.delete(callId)
        this.sink.result?.(this.turn, callId)
        const text = blockText(block.content)
        if (block.isError) this.emit({ type: 'tool-output-error', toolCallId: callId, errorText: text || (d.error?.code ?? 'tool error'), dynamic: true })
        else this.emit({ type: 'tool-output-available', toolCallId: callId, output: toolOutput(block.content), dynamic: true })
        return
      }
      case 'turn/end': {
        if (this.turn === null) return
        if (d.reason?.kind === 'interrupted') {
          // a crash continuation (SPEC §19) may follow: the turn stays open until it ends for good
          this.interrupted = true
          return
        }
        this.closeStep()
        const turn = this.turn
        this.turn = null
        this.sink.turnEnd?.(turn, d.reason)
        return
      }
    }
  }

  /** A live frame; only `agent/assistant-stream` matters. */
  live(frame: { event: string; data: any }): void {
    if (frame.event !== 'agent/assistant-stream') return
    const f = frame.data
    if (f.kind === 'start') this.attempt(f.attemptId, f.turn, f.step)
    else if (f.kind === 'snapshot') {
      const a = this.attempt(f.attemptId, f.turn, f.step)
      const chunks = expandStream(f.stream ?? [])
      for (let i = a.rendered; i < chunks.length; i++) this.chunk(a, chunks[i])
      a.rendered = Math.max(a.rendered, chunks.length)
    } else if (f.kind === 'chunk') {
      const a = this.attempts.get(f.attemptId)
      if (!a || a.done || f.index < a.rendered) return
      // a gap (a chunk this subscriber never got) is filled when the attempt settles
      if (f.index > a.rendered) return
      this.chunk(a, f.chunk)
      a.rendered = f.index + 1
    } else if (f.kind === 'end' && f.outcome?.kind !== 'committed') {
      // an attempt that ended without an event of its own (discarded): its open blocks end here
      const a = this.attempts.get(f.attemptId)
      if (a && !a.done) {
        this.closeBlocks(a, true)
        a.done = true
        this.attempts.delete(f.attemptId)
      }
    }
  }

  private attempt(id: string, turn: number, step: number): Attempt {
    let a = this.attempts.get(id)
    if (!a) this.attempts.set(id, (a = { rendered: 0, blocks: new Map(), done: false, turn, step, pid: this.pid(turn, step) }))
    return a
  }

  private pid(turn: number, step: number): string {
    return `t${turn}s${step}a${this.settledIn.get(`${turn}.${step}`) ?? 0}`
  }

  /**
   * A settled attempt: what its live chunks did not render yet, then its open blocks closed. It is the
   * earliest live attempt of its step not settled yet (the feed sends an attempt's end frame only after
   * its event), or, not seen live, rendered whole under an id of its own.
   */
  private settle(turn: number, step: number, records: readonly any[], failed: boolean): void {
    let id = ''
    let a: Attempt | undefined
    for (const [k, v] of this.attempts)
      if (!v.done && v.turn === turn && v.step === step) {
        id = k
        a = v
        break
      }
    a ??= { rendered: 0, blocks: new Map(), done: false, turn, step, pid: this.pid(turn, step) }
    const chunks = expandStream(records)
    for (let i = a.rendered; i < chunks.length; i++) this.chunk(a, chunks[i])
    a.rendered = Math.max(a.rendered, chunks.length)
    this.closeBlocks(a, failed)
    a.done = true
    this.attempts.delete(id)
    this.settledIn.set(`${turn}.${step}`, (this.settledIn.get(`${turn}.${step}`) ?? 0) + 1)
  }

  private chunk(a: Attempt, c: any): void {
    const partId = (index: number) => `${a.pid}:${index}`
    switch (c.type) {
      case 'block-start': {
        const kind = c.blockType
        a.blocks.set(c.index, { kind, started: kind !== 'tool-call', open: true })
        if (kind === 'text') this.emit({ type: 'text-start', id: partId(c.index) })
        else if (kind === 'reasoning') this.emit({ type: 'reasoning-start', id: partId(c.index) })
        return
      }
      case 'text-delta':
        this.emit({ type: 'text-delta', id: partId(c.index), delta: c.text })
        return
      case 'reasoning-delta':
        this.emit({ type: 'reasoning-delta', id: partId(c.index), delta: c.text })
        return
      case 'tool-call-delta': {
        const b = a.blocks.get(c.index) ?? { kind: 'tool-call', started: false, open: true }
        a.blocks.set(c.index, b)
        if (c.id) b.id = c.id
        if (c.name) b.name = c.name
        if (!b.started && b.id && b.name) this.toolStart(b)
        if (b.started && c.argumentsDelta) this.emit({ type: 'tool-input-delta', toolCallId: b.id, inputTextDelta: c.argumentsDelta })
        return
      }
      case 'block-end': {
        const b = a.blocks.get(c.index)
        const block = c.block ?? {}
        if (b) b.open = false
        if (block.type === 'text') this.emit({ type: 'text-end', id: partId(c.index) })
        else if (block.type === 'reasoning' || block.type === 'thinking') this.emit({ type: 'reasoning-end', id: partId(c.index) })
        else if (block.type === 'tool-call') {
          const tb = b ?? { kind: 'tool-call', started: false, open: false }
          tb.id = block.id
          tb.name = block.name
          if (!tb.started) this.toolStart(tb)
          this.emit({ type: 'tool-input-available', toolCallId: block.id, toolName: block.name, input: parseInput(block.arguments ?? ''), dynamic: true, ...this.executed(block.name) })
        }
        return
      }
    }
  }

  private executed(name: string): { providerExecuted?: true } {
    return this.serverTool(name) ? { providerExecuted: true } : {}
  }

  private toolStart(b: { id?: string; name?: string; started: boolean }): void {
    b.started = true
    this.emit({ type: 'tool-input-start', toolCallId: b.id, toolName: b.name, dynamic: true, ...this.executed(b.name!) })
  }

  /** Blocks a failed or cut attempt left open end where it stopped (the retry's own parts follow). */
  private closeBlocks(a: Attempt, failed: boolean): void {
    for (const [index, b] of a.blocks) {
      if (!b.open) continue
      b.open = false
      if (b.kind === 'text') this.emit({ type: 'text-end', id: `${a.pid}:${index}` })
      else if (b.kind === 'reasoning') this.emit({ type: 'reasoning-end', id: `${a.pid}:${index}` })
      else if (b.kind === 'tool-call' && b.started && failed) this.emit({ type: 'tool-input-error', toolCallId: b.id, toolName: b.name, input: {}, errorText: 'the model call failed', dynamic: true })
    }
  }

  private closeStep(): void {
    if (!this.stepOpen) return
    this.stepOpen = false
    this.emit({ type: 'finish-step' })
  }
}

/** A user message's content as UI parts (text and files). */
export function userParts(content: unknown): Array<Record<string, unknown>> {
  if (typeof content === 'string') return [{ type: 'text', text: content }]
  if (!Array.isArray(content)) return []
  return content.flatMap((b: any): Array<Record<string, unknown>> =>
    b?.type === 'text' ? [{ type: 'text', text: b.text }] : b?.type === 'image' ? [{ type: 'file', mediaType: b.mimeType, url: `data:${b.mimeType};base64,${b.data}` }] : [],
  )
}

/** A tool result as the UI's `output`: its text when it is text only, else the content blocks. */
function toolOutput(content: unknown): unknown {
  if (Array.isArray(content) && content.every((b: any) => b?.type === 'text')) return blockText(content)
  return content
}
