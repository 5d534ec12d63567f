// The suite's own start order (test/helpers/sequencer.ts): the files it starts first must exist, or a
// rename would quietly send the longest file back to the end of a clean run.
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { LONG_FIRST } from '../helpers/sequencer.js'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')

describe('the test files started first', () => {
  it.each(LONG_FIRST)('%s exists', (f) => {
    expect(fs.existsSync(path.join(root, f))).toBe(true)
  })
})
