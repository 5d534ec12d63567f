#!/usr/bin/env node
// agentd-chat: a terminal client on @agentd/client. Connects with a URL and key (flags or environment),
// picks or creates a session, streams answers as they arrive, and answers approvals and client tool
// calls at the prompt. The stream resumes by itself, so a server restart mid-answer costs a line of
// "[reconnecting…]", not the conversation.

import fs from 'node:fs'
import path from 'node:path'
import readline from 'node:readline'
import { parseArgs } from 'node:util'
import { AgentdClient, AgentdError, isEvent, type PendingCall, type Session, type StreamFrame, type ToolResultMessage } from '../index.js'
import { HELP, clip, historyLines, parseDecision, pendingQuestion, textOf, toolCallLine, toolResultLine, turnEndLine } from './render.js'

const USAGE = `Usage: agentd-chat [--url URL] [--key KEY] [--session ID | --new | --agent ID[@VERSION]] [--model MODEL] [--system TEXT]

  --url       the server (env AGENTD_URL; default http://127.0.0.1:8080)
  --key       a tenant API key (env AGENTD_API_KEY; else the embedded server's
              $AGENTD_DATA_DIR/api-key, default ./.agentd/api-key)
  --session   open this session
  --new       create a session (with --model and --system when given)
  --agent     create a session from this agent, its latest version or the one
              named; --model and --system replace the agent's for the session
`

function fail(msg: string): never {
  process.stderr.write(`agentd-chat: ${msg}\n`)
  process.exit(1)
}

function apiKey(given: string | undefined): string {
  if (given) return given
  if (process.env.AGENTD_API_KEY) return process.env.AGENTD_API_KEY
  const file = path.join(process.env.AGENTD_DATA_DIR ?? '.agentd', 'api-key')
  try {
    return fs.readFileSync(file, 'utf8').trim()
  } catch {
    return fail(`no API key: pass --key, set AGENTD_API_KEY, or run where ${file} exists`)
  }
}

class Chat {
  private rl: readline.Interface
  /** text of the attempt given to write (shown or held), to continue it after a snapshot or settle it */
  private printed = ''
  /** an answer's line is open at the cursor, and the prompt is not shown */
  private streaming = false
  /** answer text that came while the user was typing at the prompt: shown once they are done */
  private held = ''
  private running = false
  private questions: PendingCall[] = []
  private asked = new Set<string>()
  private callNames = new Map<string, string>()
  private openCalls = 0
  private sent = new Set<string>()
  private offline = false
  private readonly stop = new AbortController()

  constructor(private readonly client: AgentdClient, private readonly session: Session) {
    this.rl = readline.createInterface({ input: process.stdin, output: process.stdout, prompt: 'you> ' })
  }

  /** prints a whole line above the prompt, keeping what the user has typed */
  private say(line: string): void {
    if (this.streaming) {
      process.stdout.write('\n')
      this.streaming = false
    }
    readline.clearLine(process.stdout, 0)
    readline.cursorTo(process.stdout, 0)
    process.stdout.write(`${line}\n`)
    this.prompt()
  }

  private prompt(): void {
    if (this.streaming) return
    const q = this.questions[0]
    this.rl.setPrompt(q ? pendingQuestion(q) : 'you> ')
    this.rl.prompt(true)
  }

  /**
   * Shows answer text as it streams. While the user types at the prompt the text is held, and only
   * its whole lines go above the prompt, so that what they type never lands on the answer's line.
   */
  private write(text: string): void {
    this.printed += text
    if (!this.streaming && this.rl.line) {
      this.held += text
      const cut = this.held.lastIndexOf('\n')
      if (cut >= 0) {
        this.say(`agent> ${this.held.slice(0, cut)}`)
        this.held = this.held.slice(cut + 1)
      }
      return
    }
    if (!this.streaming) {
      readline.clearLine(process.stdout, 0)
      readline.cursorTo(process.stdout, 0)
      process.stdout.write('agent> ')
      this.streaming = true
    }
    process.stdout.write(this.held + text)
    this.held = ''
  }

  /** A key while an answer streams: the answer's line ends, and the prompt takes the key (readline echoes it after this). */
  private onKey(): void {
    if (!this.streaming) return
    process.stdout.write('\n')
    this.streaming = false
    this.prompt()
  }

  /** The answer is over: its line is closed, or what was held for the typing user is shown. */
  private endAnswer(): void {
    if (this.streaming) {
      process.stdout.write('\n')
      this.streaming = false
      this.prompt()
    } else if (this.held) this.say(`agent> ${this.held}`)
    this.held = ''
  }

  async start(): Promise<void> {
    const s = this.session
    this.running = s.status === 'running'
    // listening before the first await: a line typed meanwhile must not be lost
    this.rl.on('line', (line) => {
      // the user is done typing: what the answer held meanwhile continues it
      if (this.held) this.write('')
      void this.onLine(line).catch((e) => this.say(`! ${(e as Error).message}`))
    })
    // before readline's own listener, so that the key is echoed on the prompt's line, not the answer's
    process.stdin.prependListener('keypress', () => this.onKey())
    this.rl.on('SIGINT', () => {
      if (this.running) void this.command('/cancel')
      else this.quit()
    })
    this.rl.on('close', () => this.quit())
    const history = historyLines(await this.client.messages(s.id))
    for (const l of history) this.say(l)
    this.say(`session ${s.id} (${s.model}${s.agent ? `, agent ${s.agent.id}@${s.agent.version}` : ''})${s.title ? ` "${s.title}"` : ''}; /help for commands`)
    void this.pollPending()
    try {
      for await (const f of this.client.stream(s.id, { after: s.headSeq, signal: this.stop.signal })) this.onFrame(f)
    } catch (e) {
      this.say(`! the stream ended: ${(e as Error).message}`)
      process.exit(1)
    }
  }

  private quit(): void {
    this.stop.abort()
    process.stdout.write('\n')
    process.exit(0)
  }

  private onFrame(f: StreamFrame): void {
    switch (f.event) {
      case 'client/reconnecting':
        if (!this.offline) this.say(`[connection lost (${clip(f.data.reason, 60)}); reconnecting…]`)
        this.offline = true
        return
      case 'stream/ready':
        if (this.offline) this.say('[reconnected]')
        this.offline = false
        return
      case 'agent/status':
        this.running = f.data.status === 'running'
        return
      case 'agent/error':
        this.say(`[error ${f.data.error.code}: ${clip(f.data.error.message, 120)}]`)
        return
      case 'agent/assistant-stream': {
        const a = f.data
        if (a.kind === 'start') this.printed = ''
        else if (a.kind === 'chunk' && a.chunk.type === 'text-delta') this.write(a.chunk.text)
        else if (a.kind === 'snapshot') {
          // after a reconnect: continue the line when it extends what is shown, else show it again
          const text = a.stream.flatMap((r) => (r.type === 'text-chunks' ? r.texts : [])).join('')
          if (text.startsWith(this.printed)) this.write(text.slice(this.printed.length))
          else {
            this.printed = ''
            this.held = ''
            this.write(text)
          }
        } else if (a.kind === 'end') this.endAnswer()
        return
      }
      case 'session/event':
        return this.onEvent(f.data)
      default:
        return
    }
  }

  private onEvent(e: Extract<StreamFrame, { event: 'session/event' }>['data']): void {
    if (isEvent(e, 'turn/start')) {
      this.running = true
      if (e.data.continues !== undefined) this.say(`[continuing turn ${e.data.continues}]`)
    } else if (isEvent(e, 'user/message')) {
      // input from elsewhere (another client, a plugin) is shown; our own is on the screen already
      if (!this.sent.has(e.data.id) && e.data.source.kind === 'user') this.say(`» ${clip(textOf(e.data.content), 200)}`)
    } else if (isEvent(e, 'assistant/message')) {
      const text = textOf(e.data.message.content.filter((b) => b.type === 'text'))
      // the settlement: whatever the live chunks did not show (a reconnect can lose some) is shown now
      if (text.startsWith(this.printed)) {
        if (text.length > this.printed.length) this.write(text.slice(this.printed.length))
      } else {
        this.printed = ''
        this.held = ''
        this.write(text)
      }
      this.printed = ''
    } else if (isEvent(e, 'tool/call')) {
      this.callNames.set(e.data.callId, e.data.name)
      this.openCalls++
      this.say(toolCallLine(e.data.name, e.data.arguments))
      void this.refreshPending()
    } else if (isEvent(e, 'tool/result')) {
      const m: ToolResultMessage = e.data.message
      const block = m.content[0]
      this.openCalls = Math.max(0, this.openCalls - 1)
      this.questions = this.questions.filter((q) => q.callId !== m.source.callId)
      if (!e.surfaceOp || e.surfaceOp === 'append') this.say(toolResultLine(this.callNames.get(m.source.callId) ?? 'tool', block.content, block.isError))
    } else if (isEvent(e, 'turn/end')) {
      this.running = false
      this.openCalls = 0
      this.questions = []
      this.say(turnEndLine(e.data.reason))
    }
  }

  /** Asks the server which calls wait for us and puts new ones to the user, one at a time. */
  private async refreshPending(): Promise<void> {
    const calls = await this.client.pending(this.session.id).catch(() => undefined)
    if (!calls) return
    const waiting = new Set(calls.map((c) => `${c.kind}:${c.callId}`))
    this.questions = this.questions.filter((q) => waiting.has(`${q.kind}:${q.callId}`))
    let added = false
    for (const c of calls) {
      const k = `${c.kind}:${c.callId}`
      if (this.asked.has(k)) continue
      this.asked.add(k)
      this.questions.push(c)
      added = true
    }
    if (added) this.say(this.questions.length > 1 ? `[${this.questions.length} calls wait for you]` : '[a call waits for you]')
  }

  /** an approved client tool only becomes pending after the approval: look again while calls are open */
  private async pollPending(): Promise<void> {
    while (!this.stop.signal.aborted) {
      await new Promise((r) => setTimeout(r, 500))
      if (this.openCalls > 0) await this.refreshPending()
    }
  }

  private async onLine(line: string): Promise<void> {
    const q = this.questions[0]
    if (q && !line.startsWith('/')) return this.answer(q, line)
    if (line.startsWith('/')) return this.command(line)
    if (!line.trim()) return this.prompt()
    const id = `chat-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`
    this.sent.add(id)
    const wasRunning = this.running
    await this.client.followup(this.session.id, line, { id })
    if (wasRunning) this.say('(queued for the next turn)')
    else this.prompt()
  }

  private async answer(q: PendingCall, line: string): Promise<void> {
    if (q.kind === 'approval') {
      const d = parseDecision(line)
      if (!d) return this.say('answer y or n (a reason may follow)')
      await this.client.decide(this.session.id, q.callId, d).catch(notPending)
    } else {
      const isError = line.startsWith('!')
      await this.client.submitToolResult(this.session.id, { callId: q.callId, content: isError ? line.slice(1).trim() : line, ...(isError ? { isError: true } : {}) }).catch(notPending)
    }
    this.questions = this.questions.filter((x) => x !== q)
    this.prompt()
  }

  private async command(line: string): Promise<void> {
    const [cmd, ...rest] = line.trim().split(/\s+/)
    const arg = line.trim().slice(cmd!.length).trim()
    const id = this.session.id
    switch (cmd) {
      case '/steer':
      case '/inject': {
        if (!arg) return this.say(`usage: ${cmd} TEXT`)
        const mid = `chat-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`
        this.sent.add(mid)
        await this.client.send(cmd === '/steer' ? 'steer' : 'inject', id, arg, { id: mid })
        return this.say(cmd === '/steer' ? '(steered)' : '(injected)')
      }
      case '/cancel': {
        const r = await this.client.cancel(id)
        return this.say(r.cancelled ? '(cancelling…)' : '(nothing is running)')
      }
      case '/inbox': {
        const inbox = await this.client.inbox(id)
        const lines = [...inbox.nextStep.map((m) => `  next step: ${clip(textOf(m.content), 100)}`), ...inbox.nextTurn.map((m) => `  next turn: ${clip(textOf(m.content), 100)}`)]
        return this.say(lines.length ? `inbox:\n${lines.join('\n')}` : 'inbox: empty')
      }
      case '/pending': {
        const calls = await this.client.pending(id)
        return this.say(calls.length ? calls.map((c) => `  ${c.kind}: ${c.name} ${clip(c.rawArguments, 80)} (${c.callId})`).join('\n') : 'no calls wait')
      }
      case '/session':
        return this.say(`session ${id}`)
      case '/help':
        return this.say(HELP)
      case '/quit':
      case '/exit':
        return this.quit()
      default:
        void rest
        return this.say(`unknown command ${cmd}; /help lists them`)
    }
  }
}

/** The one line that says why the chat could not start. */
function startFailure(baseUrl: string, e: unknown): string {
  if (e instanceof DOMException && e.name === 'TimeoutError') return `no agentd answered at ${baseUrl} within ${CONNECT.deadlineMs / 1000} s; is the address right (--url, AGENTD_URL)?`
  if (!(e instanceof AgentdError)) return `${baseUrl}: ${e instanceof Error ? e.message : String(e)}`
  if (e.code !== 'network-error') return `${baseUrl}: ${e.code}: ${e.message}`
  // fetch's own error says only "fetch failed": the reason is in its causes
  let code: string | undefined
  let inner = e.message.slice(e.message.indexOf(': ') + 2)
  for (let c = e.cause as { code?: unknown; message?: unknown; cause?: unknown } | undefined; c && !code; c = c.cause as typeof c) {
    if (typeof c.code === 'string') code = c.code
    if (typeof c.message === 'string' && c.message) inner = c.message
  }
  const why = code === 'ECONNREFUSED' ? 'connection refused' : code === 'ENOTFOUND' || code === 'EAI_AGAIN' ? 'unknown host' : inner
  return `no agentd answers at ${baseUrl} (${why}); start one with \`npm start\`, or pass --url or set AGENTD_URL`
}

function notPending(e: unknown): void {
  if (e instanceof AgentdError && e.code === 'tool-call-not-pending') return
  throw e
}

/** Asks for one line on a fresh readline (the chat's own starts after the pick). */
function ask(question: string): Promise<string> {
  const rl = readline.createInterface({ input: process.stdin, output: process.stdout })
  return new Promise((resolve) =>
    rl.question(question, (a) => {
      rl.close()
      resolve(a)
    }),
  )
}

/**
 * How long the first call may take to reach a server, and how often a refused connection is tried
 * again meanwhile (a server that is just starting): then the chat gives up in one line. Its later calls
 * keep the client's own patience, so that a server restart mid-chat costs a "[reconnecting…]" only.
 */
const CONNECT = { retry: { maxAttempts: 4, initialDelayMs: 250, maxDelayMs: 1000 }, timeoutMs: 5000, deadlineMs: 10000 }

async function pickSession(client: AgentdClient, o: { session?: string; new?: boolean; agent?: string; model?: string; system?: string }): Promise<Session> {
  const create = (signal?: AbortSignal) => client.sessions.create({ ...(o.agent ? { agent: o.agent } : {}), ...(o.model ? { model: o.model } : {}), ...(o.system ? { system: o.system } : {}) }, { signal })
  // the first call finds out whether a server answers at all
  const signal = AbortSignal.timeout(CONNECT.deadlineMs)
  if (o.session) return client.sessions.get(o.session, { signal })
  if (o.new || o.agent) return create(signal)
  const page = await client.sessions.page({ limit: 9, signal })
  if (!page.sessions.length) return create()
  process.stdout.write('sessions, newest first:\n')
  page.sessions.forEach((s, i) => process.stdout.write(`  ${i + 1}) ${s.title ?? s.id}  ${s.model}  ${s.status}  ${s.updatedAt.replace('T', ' ').slice(0, 16)}\n`))
  for (;;) {
    const a = (await ask(`pick 1-${page.sessions.length}, or Enter for a new session: `)).trim()
    if (!a) return create()
    const n = Number(a)
    if (Number.isInteger(n) && n >= 1 && n <= page.sessions.length) return page.sessions[n - 1]!
  }
}

async function main(): Promise<void> {
  let args
  try {
    args = parseArgs({
      options: {
        url: { type: 'string' },
        key: { type: 'string' },
        session: { type: 'string' },
        new: { type: 'boolean' },
        agent: { type: 'string' },
        model: { type: 'string' },
        system: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    }).values
  } catch (e) {
    fail(`${(e as Error).message}\n${USAGE}`)
  }
  if (args.help) {
    process.stdout.write(USAGE)
    return
  }
  const baseUrl = args.url ?? process.env.AGENTD_URL ?? 'http://127.0.0.1:8080'
  const key = apiKey(args.key)
  const client = new AgentdClient({ baseUrl, apiKey: key })
  process.stdout.write(`connecting to ${baseUrl}…\n`)
  let session: Session
  try {
    session = await pickSession(new AgentdClient({ baseUrl, apiKey: key, retry: CONNECT.retry, timeoutMs: CONNECT.timeoutMs }), args)
  } catch (e) {
    fail(startFailure(baseUrl, e))
  }
  await new Chat(client, session).start()
}

void main()
