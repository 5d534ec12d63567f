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
  const why = check(value, [])
  if (why) throw new JsonValueError(pathOf(path, why.at), why.message)
}

/** Where a value failed: the keys and indexes from the root, innermost last. */
interface Failure {
  at: Array<string | number>
  message: string
}

/** The path text of a failure (`$.a[0].b`), built only when a value fails. */
function pathOf(root: string, at: ReadonlyArray<string | number>): string {
  let p = root
  for (let i = at.length - 1; i >= 0; i--) p += typeof at[i] === 'number' ? `[${at[i]}]` : `.${at[i]}`
  return p
}

/**
 * The first reason `v` is not lossless JSON, or undefined. `open` holds the objects being walked, for
 * cycles: a scan of a short list beats a Set at the depths JSON has; past DEEP levels a Set takes over,
 * so a hostile, deeply nested value costs linear time.
 */
function check(v: unknown, open: object[], deep?: Set<object>): Failure | undefined {
  switch (typeof v) {
    case 'string':
    case 'boolean':
      return undefined
    case 'number':
      if (!Number.isFinite(v)) return { at: [], message: `${v} is not a finite number` }
      if (v === 0 && 1 / v < 0) return { at: [], message: '-0 does not survive JSON' }
      return undefined
    case 'undefined':
      return { at: [], message: 'undefined is not JSON' }
    case 'function':
      return { at: [], message: 'a function is not JSON' }
    case 'bigint':
      return { at: [], message: 'a BigInt is not JSON' }
    case 'symbol':
      return { at: [], message: 'a symbol is not JSON' }
  }
  if (v === null) return undefined
  const o = v as object
  if (deep ? deep.has(o) : open.includes(o)) return { at: [], message: 'a cycle is not JSON' }
  open.push(o)
  if (!deep && open.length > DEEP) deep = new Set(open)
  else deep?.add(o)
  let why: Failure | undefined
  if (Array.isArray(o)) {
    for (let i = 0; i < o.length && !why; i++) {
      if (!(i in o)) why = { at: [i], message: 'a sparse array is not JSON' }
      else if ((why = check(o[i], open, deep))) why.at.push(i)
    }
    // own enumerable extras on an array would be dropped
    if (!why && Object.keys(o).length !== o.length) why = { at: [], message: 'an array with extra properties is not JSON' }
  } else {
    const proto = Object.getPrototypeOf(o)
    if (proto !== Object.prototype && proto !== null) why = { at: [], message: `a ${o.constructor?.name ?? 'non-plain'} object is not JSON` }
    else if (Object.getOwnPropertySymbols(o).length) why = { at: [], message: 'symbol keys are not JSON' }
    else {
      for (const k in o) {
        if (!Object.prototype.hasOwnProperty.call(o, k)) continue
        if ((why = check((o as Record<string, unknown>)[k], open, deep))) {
          why.at.push(k)
          break
        }
      }
    }
  }
  open.pop()
  deep?.delete(o)
  return why
}

const DEEP = 64

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

/**
 * Structural equality of JSON values (key order ignored, undefined members treated as absent). It
 * walks without making key lists (a step compares its whole tool list with the header's, admission.ts).
 */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object') return false
  const array = Array.isArray(a)
  if (array !== Array.isArray(b)) return false
  if (array) {
    const aa = a as unknown[]
    const bb = b as unknown[]
    if (aa.length !== bb.length) return false
    for (let i = 0; i < aa.length; i++) if (!jsonEqual(aa[i], bb[i])) return false
    return true
  }
  const ao = a as Record<string, unknown>
  const bo = b as Record<string, unknown>
  // every defined member of a is b's own and equal; then b has no defined member more (b's own, so
  // that a key such as "__proto__" is never read from b's prototype)
  let members = 0
  for (const k in ao) {
    if (!Object.hasOwn(ao, k) || ao[k] === undefined) continue
    if (!Object.hasOwn(bo, k) || !jsonEqual(ao[k], bo[k])) return false
    members++
  }
  for (const k in bo) if (Object.hasOwn(bo, k) && bo[k] !== undefined) members--
  return members === 0
}

/** Removes members whose value is undefined, recursively (SPEC §1.4: absent fields are omitted). */
export function stripUndefined<T>(v: T): T {
  if (v === null || typeof v !== 'object') return v
  if (Array.isArray(v)) return v.map(stripUndefined) as T
  const out: Record<string, unknown> = {}
  for (const [k, x] of Object.entries(v as Record<string, unknown>)) if (x !== undefined) out[k] = stripUndefined(x)
  return out as T
}
