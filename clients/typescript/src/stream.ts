// A session's SSE stream (API.md §6) as an async iterator that outlives its connections. After any
// disconnect — network, server restart, a `stream/error` cut — it reconnects with Last-Event-ID set to
// the last durable seq it yielded, so durable events come exactly once and in order. Live chunks are
// deduplicated by (attemptId, index) against what was yielded or what a snapshot covered (API.md §6).

import { AgentdError, errorFromResponse } from './errors.js'
import type { Transport } from './http.js'
import { backoffDelay, linkedSignal, parseRetryAfter, sleep, type RetryOptions } from './retry.js'
import { SseParser } from './sse.js'
import type { AssistantStreamFrame, AssistantStreamRecord, SessionEvent, StreamFrame } from './types.js'

export interface StreamOptions {
  /** resume after this seq (default -1: the whole log) */
  after?: number
  signal?: AbortSignal
  /** silence this long means a dead connection (default 45000 ms; the server pings every 15 s) */
  idleTimeoutMs?: number
  /** reconnect backoff: from 100 ms up to 5000 ms, without a limit on attempts unless given */
  reconnect?: RetryOptions
}

export interface SessionStream extends AsyncIterableIterator<StreamFrame> {
  /** seq of the last durable event yielded; -1 before the first */
  readonly lastSeq: number
  /** connections opened so far */
  readonly connections: number
  /** ends the iteration and the connection */
  close(): void
}

/** Chunks a compact stream expands to (SPEC §9.4): one per delta of a run, one per other record. */
export function chunkCount(records: AssistantStreamRecord[]): number {
  let n = 0
  for (const r of records) n += r.type === 'chunk' ? 1 : r.type === 'tool-call-chunks' ? r.args.length : r.texts.length
  return n
}

/** Statuses after which reconnecting cannot help. */
const FATAL = new Set([400, 401, 403, 404, 410])
const MAX_ATTEMPTS_TRACKED = 64

/**
 * Which chunks the consumer already has, per attempt, across connections: a snapshot says exactly what
 * it has from then on; a chunk below that, or after the attempt's end, is a repeat.
 */
class ChunkLedger {
  private have = new Map<string, number>()

  /** true when the frame adds something; false for a duplicate */
  admit(f: AssistantStreamFrame): boolean {
    const known = this.have.get(f.attemptId)
    switch (f.kind) {
      case 'snapshot':
        this.set(f.attemptId, chunkCount(f.stream))
        return true
      case 'start':
        if (known !== undefined) return false
        this.set(f.attemptId, 0)
        return true
      case 'chunk':
        if (known !== undefined && f.index < known) return false
        this.set(f.attemptId, f.index + 1)
        return true
      case 'end':
        if (known === Infinity) return false
        this.set(f.attemptId, Infinity)
        return true
      default:
        return true
    }
  }

  private set(id: string, n: number): void {
    this.have.delete(id)
    this.have.set(id, n)
    if (this.have.size > MAX_ATTEMPTS_TRACKED) this.have.delete(this.have.keys().next().value!)
  }
}

class Reconnect extends Error {}

export function openStream(t: Transport, sessionId: string, o: StreamOptions = {}): SessionStream {
  const stop = new AbortController()
  const onAbort = () => stop.abort()
  if (o.signal?.aborted) stop.abort()
  else o.signal?.addEventListener('abort', onAbort, { once: true })
  let lastSeq = o.after ?? -1
  let connections = 0
  const ledger = new ChunkLedger()
  const idleMs = o.idleTimeoutMs ?? 45000
  const backoff: RetryOptions = { initialDelayMs: 100, maxDelayMs: 5000, ...(o.reconnect ?? {}) }

  /** a 401 with a provider's token: the next connection asks the provider for another, once */
  let renew = false
  async function* connection(failures: { n: number }): AsyncGenerator<StreamFrame> {
    const link = linkedSignal(stop.signal)
    try {
      const headers = await t.headers('key', { accept: 'text/event-stream' }, renew)
      if (lastSeq >= 0 || o.after !== undefined) headers['last-event-id'] = String(lastSeq)
      const url = t.url(`/v1/sessions/${encodeURIComponent(sessionId)}/stream`)
      connections++
      let res: Response
      try {
        res = await t.fetch(url, { headers, signal: link.signal })
      } catch (e) {
        throw new Reconnect(`connect: ${(e as Error)?.message ?? e}`)
      }
      if (!res.ok) {
        const error = errorFromResponse(res.status, await res.text().catch(() => ''), { retryAfterMs: parseRetryAfter(res.headers.get('retry-after')), method: 'GET', url })
        if (res.status === 401 && t.refreshable && !renew) {
          renew = true
          throw new Reconnect('the token was refused; asking for another')
        }
        if (FATAL.has(res.status)) throw error
        throw new Reconnect(`HTTP ${res.status} ${error.code}`)
      }
      if (!res.body) throw new AgentdError({ status: res.status, code: 'invalid-response', message: 'the stream has no body', method: 'GET', url })
      const reader = res.body.getReader()
      const decoder = new TextDecoder()
      const parser = new SseParser()
      let cut: string | undefined
      for (;;) {
        let timer: ReturnType<typeof setTimeout> | undefined
        const idle = new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Reconnect(`no data for ${idleMs} ms`)), idleMs)
        })
        let chunk: Awaited<ReturnType<typeof reader.read>>
        try {
          chunk = await Promise.race([reader.read(), idle])
        } catch (e) {
          if (e instanceof Reconnect) throw e
          throw new Reconnect(`read: ${(e as Error)?.message ?? e}`)
        } finally {
          clearTimeout(timer)
        }
        if (chunk.done) throw new Reconnect(cut ?? 'the server ended the stream')
        for (const m of parser.push(decoder.decode(chunk.value, { stream: true }))) {
          let data: unknown
          try {
            data = JSON.parse(m.data)
          } catch {
            if (m.event === 'session/event') throw new AgentdError({ status: 200, code: 'invalid-response', message: `a session/event frame is not JSON: ${m.data.slice(0, 100)}`, url })
            yield { event: 'unknown', name: m.event, data: m.data }
            continue
          }
          if (m.event === 'session/event') {
            const e = data as SessionEvent
            if (e.seq <= lastSeq) continue // already yielded on an earlier connection
            if (e.seq !== lastSeq + 1) throw new Reconnect(`gap: seq ${e.seq} after ${lastSeq}`)
            lastSeq = e.seq
            yield { event: 'session/event', id: e.seq, data: e }
            continue
          }
          if (m.event === 'stream/ready') {
            failures.n = 0
            renew = false
          } else if (m.event === 'agent/assistant-stream') {
            if (!ledger.admit(data as AssistantStreamFrame)) continue
          } else if (m.event === 'stream/error') {
            cut = `stream/error ${(data as { code?: string }).code ?? ''}`.trim()
          }
          yield (KNOWN.has(m.event) ? { event: m.event, data } : { event: 'unknown', name: m.event, data }) as StreamFrame
        }
      }
    } finally {
      link.abort()
      link.dispose()
    }
  }

  async function* frames(): AsyncGenerator<StreamFrame> {
    const failures = { n: 0 }
    try {
      for (;;) {
        let reason: string
        try {
          yield* connection(failures)
          return
        } catch (e) {
          if (stop.signal.aborted) return
          if (!(e instanceof Reconnect)) throw e
          reason = e.message
        }
        failures.n++
        if (backoff.maxAttempts !== undefined && failures.n >= backoff.maxAttempts) throw new AgentdError({ status: 0, code: 'network-error', message: `stream of ${sessionId}: gave up after ${failures.n} failed connections (${reason})` })
        const delayMs = backoffDelay(failures.n, backoff)
        yield { event: 'client/reconnecting', data: { after: lastSeq, attempt: failures.n, delayMs, reason } }
        try {
          await sleep(delayMs, stop.signal)
        } catch {
          return
        }
      }
    } finally {
      o.signal?.removeEventListener('abort', onAbort)
    }
  }

  const it = frames()
  return {
    get lastSeq() {
      return lastSeq
    },
    get connections() {
      return connections
    },
    next: () => it.next(),
    return: (v?: unknown) => {
      stop.abort()
      return it.return(v as never)
    },
    throw: (e?: unknown) => it.throw(e),
    close() {
      stop.abort()
      void it.return(undefined as never)
    },
    [Symbol.asyncIterator]() {
      return this
    },
  }
}

const KNOWN = new Set(['stream/ready', 'stream/error', 'agent/status', 'agent/session-start', 'agent/inbox/inserted', 'agent/inbox/claimed', 'agent/inbox/discarded', 'agent/assistant-stream', 'agent/error'])
