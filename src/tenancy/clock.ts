// The clock of the tenant's periods (API.md §15): which UTC day and month the budget check and the
// usage route look at. Injected so tests can move it across a day or a month.

import { utcDay, utcMonth } from '../session/index.js'

/** Epoch milliseconds now. */
export type Clock = () => number

export const systemClock: Clock = () => Date.now()

/** The budget's periods at a time: its UTC day (`YYYY-MM-DD`) and month (`YYYY-MM`). */
export function periodsAt(ms: number): { day: string; month: string } {
  return { day: utcDay(ms), month: utcMonth(ms) }
}

/** The first and the last UTC day of a month (`YYYY-MM`). */
export function monthDays(month: string): { first: string; last: string } {
  const [y, m] = month.split('-').map(Number)
  return { first: `${month}-01`, last: utcDay(Date.UTC(y, m, 0)) }
}
