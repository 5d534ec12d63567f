// The crash-continuation soak (SPEC §19, issue 17): several agentd processes on one PostgreSQL
// database, steady followups on a dozen sessions (each with its own id, retried on any failure until
// accepted), one SSE watcher per session resuming by Last-Event-ID, and a kill -9 of a random process
// every 1–4 s until the kill budget is spent. Then, with every process up and the traffic stopped:
// every accepted input is admitted exactly once and answered (its turn, or a continuation of it, ends
// completed) unless the crash-loop limit stopped that chain (counted apart); every log passes the §15
// checker (with §19.7); every watcher saw each seq once and in order. It measures each takeover:
// from the kill of the process that drove an open turn to that turn's repair (session/end-seed) and to
// its continuation's turn/start, and counts the chains the crash-loop limit stopped and the inputs
// they consumed that the model never saw.
//
// Long: not part of `npm test`. Run it on its own:
//   npx tsx test/faults/continuation-soak.ts [--kills 200] [--processes 3] [--sessions 12] [--seed N]
// It creates and drops its own database on the test PostgreSQL server (DATABASE_URL, else the local one).

import { spawn, type ChildProcess } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import pg from 'pg'
import { adminCandidates, baseUrl } from '../helpers/db-urls.js'
import { violations } from '../helpers/invariants.js'
import { rng } from '../helpers/rng.js'
import { freePort, startMockLlm, startToolServer, type MockRequest } from '../e2e/helpers-processes.js'

const PROJECT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

interface Args {
  kills: number
  processes: number
  sessions: number
  seed: number
}

function parseArgs(argv: string[]): Args {
  const a: Args = { kills: 200, processes: 3, sessions: 12, seed: Math.floor(Math.random() * 2 ** 31) }
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i]
    const v = Number(argv[++i])
    if (!Number.isInteger(v) || v < 0) throw new Error(`${k} takes a whole number`)
    if (k === '--kills') a.kills = v
    else if (k === '--processes') a.processes = Math.max(2, v)
    else if (k === '--sessions') a.sessions = Math.max(1, v)
    else if (k === '--seed') a.seed = v
    else throw new Error(`unknown argument ${k} (known: --kills, --processes, --sessions, --seed)`)
  }
  return a
}

async function adminClient(): Promise<pg.Client> {
  let last: unknown
  for (const url of adminCandidates()) {
    const c = new pg.Client({ connectionString: url })
    try {
      await c.connect()
      return c
    } catch (e) {
      last = e
    }
  }
  throw last
}

interface Proc {
  child: ChildProcess
  alive: boolean
  ready: boolean
  exited: Promise<void>
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2))
  const rand = rng(args.seed)
  const started = Date.now()
  const dbName = `cont_soak_${crypto.randomBytes(4).toString('hex')}`
  const admin = await adminClient()
  await admin.query(`CREATE DATABASE ${dbName}`)
  const dbUrl = baseUrl(dbName)
  const llm = await startMockLlm()
  const tools = await startToolServer()
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agentd-soak-'))
  const modelsFile = path.join(dir, 'models.json')
  fs.writeFileSync(modelsFile, JSON.stringify({ providers: { mock: { api: 'openai-completions', baseUrl: llm.baseUrl, apiKey: 'literal-key', models: [{ id: 'scripted', contextWindow: 1_000_000, maxTokens: 1024 }] } } }))
  const adminToken = `soak-${crypto.randomBytes(6).toString('hex')}`
  const ports: number[] = []
  for (let i = 0; i < args.processes; i++) ports.push(await freePort())
  const procs: Proc[] = []
  let stopping = false

  // the model: after a random pause (so kills land mid-request), an answer; now and then a call of the
  // http tool first. Every session's marker answers the same way.
  const answer = (r: MockRequest) => {
    const msgs = r.body?.messages ?? []
    const last = msgs.at(-1)
    const delayMs = Math.floor(rand() * 1200)
    if (last?.role !== 'tool' && rand() < 0.25) return { delayMs, toolCalls: [{ id: `call_${crypto.randomBytes(6).toString('hex')}`, name: 'note', arguments: { n: 1 } }] }
    return { delayMs, chunks: ['ans', 'wer ', String(msgs.length)] }
  }

  const env = (i: number): Record<string, string> => {
    const e: Record<string, string> = {}
    for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('AGENTD_') && k !== 'DATABASE_URL' && k !== 'NODE_OPTIONS') e[k] = v
    return {
      ...e,
      PORT: String(ports[i]),
      HOST: '127.0.0.1',
      DATABASE_URL: dbUrl,
      AGENTD_ADMIN_TOKEN: adminToken,
      AGENTD_MODELS: modelsFile,
      AGENTD_DEFAULT_MODEL: 'mock/scripted',
      AGENTD_TOOL_HOSTS: '127.0.0.1',
      AGENTD_DATA_DIR: path.join(dir, `data-${i}`),
      AGENTD_RATE_LIMIT_PER_MIN: '10000000',
      AGENTD_LEASE_TTL_MS: '2000',
      LOG_LEVEL: 'error',
    }
  }
  const url = (i: number) => `http://127.0.0.1:${ports[i]}`

  const start = async (i: number): Promise<void> => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], { cwd: PROJECT, env: env(i), stdio: ['ignore', 'ignore', 'pipe'] })
    let err = ''
    child.stderr!.on('data', (b: Buffer) => (err = (err + b.toString()).slice(-4000)))
    const p: Proc = { child, alive: true, ready: false, exited: new Promise((r) => child.on('exit', () => r())) }
    void p.exited.then(() => {
      p.alive = false
      p.ready = false
    })
    procs[i] = p
    const deadline = Date.now() + 60000
    while (p.alive) {
      const ok = await fetch(`${url(i)}/readyz`).then((r) => r.status === 200, () => false)
      if (ok) {
        p.ready = true
        return
      }
      if (Date.now() > deadline) throw new Error(`process ${i} not ready in 60 s: ${err}`)
      await sleep(100)
    }
    if (!stopping) throw new Error(`process ${i} exited before it was ready: ${err}`)
  }
  const live = () => procs.map((p, i) => (p?.ready ? i : -1)).filter((i) => i >= 0)
  const pick = () => {
    const l = live()
    return l.length ? l[Math.floor(rand() * l.length)] : -1
  }

  // keepDb: a failed soak leaves its database (and the processes' logs) for the post-mortem
  const cleanup = async (keepDb = false) => {
    stopping = true
    for (const p of procs) if (p?.alive) p.child.kill('SIGKILL')
    await Promise.all(procs.map((p) => p?.exited))
    await llm.close()
    await tools.close()
    if (keepDb) {
      console.log(`  kept for inspection: database ${dbName}, process files in ${dir}`)
      await admin.end()
      return
    }
    await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`).catch(() => {})
    await admin.end()
    fs.rmSync(dir, { recursive: true, force: true })
  }
  process.on('SIGINT', () => void cleanup().then(() => process.exit(130)))

  try {
    await Promise.all(Array.from({ length: args.processes }, (_, i) => start(i)))
    const tenant = (await (await fetch(`${url(0)}/v1/admin/tenants`, { method: 'POST', headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'soak' }) })).json()) as { apiKey: string }
    const key = tenant.apiKey as string
    const call = async (i: number, method: string, p: string, body?: unknown, signal?: AbortSignal) => {
      const res = await fetch(url(i) + p, { method, signal: signal ?? AbortSignal.timeout(10000), headers: { authorization: `Bearer ${key}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) }, body: body === undefined ? undefined : JSON.stringify(body) })
      const text = await res.text()
      return { status: res.status, body: text ? JSON.parse(text) : undefined }
    }
    /** retries a call on any process until it answers one of `ok` */
    const retried = async (method: string, p: string, body: unknown, ok: number[]) => {
      for (let attempt = 0; ; attempt++) {
        const i = pick()
        if (i >= 0) {
          try {
            const r = await call(i, method, p, body)
            if (ok.includes(r.status)) return r
            if (r.status < 500 && r.status !== 429) throw new Error(`${method} ${p}: ${r.status} ${JSON.stringify(r.body)}`)
          } catch (e) {
            if (e instanceof Error && e.message.startsWith(method)) throw e
          }
        }
        await sleep(Math.min(1000, 50 * 2 ** Math.min(attempt, 5)))
      }
    }

    const tool = { name: 'note', description: 'notes something', parameters: { type: 'object', properties: {} }, execution: { type: 'http', url: `${tools.url}/echo`, timeoutMs: 5000 } }
    const sessions: Array<{ id: string; marker: string; accepted: Set<string>; sent: number; seen: number[]; watcherReconnects: number; watcherErrors: string[] }> = []
    for (let s = 0; s < args.sessions; s++) {
      const marker = `[[m:soak-${s}-${crypto.randomBytes(3).toString('hex')}]]`
      const r = await retried('POST', '/v1/sessions', { system: `You are soak agent ${marker}`, tools: [tool] }, [201])
      llm.fallback(marker, answer)
      sessions.push({ id: r.body.id, marker, accepted: new Set(), sent: 0, seen: [], watcherReconnects: 0, watcherErrors: [] })
    }

    // SSE watchers: resume by Last-Event-ID on any live process; record every durable seq
    let watching = true
    const watchers = sessions.map(async (s) => {
      let last = -1
      while (watching) {
        const i = pick()
        if (i < 0) {
          await sleep(100)
          continue
        }
        const ctl = new AbortController()
        try {
          const res = await fetch(`${url(i)}/v1/sessions/${s.id}/stream`, { signal: ctl.signal, headers: { authorization: `Bearer ${key}`, ...(last >= 0 ? { 'last-event-id': String(last) } : {}) } })
          if (res.status !== 200 || !res.body) throw new Error(`stream ${res.status}`)
          const reader = res.body.getReader()
          const dec = new TextDecoder()
          let buf = ''
          for (;;) {
            if (!watching) {
              ctl.abort()
              break
            }
            const { value, done } = await reader.read()
            if (done) break
            buf += dec.decode(value, { stream: true })
            let at: number
            while ((at = buf.indexOf('\n\n')) >= 0) {
              const frame = buf.slice(0, at)
              buf = buf.slice(at + 2)
              let event = 'message'
              let id: string | undefined
              for (const line of frame.split('\n')) {
                if (line.startsWith('event:')) event = line.slice(6).trim()
                else if (line.startsWith('id:')) id = line.slice(3).trim()
              }
              if (event === 'session/event' && id !== undefined) {
                const seq = Number(id)
                s.seen.push(seq)
                last = seq
              }
            }
          }
        } catch (e) {
          if (watching && !(e instanceof Error && e.name === 'AbortError')) s.watcherErrors.push(String(e).slice(0, 100))
        }
        s.watcherReconnects++
        await sleep(50)
      }
    })

    // steady followups: each session sends the next message 1–3 s after the last was accepted
    let sending = true
    let acceptedTotal = 0
    const senders = sessions.map(async (s, si) => {
      while (sending) {
        const id = `soak-${si}-${++s.sent}`
        const r = await retried('POST', `/v1/sessions/${s.id}/followup`, { id, content: `question ${s.sent}` }, [202])
        if (r.body.messageId !== id) throw new Error(`followup ${id} answered ${r.body.messageId}`)
        s.accepted.add(id)
        acceptedTotal++
        await sleep(1000 + rand() * 2000)
      }
    })

    // the killer: a random live process every 1–4 s (one at least stays up), started again at once.
    // Right before a kill, the open turns that process drives (its pid is in the lease owner) are
    // noted with the time of the kill: the takeovers to measure.
    const probe = new pg.Pool({ connectionString: dbUrl, max: 1 })
    probe.on('error', () => {})
    const killed: Array<{ id: string; turn: number; at: number }> = []
    let kills = 0
    const restarts: Promise<void>[] = []
    const t0 = Date.now()
    while (kills < args.kills) {
      await sleep(1000 + rand() * 3000)
      const l = live()
      if (l.length < 2) continue
      const i = l[Math.floor(rand() * l.length)]
      const held = await probe.query<{ id: string; open_turn: number }>('SELECT id, open_turn FROM sessions WHERE lease_owner LIKE $1 AND open_turn IS NOT NULL', [`%:${procs[i].child.pid}:%`]).catch(() => ({ rows: [] }))
      procs[i].child.kill('SIGKILL')
      const at = Date.now()
      for (const r of held.rows) killed.push({ id: r.id, turn: r.open_turn, at })
      kills++
      if (kills % 20 === 0) process.stderr.write(`soak: ${kills}/${args.kills} kills, ${acceptedTotal} inputs accepted, ${Math.round((Date.now() - t0) / 1000)} s\n`)
      const p = procs[i]
      restarts.push(p.exited.then(() => start(i)))
    }
    sending = false
    await Promise.all(senders)
    await Promise.all(restarts)
    for (let i = 0; i < args.processes; i++) if (!procs[i].ready) await start(i)
    await probe.end()
    process.stderr.write(`soak: kills done after ${Math.round((Date.now() - t0) / 1000)} s; waiting for every session to settle\n`)

    // quiescence: every session idle with nothing queued and nothing open. The queues the kills left
    // drain at the cluster's pace; only a log that stops growing for 90 s while work is left is a failure.
    const pool = new pg.Pool({ connectionString: dbUrl, max: 2 })
    pool.on('error', () => {})
    let unsettled = 0
    let lastSeq = -1
    let lastMove = Date.now()
    for (;;) {
      const { rows } = await pool.query(`SELECT count(*) FILTER (WHERE run_state <> 'idle' OR open_turn IS NOT NULL OR inbox <> '{"nextTurn":[],"nextStep":[]}')::int AS n, sum(next_seq)::bigint AS seqs FROM sessions`)
      if (rows[0].n === 0) break
      if (Number(rows[0].seqs) !== lastSeq) {
        lastSeq = Number(rows[0].seqs)
        lastMove = Date.now()
      }
      if (Date.now() - lastMove > 90000) {
        unsettled = rows[0].n
        break
      }
      await sleep(500)
    }
    process.stderr.write(`soak: settled after ${Math.round((Date.now() - t0) / 1000)} s\n`)

    // the checks
    const sum = {
      kills,
      processes: args.processes,
      sessions: args.sessions,
      accepted: 0,
      admittedOnce: 0,
      answered: 0,
      crashLoopStopped: 0,
      consumedUnseen: 0,
      notAdmitted: 0,
      admittedTwice: 0,
      lostAccepted: 0,
      unanswered: 0,
      turns: 0,
      interruptedTurns: 0,
      continuations: 0,
      crashLoops: 0,
      chainsStoppedByLimit: 0,
      takeovers: 0,
      takeoversContinued: 0,
      repairP50Ms: 0,
      repairP99Ms: 0,
      takeoverP50Ms: 0,
      takeoverP99Ms: 0,
      invariantViolations: 0,
      watcherAnomalies: 0,
      watcherReconnects: 0,
      modelRequests: 0,
    }
    const repairMs: number[] = []
    const takeoverMs: number[] = []
    const problems: string[] = []
    if (unsettled) problems.push(`${unsettled} sessions stopped making progress with work left`)
    for (const s of sessions) {
      const log: any[] = []
      let after = -1
      for (;;) {
        const r = await retried('GET', `/v1/sessions/${s.id}/events?after=${after}&limit=5000`, undefined, [200])
        log.push(...r.body.events)
        if (!r.body.events.length || log.at(-1).seq >= r.body.headSeq) break
        after = log.at(-1).seq
      }
      const v = violations(log)
      sum.invariantViolations += v.length
      for (const x of v.slice(0, 5)) problems.push(`${s.id}: §15: ${x}`)

      // turns: who claimed what, who admitted what, how each ended, which continues which
      const claimedBy = new Map<string, number>()
      const admittedIn = new Map<string, number[]>()
      const endOf = new Map<number, string>()
      const continuedBy = new Map<number, number>()
      const continuesOf = new Map<number, number>()
      const startTime = new Map<number, number>()
      const seedTime = new Map<number, number>()
      let repaired: number | null = null
      const inbox: Record<string, Array<{ id: string }>> = { 'next-turn': [], 'next-step': [] }
      const acceptedInLog = new Set<string>()
      let open: number | null = null
      for (const e of log) {
        const d = e.data
        if (e.type === 'turn/start') {
          open = d.turn
          sum.turns++
          startTime.set(d.turn, e.time)
          if (d.continues !== undefined) {
            continuedBy.set(d.continues, d.turn)
            continuesOf.set(d.turn, d.continues)
            sum.continuations++
          }
        } else if (e.type === 'turn/end') {
          endOf.set(d.turn, d.reason.kind)
          if (d.reason.kind === 'interrupted') sum.interruptedTurns++
          repaired = d.reason.kind === 'interrupted' ? d.turn : null
          open = null
        } else if (e.type === 'session/end-seed') {
          if (repaired !== null) seedTime.set(repaired, e.time)
          repaired = null
        } else if (e.type === 'agent/inbox/spliced') {
          const removed = inbox[d.target].splice(d.start, d.removedCount ?? 0)
          if (!d.outcome && open !== null) for (const m of removed) claimedBy.set(m.id, open)
          for (const m of d.inserted) if (m.source?.kind === 'user') acceptedInLog.add(m.id)
          inbox[d.target].splice(d.start, 0, ...d.inserted)
        } else if (e.type === 'user/message') admittedIn.set(d.id, [...(admittedIn.get(d.id) ?? []), open!])
      }
      for (const id of s.accepted) if (!acceptedInLog.has(id)) {
        sum.lostAccepted++
        problems.push(`${s.id}: ${id} was accepted (202) but is not in the log`)
      }
      const chainEnd = (t: number): { turn: number; length: number } => {
        let n = 0
        while (continuedBy.has(t)) {
          t = continuedBy.get(t)!
          n++
        }
        return { turn: t, length: n }
      }
      // an interrupted turn left without continuation; the limit's doing when it ends a chain of
      // AGENTD_CONTINUE_AFTER_CRASH (2) continuations, each crashed unanswered (SPEC §19.5)
      const depth = (t: number): number => (continuesOf.has(t) ? 1 + depth(continuesOf.get(t)!) : 0)
      for (const [t, reason] of endOf)
        if (reason === 'interrupted' && !continuedBy.has(t)) {
          sum.crashLoops++
          if (depth(t) >= 2) sum.chainsStoppedByLimit++
        }
      // the takeovers of turns a kill left open: to the repair, and to the continuation's turn/start
      for (const k of killed)
        if (k.id === s.id && endOf.get(k.turn) === 'interrupted') {
          sum.takeovers++
          if (seedTime.has(k.turn)) repairMs.push(seedTime.get(k.turn)! - k.at)
          const next = continuedBy.get(k.turn)
          if (next !== undefined) takeoverMs.push(startTime.get(next)! - k.at)
        }
      for (const id of acceptedInLog) {
        sum.accepted++
        const adm = admittedIn.get(id) ?? []
        const by = claimedBy.get(id)
        const end = by === undefined ? undefined : chainEnd(by)
        const endReason = end ? endOf.get(end.turn) : undefined
        const stoppedByLoop = endReason === 'interrupted' && (end?.length ?? 0) >= 2
        if (adm.length > 1) {
          sum.admittedTwice++
          problems.push(`${s.id}: ${id} admitted ${adm.length} times`)
        }
        if (adm.length === 1) sum.admittedOnce++
        if (adm.length === 0) {
          if (stoppedByLoop) {
            // claimed by the chain and never given to the model
            sum.crashLoopStopped++
            sum.consumedUnseen++
          } else {
            sum.notAdmitted++
            problems.push(`${s.id}: ${id} (claimed by turn ${by}, chain ending ${end?.turn} ${endReason}) never admitted`)
          }
          continue
        }
        if (endReason === 'completed') sum.answered++
        else if (stoppedByLoop) sum.crashLoopStopped++
        else {
          sum.unanswered++
          problems.push(`${s.id}: ${id} admitted in turn ${adm[0]}; its chain ends turn ${end?.turn} ${endReason}`)
        }
      }

      // the watcher: every seq once, in order, up to the head
      const head = log.at(-1)?.seq ?? -1
      const until = Date.now() + 15000
      while ((s.seen.at(-1) ?? -1) < head && Date.now() < until) await sleep(100)
      const expected = Array.from({ length: head + 1 }, (_, i) => i)
      if (s.seen.length !== expected.length || s.seen.some((x, i) => x !== i)) {
        sum.watcherAnomalies++
        const dup = s.seen.length - new Set(s.seen).size
        problems.push(`${s.id}: the watcher saw ${s.seen.length} seqs for a head of ${head} (${dup} repeated; first out of order at #${s.seen.findIndex((x, i) => x !== i)})`)
      }
      sum.watcherReconnects += s.watcherReconnects
      sum.modelRequests += llm.requests(s.marker).length
    }
    watching = false
    for (const p of procs) if (p?.alive) p.child.kill('SIGKILL')
    await Promise.race([Promise.all(watchers), sleep(5000)])
    await pool.end()

    const pct = (xs: number[], p: number) => (xs.length ? [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.ceil((p / 100) * xs.length) - 1)] : 0)
    sum.takeoversContinued = takeoverMs.length
    sum.repairP50Ms = pct(repairMs, 50)
    sum.repairP99Ms = pct(repairMs, 99)
    sum.takeoverP50Ms = pct(takeoverMs, 50)
    sum.takeoverP99Ms = pct(takeoverMs, 99)
    const secs = Math.round((Date.now() - started) / 1000)
    console.log(`continuation soak, seed ${args.seed}, ${secs} s`)
    console.log(Object.entries(sum).map(([k, v]) => `  ${k.padEnd(22)} ${v}`).join('\n'))
    for (const p of problems.slice(0, 40)) console.log(`  problem: ${p}`)
    if (problems.length > 40) console.log(`  … ${problems.length - 40} more problems`)
    const ok = problems.length === 0 && sum.accepted === sum.answered + sum.crashLoopStopped
    console.log(ok ? 'soak passed' : 'soak FAILED')
    await cleanup(!ok)
    process.exit(ok ? 0 : 1)
  } catch (e) {
    console.error('soak aborted:', e)
    await cleanup()
    process.exit(2)
  }
}

void main()
