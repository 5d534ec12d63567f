// WebSocket upgrade attempts in tests: whether the server accepted the upgrade, or the HTTP status
// (and JSON body) it refused it with.

import WebSocket from 'ws'

/** Opens a WebSocket; resolves 'open' or the HTTP status (and body) the server refused the upgrade with. */
export function wsAttempt(url: string, headers: Record<string, string> = {}): Promise<{ open: true; ws: WebSocket } | { open: false; status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers })
    ws.on('open', () => resolve({ open: true, ws }))
    ws.on('unexpected-response', (_req, res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (c: string) => (text += c))
      res.on('end', () => {
        let body: any
        try {
          body = JSON.parse(text)
        } catch {
          body = undefined
        }
        resolve({ open: false, status: res.statusCode ?? 0, body })
      })
    })
    ws.on('error', (e) => reject(e))
  })
}

/** The HTTP status of a refused upgrade (or 101 when it was accepted; the socket is then closed). */
export async function upgradeStatus(url: string, headers: Record<string, string> = {}): Promise<{ status: number; body: any }> {
  const r = await wsAttempt(url, headers)
  if (!r.open) return { status: r.status, body: r.body }
  r.ws.close()
  return { status: 101, body: undefined }
}
