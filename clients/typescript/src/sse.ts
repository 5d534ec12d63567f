// An incremental Server-Sent Events parser (the WHATWG event-stream format): feed it text as it
// arrives, in chunks of any size, and take the complete events out. Line ends may be CRLF, LF or CR;
// comment lines (`: ping`) are counted but yield no event.

export interface SseEvent {
  /** the `event:` field, `message` when absent */
  event: string
  data: string
  /** the `id:` field of this event, when it had one */
  id?: string
  /** the `retry:` field, in milliseconds */
  retry?: number
}

export class SseParser {
  private buf = ''
  private started = false
  /** a CR ended the last chunk: an LF opening the next one belongs to it */
  private pendingCr = false
  private data: string[] = []
  private event = ''
  private id: string | undefined
  private retry: number | undefined
  /** comment lines seen so far */
  comments = 0

  /** Parses `text` and returns the events it completed. */
  push(text: string): SseEvent[] {
    if (!this.started && text) {
      this.started = true
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1)
    }
    if (this.pendingCr && text.startsWith('\n')) text = text.slice(1)
    this.pendingCr = false
    this.buf += text
    const out: SseEvent[] = []
    let start = 0
    for (let i = 0; i < this.buf.length; i++) {
      const ch = this.buf.charCodeAt(i)
      if (ch !== 10 && ch !== 13) continue
      const line = this.buf.slice(start, i)
      if (ch === 13) {
        if (i + 1 === this.buf.length) this.pendingCr = true
        else if (this.buf.charCodeAt(i + 1) === 10) i++
      }
      start = i + 1
      const e = this.line(line)
      if (e) out.push(e)
    }
    this.buf = this.buf.slice(start)
    return out
  }

  private line(line: string): SseEvent | undefined {
    if (line === '') return this.dispatch()
    if (line.startsWith(':')) {
      this.comments++
      return undefined
    }
    const colon = line.indexOf(':')
    const field = colon < 0 ? line : line.slice(0, colon)
    let value = colon < 0 ? '' : line.slice(colon + 1)
    if (value.startsWith(' ')) value = value.slice(1)
    if (field === 'data') this.data.push(value)
    else if (field === 'event') this.event = value
    else if (field === 'id' && !value.includes('\0')) this.id = value
    else if (field === 'retry' && /^\d+$/.test(value)) this.retry = Number(value)
    return undefined
  }

  private dispatch(): SseEvent | undefined {
    const e: SseEvent | undefined = this.data.length ? { event: this.event || 'message', data: this.data.join('\n') } : undefined
    if (e && this.id !== undefined) e.id = this.id
    if (e && this.retry !== undefined) e.retry = this.retry
    this.data = []
    this.event = ''
    this.id = undefined
    this.retry = undefined
    return e
  }
}
