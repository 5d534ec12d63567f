// Process entry: config, start, graceful shutdown (SIGTERM drains drivers, SPEC §18.12).

import { loadConfig, ConfigError } from './config.js'
import { startApp } from './app.js'

async function main(): Promise<void> {
  let config
  try {
    config = loadConfig()
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`agentd: ${e.message}\n`)
      process.exit(2)
    }
    throw e
  }
  const app = await startApp(config)
  let closing = false
  const shutdown = async (signal: string) => {
    if (closing) return
    closing = true
    app.log.info({ signal }, 'shutting down: no new claims, running turns get a grace period, then leases are released')
    const hard = setTimeout(() => {
      app.log.error('shutdown took too long; exiting')
      process.exit(1)
    }, config.shutdownGraceMs + 10000)
    hard.unref()
    try {
      await app.close()
      process.exit(0)
    } catch (e) {
      app.log.error({ err: e }, 'shutdown failed')
      process.exit(1)
    }
  }
  process.on('SIGTERM', () => void shutdown('SIGTERM'))
  process.on('SIGINT', () => void shutdown('SIGINT'))
  process.on('unhandledRejection', (e) => app.log.error({ err: e }, 'unhandled rejection'))
}

main().catch((e) => {
  process.stderr.write(`agentd failed to start: ${(e as Error)?.stack ?? e}\n`)
  process.exit(1)
})
