// The llm-retry plugin (SPEC §10.5, §18.2): one agent/request-error listener that retries transient
// failures inside the open step, durably: llm/retry before the wait, llm/retry-started after it.

import crypto from 'node:crypto'
import type { Context } from 'cordis'
import { agentOf } from '../agent/index.js'
import { canonicalJson, retryKey, type LlmFailure } from '../session/index.js'
import type { RetryPolicy } from '../llm/index.js'

interface Payload {
  agent: unknown
  turn: number
  step: number
  provider: string
  failure: LlmFailure
  retryPolicy?: RetryPolicy
  signal: AbortSignal
}

/** SPEC §18.2: canonical JSON of the behaviour-relevant fields, codes sorted. */
export function policyKey(p: RetryPolicy): string {
  return canonicalJson({ mode: p.mode, maxRetries: p.maxRetries, initialDelayMs: p.initialDelayMs, maxDelayMs: p.maxDelayMs, jitterRatio: p.jitterRatio, codes: [...p.codes].sort() })
}

/** The backoff of retry r: min(initial · 2^(r−1) · (1 − j + 2j·rand), max), in whole ms. */
export function backoff(p: RetryPolicy, r: number, rand = Math.random()): number {
  const j = p.jitterRatio
  return Math.round(Math.min(p.initialDelayMs * 2 ** (r - 1) * (1 - j + 2 * j * rand), p.maxDelayMs))
}

function sleep(ms: number, signal: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve(false)
    const t = setTimeout(() => {
      signal.removeEventListener('abort', onAbort)
      resolve(true)
    }, ms)
    const onAbort = () => {
      clearTimeout(t)
      resolve(false)
    }
    signal.addEventListener('abort', onAbort, { once: true })
  })
}

export default {
  name: 'llm-retry',
  apply(ctx: Context) {
    const hooks = (ctx as unknown as { hooks: { waterfall(name: string, fn: (p: Payload, next: () => Promise<unknown>) => unknown): void } }).hooks
    hooks.waterfall('agent/request-error', async (payload: Payload, next: () => Promise<unknown>) => {
      const policy = payload.retryPolicy
      const agent = agentOf(payload.agent)
      if (!policy || !agent) return next()
      const { failure, provider, turn, step, signal } = payload
      if (failure.code === 'CONTEXT_WINDOW_EXCEEDED') return next() // compaction's (SPEC §10.5)
      if (policy.mode === 'always') {
        const downstream = (await next()) as { kind?: string } | undefined
        if (downstream?.kind === 'retry') return downstream
      } else if (!policy.codes.includes(failure.code)) return next()
      const key = policyKey(policy)
      const prev = agent.state.retries.get(retryKey(provider, key))
      const retry = (prev?.count ?? 0) + 1
      if (policy.mode === 'normal' && retry > policy.maxRetries) return next()
      let delayMs: number
      const ra = failure.providerRetryAfterMs
      if (typeof ra === 'number' && Number.isFinite(ra) && ra > 0 && ra <= policy.maxDelayMs) delayMs = Math.round(ra)
      else if (typeof ra === 'number' && Number.isFinite(ra) && ra > policy.maxDelayMs && policy.mode === 'normal') return next()
      else delayMs = backoff(policy, retry)
      const retryId = prev?.retryId ?? `retry_${crypto.randomUUID()}`
      await agent.appendOwned((u) => {
        u.add({
          type: 'llm/retry',
          data: { retryId, turn, step, provider, mode: policy.mode, policyKey: key, retry, ...(policy.mode === 'normal' ? { maxRetries: policy.maxRetries } : {}), delayMs, failure: failure as never },
        })
      })
      // cancellation or disposal during the wait: no llm/retry-started, and no retry
      if (!(await sleep(delayMs, signal))) return undefined
      await agent.appendOwned((u) => {
        u.add({ type: 'llm/retry-started', data: { retryId, turn, step, retry } })
      })
      agent.services.metrics?.retries.inc({ provider })
      return { kind: 'retry' }
    })
  },
}
