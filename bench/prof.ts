// `--cpu-prof DIR`: a V8 CPU profile of the server (this process) over agentd's measured throughput
// windows only (not setup, not the floors), taken with node:inspector, one file per level, each then
// summarised by bench/profile-summary.ts into a .txt beside it.

import fs from 'node:fs'
import inspector from 'node:inspector'
import path from 'node:path'
import { summarize } from './profile-summary.js'

let session: inspector.Session | undefined

function post<T = unknown>(method: string, params?: Record<string, unknown>): Promise<T> {
  return new Promise((resolve, reject) => session!.post(method, params ?? {}, (err, res) => (err ? reject(err) : resolve(res as T))))
}

export async function profileStart(): Promise<void> {
  if (!session) {
    session = new inspector.Session()
    session.connect()
    await post('Profiler.enable')
    await post('Profiler.setSamplingInterval', { interval: 200 })
  }
  await post('Profiler.start')
}

/** Stops the profile and writes DIR/NAME.cpuprofile and its summary DIR/NAME.txt; returns the summary. */
export async function profileStop(dir: string, name: string): Promise<string> {
  const { profile } = await post<{ profile: unknown }>('Profiler.stop')
  fs.mkdirSync(dir, { recursive: true })
  const file = path.join(dir, `${name}.cpuprofile`)
  fs.writeFileSync(file, JSON.stringify(profile))
  const text = summarize(profile as never, 0)
  fs.writeFileSync(path.join(dir, `${name}.txt`), text)
  return text
}
