// The compact stream (SPEC §9.4) and block assembly (SPEC §9.5, §18.8).

import type { AssistantStreamRecord, ContentBlock, FinishReason, Json, StreamChunk, TimedChunk, TokenUsage } from './types.js'

/** Accumulates timed chunks into AssistantStreamRecord[]; expansion gives the chunks back exactly. */
export class StreamAccumulator {
  readonly records: AssistantStreamRecord[] = []
  private lastTime: number | undefined

  push(time: number, chunk: StreamChunk): void {
    const prev = this.records.at(-1)
    const dt = this.lastTime === undefined ? 0 : time - this.lastTime
    this.lastTime = time
    if (chunk.type === 'text-delta' || chunk.type === 'reasoning-delta') {
      const kind = chunk.type === 'text-delta' ? 'text-chunks' : 'reasoning-chunks'
      if (prev && prev.type === kind && prev.index === chunk.index && Number.isSafeInteger(dt)) {
        prev.dt.push(dt)
        prev.texts.push(chunk.text)
      } else this.records.push({ type: kind, time0: time, index: chunk.index, dt: [0], texts: [chunk.text] })
      return
    }
    if (chunk.type === 'tool-call-delta') {
      // a later delta with a name cannot join: expansion gives the name to a run's first delta only
      if (prev && prev.type === 'tool-call-chunks' && prev.index === chunk.index && prev.id === chunk.id && chunk.name === undefined && Number.isSafeInteger(dt)) {
        prev.dt.push(dt)
        prev.args.push(chunk.argumentsDelta)
      } else {
        const r: AssistantStreamRecord = { type: 'tool-call-chunks', time0: time, index: chunk.index, dt: [0], id: chunk.id, args: [chunk.argumentsDelta] }
        if (chunk.name !== undefined) r.name = chunk.name
        this.records.push(r)
      }
      return
    }
    this.records.push({ type: 'chunk', time, chunk })
  }
}

/** Expands compact records into the original timed chunks. */
export function expandStream(records: readonly AssistantStreamRecord[]): TimedChunk[] {
  const out: TimedChunk[] = []
  for (const r of records) {
    if (r.type === 'chunk') {
      out.push({ time: r.time, chunk: r.chunk })
      continue
    }
    let time = r.time0
    const items = r.type === 'tool-call-chunks' ? r.args : r.texts
    for (let i = 0; i < items.length; i++) {
      time += r.dt[i]
      if (r.type === 'text-chunks') out.push({ time, chunk: { type: 'text-delta', index: r.index, text: items[i] } })
      else if (r.type === 'reasoning-chunks') out.push({ time, chunk: { type: 'reasoning-delta', index: r.index, text: items[i] } })
      else {
        const c: StreamChunk = { type: 'tool-call-delta', index: r.index, id: r.id, argumentsDelta: items[i] }
        if (i === 0 && r.name !== undefined) c.name = r.name
        out.push({ time, chunk: c })
      }
    }
  }
  return out
}

/** What a stream assembles to: content blocks, usage, finish, replay state. */
export interface Assembled {
  content: ContentBlock[]
  usage?: TokenUsage
  finish?: FinishReason
  replayState?: Json
}

/**
 * Assembles chunks into content blocks in index order (SPEC §9.5): block-end blocks win over the
 * deltas; a stream without finish counts as stop; a max-tokens finish drops every tool-call block.
 */
export function assembleBlocks(chunks: readonly StreamChunk[]): Assembled {
  const blocks = new Map<number, ContentBlock>()
  const order: number[] = []
  const touch = (index: number, make: () => ContentBlock): ContentBlock => {
    let b = blocks.get(index)
    if (!b) {
      b = make()
      blocks.set(index, b)
      order.push(index)
    }
    return b
  }
  let usage: TokenUsage | undefined
  let finish: FinishReason | undefined
  let replayState: Json | undefined
  for (const c of chunks) {
    switch (c.type) {
      case 'block-start':
        touch(c.index, () => (c.blockType === 'tool-call' ? { type: 'tool-call', id: '', name: '', arguments: '' } : c.blockType === 'reasoning' ? { type: 'reasoning', text: '' } : c.blockType === 'image' ? { type: 'image' } : { type: 'text', text: '' }))
        break
      case 'text-delta': {
        const b = touch(c.index, () => ({ type: 'text', text: '' }))
        if (b.type === 'text') b.text += c.text
        break
      }
      case 'reasoning-delta': {
        const b = touch(c.index, () => ({ type: 'reasoning', text: '' }))
        if (b.type === 'reasoning') b.text += c.text
        break
      }
      case 'tool-call-delta': {
        const b = touch(c.index, () => ({ type: 'tool-call', id: c.id, name: c.name ?? '', arguments: '' }))
        if (b.type === 'tool-call') {
          if (c.id) b.id = c.id
          if (c.name !== undefined) b.name = c.name
          b.arguments += c.argumentsDelta
        }
        break
      }
      case 'block-end':
        touch(c.index, () => c.block)
        blocks.set(c.index, structuredClone(c.block) as ContentBlock)
        break
      case 'usage':
        usage = c.usage
        break
      case 'finish':
        finish = c.reason
        if (c.replayState !== undefined) replayState = c.replayState
        break
    }
  }
  let content = order.map((i) => blocks.get(i)!)
  if (finish?.kind === 'max-tokens') content = content.filter((b) => b.type !== 'tool-call')
  const out: Assembled = { content }
  if (usage) out.usage = usage
  out.finish = finish ?? { kind: 'stop' }
  if (replayState !== undefined) out.replayState = replayState
  return out
}

/** The visible prefix of an interrupted attempt (SPEC §18.8): non-blank text and reasoning only. */
export function interruptedPrefix(content: readonly ContentBlock[]): ContentBlock[] {
  return content.filter((b) => (b.type === 'text' || b.type === 'reasoning') && b.text.trim().length > 0)
}
