// The fault suite's short size inside `npm test`: every part of parts.ts on PGlite and on
// PostgreSQL, each with a fresh seed (FAULTS_SEED fixes it), which a failure names so that
// `npm run faults -- --seed N --only PART --db DB` replays it.

import { describe, expect, it } from 'vitest'
import { PARTS } from './parts.js'
import { formatTable, type DbKind } from './lib/part.js'

const seed = process.env.FAULTS_SEED ? Number(process.env.FAULTS_SEED) : Math.floor(Math.random() * 2 ** 31)
const DBS: DbKind[] = ['pglite', 'pg']

describe.each(PARTS)('fault suite, short: $name', (part) => {
  it.each(DBS)(`on %s (seed ${seed})`, async (db) => {
    const r = await part.run({ size: 'short', seed, db, inTest: true, log: () => {} })
    process.stdout.write(`${formatTable(`${part.name} on ${db}`, r.rows)}\n`)
    expect(r.violations.slice(0, 20), `${r.violations.length} violations; replay: npm run faults -- --seed ${seed} --only ${part.name} --db ${db}`).toEqual([])
  }, 300_000)
})
