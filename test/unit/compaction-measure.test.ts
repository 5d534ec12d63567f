// The compaction meter (SPEC §12.2 step 4): the pressure of the next request is the usage the latest
// anchor reported plus an estimate of every node after it; with the surface replaced since, or the
// header changed, an estimate of the whole surface.

import { describe, expect, it } from 'vitest'
import { measure } from '../../src/plugins/compaction.js'
import { nodeTokens, type ContentBlock, type Json } from '../../src/session/index.js'
import { asstMsg, LogBuilder, rep, userMsg } from '../helpers/session-log.js'

class Sess extends LogBuilder {
  assistant(content: ContentBlock[], extra: Record<string, Json> = {}): number {
    return this.add('assistant/message', { ...this.ts, message: asstMsg(`a-${this.s.nextSeq}`, content), stream: [], ...extra }, 'append')
  }
}

const words = (n: number, w: string) => Array.from({ length: n }, () => w).join(' ')
const tokensOf = (x: Sess, seqs: number[]) => x.s.nodes.filter((n) => seqs.includes(n.seq)).reduce((s, n) => s + nodeTokens(n), 0)

describe('measure (SPEC §12.2)', () => {
  it('the anchor usage plus the nodes after it, however long the surface before it', () => {
    const x = new Sess()
    x.add('request/header', { header: { config: { provider: 'p', model: 'm' } }, reason: 'initial' })
    // a long history before the anchor: none of it is estimated again
    for (let t = 0; t < 300; t++) {
      x.turnStart()
      x.stepStart()
      x.user(userMsg(`u${t}`, words(40, 'before')))
      x.assistant([{ type: 'text', text: words(40, 'answer') }])
      x.stepEnd()
      x.turnEnd()
    }
    x.turnStart()
    x.stepStart()
    x.user(userMsg('q', words(20, 'question')))
    x.assistant([{ type: 'tool-call', id: 'c1', name: 'echo', arguments: '{}' }], { usage: { inputTokens: 1000, outputTokens: 50, cacheReadTokens: 200, cacheWriteTokens: 7 } })
    expect(measure(x.s)).toBe(1257)
    const r = x.toolResult('c1', words(300, 'result'))
    const u = x.user(userMsg('steer', words(30, 'steer')))
    const after = tokensOf(x, [r, u])
    expect(after).toBeGreaterThan(300)
    expect(measure(x.s)).toBe(1257 + after)
    // a replacement since the anchor: the whole surface is estimated, the anchor no longer trusted
    x.user(userMsg('steer2', 'short'), rep(u, u), [u])
    const all = x.s.nodes.reduce((s, n) => s + nodeTokens(n), 0)
    expect(measure(x.s)).toBe(all)
    expect(all).toBeGreaterThan(1257 + after)
  })
})
