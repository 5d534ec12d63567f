// The field types route schemas share (schemas.ts, schemas-tenant.ts): ids, the query's limits, agent
// ids, unions of literals.

import { Type } from 'typebox'
import { badRequest } from '../errors.js'

export const Id = Type.String({ minLength: 1, maxLength: 200, pattern: '^[A-Za-z0-9][A-Za-z0-9._:-]*$', description: "letters, digits, '.', '_', ':' and '-', starting with a letter or digit" })

/** A whole number in the query string (text on the wire) from 1 to max; read by queryLimit. */
export const QueryLimit = (max: number, dflt: number) => Type.String({ pattern: '^[0-9]{1,10}$', description: limitWords(max, dflt) })
const limitWords = (max: number, dflt: number) => `a whole number from 1 to ${max} (default ${dflt})`

/** The value of a QueryLimit(max, dflt) parameter; its bounds are checked here, with the schema's words. */
export function queryLimit(raw: string | undefined, max: number, dflt: number): number {
  const limit = raw === undefined ? dflt : Number(raw)
  if (!(limit >= 1 && limit <= max)) throw badRequest(`limit must be ${limitWords(max, dflt)}`, [{ path: 'querystring.limit', message: `must be ${limitWords(max, dflt)}` }])
  return limit
}

export const AgentId = Type.String({ pattern: '^[A-Za-z0-9_.-]{1,64}$', description: "1 to 64 letters, digits, '_', '.' and '-'" })
export const literals = (xs: string[]) => Type.Union(xs.map((x) => Type.Literal(x)))
