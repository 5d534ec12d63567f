// The suite's global setup (global-setup.ts) on its own, as `npm test` runs it before any test file and
// tears it down after the last: test-setup.test.ts starts it in a child process with another
// DATABASE_URL, instead of a whole vitest run inside the suite's own. Prints what it provided.

import setup from './global-setup.js'

const provided: Record<string, string> = {}
const teardown = await setup({ provide: (k, v) => void (provided[k] = v) })
process.stdout.write(`global setup provided ${Object.keys(provided).sort().join(', ')}\n`)
await teardown()
