// The open session's MCP servers and their tools (API.md §12), in the session's side column: the
// tools of the latest request/header named <server>__<tool>, grouped by server, and the servers the
// driver could not list (the live agent/error frame MCP_UNAVAILABLE) until a later header lists them.

import { $, h } from './dom.js'

const MCP_NAME = /^([A-Za-z0-9_-]{1,32})__(.+)$/

function render(v) {
  const servers = new Map()
  for (const t of v.mcp.tools) {
    const m = MCP_NAME.exec(t.name)
    if (!m) continue
    if (!servers.has(m[1])) servers.set(m[1], [])
    servers.get(m[1]).push({ name: m[2], description: t.description })
  }
  for (const name of v.mcp.down.keys()) if (!servers.has(name)) servers.set(name, [])
  $('mcp-panel').toggleAttribute('data-empty', servers.size === 0)
  if (!servers.size) return $('mcp').replaceChildren(h('p', { class: 'muted small', text: 'none in the latest request' }))
  $('mcp').replaceChildren(
    ...[...servers].map(([name, tools]) => {
      const down = v.mcp.down.get(name)
      return h(
        'div',
        { class: 'mcp-server', dataset: { server: name, state: down === undefined ? 'ok' : 'unavailable' } },
        h('div', { class: 'tool-head' }, h('span', { class: 'mono tool-name', text: name }), down === undefined ? null : h('span', { class: 'tag warn', text: 'unavailable', title: down })),
        tools.length ? h('ul', { class: 'mcp-tools' }, ...tools.map((t) => h('li', { class: 'mono small', text: t.name, title: t.description || '' }))) : null,
      )
    }),
  )
}

/** Forgets what the previous session showed. */
export function resetMcp(v) {
  v.mcp = { tools: [], down: new Map() }
  render(v)
}

/** A durable request/header: the tools the step offered; a server whose tools are there is reachable again. */
export function mcpHeader(v, ev) {
  const tools = ev.data?.header?.tools ?? []
  v.mcp.tools = tools
  for (const t of tools) {
    const m = MCP_NAME.exec(t.name)
    if (m) v.mcp.down.delete(m[1])
  }
  render(v)
}

/** The live frame agent/error {code: MCP_UNAVAILABLE, server}: the step went on without that server. */
export function mcpUnavailable(v, d) {
  const server = d.server ?? d.error?.server
  if (!server) return
  v.mcp.down.set(server, d.error?.message ?? 'unavailable')
  render(v)
}
