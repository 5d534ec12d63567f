// The fault suite's short size inside `npm test`, each run with a fresh seed (FAULTS_SEED fixes it),
// which a failure names so that `npm run faults -- --seed N --only PART --db DB` replays it.
//
// Which database: `outage` and `soak` need a PostgreSQL server to stop or processes to kill, so they
// run on PostgreSQL. `fuzz` and `hostile` attack the HTTP surface, which is the same code on both
// databases; running each twice was a fifth of the suite's time, so the seed picks one database for
// both parts (even seeds PGlite, odd ones PostgreSQL) and successive runs cover both. FAULTS_DB pins
// it; `npm run faults` runs every part on both.

import { describe, expect, it } from 'vitest'
import { PARTS } from './parts.js'
import { formatTable, type DbKind } from './lib/part.js'

const seed = process.env.FAULTS_SEED ? Number(process.env.FAULTS_SEED) : Math.floor(Math.random() * 2 ** 31)
const seeded: DbKind = (process.env.FAULTS_DB as DbKind | undefined) ?? (seed % 2 === 0 ? 'pglite' : 'pg')
const DB_OF: Record<string, DbKind> = { fuzz: seeded, hostile: seeded, outage: 'pg', soak: 'pg' }

describe.each(PARTS)('fault suite, short: $name', (part) => {
  const db = DB_OF[part.name] ?? seeded
  it(`on ${db} (seed ${seed})`, async () => {
    const r = await part.run({ size: 'short', seed, db, inTest: true, log: () => {} })
    process.stdout.write(`${formatTable(`${part.name} on ${db}`, r.rows)}\n`)
    expect(r.violations.slice(0, 20), `${r.violations.length} violations; replay: npm run faults -- --seed ${seed} --only ${part.name} --db ${db}`).toEqual([])
  }, 300_000)
})
