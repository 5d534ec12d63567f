// The fault suite's runner: `npm run faults [-- --long] [--seed N] [--only NAME] [--db pglite|pg]`.
// Runs every part of parts.ts (or those named) on each database, prints a summary table per part
// and the violations, and exits 1 when there is any.

import { PARTS } from './parts.js'
import { formatTable, type DbKind, type Size } from './lib/part.js'

interface Args {
  size: Size
  seed: number
  only: string[]
  dbs: DbKind[]
}

function parseArgs(argv: string[]): Args {
  const a: Args = { size: 'short', seed: Math.floor(Math.random() * 2 ** 31), only: [], dbs: ['pglite', 'pg'] }
  for (let i = 0; i < argv.length; i++) {
    const x = argv[i]
    const value = () => {
      const v = argv[++i]
      if (v === undefined) usage(`${x} needs a value`)
      return v
    }
    if (x === '--long') a.size = 'long'
    else if (x === '--short') a.size = 'short'
    else if (x === '--seed') {
      a.seed = Number(value())
      if (!Number.isInteger(a.seed)) usage('--seed takes an integer')
    } else if (x === '--only') a.only.push(value())
    else if (x === '--db') {
      const v = value()
      if (v !== 'pglite' && v !== 'pg') usage('--db is pglite or pg')
      a.dbs = [v]
    } else usage(`unknown argument ${x}`)
  }
  for (const o of a.only) if (!PARTS.some((p) => p.name === o)) usage(`no part named ${o} (parts: ${PARTS.map((p) => p.name).join(', ')})`)
  return a
}

function usage(why: string): never {
  process.stderr.write(`faults: ${why}\nusage: npm run faults -- [--long] [--seed N] [--only ${PARTS.map((p) => p.name).join('|')}] [--db pglite|pg]\n`)
  process.exit(2)
}

async function main(): Promise<number> {
  const args = parseArgs(process.argv.slice(2))
  const parts = PARTS.filter((p) => !args.only.length || args.only.includes(p.name))
  process.stdout.write(`fault suite: ${args.size}, seed ${args.seed} (replay with --seed ${args.seed}), parts ${parts.map((p) => p.name).join(', ')}, databases ${args.dbs.join(', ')}\n\n`)
  let failed = 0
  for (const part of parts) {
    for (const db of args.dbs) {
      const title = `${part.name} on ${db} — ${part.description}`
      try {
        const r = await part.run({ size: args.size, seed: args.seed, db, log: (l) => process.stdout.write(`  ${l}\n`) })
        process.stdout.write(`${formatTable(title, r.rows)}\n`)
        if (r.violations.length) {
          failed++
          process.stdout.write(`${r.violations.length} violations (first 30):\n${r.violations.slice(0, 30).map((v) => `  - ${v}`).join('\n')}\n`)
        }
      } catch (e) {
        failed++
        process.stdout.write(`${title}: the part itself failed: ${(e as Error)?.stack ?? e}\n`)
      }
      process.stdout.write('\n')
    }
  }
  process.stdout.write(failed ? `FAILED: ${failed} part run(s) with violations; replay with --seed ${args.seed}\n` : `all parts passed (seed ${args.seed})\n`)
  return failed ? 1 : 0
}

main().then(
  (code) => process.exit(code),
  (e) => {
    process.stderr.write(`faults: ${(e as Error)?.stack ?? e}\n`)
    process.exit(1)
  },
)
