// A TCP proxy in front of PostgreSQL that can be cut and restored: the database becomes unreachable
// for the server exactly as when its host goes away (connections reset, new ones refused).

import net from 'node:net'

export class CuttableProxy {
  private server?: net.Server
  private readonly sockets = new Set<net.Socket>()
  port = 0
  constructor(private readonly target: { host: string; port: number }) {}

  /** Listens (on the same port again after a cut). */
  async open(): Promise<void> {
    if (this.server) return
    this.server = net.createServer((client) => {
      const upstream = net.connect(this.target.port, this.target.host)
      for (const s of [client, upstream]) {
        this.sockets.add(s)
        s.on('close', () => this.sockets.delete(s))
        s.on('error', () => {})
      }
      client.pipe(upstream)
      upstream.pipe(client)
      client.on('close', () => upstream.destroy())
      upstream.on('close', () => client.destroy())
    })
    await new Promise<void>((resolve, reject) => {
      this.server!.once('error', reject)
      this.server!.listen(this.port, '127.0.0.1', () => resolve())
    })
    this.port = (this.server.address() as net.AddressInfo).port
  }

  /** Refuses new connections and resets the open ones. */
  async cut(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server?.close(() => resolve()) ?? resolve())
    for (const s of this.sockets) s.destroy()
    await closed
    this.server = undefined
  }

  /** The same URL through the proxy. */
  url(databaseUrl: string): string {
    const u = new URL(databaseUrl)
    u.hostname = '127.0.0.1'
    u.port = String(this.port)
    return u.toString()
  }
}
