// The example app's backend (examples/chat/README.md): serves the React page (Vite), mints a token for
// the signed-in user with the tenant key, which never leaves this process, relays /v1 to agentd so the
// page talks to it on its own origin, and answers the agent's `clean_up` tool. Run alone
// (`npm run example:chat`), it also starts agentd on the embedded database and creates the agent.

import { spawn } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const HERE = path.dirname(fileURLToPath(import.meta.url))
const ROOT = path.resolve(HERE, '../..')

/** The user this demo pretends is signed in; a real app takes it from its session. */
const USER = 'demo-user'

/**
 * Starts the backend. `agentd` and `apiKey` say where agentd is and the tenant key to mint with;
 * `agentId` is the agent the page chats with. Resolves with its URL and close().
 */
export async function startExample({ agentd, apiKey, agentId = 'chat', port = 5173, host = '127.0.0.1' }) {
  const { createServer } = await import('vite')
  const react = (await import('@vitejs/plugin-react')).default
  const vite = await createServer({
    root: HERE,
    configFile: false,
    plugins: [react()],
    server: { middlewareMode: true, hmr: false },
    appType: 'spa',
    logLevel: 'warn',
    define: { __AGENT_ID__: JSON.stringify(agentId) },
  })
  const api = new URL(agentd)
  const server = http.createServer(async (req, res) => {
    const url = req.url ?? '/'
    if (req.method === 'POST' && url === '/api/agent-token') {
      // here a real backend checks who is signed in; the token reaches only this user's chats with the agent
      const r = await fetch(`${agentd}/v1/tokens`, {
        method: 'POST',
        headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ subject: USER, agents: [agentId], scopes: ['read', 'write'], ttlSeconds: 900 }),
      })
      res.writeHead(r.ok ? 200 : 502, { 'content-type': 'application/json' })
      return void res.end(r.ok ? await r.text() : JSON.stringify({ error: 'could not get a token' }))
    }
    if (req.method === 'POST' && url === '/tools/clean_up') {
      // the agent's http tool (it runs only after the user allowed it in the page)
      let body = ''
      req.on('data', (c) => (body += c))
      return void req.on('end', () => {
        const args = JSON.parse(body || '{}').arguments ?? {}
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ content: `cleaned up ${args.folder ?? 'the folder'}` }))
      })
    }
    if (url.startsWith('/v1/')) {
      // the page's requests to agentd, streamed both ways (a reverse proxy does this in production)
      const up = http.request({ host: api.hostname, port: api.port, method: req.method, path: url, headers: { ...req.headers, host: api.host } }, (r) => {
        res.writeHead(r.statusCode ?? 502, r.headers)
        r.pipe(res)
      })
      up.on('error', () => res.destroy())
      res.on('close', () => up.destroy())
      return void req.pipe(up)
    }
    vite.middlewares(req, res)
  })
  await new Promise((resolve) => server.listen(port, host, resolve))
  const address = server.address()
  return {
    url: `http://${host}:${address.port}`,
    async close() {
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
      await vite.close()
    },
  }
}

/** The agent the page talks to: faux/tools (no API key needed) with one tool that asks for approval. */
export function agentBody(toolUrl, model = 'faux/tools') {
  return {
    id: 'chat',
    name: 'Chat example',
    description: 'examples/chat: answers, and cleans up a folder once you allow it',
    model,
    system: 'You are a helpful assistant.',
    tools: [{ name: 'clean_up', description: 'Deletes the temporary files in a folder', parameters: { type: 'object', properties: { folder: { type: 'string' } } }, execution: { type: 'http', url: toolUrl }, approval: 'always' }],
  }
}

async function main() {
  const port = Number(process.env.PORT ?? 5173)
  const agentdPort = Number(process.env.AGENTD_PORT ?? 8787)
  const dataDir = path.join(HERE, '.agentd')
  const agentd = `http://127.0.0.1:${agentdPort}`
  // agentd on the embedded database, allowed to call this backend's tool
  const child = spawn(path.join(ROOT, 'node_modules/.bin/tsx'), [path.join(ROOT, 'src/main.ts')], {
    cwd: ROOT,
    stdio: ['ignore', 'inherit', 'inherit'],
    env: { ...process.env, PORT: String(agentdPort), HOST: '127.0.0.1', AGENTD_DATA_DIR: dataDir, AGENTD_TOOL_HOSTS: '127.0.0.1', LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn' },
  })
  const stop = () => child.kill('SIGTERM')
  process.on('SIGINT', () => (stop(), process.exit(0)))
  process.on('SIGTERM', () => (stop(), process.exit(0)))
  for (let i = 0; ; i++) {
    if (child.exitCode !== null) throw new Error('agentd did not start')
    const ok = await fetch(`${agentd}/readyz`).then((r) => r.ok, () => false)
    if (ok) break
    if (i > 600) throw new Error('agentd did not get ready in 60 s')
    await new Promise((r) => setTimeout(r, 100))
  }
  const apiKey = fs.readFileSync(path.join(dataDir, 'api-key'), 'utf8').trim()
  const body = agentBody(`http://127.0.0.1:${port}/tools/clean_up`)
  const got = await fetch(`${agentd}/v1/agents/${body.id}`, { headers: { authorization: `Bearer ${apiKey}` } })
  if (got.status === 404) await fetch(`${agentd}/v1/agents`, { method: 'POST', headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' }, body: JSON.stringify(body) })
  const app = await startExample({ agentd, apiKey, agentId: body.id, port })
  console.log(`\n  the chat example: ${app.url}   (agentd at ${agentd}, data in ${path.relative(ROOT, dataDir)})\n`)
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((e) => {
    console.error(e.message)
    process.exit(1)
  })
}
