// The event catalogue (SPEC §3.4, §3.6): the shape of every event the loop and the built-in plugins
// write. An event of a known type with the wrong shape never enters a log; other types (tool-owned
// events, SPEC §11.9) may carry any JSON.

/** An event that cannot enter the log (SPEC §3.1.4: the unit is discarded, the log unchanged). */
export class LogError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'LogError'
  }
}

export class EventShapeError extends LogError {
  constructor(type: string, why: string) {
    super(`${type}: ${why}`)
    this.name = 'EventShapeError'
  }
}

type Check = (d: Record<string, unknown>) => string | undefined

const isInt = (v: unknown, min = 0) => Number.isInteger(v) && (v as number) >= min
const isStr = (v: unknown) => typeof v === 'string'
const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v)
const optional = (v: unknown, ok: (v: unknown) => boolean) => v === undefined || ok(v)

const turnStep: Check = (d) => (!isInt(d.turn, 1) ? 'turn must be a positive integer' : !isInt(d.step, 1) ? 'step must be a positive integer' : undefined)
const turnOnly: Check = (d) => (!isInt(d.turn, 1) ? 'turn must be a positive integer' : undefined)

function message(m: unknown, role: string): string | undefined {
  if (!isObj(m)) return 'message must be an object'
  if (!isStr(m.id)) return 'message.id must be a string'
  if (m.role !== role) return `message.role must be ${role}`
  if (!Array.isArray(m.content) || !m.content.every((b) => isObj(b) && isStr(b.type))) return 'message.content must be content blocks'
  if (!isObj(m.source) || !isStr(m.source.kind)) return 'message.source must be {kind, …}'
  return undefined
}

const END_KINDS = new Set(['completed', 'aborted', 'blocked', 'error', 'max-tokens', 'interrupted'])
const REASONS = new Set(['initial', 'resume', 'change', 'series'])

const CATALOGUE: Record<string, Check> = {
  'agent/inbox/spliced': (d) => {
    if (d.target !== 'next-turn' && d.target !== 'next-step') return 'target must be next-turn or next-step'
    if (!isInt(d.start)) return 'start must be a non-negative integer'
    if (!optional(d.removedCount, (v) => isInt(v, 1))) return 'removedCount must be a positive integer when present'
    if (!Array.isArray(d.inserted)) return 'inserted must be an array'
    for (const m of d.inserted) {
      const why = message(m, 'user')
      if (why) return `inserted: ${why}`
    }
    if (!optional(d.outcome, (v) => v === 'canceled')) return "outcome must be 'canceled' when present"
    return undefined
  },
  'turn/start': (d) => turnOnly(d) ?? (!optional(d.continues, (v) => isInt(v, 1) && (v as number) < (d.turn as number)) ? 'continues must be an earlier turn when present' : undefined),
  'turn/end': (d) => turnOnly(d) ?? (!isObj(d.reason) || !END_KINDS.has(d.reason.kind as string) ? 'reason must be a TurnEndReason' : undefined),
  'step/start': turnStep,
  'step/end': turnStep,
  'system/message': (d) => turnStep(d) ?? message(d.message, 'system'),
  'user/message': (d) => message(d, 'user'),
  'request/header': (d) =>
    !isObj(d.header) || !isObj(d.header.config) || !isStr(d.header.config.provider) || !isStr(d.header.config.model)
      ? 'header must be {config: {provider, model, …}, …}'
      : !REASONS.has(d.reason as string)
        ? 'reason must be initial, resume, change or series'
        : !optional(d.startsSeries, (v) => v === true)
          ? 'startsSeries must be true when present'
          : undefined,
  'request/context': (d) => (!isStr(d.provider) || !isStr(d.model) ? 'provider and model must be strings' : !optional(d.contextWindow, (v) => isInt(v, 1)) ? 'contextWindow must be a positive integer' : undefined),
  'assistant/message': (d) => turnStep(d) ?? message(d.message, 'assistant') ?? (!Array.isArray(d.stream) ? 'stream must be an array' : !optional(d.interrupted, (v) => v === true) ? 'interrupted must be true when present' : undefined),
  'assistant/attempt': (d) => turnStep(d) ?? (!Array.isArray(d.stream) ? 'stream must be an array' : undefined),
  'tool/call': (d) => turnStep(d) ?? (!isStr(d.callId) || !isStr(d.name) || !isStr(d.arguments) ? 'callId, name and arguments must be strings' : undefined),
  'tool/result': (d) => {
    const why = turnStep(d) ?? message(d.message, 'user')
    if (why) return why
    const m = d.message as { content: Array<{ type: string }>; source: { kind: string; callId?: unknown } }
    if (m.content.length !== 1 || m.content[0].type !== 'tool-result') return 'message.content must be exactly one tool-result block'
    if (m.source.kind !== 'tool' || !isStr(m.source.callId)) return "message.source must be {kind: 'tool', callId}"
    if (!optional(d.error, (v) => isObj(v) && isStr(v.name) && isStr(v.code))) return 'error must be {name, code} when present'
    return undefined
  },
  'session/end-seed': (d) => (Object.keys(d).length === 0 || (Object.keys(d).length === 1 && d.inherited === true) ? undefined : 'data must be {} (or {inherited: true})'),
  'llm/retry': (d) => turnStep(d) ?? (!isStr(d.retryId) || !isStr(d.provider) || !isStr(d.policyKey) || !isInt(d.retry, 1) || !isInt(d.delayMs) || !isObj(d.failure) ? 'retryId, provider, policyKey, retry, delayMs and failure are required' : undefined),
  'llm/retry-started': (d) => turnStep(d) ?? (!isStr(d.retryId) || !isInt(d.retry, 1) ? 'retryId and retry are required' : undefined),
  'compaction/start': (d) => (!isStr(d.compactionId) ? 'compactionId must be a string' : d.turn !== null && !isInt(d.turn, 1) ? 'turn must be a turn number or null' : undefined),
  'compaction/summary': (d) => (!isStr(d.compactionId) || !isStr(d.summary) || !Array.isArray(d.shadowedSeqs) || !isObj(d.shadowedRange) ? 'compactionId, summary, shadowedRange and shadowedSeqs are required' : undefined),
  'compaction/end': (d) => (!isStr(d.compactionId) ? 'compactionId must be a string' : !optional(d.error, isStr) ? 'error must be a string when present' : undefined),
  'compaction/prune': (d) => (!isObj(d.shadowedRange) || !Array.isArray(d.shadowedSeqs) || !isInt(d.shadowedTokenCount) ? 'shadowedRange, shadowedSeqs and shadowedTokenCount are required' : undefined),
}

/** The types the catalogue knows. */
export const KNOWN_EVENT_TYPES: ReadonlySet<string> = new Set(Object.keys(CATALOGUE))

/** Throws EventShapeError when an event of a known type has the wrong shape. */
export function checkEventShape(type: string, data: unknown): void {
  if (typeof type !== 'string' || !type) throw new EventShapeError(String(type), 'an event needs a type')
  const check = CATALOGUE[type]
  if (!check) return
  if (!isObj(data)) throw new EventShapeError(type, 'data must be an object')
  const why = check(data)
  if (why) throw new EventShapeError(type, why)
}
