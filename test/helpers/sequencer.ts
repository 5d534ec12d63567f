// The order test files start in. vitest starts the files it has no timings for largest first, and on a
// clean clone (CI) it has none, so the fault suite's short file, small but the longest to run, started
// last and ran beside little else for its last two minutes; the process tests below did the same on a
// smaller scale. The files below start first, and vitest's own order follows (with timings from an
// earlier run in node_modules/.vite, it already puts them early).
// Only files that vitest misplaces belong here: two long files started together slow each other down.
import { BaseSequencer, type TestSpecification } from 'vitest/node'

/**
 * Long-running files that are small on disk: the fault suite's (two minutes on 2 cores), then those that
 * start server processes or kill them, each up to a minute, which by their size would start among the
 * last files of a clean run and end alone after the others.
 */
export const LONG_FIRST = [
  'test/faults/faults.test.ts',
  'test/e2e/continuation.test.ts',
  'test/e2e/start.test.ts',
  'test/e2e/group-kill.test.ts',
  'test/faults/leaks.test.ts',
  'test/e2e/sdk-slow-consumer.test.ts',
  'test/e2e/chat-tmux.test.ts',
  'test/e2e/webhooks-processes.test.ts',
]

export default class LongFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files)
    const rank = (f: TestSpecification) => LONG_FIRST.findIndex((p) => f.moduleId.replaceAll('\\', '/').endsWith(p))
    // the listed files first, longest first as listed; the others in vitest's order
    const listed = sorted.filter((f) => rank(f) >= 0).sort((a, b) => rank(a) - rank(b))
    return [...listed, ...sorted.filter((f) => rank(f) < 0)]
  }
}
