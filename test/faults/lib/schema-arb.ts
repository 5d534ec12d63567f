// fast-check arbitraries from the JSON Schemas of openapi.json: values a schema accepts (within
// sane sizes), with hints by field name for the values a server must recognise (known models, the
// local tool server's URL) so that valid requests go far enough to run turns.

import fc from 'fast-check'

export type Schema = Record<string, any>

export interface Hints {
  /** candidate values for a field of this name, mixed with what the schema alone would give */
  byName: Record<string, string[]>
}

/** Resolves a local $ref of the document. */
export function resolve(doc: any, s: Schema | undefined): Schema {
  let x = s ?? {}
  for (let i = 0; x.$ref && i < 20; i++) {
    const parts = String(x.$ref).replace(/^#\//, '').split('/')
    x = parts.reduce((o: any, p) => o?.[p], doc) ?? {}
  }
  return x
}

/** Printable text, without NUL or lone surrogates: what a well-behaved client sends. */
export const cleanText = (maxLength = 24) =>
  fc.string({ unit: fc.oneof({ weight: 8, arbitrary: fc.constantFrom(...'abcdefghijklmnopqrstuvwxyz0123456789 _-.'.split('')) }, { weight: 1, arbitrary: fc.constantFrom('é', 'ß', '中', '😀', '\n', '"', '\\', '/', '%') }), maxLength })

/** Any small JSON value (for schemas that accept anything). */
export const jsonValue = (depth = 2): fc.Arbitrary<unknown> =>
  fc.letrec<{ v: unknown }>((tie) => ({
    v: fc.oneof(
      { depthSize: 'small', maxDepth: depth },
      cleanText(12),
      fc.integer({ min: -1000, max: 1000 }),
      fc.boolean(),
      fc.constant(null),
      fc.array(tie('v'), { maxLength: 3 }),
      fc.dictionary(cleanText(8), tie('v'), { maxKeys: 3 }),
    ),
  })).v

/** A value the schema accepts. `name` is the field's name, for hints. */
export function valueOf(doc: any, schema: Schema | undefined, hints: Hints, name = '', depth = 0): fc.Arbitrary<unknown> {
  const s = resolve(doc, schema)
  if (s.const !== undefined) return fc.constant(s.const)
  if (Array.isArray(s.enum)) return fc.constantFrom(...s.enum)
  const alts = s.anyOf ?? s.oneOf
  if (Array.isArray(alts)) return fc.oneof(...alts.map((a: Schema) => valueOf(doc, a, hints, name, depth)))
  const hinted = hints.byName[name]
  switch (s.type) {
    case 'string': {
      const max = Math.min(s.maxLength ?? 40, 40)
      let base: fc.Arbitrary<string>
      if (s.pattern) base = fc.stringMatching(new RegExp(s.pattern)).filter((x) => x.length >= (s.minLength ?? 0) && x.length <= (s.maxLength ?? Infinity))
      else if (s.format === 'date-time') base = fc.date({ noInvalidDate: true }).map((d) => d.toISOString())
      else base = cleanText(max).filter((x) => x.length >= (s.minLength ?? 0))
      return hinted ? fc.oneof({ weight: 3, arbitrary: fc.constantFrom(...hinted) }, { weight: 1, arbitrary: base }) : base
    }
    case 'integer':
      return fc.integer({ min: Math.max(s.minimum ?? -5, -1e6), max: Math.min(s.maximum ?? 1000, 1e6) })
    case 'number':
      return fc.double({ min: s.minimum ?? -1000, max: s.maximum ?? 1000, noNaN: true, noDefaultInfinity: true }).filter((x) => !Object.is(x, -0))
    case 'boolean':
      return fc.boolean()
    case 'null':
      return fc.constant(null)
    case 'array':
      if (depth > 4) return fc.constant([])
      return fc.array(valueOf(doc, s.items, hints, name, depth + 1), { minLength: s.minItems ?? 0, maxLength: Math.min(s.maxItems ?? 3, 3) })
  }
  if (s.type === 'object' || s.properties) {
    const props = Object.entries<Schema>(s.properties ?? {})
    if (!props.length) return s.additionalProperties === false ? fc.constant({}) : fc.dictionary(cleanText(10), jsonValue(depth > 2 ? 0 : 2), { maxKeys: 3 })
    if (depth > 4) return fc.constant({})
    const required = new Set<string>(s.required ?? [])
    return fc.record(Object.fromEntries(props.map(([k, v]) => [k, valueOf(doc, v, hints, k, depth + 1)])), { requiredKeys: props.map(([k]) => k).filter((k) => required.has(k)) })
  }
  return jsonValue(depth > 2 ? 0 : 2)
}
