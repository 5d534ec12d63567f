// The agentd server that end-to-end tests spawn, transpiled once per test run instead of once per
// process start. `node --import tsx src/main.ts` transpiles every module again in each new process,
// and the suite starts a server a few hundred times (every kill -9 is followed by a start); a
// transpiled copy starts in a fraction of that time. The copy is what tsx would have run: esbuild,
// the same transform tsx uses, one output file per source file, no bundling. It lives in
// `.test-server/` at the project root, one directory below it as `src/` is, so the paths the server
// resolves from its own location (`../../migrations`, `../../web`, `../../package.json`) are the same.
// The tests of `npm start` itself (start.test.ts, the README walkthrough) still run src/ through tsx.

import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { build } from 'esbuild'

export const PROJECT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
export const SERVER_DIR = path.join(PROJECT, '.test-server')
/** The spawned server's entry: `node <SERVER_MAIN>` is `npm start` without tsx. */
export const SERVER_MAIN = path.join(SERVER_DIR, 'main.js')

function sources(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const full = path.join(dir, e.name)
    if (e.isDirectory()) return sources(full)
    return e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [full] : []
  })
}

/**
 * Transpiles src/ into .test-server/. Each file is written to a temporary name and renamed into
 * place, so two runs building at once (two vitest processes on one checkout) never leave a reader
 * a half-written module; both write the same bytes. Returns the number of modules.
 */
export async function buildServer(): Promise<number> {
  const src = path.join(PROJECT, 'src')
  const entryPoints = sources(src)
  const out = await build({
    entryPoints,
    outdir: SERVER_DIR,
    outbase: src,
    bundle: false,
    format: 'esm',
    platform: 'node',
    target: 'node24',
    sourcemap: 'inline',
    write: false,
    logLevel: 'silent',
    tsconfig: path.join(PROJECT, 'tsconfig.json'),
  })
  const tag = crypto.randomBytes(4).toString('hex')
  for (const f of out.outputFiles) {
    fs.mkdirSync(path.dirname(f.path), { recursive: true })
    const tmp = `${f.path}.${tag}.tmp`
    fs.writeFileSync(tmp, f.contents)
    fs.renameSync(tmp, f.path)
  }
  return entryPoints.length
}

/** The arguments that start the transpiled server, with source maps for readable stack traces. */
export const serverArgs = (): string[] => ['--enable-source-maps', SERVER_MAIN]
