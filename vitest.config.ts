import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 30000,
    hookTimeout: 60000,
    pool: 'forks',
    globalSetup: ['test/helpers/global-setup.ts'],
    reporters: ['default', './test/helpers/tail-reporter.ts'],
  },
})
