// Reading session logs in tests: event types, lookups by type and turn, message texts, and the
// expansion of compact stream records (SPEC §9.4).

/** A session event as the HTTP API returns it (SPEC §3.4), with `data` left untyped. */
export type Ev = { seq: number; time: number; type: string; data: any; surfaceOp?: any; sourceEventSeqs?: number[] }

type Typed = { type: string }
type WithData = { type: string; data: unknown }

export const types = (evs: Typed[]) => evs.map((e) => e.type)
/**
 * The events up to and including the first `session/end-seed`: crash repair's closers and its marker. A
 * continuation (SPEC §19) may open right after them, so a repair is judged on this prefix, never on the log's end.
 */
export const throughSeed = <E extends Typed>(evs: E[]): E[] => {
  const i = evs.findIndex((e) => e.type === 'session/end-seed')
  return i < 0 ? evs : evs.slice(0, i + 1)
}
export const ofType = <E extends Typed>(evs: E[], type: string): E[] => evs.filter((e) => e.type === type)
/** An event's data, untyped. */
export const d = (e: { data: unknown } | undefined) => e?.data as any
export const turnEnd = <E extends WithData>(evs: E[], turn: number): E | undefined => evs.find((e) => e.type === 'turn/end' && d(e).turn === turn)
/** The texts of the user/message events, in log order. */
export const userTexts = (evs: WithData[]) => ofType(evs, 'user/message').map((e) => d(e).content.map((b: any) => b.text).join(''))
/** The text of a message's content blocks ('' for none). */
export const textOf = (m: any) => (m?.content ?? []).map((b: any) => b.text ?? '').join('')

/** The events of turn n, turn/start through turn/end. */
export function turnOf<E extends WithData>(evs: E[], n: number): E[] {
  const a = evs.findIndex((e) => e.type === 'turn/start' && d(e).turn === n)
  const b = evs.findIndex((e) => e.type === 'turn/end' && d(e).turn === n)
  if (a < 0 || b < 0) throw new Error(`turn ${n} is not in the log: ${types(evs).join(' ')}`)
  return evs.slice(a, b + 1)
}

/** SPEC §9.4: the timed chunks a compact stream stands for (written independently of the server). */
export function expand(records: any[]): Array<{ time: number; chunk: any }> {
  const out: Array<{ time: number; chunk: any }> = []
  for (const r of records) {
    if (r.type === 'chunk') {
      out.push({ time: r.time, chunk: r.chunk })
      continue
    }
    let time = r.time0
    const items: string[] = r.type === 'tool-call-chunks' ? r.args : r.texts
    items.forEach((x, i) => {
      time += r.dt[i]
      if (r.type === 'text-chunks') out.push({ time, chunk: { type: 'text-delta', index: r.index, text: x } })
      else if (r.type === 'reasoning-chunks') out.push({ time, chunk: { type: 'reasoning-delta', index: r.index, text: x } })
      else out.push({ time, chunk: { type: 'tool-call-delta', index: r.index, id: r.id, ...(i === 0 && r.name !== undefined ? { name: r.name } : {}), argumentsDelta: x } })
    })
  }
  return out
}

/** The step a seq falls in (the latest step/start before it). */
export const stepAt = (evs: Ev[], seq: number) => evs.filter((e) => e.type === 'step/start' && e.seq < seq).at(-1)?.data.step
