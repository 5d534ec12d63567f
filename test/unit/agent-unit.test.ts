// The turn's open unit (src/agent/unit.ts): staged parts ride with the next barrier as ONE commit,
// published part by part where a part waits for its own publication; a failed commit leaves nothing
// staged and tells every part; the row flags the parts read are the commit's declared inputs.

import { describe, expect, it } from 'vitest'
import { OpenUnit, type UnitLog } from '../../src/agent/unit.js'
import type { StoredEvent } from '../../src/store/index.js'

/** A UnitLog that runs the build once against fixed flags and publishes as `segments` says. */
function fakeLog(opts: { fail?: Error } = {}) {
  const commits: Array<{ types: string[]; reads: readonly string[]; patch: unknown; pieces: string[][] }> = []
  const log: UnitLog = {
    async commit(build, o = {}) {
      const types: string[] = []
      const added: StoredEvent[] = []
      const row = { runState: 'running', cancelPending: false, wakeLatched: true } as never
      const out = build({ add: (d) => (types.push(d.type), added.push({ ...d, seq: added.length, time: 0 } as unknown as StoredEvent), added[added.length - 1]) as never, side: () => {}, row }) ?? {}
      if (opts.fail) throw opts.fail
      const pieces: string[][] = []
      let at = 0
      for (const { count, after } of o.segments?.() ?? [{ count: added.length }]) {
        const piece = added.slice(at, (at += count))
        pieces.push(piece.map((e) => e.type))
        after?.(piece)
      }
      commits.push({ types, reads: o.reads ?? [], patch: out.patch, pieces })
      return { events: added, value: out.value as never, row: row as never }
    },
  }
  return { log, commits }
}

const part = (type: string, more: object = {}) => ({ build: (u: { add: (d: never) => unknown }) => void u.add({ type, data: {} } as never), ...more })

describe('OpenUnit', () => {
  it('staged parts ride with the barrier as one commit, published in pieces cut after a waiting part', async () => {
    const { log, commits } = fakeLog()
    const unit = new OpenUnit(log)
    const seen: string[] = []
    unit.stage(part('assistant/message', { published: (e: StoredEvent[]) => seen.push(`end after ${e.map((x) => x.type)}`), committed: () => seen.push('committed') }))
    expect(unit.staged).toBe(true)
    await unit.close({ reads: ['cancelPending', 'wakeLatched'], build: (u) => (u.add({ type: 'step/end', data: {} } as never), u.add({ type: 'turn/end', data: {} } as never), { runState: u.row.wakeLatched ? 'running' : 'idle' }) })
    expect(unit.staged).toBe(false)
    expect(commits).toEqual([{ types: ['assistant/message', 'step/end', 'turn/end'], reads: ['cancelPending', 'wakeLatched'], patch: { runState: 'running' }, pieces: [['assistant/message'], ['step/end', 'turn/end']] }])
    expect(seen).toEqual(['end after assistant/message', 'committed'])
  })

  it('a failed commit tells every part, runs no committed callback and leaves nothing staged', async () => {
    const { log } = fakeLog({ fail: new Error('no') })
    const unit = new OpenUnit(log)
    const seen: string[] = []
    unit.stage(part('step/start', { failed: () => seen.push('start failed'), committed: () => seen.push('committed') }))
    await expect(unit.close(part('step/end', { failed: () => seen.push('end failed') }))).rejects.toThrow('no')
    expect(seen).toEqual(['start failed', 'end failed'])
    expect(unit.staged).toBe(false)
  })

  it('a barrier with nothing staged and nothing to add commits nothing', async () => {
    const { log, commits } = fakeLog()
    await new OpenUnit(log).close()
    expect(commits).toEqual([])
  })
})
