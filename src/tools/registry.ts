// Built-in tools registered by plugins (API.md §11 ctx.tools.register). A registration lives in the
// registering plugin's scope and leaves with it.

import { Service, type Context } from 'cordis'
import { pluginName } from '../hooks/index.js'
import type { ContentBlock, JsonObject, MessageInput } from '../session/index.js'

export interface ToolResultValue {
  content: string | ContentBlock[]
  isError?: boolean
  concludesTurn?: boolean
  additionalContexts?: MessageInput[]
  /** log-only data kept with the result (SPEC §3.4 tool/result.meta) */
  meta?: unknown
}

export interface ToolContext {
  signal: AbortSignal
  callId: string
  sessionId: string
  /** the session's Agent handle */
  agent?: unknown
}

export interface BuiltinTool {
  name: string
  description: string
  parameters: JsonObject
  /** SPEC §11.3: parallel only when this returns exactly true */
  isConcurrencySafe?: (args: unknown) => unknown
  execute(args: unknown, ctx: ToolContext): Promise<ToolResultValue> | ToolResultValue
  /** SPEC §11.6: a last rewrite of the result content before it is logged */
  finalizeContent?: (content: ContentBlock[]) => ContentBlock[]
}

export interface RegisteredTool extends BuiltinTool {
  readonly plugin: string
}

const NAME_RE = /^[A-Za-z0-9_-]{1,64}$/

export class ToolRegistry extends Service {
  private readonly tools = new Map<string, RegisteredTool[]>()

  constructor(ctx: Context) {
    super(ctx, 'tools', true)
  }

  /** Registers a built-in tool in the caller's plugin scope; a later registration of a name shadows earlier ones. */
  register(tool: BuiltinTool): () => void {
    if (!tool || typeof tool !== 'object') throw new TypeError('ctx.tools.register takes a tool object')
    if (typeof tool.name !== 'string' || !NAME_RE.test(tool.name)) throw new TypeError(`tool name must match ${NAME_RE}, got ${JSON.stringify(tool.name)}`)
    if (typeof tool.execute !== 'function') throw new TypeError(`tool ${tool.name}: execute must be a function`)
    const params = tool.parameters ?? { type: 'object', properties: {} }
    if (params === null || typeof params !== 'object' || Array.isArray(params)) throw new TypeError(`tool ${tool.name}: parameters must be a JSON Schema object`)
    const reg: RegisteredTool = { ...tool, description: tool.description ?? '', parameters: params as JsonObject, plugin: pluginName(this.ctx) }
    const d = this.ctx.effect(() => {
      let l = this.tools.get(reg.name)
      if (!l) this.tools.set(reg.name, (l = []))
      l.push(reg)
      return () => {
        const list = this.tools.get(reg.name)
        const i = list ? list.indexOf(reg) : -1
        if (i >= 0) list!.splice(i, 1)
        if (list && !list.length) this.tools.delete(reg.name)
      }
    })
    return typeof d === 'function' ? d : () => (d as { dispose(): void }).dispose()
  }

  get(name: string): RegisteredTool | undefined {
    return this.tools.get(name)?.at(-1)
  }
}
