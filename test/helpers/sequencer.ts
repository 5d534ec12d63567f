// The order test files start in. vitest starts the files it has no timings for largest first, and on a
// clean clone (CI) it has none, so the fault suite's short file, small but the longest to run, started
// last and ran beside little else for its last two minutes. The files below start first, and vitest's
// own order follows (with timings from an earlier run in node_modules/.vite, it already puts them early).
// Only files that vitest misplaces belong here: two long files started together slow each other down.
import { BaseSequencer, type TestSpecification } from 'vitest/node'

/** Long-running files that are small on disk (the fault suite's: two to three minutes on 2 cores). */
export const LONG_FIRST = ['test/faults/faults.test.ts']

export default class LongFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files)
    const listed = (f: TestSpecification) => LONG_FIRST.some((p) => f.moduleId.replaceAll('\\', '/').endsWith(p))
    // the listed files first; each part keeps vitest's order
    return [...sorted.filter(listed), ...sorted.filter((f) => !listed(f))]
  }
}
