// The PostgreSQL-outage part: the server runs on a PostgreSQL cluster of the suite's own (never the
// machine's shared server), clients send input with Idempotency-Keys (retrying what got no answer or
// a 503 under the same key), SSE watchers follow every session and resume by Last-Event-ID, and the
// cluster is stopped under that traffic and started again. While it is away, routes that need it
// answer `503 unavailable` with Retry-After (API.md §10), /readyz 503 and /healthz 200; once it is
// back the same server answers again within seconds, no accepted input is lost or doubled, every
// watcher saw every seq once, the drivers bring every session back to idle, and every log passes §15.
// PGlite runs in the server's process: there is no server to stop, so the part says so and passes.

import crypto from 'node:crypto'
import type { FaultPart, PartContext, PartResult } from './lib/part.js'
import { Outcomes } from './lib/outcomes.js'
import { privatePgUnavailable, startPrivatePg, type PrivatePg } from './lib/private-pg.js'
import { putSecret, startTarget, type Target } from './lib/target.js'
import { readSseIds, wireRequest } from './lib/wire.js'

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

const SIZES = {
  short: { sessions: 3, clients: 3, outages: 1, downMs: 3000, trafficMs: 1500 },
  long: { sessions: 8, clients: 8, outages: 6, downMs: 8000, trafficMs: 5000 },
}

/** A watcher of one session's SSE stream that reconnects with Last-Event-ID whenever the stream ends. */
function watch(url: string, id: string, auth: string) {
  const seqs: number[] = []
  let stopped = false
  let reconnects = 0
  let ac = new AbortController()
  const loop = (async () => {
    while (!stopped) {
      ac = new AbortController()
      try {
        const last = seqs.at(-1)
        const res = await fetch(`${url}/v1/sessions/${id}/stream`, { headers: { authorization: auth, ...(last !== undefined ? { 'last-event-id': String(last) } : {}) }, signal: ac.signal })
        if (res.status === 200 && res.body) {
          await readSseIds(res.body, (seq) => seqs.push(seq))
        } else await res.text().catch(() => '')
      } catch {
        // cut: reconnect from the last id
      }
      if (!stopped) {
        reconnects++
        await sleep(200)
      }
    }
  })()
  return {
    seqs,
    get reconnects() {
      return reconnects
    },
    async stop() {
      stopped = true
      ac.abort()
      await loop
    },
  }
}

export async function runOutage(ctx: PartContext): Promise<PartResult> {
  const started = Date.now()
  const rows: Array<[string, string | number]> = [['seed', ctx.seed], ['size', ctx.size], ['database', ctx.db]]
  if (ctx.db === 'pglite') return { rows: [...rows, ['skipped', 'PGlite runs in-process; no server to stop']], violations: [] }
  const why = privatePgUnavailable()
  if (why) return { rows: [...rows, ['skipped', why]], violations: [] }
  const z = SIZES[ctx.size]
  const since = () => `${Math.round((Date.now() - started) / 100) / 10} s`
  let cluster: PrivatePg | undefined
  let target: Target | undefined
  try {
    cluster = await startPrivatePg()
    ctx.log(`outage: private PostgreSQL on port ${cluster.port} (${since()})`)
    target = await startTarget('pg', {}, { pgServer: cluster.url })
    const url = target.url
    const o = new Outcomes(url)
    const admin = { authorization: `Bearer ${target.adminToken}`, 'content-type': 'application/json' }
    const t = await wireRequest(url, { method: 'POST', path: '/v1/admin/tenants', headers: admin, body: '{"name":"outage"}' })
    const auth = `Bearer ${t.body.apiKey as string}`
    const json = { authorization: auth, 'content-type': 'application/json' }
    if ((await putSecret(target, t.body.apiKey, 'OUTAGE_TOKEN')) !== 204) o.problem('PUT /v1/secrets/OUTAGE_TOKEN was not accepted')
    const sessions: string[] = []
    for (let i = 0; i < z.sessions; i++) {
      const s = o.answer('create a session', await wireRequest(url, { method: 'POST', path: '/v1/sessions', headers: json, body: JSON.stringify({ model: target.models.ref() }) }), { expect: [201] })
      sessions.push(s.body.id)
      target.models.fallback(s.body.id, { text: ['heard you'], delayMs: 50 })
    }
    const watchers = sessions.map((id) => watch(url, id, auth))

    // clients: input with an Idempotency-Key each, retried under the same key until it is accepted
    let down = false
    let stop = false
    let sends = 0
    let retries = 0
    let refusedWhileDown = 0
    let answered503 = 0
    const clients = Array.from({ length: z.clients }, async (_, c) => {
      for (let n = 0; !stop; n++) {
        const id = sessions[(c + n) % sessions.length]
        const route = n % 3 === 0 ? 'inject' : 'followup'
        const key = `outage-${ctx.seed}-${c}-${n}-${crypto.randomBytes(3).toString('hex')}`
        const body = JSON.stringify({ content: `client ${c} message ${n}` })
        sends++
        for (let attempt = 0; ; attempt++) {
          const r = await wireRequest(url, { method: 'POST', path: `/v1/sessions/${id}/${route}`, headers: { ...json, 'idempotency-key': key }, body, timeoutMs: 20000 })
          // a cut answer is no answer: retry under the same key (the contract makes that safe)
          if (r.error) {
            retries++
            await sleep(200)
            continue
          }
          o.answer(`${route} to ${id}${down ? ' (database away)' : ''}`, r, { allow503: true, expect: [202, 503] })
          if (r.status === 202) {
            o.accept(id, r.body.messageId)
            break
          }
          if (r.status === 503) answered503++
          if (down) refusedWhileDown++
          retries++
          if (attempt > 200) {
            o.problem(`${route} to ${id}: not accepted after ${attempt} tries`)
            break
          }
          await sleep(Math.min(1000, Number(r.headers['retry-after'] ?? 1) * 100))
        }
        await sleep(20)
      }
    })

    const recoveries: number[] = []
    let downProbes = 0
    for (let k = 0; k < z.outages; k++) {
      await sleep(z.trafficMs)
      ctx.log(`outage ${k + 1}: stopping PostgreSQL (${since()})`)
      cluster.stop(k % 2 === 0 ? 'immediate' : 'fast')
      down = true
      const downUntil = Date.now() + z.downMs
      // while it is away: every route that needs it is 503 with Retry-After; /healthz stays 200, /readyz 503
      while (Date.now() < downUntil) {
        const probes: Array<[string, string, number[]]> = [
          ['GET', `/v1/sessions/${sessions[0]}`, [503]],
          ['GET', `/v1/sessions/${sessions[1 % sessions.length]}/events`, [503]],
          ['GET', '/v1/sessions', [503]],
          ['GET', '/readyz', [503]],
          ['GET', '/healthz', [200]],
        ]
        for (const [method, path, want] of probes) {
          const r = await wireRequest(url, { method, path, headers: { authorization: auth }, timeoutMs: 15000 })
          downProbes++
          o.answer(`${method} ${path} while the database is away`, r, { allow503: true, expect: want })
          if (r.status === 503 && path !== '/readyz' && !r.headers['retry-after']) o.problem(`${path}: 503 without Retry-After`)
        }
        await sleep(300)
      }
      ctx.log(`outage ${k + 1}: starting PostgreSQL (${since()})`)
      cluster.start()
      const back = Date.now()
      for (;;) {
        const r = await wireRequest(url, { method: 'GET', path: `/v1/sessions/${sessions[0]}`, headers: { authorization: auth }, timeoutMs: 15000 })
        if (r.status === 200) break
        if (Date.now() - back > 30000) {
          o.problem(`outage ${k + 1}: the server did not answer 200 within 30 s of the database's return (last ${r.status || r.error})`)
          break
        }
        await sleep(100)
      }
      recoveries.push(Date.now() - back)
      down = false
      const ready = await wireRequest(url, { method: 'GET', path: '/readyz' })
      if (ready.status !== 200) o.problem(`outage ${k + 1}: /readyz ${ready.status} once the database answered again`)
    }
    await sleep(z.trafficMs)
    stop = true
    await Promise.all(clients)
    ctx.log(`outage: traffic stopped, ${o.acceptedCount} inputs accepted (${since()})`)

    // the drivers carry on: every session returns to idle with its inbox drained
    const settle = Date.now()
    // what clients queued during the traffic runs first (the long size queues minutes of turns)
    const settleMs0 = ctx.size === 'long' ? 600_000 : 60_000
    const settleDeadline = settle + settleMs0
    for (const id of sessions) {
      for (;;) {
        const s = await wireRequest(url, { method: 'GET', path: `/v1/sessions/${id}`, headers: { authorization: auth } })
        const inbox = await wireRequest(url, { method: 'GET', path: `/v1/sessions/${id}/inbox`, headers: { authorization: auth } })
        const waiting = (inbox.body?.nextTurn?.length ?? 0) + (inbox.body?.nextStep?.length ?? 0)
        if (s.body?.status === 'idle' && waiting === 0) break
        if (Date.now() > settleDeadline) {
          o.problem(`session ${id} is still ${s.body?.status} with ${waiting} inputs waiting ${settleMs0 / 1000} s after the traffic stopped`)
          break
        }
        await sleep(200)
      }
    }
    const settleMs = Date.now() - settle
    // every watcher saw 0..head once, in order, across its reconnects
    const heads = await o.heads(auth, sessions)
    await sleep(500)
    let watched = 0
    let reconnects = 0
    for (const [i, w] of watchers.entries()) {
      const head = heads.get(sessions[i])!
      const until = Date.now() + 10000
      while (w.seqs.at(-1) !== head && Date.now() < until) await sleep(100)
      await w.stop()
      watched += w.seqs.length
      reconnects += w.reconnects
      const off = w.seqs.findIndex((s, j) => s !== j)
      // seqs 0, 1, 2, … each once and in order, at least up to the head read above
      if (off >= 0 || w.seqs.length < head + 1) o.problem(`the watcher of ${sessions[i]} got ${w.seqs.length} seqs for head ${head}${off >= 0 ? `, seq ${w.seqs[off]} at place ${off}` : ''}`)
    }
    const loss = await o.noLoss(auth, sessions)
    const turns = (await Promise.all(sessions.map((id) => o.log(auth, id)))).flat().filter((e) => e.type === 'turn/end')
    const endings = new Map<string, number>()
    for (const e of turns) {
      const r = `turn/end ${String((e.data as { reason?: { kind?: string } }).reason?.kind ?? '?')}`
      endings.set(r, (endings.get(r) ?? 0) + 1)
    }
    await o.alive('at the end')
    const leaked = await target.leakCheck()
    for (const l of leaked) o.problem(l)
    const sorted = [...recoveries].sort((a, b) => a - b)
    const five = [...o.statuses].filter(([s]) => s >= 500 && s !== 503).reduce((n, [, c]) => n + c, 0)
    rows.push(
      ['outages', z.outages],
      ['  down each (ms)', z.downMs],
      ['  probes while away', downProbes],
      ['  back to 200 after (ms, max)', sorted.at(-1) ?? 0],
      ['inputs sent', sends],
      ['  retried (503 or no answer)', retries],
      ['  of them while away', refusedWhileDown],
      ['  503 answers to input', answered503],
      ['inputs accepted', o.acceptedCount],
      ['lost', loss.lost],
      ['duplicated', loss.duplicated],
      ['turns ended', turns.length],
      ...[...endings].map(([r, n]) => [`  ${r}`, n] as [string, number]),
      ['sessions idle again after (ms)', settleMs],
      ['SSE seqs watched', watched],
      ['  watcher reconnects', reconnects],
      ['invariant violations', loss.violations],
      ...o.statusRows(),
      ['5xx other than 503', five],
      ['secrets looked for', target.leaks.secretCount],
      ['  leaked', leaked.length],
      ['violations', o.problems.length],
      ['seconds', Math.round((Date.now() - started) / 100) / 10],
    )
    return { rows, violations: o.problems }
  } finally {
    await target?.close().catch((e) => ctx.log(`outage: closing the target: ${(e as Error).message}`))
    cluster?.destroy()
  }
}

export const outage: FaultPart = { name: 'outage', description: 'PostgreSQL stopped and started again under traffic', run: runOutage }
