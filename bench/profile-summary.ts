// Summarizes a V8 .cpuprofile (from `node --cpu-prof`, or bench/run.ts --cpu-prof DIR):
//  - busy time by module (self time): each npm package, node's own internals, and agentd's src/ files;
//  - the top 25 functions by self time, grouped by their module;
//  - busy time by category (pg driver and its socket writes, HTTP/SSE writes, cordis, GC, src/ files);
//  - the src/ functions with the most inclusive time.
//   npx tsx bench/profile-summary.ts <file.cpuprofile> [skipFraction]
// skipFraction (0–1) drops the first part of the profile's wall time (startup, setup).

import fs from 'node:fs'
import { fileURLToPath } from 'node:url'

interface Node {
  id: number
  callFrame: { functionName: string; url: string; lineNumber: number }
  children?: number[]
}

export interface Profile {
  nodes: Node[]
  samples: number[]
  timeDeltas: number[]
}

/** The module a frame belongs to: an npm package (scoped or not), node:internal/…, src/<file>, or a V8 pseudo-frame. */
export function moduleOf(url: string, fn: string): string {
  if (!url) return fn.startsWith('(') ? fn : '(native)'
  const nm = url.lastIndexOf('/node_modules/')
  if (nm >= 0) {
    const rest = url.slice(nm + '/node_modules/'.length).split('/')
    return rest[0].startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0]
  }
  if (url.startsWith('node:')) return url.replace(/^node:internal\/(deps\/)?/, 'node:').split('/').slice(0, 2).join('/')
  if (url.includes('/src/')) return `src/${url.split('/src/').pop()}`
  if (url.includes('/bench/')) return `bench/${url.split('/bench/').pop()}`
  return url.replace(/^file:\/\//, '')
}

export function summarize(p: Profile, skip = 0): string {
  const nodes = new Map(p.nodes.map((n) => [n.id, n]))
  const parent = new Map<number, number>()
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id)
  const total = p.timeDeltas.reduce((a, b) => a + b, 0)
  const self = new Map<number, number>()
  // the profiler's own start/stop calls (node:inspector post, bench/prof.ts) are not the server's time
  const tooling = (id: number) => {
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) if (nodes.get(cur)!.callFrame.url === 'node:inspector') return true
    return false
  }
  let t = 0
  p.samples.forEach((s, i) => {
    t += p.timeDeltas[i]
    if (t >= skip * total && !tooling(s)) self.set(s, (self.get(s) ?? 0) + p.timeDeltas[i])
  })

  function category(id: number): string {
    const fn = nodes.get(id)!.callFrame.functionName
    if (fn === '(idle)') return 'idle'
    if (fn === '(garbage collector)') return 'gc'
    if (fn === '(program)') return 'program'
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const u = nodes.get(cur)!.callFrame.url
      if (fn === 'writev' || fn === 'writeBuffer') {
        if (/node_modules\/pg/.test(u)) return 'socket writes: pg'
        if (/_http|fastify/.test(u)) return 'socket writes: http/SSE'
      }
      if (/node_modules\/pg/.test(u)) return 'pg driver (js)'
      if (/_http_outgoing|_http_server|fastify|find-my-way/.test(u)) return 'http/fastify (js)'
      if (/cordis/.test(u)) return 'cordis (Context proxy)'
      if (/pi-ai/.test(u)) return 'pi-ai'
      if (/@electric-sql\/pglite/.test(u)) return 'pglite'
      if (u.includes('/src/')) return `src/${u.split('/src/').pop()}`
    }
    return 'other'
  }

  const cats = new Map<string, number>()
  const incl = new Map<string, number>()
  const mods = new Map<string, number>()
  const fns = new Map<string, { us: number; mod: string }>()
  for (const [id, us] of self) {
    const c = category(id)
    cats.set(c, (cats.get(c) ?? 0) + us)
    const f0 = nodes.get(id)!.callFrame
    if (f0.functionName !== '(idle)') {
      let mod = moduleOf(f0.url, f0.functionName)
      if (mod === '(native)') {
        // a native function (writev, JSON.stringify, …) counts under the nearest JS caller's module
        let cur = parent.get(id)
        while (cur !== undefined && !nodes.get(cur)!.callFrame.url) cur = parent.get(cur)
        // node's own stream/net layers are skipped so that socket writes land on pg / http
        while (cur !== undefined && /^node:(internal\/)?(stream|net|_stream|streams|_http_outgoing)/.test(nodes.get(cur)!.callFrame.url)) cur = parent.get(cur)
        if (cur !== undefined) mod = `${moduleOf(nodes.get(cur)!.callFrame.url, '')} (native)`
      }
      mods.set(mod, (mods.get(mod) ?? 0) + us)
      // (tsx-compiled src/ files have no useful line numbers)
      const k = `${f0.functionName || '(anonymous)'}${f0.url && !mod.startsWith('src/') && !mod.startsWith('bench/') ? `:${f0.lineNumber + 1}` : ''}\u0000${mod}`
      const cur = fns.get(k) ?? { us: 0, mod }
      cur.us += us
      fns.set(k, cur)
    }
    const seen = new Set<string>()
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const f = nodes.get(cur)!.callFrame
      if (!f.url.includes('/src/')) continue
      const k = `${f.functionName || '(anonymous)'} src/${f.url.split('/src/').pop()}`
      if (seen.has(k)) continue
      seen.add(k)
      incl.set(k, (incl.get(k) ?? 0) + us)
    }
  }
  const busy = [...cats].filter(([k]) => k !== 'idle').reduce((a, [, v]) => a + v, 0)
  const line = (us: number, label: string, indent = '') => `${indent}${(us / 1000).toFixed(1).padStart(9)} ms ${((100 * us) / busy).toFixed(1).padStart(5)}%  ${label}`
  const out: string[] = [`busy ${(busy / 1000).toFixed(0)} ms, idle ${((cats.get('idle') ?? 0) / 1000).toFixed(0)} ms`, '', 'by module (self time, top 20):']
  for (const [k, v] of [...mods].sort((a, b) => b[1] - a[1]).slice(0, 20)) out.push(line(v, k))
  out.push('', 'top 25 functions by self time, grouped by module:')
  const top = [...fns].sort((a, b) => b[1].us - a[1].us).slice(0, 25)
  const byMod = new Map<string, Array<[string, number]>>()
  for (const [k, v] of top) {
    const list = byMod.get(v.mod) ?? []
    list.push([k.split('\u0000')[0], v.us])
    byMod.set(v.mod, list)
  }
  for (const [mod, list] of [...byMod].sort((a, b) => b[1].reduce((x, y) => x + y[1], 0) - a[1].reduce((x, y) => x + y[1], 0))) {
    out.push(`  ${mod} (module total ${((mods.get(mod) ?? 0) / 1000).toFixed(1)} ms)`)
    for (const [fn, us] of list) out.push(line(us, fn, '  '))
  }
  out.push('', 'by category (self time):')
  for (const [k, v] of [...cats].filter(([k]) => k !== 'idle').sort((a, b) => b[1] - a[1]).slice(0, 25)) out.push(line(v, k))
  out.push('', 'src/ functions (inclusive):')
  for (const [k, v] of [...incl].sort((a, b) => b[1] - a[1]).slice(0, 30)) out.push(line(v, k))
  return out.join('\n') + '\n'
}

if (process.argv[1] && fileURLToPath(import.meta.url) === fs.realpathSync(process.argv[1])) {
  const [file, skipArg] = process.argv.slice(2)
  if (!file) {
    process.stderr.write('usage: npx tsx bench/profile-summary.ts <file.cpuprofile> [skipFraction]\n')
    process.exit(2)
  }
  process.stdout.write(summarize(JSON.parse(fs.readFileSync(file, 'utf8')) as Profile, Number(skipArg ?? 0)))
}
