// The parent's side of the load generator (bench/client.ts): fork it once, send commands, await answers.

import { fork, type ChildProcess } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import type { Command, FanoutOpenResult, FanoutRunResult, TurnsResult } from './client.js'

type ResultOf<C extends Command> = C extends { op: 'turns' } ? TurnsResult : C extends { op: 'fanoutOpen' } ? FanoutOpenResult : C extends { op: 'fanoutRun' | 'fanoutCollect' } ? FanoutRunResult : unknown

export class ClientProc {
  private child: ChildProcess
  private seq = 0
  private readonly pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>()

  constructor() {
    this.child = fork(fileURLToPath(new URL('./client.ts', import.meta.url)), [], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
    this.child.on('message', (m: { id: number; result?: unknown; error?: string }) => {
      const p = this.pending.get(m.id)
      if (!p) return
      this.pending.delete(m.id)
      if (m.error) p.reject(new Error(`client: ${m.error}`))
      else p.resolve(m.result)
    })
    this.child.on('exit', (code) => {
      for (const p of this.pending.values()) p.reject(new Error(`client process exited (${code})`))
      this.pending.clear()
    })
  }

  call<C extends Command>(cmd: C): Promise<ResultOf<C>> {
    const id = ++this.seq
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject })
      this.child.send({ id, cmd })
    })
  }

  get pid(): number | undefined {
    return this.child.pid
  }

  close(): void {
    this.child.disconnect()
  }
}
