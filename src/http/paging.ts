// The query of a keyset-paged list (API.md §4 sessions, §16 agents): `limit` 1 to 200 (default 50)
// and a `cursor` this server gave out.

import { badRequest } from '../errors.js'
import { LIST_LIMIT, queryLimit } from './schemas.js'

export function pageQuery<C>(query: unknown, decode: (cursor: string) => C | null): { limit: number; cursor?: C } {
  const q = query as { limit?: string; cursor?: string }
  const limit = queryLimit(q.limit, LIST_LIMIT.max, LIST_LIMIT.dflt)
  if (q.cursor === undefined) return { limit }
  const cursor = decode(q.cursor)
  if (!cursor) throw badRequest('cursor is not one this server gave out', [{ path: 'querystring.cursor', message: 'invalid cursor' }])
  return { limit, cursor }
}
