// Lossless JSON (SPEC §3.1.3): what goes into the log must come back out of it unchanged.

import type { Json } from './types.js'

export class JsonValueError extends Error {
  constructor(readonly path: string, readonly why: string) {
    super(`${path}: ${why}`)
    this.name = 'JsonValueError'
  }
}

/**
 * Throws a JsonValueError naming the first value that JSON cannot carry losslessly: undefined,
 * functions, BigInt, symbols, -0, NaN, ±Infinity, sparse arrays, cycles and non-plain objects.
 */
export function assertLosslessJson(value: unknown, path = '$'): asserts value is Json {
  walk(value, path, new Set())
}

function walk(v: unknown, path: string, stack: Set<object>): void {
  switch (typeof v) {
    case 'string':
    case 'boolean':
      return
    case 'number':
      if (!Number.isFinite(v)) throw new JsonValueError(path, `${v} is not a finite number`)
      if (Object.is(v, -0)) throw new JsonValueError(path, '-0 does not survive JSON')
      return
    case 'undefined':
      throw new JsonValueError(path, 'undefined is not JSON')
    case 'function':
      throw new JsonValueError(path, 'a function is not JSON')
    case 'bigint':
      throw new JsonValueError(path, 'a BigInt is not JSON')
    case 'symbol':
      throw new JsonValueError(path, 'a symbol is not JSON')
    case 'object':
      break
  }
  if (v === null) return
  const o = v as object
  if (stack.has(o)) throw new JsonValueError(path, 'a cycle is not JSON')
  stack.add(o)
  if (Array.isArray(o)) {
    for (let i = 0; i < o.length; i++) {
      if (!(i in o)) throw new JsonValueError(`${path}[${i}]`, 'a sparse array is not JSON')
      walk(o[i], `${path}[${i}]`, stack)
    }
    // own enumerable extras on an array would be dropped
    const keys = Object.keys(o)
    if (keys.length !== o.length) throw new JsonValueError(path, 'an array with extra properties is not JSON')
  } else {
    const proto = Object.getPrototypeOf(o)
    if (proto !== Object.prototype && proto !== null) throw new JsonValueError(path, `a ${o.constructor?.name ?? 'non-plain'} object is not JSON`)
    if (Object.getOwnPropertySymbols(o).length) throw new JsonValueError(path, 'symbol keys are not JSON')
    for (const k of Object.keys(o)) walk((o as Record<string, unknown>)[k], `${path}.${k}`, stack)
  }
  stack.delete(o)
}

// NUL, or a UTF-16 surrogate without its partner (a lone high or a lone low one)
const UNSTORABLE = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/

/**
 * Why PostgreSQL text could not hold this string exactly, else undefined: the server refuses NUL, and a
 * lone surrogate has no UTF-8 form (the pg driver would silently store U+FFFD instead).
 */
export function unstorableText(s: string): string | undefined {
  const m = UNSTORABLE.exec(s)
  if (!m) return undefined
  return m[0] === '\u0000' ? 'contains a NUL character' : `contains a lone surrogate (U+${m[0].charCodeAt(0).toString(16).toUpperCase()})`
}

/**
 * Throws a JsonValueError naming the first string or object key, at any depth, that PostgreSQL text
 * could not hold losslessly (see unstorableText). The one rule for every text that may reach the
 * database: request input over HTTP and deliveries through the Agent handle alike.
 */
export function assertStorableText(value: unknown, path = '$'): void {
  if (typeof value === 'string') {
    const why = unstorableText(value)
    if (why) throw new JsonValueError(path, why)
    return
  }
  if (value === null || typeof value !== 'object') return
  if (Array.isArray(value)) {
    value.forEach((v, i) => assertStorableText(v, `${path}[${i}]`))
    return
  }
  for (const [k, v] of Object.entries(value)) {
    const why = unstorableText(k)
    if (why) throw new JsonValueError(path, `an object key ${why}`)
    assertStorableText(v, `${path}.${k}`)
  }
}

/** Deep-freezes a JSON value in place and returns it. */
export function deepFreeze<T>(v: T): T {
  if (v !== null && typeof v === 'object' && !Object.isFrozen(v)) {
    Object.freeze(v)
    for (const k of Object.keys(v as object)) deepFreeze((v as Record<string, unknown>)[k])
  }
  return v
}

/** A deep copy of a JSON value. */
export function cloneJson<T>(v: T): T {
  return v === undefined ? v : (JSON.parse(JSON.stringify(v)) as T)
}

/** JSON text with object keys sorted: equal values give equal text. */
export function canonicalJson(v: unknown): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v) ?? 'null'
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`
  const o = v as Record<string, unknown>
  const keys = Object.keys(o).filter((k) => o[k] !== undefined).sort()
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`).join(',')}}`
}

/** Structural equality of JSON values (key order ignored, undefined members treated as absent). */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object') return false
  if (Array.isArray(a) !== Array.isArray(b)) return false
  if (Array.isArray(a)) {
    const bb = b as unknown[]
    if (a.length !== bb.length) return false
    for (let i = 0; i < a.length; i++) if (!jsonEqual(a[i], bb[i])) return false
    return true
  }
  const ao = a as Record<string, unknown>
  const bo = b as Record<string, unknown>
  const ak = Object.keys(ao).filter((k) => ao[k] !== undefined)
  const bk = Object.keys(bo).filter((k) => bo[k] !== undefined)
  if (ak.length !== bk.length) return false
  for (const k of ak) if (!jsonEqual(ao[k], bo[k])) return false
  return true
}

/** Removes members whose value is undefined, recursively (SPEC §1.4: absent fields are omitted). */
export function stripUndefined<T>(v: T): T {
  if (v === null || typeof v !== 'object') return v
  if (Array.isArray(v)) return v.map(stripUndefined) as T
  const out: Record<string, unknown> = {}
  for (const [k, x] of Object.entries(v as Record<string, unknown>)) if (x !== undefined) out[k] = stripUndefined(x)
  return out as T
}
