// The memory floor: a minimal server process on the same database driver and schema as agentd —
// pg (a pool of agentd's size) or PGlite (in this process, like agentd's embedded mode) — that
// stores sessions (POST /sessions?n=N, one INSERT of N rows) and holds SSE responses open
// (GET /stream). Started by bench/memory.ts exactly as agentd is (node --import tsx), so the
// loader's cost is in both. Prints {"msg":"floor listening","url":…} when ready.

import crypto from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { migrate, openDb } from '../src/store/index.js'

const db = await openDb({ databaseUrl: process.env.DATABASE_URL || undefined, dataDir: process.env.AGENTD_DATA_DIR ?? '/tmp' })
await migrate(db)
const tenant = crypto.randomUUID()
await db.query('INSERT INTO tenants (id, name, created_at) VALUES ($1, $2, $3)', [tenant, 'floor', Date.now()])

const streams = new Set<http.ServerResponse>()
const server = http.createServer((req, res) => {
  if (req.method === 'POST' && req.url?.startsWith('/sessions')) {
    const n = Number(new URL(req.url, 'http://x').searchParams.get('n') ?? 1)
    req.resume()
    req.on('end', () => {
      const now = Date.now()
      const keys = Array.from({ length: n }, () => crypto.randomUUID())
      db.query(
        'INSERT INTO sessions (key, tenant_id, id, model, create_hash, created_at, updated_at) SELECT k, $2, \'ses_\' || k::text, \'faux/echo\', \'floor\', $3, $3 FROM unnest($1::uuid[]) AS k',
        [keys, tenant, now],
      ).then(
        () => res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ ids: keys.map((k) => `ses_${k}`) })),
        (e: Error) => res.writeHead(500).end(e.message),
      )
    })
    return
  }
  if (req.method === 'GET' && req.url?.startsWith('/stream')) {
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' })
    res.write('event: stream/ready\ndata: {"headSeq":-1}\n\n')
    streams.add(res)
    res.on('close', () => streams.delete(res))
    return
  }
  res.writeHead(404).end()
})
server.keepAliveTimeout = 60000
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo
  process.stdout.write(`${JSON.stringify({ msg: 'floor listening', url: `http://127.0.0.1:${port}` })}\n`)
})
process.on('SIGTERM', () => {
  for (const r of streams) r.destroy()
  server.close()
  void db.close().finally(() => process.exit(0))
})
