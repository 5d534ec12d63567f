// Durable logs written by the old pi-ai line load and replay byte for byte (issue 33). The fixtures of
// test/fixtures/pi-ai-0.73 are session logs agentd wrote on @mariozechner/pi-ai 0.73.1 through its real
// anthropic-messages, openai-responses and openai-completions clients (thinking signatures, redacted
// thinking, reasoning items, client tool calls, a compaction), with the next model request that build sent
// once the log was loaded into a fresh database. This build, given the same log, must send the same bytes:
// SPEC §8.10, every byte the model saw is reconstructable from the log.

import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DB_KINDS, openTestDb, type TestDb } from '../helpers/db.js'
import { FIXTURE_APIS, importSession, sendNext, startFixtureApp, type FixtureApp, type SessionFixture } from '../helpers/replay-fixture.js'
import { startWireServer, type WireServer } from '../helpers/wire-server.js'

const dir = path.resolve(import.meta.dirname, '../fixtures/pi-ai-0.73')
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

  it.each(fixtures.map((x) => [x.api, x] as const))('%s: the next request is the one the old line sent, byte for byte', async (_api, fixture) => {
    // the fixture is what it says: thinking or reasoning replay data, tool calls and a compaction
    const types = fixture.events.map((e) => e.type)
    for (const t of ['tool/call', 'tool/result', 'compaction/summary']) expect(types).toContain(t)
    expect(fixture.events.some((e) => e.type === 'assistant/message' && e.body.includes('"replayState"'))).toBe(true)

    await importSession(testDb.db, f.tenantId, fixture)
    const sent = await sendNext(f, wire, fixture.api, fixture.sessionId, fixture.nextPrompt)
    expect(sent.path).toBe(fixture.nextRequest.path)
    expect(sent.raw).toBe(fixture.nextRequest.body)
    // and the log the old line wrote stays valid: the turn ran to its end on top of it
    const log = await f.events(fixture.sessionId)
    expect(log.slice(0, fixture.events.length).map((e) => e.seq)).toEqual(fixture.events.map((e) => e.seq))
    expect(log.at(-1)).toMatchObject({ type: 'turn/end', data: { reason: { kind: 'completed' } } })
  })
})
