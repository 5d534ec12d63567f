// docs/protocols.md's OpenAI client examples, run as written against a real server (only its address
// and key swapped in), on the embedded database (the flows themselves are tested on both in
// responses-*.test.ts): they create, stream, resume, use a client tool and cancel
// without an error, and print what the page says.

import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { startTestApp, type TestApp } from '../helpers/app.js'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const blocks = (md: string) => [...md.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1])

describe.each(['pglite'] as const)('docs/protocols.md examples on %s', (kind) => {
  let t: TestApp
  beforeAll(async () => {
    t = await startTestApp({ kind })
    expect((await t.api('POST', '/v1/agents', { id: 'default', name: 'Default', model: 'faux/echo' })).status).toBe(201)
  })
  afterAll(async () => {
    await t?.close()
  })

  it('the OpenAI client examples run as written', async () => {
    // the OpenAI section's blocks (the other protocols' sections have examples of their own, tested beside them)
    const md = fs.readFileSync(path.join(ROOT, 'docs/protocols.md'), 'utf8')
    const start = md.indexOf('\n## OpenAI Responses and Conversations')
    expect(start).toBeGreaterThan(0)
    const end = md.indexOf('\n## ', start + 1)
    const code = blocks(md.slice(start, end < 0 ? undefined : end))
    expect(code.length).toBe(3)
    const source = code.join('\n').replace("'http://127.0.0.1:8080/v1'", JSON.stringify(`${t.url}/v1`)).replace('process.env.AGENTD_API_KEY', JSON.stringify(t.key))
    // a module beside the tests, so `openai` resolves from the project's node_modules
    const file = path.join(ROOT, 'test', `.docs-protocols-${kind}-${process.pid}.mjs`)
    fs.writeFileSync(file, source)
    const logged: unknown[][] = []
    const written: string[] = []
    const log = vi.spyOn(console, 'log').mockImplementation((...a) => void logged.push(a))
    const write = vi.spyOn(process.stdout, 'write').mockImplementation(((s: string) => (written.push(String(s)), true)) as never)
    try {
      await import(pathToFileURL(file).href)
    } finally {
      log.mockRestore()
      write.mockRestore()
      fs.rmSync(file, { force: true })
    }
    // create: the first answer and its usage; stream: the deltas; resume after the last: nothing more
    expect(logged[0][0]).toBe('echo: Hello!')
    expect(logged[0][1]).toMatchObject({ input_tokens: expect.any(Number), output_tokens: expect.any(Number) })
    expect(written.join('')).toBe('echo: Tell me more')
    // the tool round trip
    const rest = logged.slice(1)
    expect(rest).toEqual([['weather', '{"city":"Oslo"}'], ['weather: 3 degrees, light snow']])
  })
})
