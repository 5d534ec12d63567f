// Prometheus metrics (API.md §8) through prom-client: one registry per process, the default process
// metrics, and agentd's own families. Labels stay bounded: routes are route patterns, never session
// ids, and tenants appear only where a feature says so. Each part of the server may add its own
// families with counter()/gauge()/histogram(); docs/operations.md lists every family a process serves.

import client from 'prom-client'

/** Seconds buckets for HTTP answers and tool calls: 1 ms to a minute. */
const FAST_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60]
/** Seconds buckets for model attempts and turns, which run much longer. */
const SLOW_BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900]
/** Seconds buckets for tool calls: a builtin's millisecond to a person answering a client call. */
const TOOL_BUCKETS = [0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900]

export class Metrics {
  readonly registry = new client.Registry()

  readonly httpSeconds = this.histogram('agentd_http_request_duration_seconds', 'HTTP answers by method, route pattern and status', ['method', 'route', 'status'], FAST_BUCKETS)
  readonly turns = this.counter('agentd_turns_total', 'Turns ended, by end reason', ['reason'])
  readonly steps = this.counter('agentd_steps_total', 'Steps started')
  readonly attempts = this.counter('agentd_attempts_total', 'Model attempts settled, by outcome', ['outcome'])
  readonly toolCalls = this.counter('agentd_tool_calls_total', 'Tool results committed, by error code (ok when none)', ['code'])
  readonly appends = this.counter('agentd_event_appends_total', 'Durable events appended by this process')
  readonly takeovers = this.counter('agentd_lease_takeovers_total', 'Expired leases taken over (crash repair)')
  readonly leaseClaims = this.counter('agentd_lease_claims_total', 'Session leases claimed')
  readonly turnSeconds = this.histogram('agentd_turn_duration_seconds', 'Turns ended by this process, from turn/start to turn/end, by end reason', ['reason'])
  // provider is bounded: a session's model must resolve against the models file or pi-ai's catalogue
  readonly attemptSeconds = this.histogram('agentd_model_attempt_duration_seconds', 'Model attempts, from dispatch to settlement, by provider and outcome (ok, error, aborted)', ['provider', 'outcome'])
  readonly firstTokenSeconds = this.histogram('agentd_model_time_to_first_token_seconds', 'Model attempts that streamed a token, from dispatch to the first delta, by provider and outcome', ['provider', 'outcome'])
  readonly toolSeconds = this.histogram('agentd_tool_call_duration_seconds', 'Tool executions (tools/execute around the body), by the tool\'s kind', ['kind'], TOOL_BUCKETS)
  readonly retries = this.counter('agentd_llm_retries_total', 'Model calls retried by llm-retry inside their step, by provider', ['provider'])
  readonly continuations = this.counter('agentd_continuations_total', 'Continuations owed after crash repair (SPEC §19), by decision: continue, or why not (cancelled, disabled, crash-loop, spent)', ['decision'])
  readonly compactions = this.counter('agentd_compactions_total', 'Summary compactions, by outcome (compacted, failed)', ['outcome'])

  constructor() {
    client.collectDefaultMetrics({ register: this.registry })
  }

  counter<L extends string = never>(name: string, help: string, labelNames: readonly L[] = []): client.Counter<L> {
    return new client.Counter({ name, help, labelNames: [...labelNames], registers: [this.registry] })
  }

  histogram<L extends string = never>(name: string, help: string, labelNames: readonly L[] = [], buckets: number[] = SLOW_BUCKETS): client.Histogram<L> {
    return new client.Histogram({ name, help, labelNames: [...labelNames], buckets, registers: [this.registry] })
  }

  /** A gauge read at scrape time (`read` returns one value, or values by label). */
  gauge<L extends string = never>(name: string, help: string, read: () => number | Array<{ labels: Partial<Record<L, string>>; value: number }>, labelNames: readonly L[] = []): client.Gauge<L> {
    return new client.Gauge({
      name,
      help,
      labelNames: [...labelNames],
      registers: [this.registry],
      collect() {
        let v: ReturnType<typeof read>
        try {
          v = read()
        } catch {
          v = NaN
        }
        this.reset()
        if (typeof v === 'number') this.set(v)
        else for (const x of v) this.set(x.labels as Partial<Record<L, string | number>>, x.value)
      },
    })
  }

  http(method: string, route: string, status: number, seconds: number): void {
    this.httpSeconds.observe({ method, route, status: String(status) }, seconds)
  }

  /** A turn/end this process wrote after running the turn since `started` (hrtime). */
  turnEnded(reason: string, started: bigint): void {
    this.turns.inc({ reason })
    this.turnSeconds.observe({ reason }, secondsSince(started))
  }

  /** A settled model attempt dispatched at `started`, whose first delta came at `firstToken`. */
  attemptSettled(labels: { provider: string; outcome: 'ok' | 'error' | 'aborted' }, started: bigint, firstToken: bigint | undefined): void {
    this.attemptSeconds.observe(labels, secondsSince(started))
    if (firstToken !== undefined) this.firstTokenSeconds.observe(labels, Number(firstToken - started) / 1e9)
  }

  /** A tool execution that began at `started`. */
  toolExecuted(kind: string, started: bigint): void {
    this.toolSeconds.observe({ kind }, secondsSince(started))
  }

  get contentType(): string {
    return this.registry.contentType
  }

  render(): Promise<string> {
    return this.registry.metrics()
  }
}

/** Seconds since a process.hrtime.bigint() reading. */
export const secondsSince = (start: bigint): number => Number(process.hrtime.bigint() - start) / 1e9

export { FAST_BUCKETS, SLOW_BUCKETS, TOOL_BUCKETS }
