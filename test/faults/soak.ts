// The kill -9 soak: agentd processes (real `src/main.ts` processes) on one PostgreSQL database, clients
// sending input with Idempotency-Keys to whichever process is up (retrying what got no answer under
// the same key), and a kill loop that SIGKILLs the process holding sessions and starts it again. Checks:
// no 5xx but the documented 503, every accepted input in its log exactly once, every session idle with
// an empty inbox at the end (the survivors took the killed process's sessions over), and every log
// passes SPEC §15. It measures how long each takeover took. PGlite is one process: skipped there.

import crypto from 'node:crypto'
import path from 'node:path'
import { startCluster, type Cluster } from '../e2e/helpers-processes.js'
import type { FaultPart, PartContext, PartResult } from './lib/part.js'
import { Outcomes } from './lib/outcomes.js'
import { freshPgServerDatabase, putSecret } from './lib/target.js'
import { LeakWatch } from './lib/leaks.js'
import { openPg } from '../../src/store/index.js'
import { wireRequest } from './lib/wire.js'

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

const SIZES = {
  short: { processes: 2, sessions: 4, clients: 2, kills: 10, everyMs: 1500 },
  long: { processes: 3, sessions: 12, clients: 6, kills: 200, everyMs: 1500 },
}

const pct = (xs: number[], p: number) => {
  if (!xs.length) return 0
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]
}

export async function runSoak(ctx: PartContext): Promise<PartResult> {
  const started = Date.now()
  const rows: Array<[string, string | number]> = [['seed', ctx.seed], ['size', ctx.size], ['database', ctx.db]]
  if (ctx.db === 'pglite') return { rows: [...rows, ['skipped', 'PGlite is one process; no other process to take over']], violations: [] }
  // each kill waits for the killed process to start again (a few seconds): npm test does four of the ten
  const z = ctx.inTest && ctx.size === 'short' ? { ...SIZES.short, kills: 4 } : SIZES[ctx.size]
  const since = () => `${Math.round((Date.now() - started) / 100) / 10} s`
  const leaseTtl = 1000
  const o0: string[] = []
  let cluster: Cluster | undefined
  // the secrets check: a literal provider key in the models file, the secret key, a tenant secret, every process's output
  const leaks = new LeakWatch()
  const secretKey = crypto.randomBytes(32).toString('base64')
  const providerKey = `faults-provider-literal-${crypto.randomBytes(12).toString('hex')}`
  leaks.add('secret key', secretKey)
  leaks.add('provider key', providerKey)
  try {
    cluster = await startCluster({
      processes: z.processes,
      env: { AGENTD_LEASE_TTL_MS: String(leaseTtl), AGENTD_SECRET_KEY: secretKey, LOG_LEVEL: 'trace' },
      database: freshPgServerDatabase,
      providerKey,
      onOutput: (i, b) => leaks.print(`process ${i}`, b.toString()),
    })
    const c = cluster
    leaks.add('admin token', c.adminToken)
    leaks.add('api key', c.key)
    // the models file holds the provider key by design
    leaks.keyFile(path.join(c.dir, 'models.json'), providerKey)
    if ((await putSecret({ url: c.procs[0].url, leaks }, c.key, 'SOAK_TOKEN')) !== 204) o0.push('PUT /v1/secrets/SOAK_TOKEN was not accepted')
    ctx.log(`soak: ${z.processes} processes up (${since()})`)
    const o = new Outcomes(c.procs[0].url)
    const auth = `Bearer ${c.key}`
    const sessions: string[] = []
    for (let i = 0; i < z.sessions; i++) {
      const s = await c.createSession(i % z.processes)
      sessions.push(s.id)
      c.llm.fallback(s.marker, { chunks: ['soak ', 'answer ', 'here'], delayMs: 150 })
    }
    const live = () => c.procs.filter((p) => p.alive)

    let stop = false
    let sends = 0
    let retries = 0
    const clients = Array.from({ length: z.clients }, async (_, k) => {
      for (let n = 0; !stop; n++) {
        const id = sessions[(k + n) % sessions.length]
        const route = n % 4 === 3 ? 'steer' : 'followup'
        const key = `soak-${ctx.seed}-${k}-${n}-${crypto.randomBytes(3).toString('hex')}`
        const body = JSON.stringify({ content: `client ${k} message ${n}` })
        sends++
        for (let attempt = 0; ; attempt++) {
          const up = live()
          const p = up[(n + attempt) % Math.max(1, up.length)]
          if (!p) {
            await sleep(100)
            continue
          }
          const r = await wireRequest(p.url, { method: 'POST', path: `/v1/sessions/${id}/${route}`, headers: { authorization: auth, 'content-type': 'application/json', 'idempotency-key': key }, body, timeoutMs: 15000 })
          if (r.error) {
            retries++
            await sleep(50)
            continue
          }
          o.answer(`${route} to ${id} on process ${p.index}`, r, { allow503: true, expect: [202, 503] })
          if (r.status === 202) {
            o.accept(id, r.body.messageId)
            break
          }
          retries++
          if (attempt > 300) {
            o.problem(`${route} to ${id}: not accepted after ${attempt} tries`)
            break
          }
          await sleep(100)
        }
        await sleep(50)
      }
    })

    const takeovers: number[] = []
    let kills = 0
    let unheld = 0
    for (let k = 0; k < z.kills; k++) {
      await sleep(z.everyMs)
      await c.ensureUp()
      // the victim: the process holding the most sessions
      const held = new Map<number, string[]>()
      for (const id of sessions) {
        const h = await c.holder(id)
        if (h >= 0) held.set(h, [...(held.get(h) ?? []), id])
      }
      const [victim, its] = [...held].sort((a, b) => b[1].length - a[1].length)[0] ?? [k % z.processes, []]
      const p = c.procs[victim]
      p.child.kill('SIGKILL')
      await p.exited
      kills++
      const t0 = Date.now()
      // a survivor takes each of its sessions that has work; an idle one may stay unheld until input comes
      await Promise.all(
        its.map(async (id) => {
          const deadline = t0 + leaseTtl + 20000
          for (;;) {
            const h = await c.holder(id)
            if (h >= 0 && h !== victim) return void takeovers.push(Date.now() - t0)
            const lease = await c.lease(id)
            if (lease.owner === null && lease.runState !== 'running' && lease.openTurn === null) return void unheld++
            if (Date.now() > deadline) return void o.problem(`kill ${kills}: session ${id} of process ${victim} was not taken over within ${deadline - t0} ms (${JSON.stringify(lease)})`)
            await sleep(50)
          }
        }),
      )
      ctx.log(`soak: kill ${kills} of process ${victim} (held ${its.length}), ${o.acceptedCount} inputs accepted (${since()})`)
    }
    stop = true
    await Promise.all(clients)
    await c.ensureUp()
    o.url = c.procs[0].url
    ctx.log(`soak: traffic stopped (${since()})`)

    // every session idle again with nothing waiting
    const settle = Date.now()
    for (const id of sessions) {
      for (;;) {
        const s = await wireRequest(o.url, { method: 'GET', path: `/v1/sessions/${id}`, headers: { authorization: auth } })
        const inbox = await wireRequest(o.url, { method: 'GET', path: `/v1/sessions/${id}/inbox`, headers: { authorization: auth } })
        const waiting = (inbox.body?.nextTurn?.length ?? 0) + (inbox.body?.nextStep?.length ?? 0)
        if (s.body?.status === 'idle' && waiting === 0) break
        if (Date.now() - settle > 60000) {
          o.problem(`session ${id} still ${s.body?.status} with ${waiting} inputs waiting 60 s after the traffic stopped`)
          break
        }
        await sleep(200)
      }
    }
    const settleMs = Date.now() - settle
    const loss = await o.noLoss(auth, sessions)
    const logs = await Promise.all(sessions.map((id) => o.log(auth, id)))
    const endings = new Map<string, number>()
    for (const e of logs.flat()) {
      if (e.type !== 'turn/end') continue
      const r = `turn/end ${String((e.data as { reason?: { kind?: string } }).reason?.kind ?? '?')}`
      endings.set(r, (endings.get(r) ?? 0) + 1)
    }
    await o.alive('at the end')
    const db = openPg(c.dbUrl, 2)
    const leaked = await leaks.check({ db, dataDirs: [c.dir] }).finally(() => db.close())
    for (const l of [...o0, ...leaked]) o.problem(l)
    const five = [...o.statuses].filter(([s]) => s >= 500 && s !== 503).reduce((n, [, x]) => n + x, 0)
    rows.push(
      ['processes', z.processes],
      ['kills (SIGKILL)', kills],
      ['takeovers measured', takeovers.length],
      ['  takeover p50 (ms)', pct(takeovers, 50)],
      ['  takeover p99 (ms)', pct(takeovers, 99)],
      ['  idle sessions left unheld', unheld],
      ['inputs sent', sends],
      ['  retried (no answer or 503)', retries],
      ['inputs accepted', o.acceptedCount],
      ['lost', loss.lost],
      ['duplicated', loss.duplicated],
      ...[...endings].map(([r, n]) => [`  ${r}`, n] as [string, number]),
      ['sessions idle again after (ms)', settleMs],
      ['invariant violations', loss.violations],
      ...o.statusRows(),
      ['5xx other than 503', five],
      ['secrets looked for', leaks.secretCount],
      ['  leaked', leaked.length],
      ['violations', o.problems.length],
      ['seconds', Math.round((Date.now() - started) / 100) / 10],
    )
    return { rows, violations: o.problems }
  } finally {
    leaks.stop()
    await cluster?.close().catch((e) => ctx.log(`soak: closing the cluster: ${(e as Error).message}`))
    leaks.discard()
  }
}

export const soak: FaultPart = { name: 'soak', description: 'kill -9 of agentd processes on one PostgreSQL under retried input', run: runSoak }
