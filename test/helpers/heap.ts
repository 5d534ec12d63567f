// The heap a process holds: heapUsed after a full garbage collection, so garbage not yet collected
// does not count. gc() is exposed for this process by setting V8's flag at run time.

import v8 from 'node:v8'
import { runInNewContext } from 'node:vm'

v8.setFlagsFromString('--expose-gc')
const collect = runInNewContext('gc') as () => void

/** heapUsed in bytes after a full collection */
export function heapAfterGc(): number {
  collect()
  return process.memoryUsage().heapUsed
}
