// A generated file of the repository (openapi/openapi.json, docs/api.md): written, or with `--check`
// compared with what would be written, exiting 1 when the committed file is stale.

import fs from 'node:fs'
import path from 'node:path'

export function writeOrCheck(file: string, text: string, o: { command: string; check: boolean; wrote?: string }): void {
  const rel = path.relative(process.cwd(), file) || file
  if (o.check) {
    const current = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : undefined
    if (current !== text) {
      process.stderr.write(`${rel} is ${current === undefined ? 'missing' : 'stale'}: run \`${o.command}\` and commit the result\n`)
      process.exit(1)
    }
    process.stdout.write(`${rel} is up to date\n`)
    return
  }
  fs.mkdirSync(path.dirname(file), { recursive: true })
  fs.writeFileSync(file, text)
  process.stdout.write(`wrote ${rel}${o.wrote ? `: ${o.wrote}` : ''}\n`)
}
