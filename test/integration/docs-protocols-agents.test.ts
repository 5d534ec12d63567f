// docs/protocols.md's A2A and MCP server examples (its `javascript` blocks), each run as written as a
// module against a real server (only its address and key swapped in), on one database (docs/testing.md): they send,
// stream and resubscribe, and print what the page says.

import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { APP_DB_KINDS } from '../helpers/db.js'
import { startTestApp, type TestApp } from '../helpers/app.js'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const blocks = (md: string) => [...md.matchAll(/```javascript\n([\s\S]*?)```/g)].map((m) => m[1])

describe.each(APP_DB_KINDS)('docs/protocols.md A2A and MCP examples on %s', (kind) => {
  let t: TestApp
  beforeAll(async () => {
    t = await startTestApp({ kind })
    expect((await t.api('POST', '/v1/agents', { id: 'default', name: 'Default', model: 'faux/echo' })).status).toBe(201)
  })
  afterAll(async () => {
    await t?.close()
  })

  /** Runs one block as a module beside the tests (so packages resolve from the project); what it logged. */
  const run = async (code: string, n: number): Promise<unknown[][]> => {
    const source = code.replaceAll('http://127.0.0.1:8080', t.url).replaceAll('process.env.AGENTD_API_KEY', JSON.stringify(t.key))
    const file = path.join(ROOT, 'test', `.docs-protocols-agents-${kind}-${process.pid}-${n}.mjs`)
    fs.writeFileSync(file, source)
    const logged: unknown[][] = []
    const log = vi.spyOn(console, 'log').mockImplementation((...a) => void logged.push(a))
    try {
      await import(pathToFileURL(file).href)
    } finally {
      log.mockRestore()
      fs.rmSync(file, { force: true })
    }
    return logged
  }

  it('the A2A client example sends, streams in the same context and resubscribes; the MCP example gets the answer', async () => {
    const [a2a, mcp, ...more] = blocks(fs.readFileSync(path.join(ROOT, 'docs/protocols.md'), 'utf8'))
    expect(more).toEqual([])
    const logged = await run(a2a, 1)
    // the blocking send: completed (TASK_STATE_COMPLETED is 3) with the echo as its artifact
    expect(logged[0]).toEqual([3, ['echo: Hello!']])
    // the streamed task: announced first, ended last; then the first task replayed the same way
    const cases = logged.slice(1).map((l) => l[0])
    const split = cases.indexOf('task', 1)
    expect(split).toBeGreaterThan(0)
    for (const one of [cases.slice(0, split), cases.slice(split)]) {
      expect(one[0]).toBe('task')
      expect(one.at(-1)).toBe('statusUpdate')
      expect(one.slice(1, -1).every((c) => c === 'artifactUpdate')).toBe(true)
    }
    const answer = await run(mcp, 2)
    expect(answer).toEqual([[{ status: 'completed', session: expect.stringMatching(/./), turn: 1, text: 'echo: Hello!' }]])
  })
})
