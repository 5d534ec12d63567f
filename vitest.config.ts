import os from 'node:os'
import { defineConfig } from 'vitest/config'
import LongFirstSequencer from './test/helpers/sequencer.js'

// Two test files at a time, even on two cores (vitest's own default there is one). Most of a file's time
// is spent waiting, on PostgreSQL, on spawned server processes and on timers, so two overlap well: on a
// 2-core machine the suite takes about 13 minutes instead of 19. Every file has its own databases and
// ports, so files never share state.
const workers = Math.max(2, os.availableParallelism() - 1)

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 30000,
    hookTimeout: 60000,
    pool: 'forks',
    maxWorkers: workers,
    sequence: { sequencer: LongFirstSequencer },
    globalSetup: ['test/helpers/global-setup.ts'],
    reporters: ['default', './test/helpers/tail-reporter.ts'],
  },
})
