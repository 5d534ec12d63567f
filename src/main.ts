// Process entry: the runtime check first, then the server (serve.ts), loaded only on a Node.js that can
// run it, so an old Node.js gets one clear line instead of whatever a dependency trips over.

import { runtimeProblem } from './runtime.js'

const problem = runtimeProblem(process.version)
if (problem) {
  process.stderr.write(`${problem}\n`)
  process.exit(1)
}
await import('./serve.js')
