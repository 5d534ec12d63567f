// Durable logs written by the old pi-ai line load and replay byte for byte (issue 33). The fixtures of
// test/fixtures/pi-ai-0.73 are session logs agentd wrote on @mariozechner/pi-ai 0.73.1 through its real
// anthropic-messages, openai-responses and openai-completions clients (thinking signatures, redacted
// thinking, reasoning items, client tool calls, a compaction), with the next model request that build sent
// once the log was loaded into a fresh database. This build, given the same log, must send the same bytes:
// SPEC §8.10, every byte the model saw is reconstructable from the log.
//
// Everything agentd reconstructs (history, signatures, reasoning items, tool calls and results, prompt,
// tools, settings, max tokens) is compared byte for byte. pi-ai 1.x writes three things of the wire format
// differently for the same context, on purpose; WIRE_CHANGES applies exactly those to the old body, and the
// comparison is byte for byte against the result. Any other difference fails.

import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DB_KINDS, openTestDb, type TestDb } from '../helpers/db.js'
import { FIXTURE_APIS, importSession, sendNext, startFixtureApp, type FixtureApp, type SessionFixture } from '../helpers/replay-fixture.js'
import { startWireServer, type WireServer } from '../helpers/wire-server.js'

const dir = path.resolve(import.meta.dirname, '../fixtures/pi-ai-0.73')

type Obj = Record<string, any>
/** What pi-ai 1.x sends differently from 0.73.1 for the same context, per API (docs/runtime.md lists them). */
const WIRE_CHANGES: Record<string, { path?: (p: string) => string; body?: (b: Obj) => Obj }> = {
  // the Anthropic client goes through the SDK's beta endpoint (betas such as the inline tools of 1.x need it)
  'anthropic-messages': { path: (p) => `${p}?beta=true` },
  'openai-responses': {
    body: (b) => ({
      ...b,
      // replayed function calls carry the status OpenAI returned them with, so the replayed prefix matches
      // what OpenAI produced (a mismatch makes newer models drop the reasoning that follows)
      input: b.input.map((item: Obj) => (item.type === 'function_call' ? insertAfter(item, 'name', 'status', 'completed') : item)),
      // `strict` is sent only where the route says the server supports it (compat.supportsStrictMode)
      tools: b.tools.map(({ strict: _s, ...t }: Obj) => t),
    }),
  },
  'openai-completions': {
    body: (b) => ({
      ...b,
      // the `developer` role only where the endpoint is api.openai.com (or compat.supportsDeveloperRole says so):
      // most OpenAI-compatible servers reject it
      messages: b.messages.map((m: Obj, i: number) => (i === 0 && m.role === 'developer' ? { ...m, role: 'system' } : m)),
      tools: b.tools.map(({ function: { strict: _s, ...f }, ...t }: Obj) => ({ ...t, function: f })),
    }),
  },
}

function insertAfter(o: Obj, after: string, key: string, value: unknown): Obj {
  const out: Obj = {}
  for (const [k, v] of Object.entries(o)) {
    out[k] = v
    if (k === after) out[key] = value
  }
  return out
}
const fixtures = FIXTURE_APIS.map((api) => JSON.parse(fs.readFileSync(path.join(dir, `${api}.json`), 'utf8')) as SessionFixture)

describe.each(DB_KINDS)('a session log written by @mariozechner/pi-ai 0.73.1, loaded on %s', (kind) => {
  let wire: WireServer
  let testDb: TestDb
  let f: FixtureApp
  beforeAll(async () => {
    wire = await startWireServer()
    testDb = await openTestDb(kind)
    f = await startFixtureApp({ db: testDb.db, origin: wire.origin, ...(testDb.url ? { databaseUrl: testDb.url } : {}), ...(testDb.dataDir ? { dataDir: testDb.dataDir } : {}) })
  })
  afterAll(async () => {
    await f?.close()
    await testDb?.drop()
    await wire?.close()
  })

  it.each(fixtures.map((x) => [x.api, x] as const))('%s: the next request is the old line\'s, byte for byte (with pi-ai 1.x\'s own wire changes applied)', async (_api, fixture) => {
    // the fixture is what it says: thinking or reasoning replay data, tool calls and a compaction
    const types = fixture.events.map((e) => e.type)
    for (const t of ['tool/call', 'tool/result', 'compaction/summary']) expect(types).toContain(t)
    expect(fixture.events.some((e) => e.type === 'assistant/message' && e.body.includes('"replayState"'))).toBe(true)

    await importSession(testDb.db, f.tenantId, fixture)
    const sent = await sendNext(f, wire, fixture.api, fixture.sessionId, fixture.nextPrompt)
    const change = WIRE_CHANGES[fixture.api]!
    expect(sent.path).toBe(change.path ? change.path(fixture.nextRequest.path) : fixture.nextRequest.path)
    const old = fixture.nextRequest.body
    // the old body is canonical JSON, so applying the changes to its parsed form and serializing again is exact
    expect(JSON.stringify(JSON.parse(old))).toBe(old)
    expect(sent.raw).toBe(change.body ? JSON.stringify(change.body(JSON.parse(old))) : old)
    // and the log the old line wrote stays valid: the turn ran to its end on top of it
    const log = await f.events(fixture.sessionId)
    expect(log.slice(0, fixture.events.length).map((e) => e.seq)).toEqual(fixture.events.map((e) => e.seq))
    expect(log.at(-1)).toMatchObject({ type: 'turn/end', data: { reason: { kind: 'completed' } } })
  })
})
