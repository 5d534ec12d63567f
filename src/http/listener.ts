// The listening socket of API.md §1 (PORT, HOST), bound before a start writes anything (no data
// directory, no migration, no tenant key): a busy port stops the start with one line, and the port is
// held from then on, so no other process can take it between that check and serving. Until the app
// serves, requests are answered `503 unavailable` (GET /healthz 200: the process is up).

import http from 'node:http'
import type { Socket } from 'node:net'
import { ConfigError, type Config } from '../config.js'
import { ApiError } from '../errors.js'
import { closeInStages, handleClientError } from './errors.js'

/** fastify's own default, which it would set on a server it made itself */
const KEEP_ALIVE_MS = 72_000

export class Listener {
  readonly server: http.Server
  private app?: http.RequestListener

  constructor(config: Pick<Config, 'requestTimeoutMs'>) {
    this.server = http.createServer(
      {
        // a client gets AGENTD_REQUEST_TIMEOUT_MS to send its whole request (a slow-loris body or header
        // is cut with a §10 answer by handleClientError); Node checks that this often
        requestTimeout: config.requestTimeoutMs,
        headersTimeout: Math.min(60_000, config.requestTimeoutMs),
        connectionsCheckingInterval: Math.max(100, Math.min(5000, Math.floor(config.requestTimeoutMs / 4))),
        keepAliveTimeout: KEEP_ALIVE_MS,
        // Node answers a missing Host with an empty 400 of its own; connectionsPlugin answers it instead
        requireHostHeader: false,
        // API.md §18: a token up to 8 KiB (and a longer one, to refuse with 401) fits with room to spare
        maxHeaderSize: 32 * 1024,
      },
      (req, res) => (this.app ? this.app(req, res) : starting(req, res)),
    )
    this.server.on('clientError', handleClientError)
    // Node closes a connection after its last answer (the client asked for close, or the answer says
    // close) with socket.destroySoon(), which resets a client still sending its body; close in stages
    this.server.on('connection', (socket: Socket) => {
      socket.destroySoon = () => closeInStages(socket)
    })
  }

  /** Binds HOST:PORT now; a port or host that cannot be had is a ConfigError naming its variable. */
  async bind(port: number, host: string): Promise<void> {
    const err = await new Promise<NodeJS.ErrnoException | undefined>((resolve) => {
      this.server.once('error', resolve)
      this.server.listen({ port, host }, () => {
        this.server.removeListener('error', resolve)
        resolve(undefined)
      })
    })
    if (!err) return
    const at = `${host.includes(':') ? `[${host}]` : host}:${port}`
    if (err.code === 'EADDRINUSE') throw new ConfigError(`PORT: ${at} is already in use by another process; stop it or choose another PORT`)
    if (err.code === 'EACCES') throw new ConfigError(`PORT: ${at} needs privileges this process does not have (ports below 1024 usually do); choose another PORT`)
    if (err.code === 'EADDRNOTAVAIL') throw new ConfigError(`HOST: ${host} is not an address of this machine`)
    if (err.code === 'ENOTFOUND' || err.code === 'EAI_AGAIN') throw new ConfigError(`HOST: ${host} does not resolve to an address`)
    throw err
  }

  /**
   * fastify's serverFactory: its server is this one. fastify's listen() takes over the bound port (or
   * binds it, when bind() was not called), and from then on its handler answers every request.
   */
  readonly serverFactory = (handler: http.RequestListener): http.Server => {
    const server = this.server
    // fastify adds its clientErrorHandler to the server it is given
    server.removeListener('clientError', handleClientError)
    const listen = server.listen.bind(server)
    server.listen = ((...args: Parameters<http.Server['listen']>) => {
      this.app = handler
      if (!server.listening) return listen(...args)
      process.nextTick(() => server.emit('listening'))
      return server
    }) as http.Server['listen']
    return server
  }

  /** Releases the port of a start that failed before fastify took it over. */
  close(): Promise<void> {
    if (!this.server.listening) return Promise.resolve()
    return new Promise((resolve) => {
      this.server.close(() => resolve())
      this.server.closeAllConnections()
    })
  }
}

function starting(req: http.IncomingMessage, res: http.ServerResponse): void {
  const path = (req.url ?? '').split('?')[0]
  if (req.method === 'GET' && path === '/healthz') return void res.writeHead(200, { 'content-type': 'application/json; charset=utf-8' }).end('{"ok":true}')
  const body = JSON.stringify(new ApiError('unavailable', 'the server is starting; try again in a moment').toJSON())
  res.writeHead(503, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body), 'retry-after': '1' }).end(body)
}
