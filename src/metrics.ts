// Prometheus text metrics (API.md §8): HTTP, turns, steps, attempts, tool calls, event appends,
// SSE subscribers, lease takeovers. Counters live in memory; each process exposes its own.

type Labels = Record<string, string | number>

class Counter {
  readonly values = new Map<string, number>()
  constructor(readonly name: string, readonly help: string) {}
  inc(labels: Labels = {}, by = 1): void {
    const k = labelText(labels)
    this.values.set(k, (this.values.get(k) ?? 0) + by)
  }
}

const labelText = (l: Labels) => {
  const keys = Object.keys(l).sort()
  return keys.length ? `{${keys.map((k) => `${k}="${String(l[k]).replace(/["\\\n]/g, '_')}"`).join(',')}}` : ''
}

export class Metrics {
  readonly httpRequests = new Counter('agentd_http_requests_total', 'HTTP requests by method, route and status')
  readonly httpSeconds = new Counter('agentd_http_request_seconds_sum', 'Total seconds spent answering HTTP requests')
  readonly turns = new Counter('agentd_turns_total', 'Turns ended, by end reason')
  readonly steps = new Counter('agentd_steps_total', 'Steps started')
  readonly attempts = new Counter('agentd_attempts_total', 'Model attempts settled, by outcome')
  readonly toolCalls = new Counter('agentd_tool_calls_total', 'Tool results committed, by error code (ok when none)')
  readonly appends = new Counter('agentd_event_appends_total', 'Durable events appended by this process')
  readonly takeovers = new Counter('agentd_lease_takeovers_total', 'Expired leases taken over (crash repair)')
  readonly leaseClaims = new Counter('agentd_lease_claims_total', 'Session leases claimed')
  /** gauges read at scrape time */
  gauges: Array<{ name: string; help: string; read: () => number }> = []

  http(method: string, route: string, status: number, seconds: number): void {
    this.httpRequests.inc({ method, route, status })
    this.httpSeconds.inc({}, seconds)
  }

  gauge(name: string, help: string, read: () => number): void {
    this.gauges.push({ name, help, read })
  }

  render(): string {
    const out: string[] = []
    for (const c of [this.httpRequests, this.httpSeconds, this.turns, this.steps, this.attempts, this.toolCalls, this.appends, this.takeovers, this.leaseClaims]) {
      out.push(`# HELP ${c.name} ${c.help}`, `# TYPE ${c.name} counter`)
      if (!c.values.size) out.push(`${c.name} 0`)
      for (const [k, v] of c.values) out.push(`${c.name}${k} ${v}`)
    }
    for (const g of this.gauges) {
      let v = 0
      try {
        v = g.read()
      } catch {
        v = NaN
      }
      out.push(`# HELP ${g.name} ${g.help}`, `# TYPE ${g.name} gauge`, `${g.name} ${v}`)
    }
    return `${out.join('\n')}\n`
  }
}
