import { describe, expect, it } from 'vitest'
import { assertLosslessJson, assertStorableText, canonicalJson, jsonEqual, JsonValueError } from '../../src/session/index.js'

describe('lossless JSON (SPEC §3.1.3)', () => {
  const bad: Array<[string, unknown]> = [
    ['undefined', { a: undefined }],
    ['a function', { f: () => 1 }],
    ['a BigInt', { n: 1n }],
    ['a symbol', [Symbol('x')]],
    ['-0', { z: -0 }],
    ['NaN', [NaN]],
    ['Infinity', { i: Infinity }],
    ['-Infinity', { i: -Infinity }],
    // eslint-disable-next-line no-sparse-arrays
    ['a sparse array', [1, , 3]],
    ['a Date', { d: new Date() }],
    ['a Map', { m: new Map() }],
    ['a class instance', { c: new (class X {})() }],
  ]
  it.each(bad)('rejects %s', (_name, value) => {
    expect(() => assertLosslessJson(value)).toThrow(JsonValueError)
  })
  it('rejects cycles', () => {
    const a: Record<string, unknown> = {}
    a.self = a
    expect(() => assertLosslessJson(a)).toThrow(/cycle/)
  })
  it('accepts plain JSON, including repeated (non-cyclic) references', () => {
    const shared = { x: 1 }
    expect(() => assertLosslessJson({ a: shared, b: shared, s: 'é\u0000', n: [0, 1.5, -2, null, true], o: Object.create(null) })).not.toThrow()
  })
  it('names the offending path', () => {
    expect(() => assertLosslessJson({ a: [{ b: NaN }] })).toThrow('$.a[0].b')
    expect(() => assertLosslessJson([1, { 'x y': [true, undefined] }], 'data')).toThrow('data[1].x y[1]: undefined is not JSON')
  })
  it('finds cycles and bad values below a hundred levels, with their path, and shared references there too', () => {
    const deep = (n: number, leaf: unknown) => {
      const root: Record<string, unknown> = {}
      let cur = root
      for (let i = 0; i < n; i++) cur = (cur.x = {}) as Record<string, unknown>
      cur.leaf = leaf
      return { root, cur }
    }
    const { root, cur } = deep(150, 1)
    cur.back = root.x
    let err: unknown
    try {
      assertLosslessJson(root)
    } catch (e) {
      err = e
    }
    expect((err as JsonValueError).message).toMatch(/cycle/)
    expect((err as JsonValueError).path).toBe(`$${'.x'.repeat(150)}.back`)
    expect(() => assertLosslessJson(deep(150, -0).root)).toThrow(`$${'.x'.repeat(150)}.leaf: -0`)
    const shared = { s: [1] }
    expect(() => assertLosslessJson(deep(150, [shared, shared, { again: shared }]).root)).not.toThrow()
  })
  it('canonical JSON sorts keys', () => {
    expect(canonicalJson({ b: 1, a: { d: [1, { f: 2, e: 3 }], c: null } })).toBe('{"a":{"c":null,"d":[1,{"e":3,"f":2}]},"b":1}')
  })
})

describe('jsonEqual: equality of canonical texts without writing them', () => {
  const base = { name: 't', parameters: { type: 'object', properties: { a: { type: 'string', enum: ['x', 'y'] } }, required: ['a'] } }
  it('ignores key order and undefined members, at any depth, and agrees with canonicalJson', () => {
    const same = { parameters: { required: ['a'], properties: { a: { enum: ['x', 'y'], type: 'string', note: undefined } }, type: 'object' }, name: 't', extra: undefined }
    expect(jsonEqual(base, same)).toBe(true)
    expect(jsonEqual(same, base)).toBe(true)
    expect(canonicalJson(base)).toBe(canonicalJson(same))
    expect(jsonEqual(Object.freeze(JSON.parse(canonicalJson(base))), base)).toBe(true)
  })
  it('tells apart a changed value, a member more or fewer on either side, array order and length, and arrays from objects', () => {
    const cases: unknown[] = [
      { ...base, parameters: { ...base.parameters, required: ['b'] } },
      { ...base, parameters: { ...base.parameters, properties: { a: { type: 'string', enum: ['y', 'x'] } } } },
      { ...base, parameters: { ...base.parameters, properties: { a: { type: 'string', enum: ['x'] } } } },
      { ...base, description: '' },
      { name: 't' },
      { ...base, parameters: { ...base.parameters, properties: { a: { type: 'string', enum: ['x', 'y'], default: null } } } },
      { ...base, name: 1 },
      [base],
      { 0: base },
    ]
    for (const c of cases) {
      expect(jsonEqual(base, c), JSON.stringify(c)).toBe(false)
      expect(jsonEqual(c, base), JSON.stringify(c)).toBe(false)
      expect(canonicalJson(c)).not.toBe(canonicalJson(base))
    }
    expect(jsonEqual([base], { 0: base })).toBe(false)
    // a "__proto__" member (JSON.parse makes it an own one) is compared with b's own member, never b's prototype
    const proto = JSON.parse('{"__proto__": {}}')
    expect(jsonEqual(proto, { x: 1 })).toBe(false)
    expect(jsonEqual({ x: 1 }, proto)).toBe(false)
    expect(jsonEqual(proto, JSON.parse('{"__proto__": {}}'))).toBe(true)
    expect(jsonEqual(null, {})).toBe(false)
    expect(jsonEqual({ a: null }, {})).toBe(false)
  })
})

describe('text PostgreSQL can store (assertStorableText)', () => {
  it('refuses NUL and lone surrogates in strings and keys at any depth, naming the place', () => {
    const bad: Array<[unknown, string]> = [
      ['a\u0000', '$'],
      [{ a: ['ok', { b: '\ud800' }] }, '$.a[1].b'],
      [{ a: { ['k\u0000']: 1 } }, '$.a'],
      [['\udfff'], '$[0]'],
      ['x\ud83d', '$'],
      ['\ude00\ud83d', '$'],
    ]
    for (const [v, where] of bad) {
      let err: unknown
      try {
        assertStorableText(v)
      } catch (e) {
        err = e
      }
      expect(err, JSON.stringify(v)).toBeInstanceOf(JsonValueError)
      expect((err as JsonValueError).path).toBe(where)
    }
  })
  it('accepts paired surrogates, other control characters and non-strings', () => {
    for (const v of ['😀', '\ud83d\ude00x', '\u0001\t\n', { '😀': ['é', 1, null, true] }, 5, null]) expect(() => assertStorableText(v)).not.toThrow()
  })
})

