import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 30000,
    hookTimeout: 60000,
    pool: 'forks',
    // two workers on a 2-core machine: most tests wait on PostgreSQL, timers or child processes
    maxWorkers: 2,
    globalSetup: ['test/helpers/global-setup.ts'],
  },
})
