// The server process: config, start, graceful shutdown (SIGTERM drains drivers, SPEC §18.12). main.ts loads it.

import { loadConfig, ConfigError, type Config } from './config.js'
import { startApp } from './app.js'

/** A start that cannot go on: one line on stderr. A bad setting names its variable and exits 2. */
function fail(e: unknown, config?: Config): never {
  if (e instanceof ConfigError) {
    process.stderr.write(`agentd: ${e.message}\n`)
    process.exit(2)
  }
  const message = (e as Error)?.message?.split('\n')[0] || String(e)
  // the stack helps a bug report; it is there for whoever asks for it
  const debug = config && ['debug', 'trace'].includes(config.logLevel)
  process.stderr.write(debug ? `agentd failed to start: ${(e as Error)?.stack ?? message}\n` : `agentd failed to start: ${message} (LOG_LEVEL=debug shows where)\n`)
  process.exit(1)
}

async function main(): Promise<void> {
  let config: Config
  try {
    config = loadConfig()
  } catch (e) {
    fail(e)
  }
  const app = await startApp(config).catch((e) => fail(e, config))
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

main().catch((e) => fail(e))
