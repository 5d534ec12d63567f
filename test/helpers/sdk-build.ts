// The TypeScript client's library as `tsc -p clients/typescript` builds it from its sources today, made
// once per test run for every file that needs it (the console's SDK route test compares what agentd
// serves with it, the browser test loads it in Chromium) instead of once in each. The first file to ask
// builds it; a file that asks meanwhile waits for that build. The global setup names the folder and
// removes it after the run.

import { execFile } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { promisify } from 'node:util'
import { inject } from 'vitest'
import { PROJECT } from './server-build.js'

declare module 'vitest' {
  export interface ProvidedContext {
    /** where this run's library build of clients/typescript goes (sdk-build.ts) */
    sdkBuildDir: string
  }
}

/** The folders of a run's build: the build, the claim of its builder, its failure. */
export const sdkBuildPaths = (dir: string) => ({ dir, lock: `${dir}.lock`, tmp: `${dir}.tmp`, failed: `${dir}.failed` })

/** The folder with this run's library build of clients/typescript, built by the first caller. */
export async function sdkBuild(): Promise<string> {
  const p = sdkBuildPaths(inject('sdkBuildDir'))
  let builder = false
  try {
    fs.mkdirSync(p.lock)
    builder = true
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e
  }
  if (builder) {
    try {
      await promisify(execFile)(path.join(PROJECT, 'node_modules/.bin/tsc'), ['-p', path.join(PROJECT, 'clients/typescript'), '--outDir', p.tmp])
      fs.renameSync(p.tmp, p.dir)
    } catch (e) {
      const err = e as { stdout?: string; message: string }
      fs.writeFileSync(p.failed, `${err.message}\n${err.stdout ?? ''}`)
      throw e
    }
    return p.dir
  }
  for (const deadline = Date.now() + 120_000; ; ) {
    if (fs.existsSync(p.dir)) return p.dir
    if (fs.existsSync(p.failed)) throw new Error(`tsc -p clients/typescript failed in another test file: ${fs.readFileSync(p.failed, 'utf8')}`)
    if (Date.now() > deadline) throw new Error('timed out waiting for the library build of clients/typescript')
    await new Promise((r) => setTimeout(r, 100))
  }
}
