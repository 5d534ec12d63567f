// The period of the usage route (API.md §15): UTC days from `from` to `to`, both included.

import { badRequest } from '../errors.js'
import { utcMonth } from '../session/index.js'
import { monthDays } from './clock.js'

const DATE = /^(\d{4})-(\d{2})-(\d{2})$/

/** A calendar date `YYYY-MM-DD` (years 0001–9999) as given; 400 for anything else (also 2025-02-30). */
function date(field: 'from' | 'to', s: string): string {
  const m = DATE.exec(s)
  const d = new Date(0)
  if (m) d.setUTCFullYear(Number(m[1]), Number(m[2]) - 1, Number(m[3]))
  if (m && m[1] !== '0000' && d.toISOString().slice(0, 10) === s) return s
  throw badRequest(`${field} must be a date YYYY-MM-DD (UTC)`, [{ path: `querystring.${field}`, message: 'must be a date YYYY-MM-DD (UTC)' }])
}

/**
 * The UTC days a query covers: `to` defaults to the last day of the current month, `from` to the
 * first day of `to`'s month (so no query means the current month). 400 for a bad date or range.
 */
export function usagePeriod(q: { from?: string; to?: string }, now: number): { from: string; to: string } {
  const to = q.to === undefined ? monthDays(utcMonth(now)).last : date('to', q.to)
  const from = q.from === undefined ? monthDays(to.slice(0, 7)).first : date('from', q.from)
  if (from > to) throw badRequest(`from (${from}) is after to (${to})`, [{ path: 'querystring.from', message: 'must not be after to' }])
  return { from, to }
}
