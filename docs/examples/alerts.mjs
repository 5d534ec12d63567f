// Tells a webhook when a turn ends in an error. `session/event` listeners see every event after it is
// stored, in the process that stored it; what they do cannot change or delay the session.
// Configure with ALERT_URL=https://… (the plugin does nothing without it).

export default function alerts(ctx) {
  const url = process.env.ALERT_URL
  if (!url) return
  ctx.on('session/event', (event) => {
    if (event.type !== 'turn/end' || event.data.reason.kind !== 'error') return
    const body = { sessionId: event.sessionId, turn: event.data.turn, seq: event.seq, error: event.data.reason.error }
    // never awaited by agentd; a failure here is this plugin's to handle
    fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }).catch((e) => {
      console.error(`alerts: could not reach ${url}: ${e.message}`)
    })
  })
}
