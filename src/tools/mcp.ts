// MCP tool servers of one session (API.md §12), through the official SDK's client over streamable HTTP.
// One connection per (session, server) in the process that drives the session, opened lazily when a
// step lists tools or a call runs, re-initialized after a 404 on its MCP session id (a restarted
// server), closed on release and shutdown. Tool lists are cached until the server says
// tools/list_changed, or for 60 s. Every connection goes through the http tools' address guard.

import crypto from 'node:crypto'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { ErrorCode, McpError, ToolListChangedNotificationSchema, type Tool } from '@modelcontextprotocol/sdk/types.js'
import { assertLosslessJson, errorChain, type ContentBlock, type JsonObject } from '../session/index.js'
import { MissingSecretError, resolveHeaders, scrub, secretNames, type SecretResolver } from './headers.js'
import { guardedFetch, type GuardedFetch } from './fetch.js'
import { checkToolUrl, defaultResolver, type HostPolicy, type Resolver } from './hosts.js'
import type { ToolOutcome, ToolSpec } from './pipeline.js'

/** A session's MCP server as API.md §12 defines it (validated at creation). */
export interface McpServerSpec {
  name: string
  url: string
  headers?: Record<string, string>
  /** allow-list of the server's tool names */
  tools?: string[]
  approval?: 'always' | 'never'
}

export const MCP_CACHE_MS = 60_000
export const MCP_LIST_TIMEOUT_MS = 10_000
export const MCP_CALL_TIMEOUT_MS = 30_000
const MAX_PAGES = 20
const TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/

/** `<server>__<tool>`, or, when that is longer than 64 or has other characters, a cut with a hash suffix. */
export function mcpToolName(server: string, tool: string): string {
  const full = `${server}__${tool}`
  if (TOOL_NAME.test(full)) return full
  const hash = crypto.createHash('sha256').update(full).digest('hex').slice(0, 8)
  return `${full.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 64 - 9)}_${hash}`
}

export interface McpOptions {
  policy: HostPolicy
  /** the tenant's secrets, for `secret:NAME` header values at connection time */
  secrets?: SecretResolver
  resolve?: Resolver
  callTimeoutMs?: number
  listTimeoutMs?: number
  cacheMs?: number
  log?: { warn(o: object, msg: string): void; debug?(o: object, msg: string): void }
}

/** A server that could not be listed this step (API.md §12: MCP_UNAVAILABLE, once per outage). */
export interface McpOutage {
  server: string
  message: string
}

class Unavailable extends Error {}

/** One server's connection and tool cache. */
class Link {
  client?: Client
  private agent?: GuardedFetch
  private connecting?: Promise<Client>
  tools?: Tool[]
  listedAt = 0
  stale = false
  /** an outage was reported and the server has not been listed since */
  down = false
  /** the secret values its headers carry: scrubbed from every error text */
  secrets: string[] = []
  /** a digest of the headers the connection was opened with */
  private opened = ''

  constructor(public spec: McpServerSpec, private readonly o: McpOptions) {}

  get key(): string {
    return JSON.stringify([this.spec.url, this.spec.headers ?? {}])
  }

  scrub(text: string): string {
    return scrub(text, this.secrets)
  }

  /** The connected client, connecting when there is none. */
  connect(signal: AbortSignal): Promise<Client> {
    if (this.client) return Promise.resolve(this.client)
    if (!this.connecting) {
      this.connecting = this.open(signal).finally(() => (this.connecting = undefined))
    }
    return this.connecting
  }

  private async open(signal: AbortSignal): Promise<Client> {
    const { url } = this.spec
    const why = await checkToolUrl(url, this.o.policy, this.o.resolve)
    if (why) throw new Unavailable(`address refused: ${why}`)
    const { headers, secrets } = await resolveHeaders(this.spec.headers, this.o.secrets)
    this.secrets = secrets
    const opened = digest(headers)
    const u = new URL(url)
    const agent = guardedFetch(u, this.o.policy, this.o.resolve ?? defaultResolver)
    const transport = new StreamableHTTPClientTransport(u, { requestInit: { headers }, fetch: agent.fetch })
    const client = new Client({ name: 'agentd', version: '0.1.0' }, { capabilities: {} })
    client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
      if (this.client === client) this.stale = true
    })
    client.onerror = (e) => this.o.log?.debug?.({ server: this.spec.name, err: this.scrub(errorChain(e)) }, 'MCP transport error')
    client.onclose = () => {
      if (this.client === client) this.forget()
    }
    try {
      await client.connect(transport, { signal, timeout: this.o.listTimeoutMs ?? MCP_LIST_TIMEOUT_MS })
    } catch (e) {
      await client.close().catch(() => {})
      await agent.close()
      throw e
    }
    this.client = client
    this.agent = agent
    this.opened = opened
    return client
  }

  /**
   * Before a step lists tools: the header set's secrets as they are now. A replaced secret reconnects
   * with its new value; a deleted one ends the connection (MissingSecretError).
   */
  async checkSecrets(): Promise<void> {
    if (!this.client || !secretNames(this.spec.headers).length) return
    let headers: Record<string, string>
    try {
      ;({ headers } = await resolveHeaders(this.spec.headers, this.o.secrets))
    } catch (e) {
      await this.reset()
      throw e
    }
    if (digest(headers) !== this.opened) await this.reset()
  }

  private forget(): void {
    const agent = this.agent
    this.client = undefined
    this.agent = undefined
    this.stale = true
    if (agent) void agent.close()
  }

  /** Drops the connection (a transport failure, a 404 on the session id, release). */
  async reset(terminate = false): Promise<void> {
    const client = this.client
    const agent = this.agent
    this.client = undefined
    this.agent = undefined
    this.stale = true
    if (!client) return
    if (terminate) {
      // API.md §12: release ends the MCP session; a server that does not answer in a second is left to expire it
      const t = client.transport as StreamableHTTPClientTransport | undefined
      await Promise.race([t?.terminateSession().catch(() => {}), new Promise((r) => setTimeout(r, 1000).unref())])
    }
    await client.close().catch(() => {})
    await agent?.close()
  }
}

const digest = (headers: Record<string, string>) => crypto.createHash('sha256').update(JSON.stringify(Object.entries(headers).sort())).digest('hex')

const isSessionGone = (e: unknown) => e instanceof StreamableHTTPError && e.code === 404

/** Whether a failure leaves the connection unusable (anything but a JSON-RPC error answer). */
const brokenBy = (e: unknown) => !(e instanceof McpError) || e.code === ErrorCode.ConnectionClosed

/** The MCP servers of one session. */
export class McpClients {
  private links = new Map<string, Link>()

  constructor(private readonly o: McpOptions, servers: readonly McpServerSpec[] = []) {
    this.setServers(servers)
  }

  get servers(): McpServerSpec[] {
    return [...this.links.values()].map((l) => l.spec)
  }

  /** Replaces the server list (PATCH): a server whose URL or headers changed gets a new connection. */
  setServers(servers: readonly McpServerSpec[]): void {
    const next = new Map<string, Link>()
    for (const s of servers) {
      const old = this.links.get(s.name)
      const link = new Link(s, this.o)
      if (old && old.key === link.key) {
        // same connection; a changed allow-list or approval only changes what is offered
        old.spec = s
        next.set(s.name, old)
      } else next.set(s.name, link)
    }
    for (const [name, l] of this.links) if (next.get(name) !== l) void l.reset(true)
    this.links = next
  }

  /**
   * Before a step's request: every server's tools as ToolSpecs (`execution {type:'mcp'}`), from the cache
   * when fresh. A server that cannot be listed contributes none; it is reported once per outage.
   */
  async listTools(signal: AbortSignal): Promise<{ tools: ToolSpec[]; outages: McpOutage[] }> {
    const outages: McpOutage[] = []
    const perServer = await Promise.all(
      [...this.links.values()].map(async (link) => {
        try {
          const tools = await this.listed(link, signal)
          link.down = false
          return toSpecs(link.spec, tools, this.o.log)
        } catch (e) {
          if (signal.aborted) throw e
          const message = link.scrub(e instanceof MissingSecretError || e instanceof Unavailable ? e.message : `cannot list tools: ${errorChain(e)}`)
          if (!link.down) outages.push({ server: link.spec.name, message })
          link.down = true
          await link.reset()
          return []
        }
      }),
    )
    const tools: ToolSpec[] = []
    const seen = new Set<string>()
    for (const t of perServer.flat()) {
      if (seen.has(t.name)) continue
      seen.add(t.name)
      tools.push(t)
    }
    return { tools, outages }
  }

  private async listed(link: Link, signal: AbortSignal): Promise<Tool[]> {
    await link.checkSecrets()
    const fresh = link.tools && !link.stale && link.client && Date.now() - link.listedAt < (this.o.cacheMs ?? MCP_CACHE_MS)
    if (fresh) return link.tools!
    const list = async () => {
      const client = await link.connect(signal)
      const out: Tool[] = []
      let cursor: string | undefined
      for (let page = 0; page < MAX_PAGES; page++) {
        const r = await client.listTools(cursor ? { cursor } : undefined, { signal, timeout: this.o.listTimeoutMs ?? MCP_LIST_TIMEOUT_MS })
        out.push(...r.tools)
        cursor = r.nextCursor
        if (!cursor) break
      }
      return out
    }
    // the stale flag is cleared before listing: a list_changed during the listing marks it stale again
    link.stale = false
    let tools: Tool[]
    try {
      tools = await list()
    } catch (e) {
      if (!isSessionGone(e)) throw e
      await link.reset()
      link.stale = false
      tools = await list()
    }
    link.tools = tools
    link.listedAt = Date.now()
    return tools
  }

  /** MCP tools/call for one of this session's MCP tools; every failure is an isError outcome. */
  async call(server: string, tool: string, args: unknown, signal: AbortSignal, timeoutMs = this.o.callTimeoutMs ?? MCP_CALL_TIMEOUT_MS): Promise<ToolOutcome> {
    const link = this.links.get(server)
    if (!link) return fail('UNKNOWN_TOOL', `MCP server ${server} is no longer configured for this session`)
    if (args === null || typeof args !== 'object' || Array.isArray(args)) return fail('TOOL_INVALID_ARGUMENTS', 'MCP tool arguments must be a JSON object')
    const once = async () => {
      const client = await link.connect(signal)
      return client.callTool({ name: tool, arguments: args as Record<string, unknown> }, undefined, { signal, timeout: timeoutMs })
    }
    try {
      let r
      try {
        r = await once()
      } catch (e) {
        // a restarted server forgot the MCP session: the call never ran there, so it is sent again once
        if (!isSessionGone(e) || signal.aborted) throw e
        await link.reset()
        r = await once()
      }
      return toOutcome(r as Record<string, unknown>)
    } catch (e) {
      if (signal.aborted) return fail('TOOL_ABORTED', 'tool call aborted', 'AbortError')
      if (e instanceof McpError && e.code === ErrorCode.RequestTimeout) return fail('TOOL_TIMEOUT', `tool call timed out after ${timeoutMs} ms`)
      if (e instanceof MissingSecretError) return fail('TOOL_ERROR', e.message)
      if (brokenBy(e)) await link.reset()
      const why = e instanceof Unavailable ? e.message : errorChain(e)
      return fail('TOOL_ERROR', link.scrub(`MCP server ${server}: ${why}`))
    }
  }

  /** Closes every connection (idle release, shutdown, deletion). */
  async close(): Promise<void> {
    const links = [...this.links.values()]
    await Promise.allSettled(links.map((l) => l.reset(true)))
  }
}

function fail(code: string, text: string, name = 'ToolError'): ToolOutcome {
  return { content: [{ type: 'text', text: `Error: ${text.replace(/\s+/g, ' ').trim().slice(0, 1000)}` }], isError: true, error: { name, code } }
}

/** A listed server's tools, allow-list applied, as the session's tools. */
function toSpecs(server: McpServerSpec, tools: readonly Tool[], log?: McpOptions['log']): ToolSpec[] {
  const allow = server.tools ? new Set(server.tools) : undefined
  const out: ToolSpec[] = []
  for (const t of tools) {
    if (allow && !allow.has(t.name)) continue
    const parameters = t.inputSchema as unknown as JsonObject
    try {
      assertLosslessJson(parameters)
    } catch {
      log?.warn({ server: server.name, tool: t.name }, 'an MCP tool whose inputSchema is not plain JSON is left out')
      continue
    }
    out.push({
      name: mcpToolName(server.name, t.name),
      description: typeof t.description === 'string' ? t.description : '',
      parameters,
      execution: { type: 'mcp', server: server.name, tool: t.name },
      concurrency: t.annotations?.readOnlyHint === true ? 'parallel' : 'exclusive',
      approval: server.approval ?? 'never',
    })
  }
  return out
}

/** API.md §12: text → text, image → image, anything else → its JSON as text; structuredContent → meta. */
function toOutcome(r: Record<string, unknown>): ToolOutcome {
  const blocks = Array.isArray(r.content) ? (r.content as Array<Record<string, unknown>>) : r.toolResult !== undefined ? [{ type: 'json', value: r.toolResult }] : []
  const content: ContentBlock[] = blocks.map((b) => {
    if (b.type === 'text' && typeof b.text === 'string') return { type: 'text', text: b.text }
    if (b.type === 'image' && typeof b.data === 'string' && typeof b.mimeType === 'string') return { type: 'image', mimeType: b.mimeType, data: b.data }
    return { type: 'text', text: JSON.stringify(b) }
  })
  const out: ToolOutcome = { content, isError: r.isError === true }
  if (r.structuredContent !== undefined) out.meta = r.structuredContent
  return out
}
