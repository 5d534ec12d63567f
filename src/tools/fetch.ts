// A fetch under the http tools' address guard (API.md §1 AGENTD_TOOL_HOSTS), for clients that take a
// fetch function: MCP servers (§12) and tenants' identity providers (§18).

import net from 'node:net'
import { Agent, fetch as undiciFetch } from 'undici'
import { traceHeaders } from '../tracing/index.js'
import { defaultResolver, guardedLookup, RefusedAddress, type HostPolicy, type Resolver } from './hosts.js'

export interface GuardedFetch {
  fetch(input: string | URL, init?: RequestInit): Promise<Response>
  /** closes its connections */
  close(): Promise<void>
}

/**
 * A fetch for the host of `url`: every new socket checks the address it connects to (guardedLookup,
 * so a name that re-resolves to a refused address is caught), and an IP literal, which Node connects
 * to without a lookup, is checked before each call.
 */
export function guardedFetch(url: URL, policy: HostPolicy, resolve: Resolver = defaultResolver): GuardedFetch {
  const hostname = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname
  const port = url.port ? Number(url.port) : url.protocol === 'https:' ? 443 : 80
  const agent = new Agent({ connect: { lookup: guardedLookup(policy, hostname, port, resolve) } })
  return {
    fetch(input, init) {
      if (net.isIP(hostname)) {
        const refused = policy.check(hostname, port, hostname)
        if (refused) return Promise.reject(new RefusedAddress(refused))
      }
      // API.md §19: the active span's traceparent (an MCP call's execute_tool span)
      const trace = traceHeaders()
      if (trace) {
        const headers = new Headers(init?.headers)
        for (const [k, v] of Object.entries(trace)) headers.set(k, v)
        init = { ...init, headers }
      }
      return undiciFetch(input, { ...(init as object), dispatcher: agent } as never) as unknown as Promise<Response>
    },
    close: () => agent.destroy().catch(() => {}),
  }
}
