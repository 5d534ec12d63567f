// Summarizes a V8 .cpuprofile (from `node --cpu-prof`) the way bench/README.md's diagnosis does:
// busy time by category (pg driver and its socket writes, HTTP/SSE writes, cordis, GC, agentd's
// src/ files) and the src/ functions with the most inclusive time.
//   npx tsx bench/profile-summary.ts <file.cpuprofile> [skipFraction]
// skipFraction (0–1) drops the first part of the profile's wall time (startup, setup).

import fs from 'node:fs'

interface Node {
  id: number
  callFrame: { functionName: string; url: string; lineNumber: number }
  children?: number[]
}

const [file, skipArg] = process.argv.slice(2)
if (!file) {
  process.stderr.write('usage: npx tsx bench/profile-summary.ts <file.cpuprofile> [skipFraction]\n')
  process.exit(2)
}
const p = JSON.parse(fs.readFileSync(file, 'utf8')) as { nodes: Node[]; samples: number[]; timeDeltas: number[] }
const skip = Number(skipArg ?? 0)
const nodes = new Map(p.nodes.map((n) => [n.id, n]))
const parent = new Map<number, number>()
for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id)
const total = p.timeDeltas.reduce((a, b) => a + b, 0)
const self = new Map<number, number>()
let t = 0
p.samples.forEach((s, i) => {
  t += p.timeDeltas[i]
  if (t >= skip * total) self.set(s, (self.get(s) ?? 0) + p.timeDeltas[i])
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
for (const [id, us] of self) {
  const c = category(id)
  cats.set(c, (cats.get(c) ?? 0) + us)
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
const line = (us: number, label: string) => `${(us / 1000).toFixed(1).padStart(9)} ms ${((100 * us) / busy).toFixed(1).padStart(5)}%  ${label}`
process.stdout.write(`busy ${(busy / 1000).toFixed(0)} ms, idle ${((cats.get('idle') ?? 0) / 1000).toFixed(0)} ms\n\nby category (self time):\n`)
for (const [k, v] of [...cats].filter(([k]) => k !== 'idle').sort((a, b) => b[1] - a[1]).slice(0, 25)) process.stdout.write(`${line(v, k)}\n`)
process.stdout.write('\nsrc/ functions (inclusive):\n')
for (const [k, v] of [...incl].sort((a, b) => b[1] - a[1]).slice(0, 30)) process.stdout.write(`${line(v, k)}\n`)
