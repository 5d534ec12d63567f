// The shape of src/ (DESIGN.md §2): every folder is a room with one door — other folders import only
// its index.ts — and no file imports itself back through others (no import cycle, type imports
// included). The import graph is read from the sources themselves.

import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'

const SRC = path.resolve(import.meta.dirname, '../../src')

function sources(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((d) => (d.isDirectory() ? sources(path.join(dir, d.name)) : d.name.endsWith('.ts') ? [path.join(dir, d.name)] : []))
}

/** Relative imports and re-exports of a file (`import type` too), resolved to .ts files under src/. */
function importsOf(file: string): string[] {
  const text = fs.readFileSync(file, 'utf8')
  const out: string[] = []
  for (const m of text.matchAll(/^\s*(?:import|export)\b[^'"]*?\bfrom\s+['"](\.[^'"]+)['"]|^\s*import\s+['"](\.[^'"]+)['"]/gm)) {
    const spec = m[1] ?? m[2]
    out.push(path.resolve(path.dirname(file), spec.replace(/\.js$/, '.ts')))
  }
  return out
}

const files = sources(SRC)
const graph = new Map(files.map((f) => [f, importsOf(f)]))
const rel = (f: string) => path.relative(SRC, f)
const folderOf = (f: string) => path.dirname(rel(f))

/** Strongly connected components with more than one file, or a file importing itself (Tarjan). */
function cycles(): string[][] {
  let index = 0
  const idx = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: string[] = []
  const on = new Set<string>()
  const out: string[][] = []
  const visit = (v: string) => {
    idx.set(v, index)
    low.set(v, index++)
    stack.push(v)
    on.add(v)
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue
      if (!idx.has(w)) {
        visit(w)
        low.set(v, Math.min(low.get(v)!, low.get(w)!))
      } else if (on.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!))
    }
    if (low.get(v) === idx.get(v)) {
      const scc: string[] = []
      let w: string
      do {
        w = stack.pop()!
        on.delete(w)
        scc.push(rel(w))
      } while (w !== v)
      if (scc.length > 1 || (graph.get(v) ?? []).includes(v)) out.push(scc.sort())
    }
  }
  for (const f of files) if (!idx.has(f)) visit(f)
  return out
}

describe('src/ imports', () => {
  it('every relative import names a file that exists', () => {
    const missing = [...graph].flatMap(([f, deps]) => deps.filter((d) => !graph.has(d)).map((d) => `${rel(f)} → ${rel(d)}`))
    expect(missing).toEqual([])
  })

  it('other folders are entered only through their index.ts', () => {
    const bad = [...graph].flatMap(([f, deps]) => deps.filter((d) => folderOf(d) !== folderOf(f) && folderOf(d) !== '.' && path.basename(d) !== 'index.ts').map((d) => `${rel(f)} → ${rel(d)}`))
    expect(bad).toEqual([])
  })

  it('has no import cycle', () => {
    expect(cycles()).toEqual([])
  })
})

// The client SDK (clients/typescript/src) is loaded by browsers and bundlers, where a module that
// imports itself back at run time may see the other half undefined. Its type imports may go both ways
// (run.ts names the client's type); what is evaluated may not.
describe('the client SDK imports', () => {
  const SDK = path.resolve(import.meta.dirname, '../../clients/typescript/src')
  const sdkFiles = sources(SDK)
  const runtimeImportsOf = (file: string): string[] => {
    const text = fs.readFileSync(file, 'utf8')
    const out: string[] = []
    for (const m of text.matchAll(/^\s*(import|export)(\s+type\b)?[^'"]*?\bfrom\s+['"](\.[^'"]+)['"]|^\s*import\s+['"](\.[^'"]+)['"]/gm)) {
      if (m[2]) continue
      const spec = m[3] ?? m[4]
      out.push(path.resolve(path.dirname(file), spec.replace(/\.js$/, '.ts')))
    }
    return out
  }
  const sdkGraph = new Map(sdkFiles.map((f) => [f, runtimeImportsOf(f)]))

  it('has no run-time import cycle', () => {
    // depth-first search for a back edge: a file reached again while it is still on the path
    const state = new Map<string, 'open' | 'done'>()
    const found: string[] = []
    const visit = (f: string, trail: string[]) => {
      state.set(f, 'open')
      for (const d of sdkGraph.get(f) ?? []) {
        if (!sdkGraph.has(d)) continue
        if (state.get(d) === 'open') found.push([...trail, f, d].map((x) => path.relative(SDK, x)).join(' → '))
        else if (!state.has(d)) visit(d, [...trail, f])
      }
      state.set(f, 'done')
    }
    for (const f of sdkFiles) if (!state.has(f)) visit(f, [])
    expect(found).toEqual([])
  })
})

// Issue 35 "one unit, one writer": the unit writer (store/unit.ts with its statement, unit-sql.ts, and
// its side-row kinds, unit-kinds.ts) is the only code in src/ that writes session_events or moves a
// session row's log position, inbox, run state or usage. Leases, settings and deletion are not moves.
describe('the unit writer', () => {
  const WRITER = new Set(['store/unit.ts', 'store/unit-sql.ts', 'store/unit-kinds.ts'])
  const EVENTS_WRITE = /\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+session_events\b/i
  const SESSIONS_UPDATE = /\bUPDATE\s+sessions\b(?:\s+(?:AS\s+)?\w+)?\s+SET\b([\s\S]{0,1000}?)(?:\bWHERE\b|\bFROM\b|\bRETURNING\b|;|$)/gi
  const ROW_MOVE = /\b(?:next_seq|last_time|inbox|run_state|open_turn|wake_seq|cancel_pending|wake_latched|continue_turn|last_turn|input_tokens|output_tokens|cache_read_tokens|cache_write_tokens|reasoning_tokens|cost_usd)\s*=/i

  /** Where a file's text writes events or moves a session row. */
  function writes(text: string): string[] {
    const out: string[] = []
    if (EVENTS_WRITE.test(text)) out.push('writes session_events')
    for (const m of text.matchAll(SESSIONS_UPDATE)) if (ROW_MOVE.test(m[1])) out.push(`moves a session row: ${m[0].slice(0, 80)}`)
    return out
  }

  it('sees a write of events and a row move where there is one', () => {
    expect(writes("await tx.query('INSERT INTO session_events (session_key, seq) VALUES ($1, $2)', [k, 0])")).toHaveLength(1)
    expect(writes('await db.query(`UPDATE sessions SET next_seq = $2, inbox = $3 WHERE key = $1`, p)')).toHaveLength(1)
    expect(writes("await db.query('UPDATE sessions s SET run_state = $2 WHERE s.key = $1', p)")).toHaveLength(1)
    expect(writes("await db.query(\"UPDATE sessions SET lease_owner = 'x', wake_latched = true WHERE key = $1\", p)")).toHaveLength(1)
    expect(writes("await db.query('UPDATE sessions SET lease_owner = NULL, lease_expires_at = NULL WHERE key = $1', [k])")).toEqual([])
    expect(writes("await db.query('SELECT seq, body FROM session_events WHERE session_key = $1', [k])")).toEqual([])
  })

  it('is the only code in src/ that writes session_events or moves a session row', () => {
    const found = files.filter((f) => !WRITER.has(rel(f))).flatMap((f) => writes(fs.readFileSync(f, 'utf8')).map((w) => `${rel(f)}: ${w}`))
    expect(found).toEqual([])
  })
})
