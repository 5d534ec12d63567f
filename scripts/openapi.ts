// Writes openapi/openapi.json from the route schemas of the running server (GET /openapi.json), so the
// committed document cannot drift from the code. `--check` only compares and exits 1 when it is stale.
//
//   npm run openapi             regenerate openapi/openapi.json
//   npm run openapi -- --check  fail when the committed file differs from what the server serves

import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { loadConfig } from '../src/config.js'
import { startApp } from '../src/app.js'
import { openDb } from '../src/store/index.js'
import { writeOrCheck } from './generated.js'

export const OPENAPI_FILE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../openapi/openapi.json')

/** The file's exact text for a served document: 2-space indentation, trailing newline. */
export function formatDocument(doc: unknown): string {
  return `${JSON.stringify(doc, null, 2)}\n`
}

/** Starts the app in-process on a throwaway embedded database and returns what it serves. */
export async function servedDocument(): Promise<unknown> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'agentd-openapi-'))
  try {
    const config = loadConfig({ AGENTD_DATA_DIR: dataDir, PORT: '0', LOG_LEVEL: 'silent' })
    // our own database handle: startApp then creates no tenant and prints no API key
    const db = await openDb({ dataDir })
    try {
      const app = await startApp(config, { listen: false, db })
      try {
        const res = await app.http!.inject({ method: 'GET', url: '/openapi.json' })
        if (res.statusCode !== 200) throw new Error(`GET /openapi.json answered ${res.statusCode}: ${res.body}`)
        return JSON.parse(res.body)
      } finally {
        await app.close()
      }
    } finally {
      await db.close()
    }
  } finally {
    fs.rmSync(dataDir, { recursive: true, force: true })
  }
}

async function main(): Promise<void> {
  const text = formatDocument(await servedDocument())
  const doc = JSON.parse(text) as { paths: Record<string, Record<string, unknown>> }
  const operations = Object.values(doc.paths).reduce((n, p) => n + Object.keys(p).length, 0)
  writeOrCheck(OPENAPI_FILE, text, { command: 'npm run openapi', check: process.argv.slice(2).includes('--check'), wrote: `${Object.keys(doc.paths).length} paths, ${operations} operations` })
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().then(
    () => process.exit(0),
    (e) => {
      process.stderr.write(`openapi: ${(e as Error)?.stack ?? e}\n`)
      process.exit(1)
    },
  )
}
