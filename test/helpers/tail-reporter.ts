// Repeats the run's unhandled errors, briefly, after vitest's summary. The summary is the part of a long
// run's output that a CI log shows first (or only); the default reporter prints these errors in full
// above it, where a truncated log loses them, and a run with only "Errors 1 error" cannot be diagnosed.
import type { Reporter, SerializedError } from 'vitest/node'

const line = (s: unknown) => String(s ?? '').split('\n')[0].slice(0, 300)

export default class TailReporter implements Reporter {
  onTestRunEnd(_modules: unknown, unhandledErrors: ReadonlyArray<SerializedError>): void {
    if (!unhandledErrors.length) return
    const out = [`unhandled errors (${unhandledErrors.length}), repeated from above:`]
    for (const e of unhandledErrors) {
      const x = e as SerializedError & { VITEST_TEST_PATH?: string; VITEST_TEST_NAME?: string; type?: string }
      out.push(`- ${line(x.name)}: ${line(x.message)}${x.VITEST_TEST_PATH ? ` [${x.VITEST_TEST_PATH.split('/').slice(-2).join('/')}${x.VITEST_TEST_NAME ? ` > ${line(x.VITEST_TEST_NAME)}` : ''}]` : ''}`)
      for (const frame of String(x.stack ?? '').split('\n').slice(1, 5)) out.push(`    ${frame.trim().slice(0, 200)}`)
    }
    process.stdout.write(`${out.join('\n')}\n`)
  }
}
