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
    const rank = (f: TestSpecification) => {
      const i = LONG_FIRST.findIndex((p) => f.moduleId.replaceAll('\\', '/').endsWith(p))
      return i < 0 ? LONG_FIRST.length : i
    }
    // a stable sort: the listed files first, in their order; the others keep vitest's
    return sorted.map((f, i) => ({ f, i, r: rank(f) })).sort((a, b) => a.r - b.r || a.i - b.i).map((x) => x.f)
  }
}
