// Hook dispatch on cordis (SPEC §7.1). cordis has emit/parallel/serial/bail but no waterfall, so the
// Hooks service adds Koa-style waterfalls and serial hooks whose registrations live in the calling
// plugin's scope (ctx.effect), and contained emits for notifications.

import { Context, Service } from 'cordis'

export type Next<T> = (payload?: unknown) => Promise<T>
export type WaterfallListener<T = unknown> = (payload: any, next: Next<T>, ...rest: any[]) => T | Promise<T>
export type SerialListener = (payload: any) => unknown | Promise<unknown>

export interface Registration<F> {
  readonly fn: F
  /** the registering plugin's name (for default message sources, SPEC/API.md §11) */
  readonly plugin: string
}

/** Payload rewriting per listener: e.g. an Agent handle whose default source names the plugin. */
export type Bind = (payload: any, plugin: string) => any

export class Hooks extends Service {
  private readonly waterfalls = new Map<string, Registration<WaterfallListener>[]>()
  private readonly serials = new Map<string, Registration<SerialListener>[]>()

  constructor(ctx: Context) {
    super(ctx, 'hooks', true)
  }

  /** Registers a waterfall listener in the caller's plugin scope; returns its disposer. */
  waterfall(name: string, fn: WaterfallListener): () => void {
    return this.add(this.waterfalls, name, fn)
  }

  /** Registers a serial listener (awaited in registration order, no next()). */
  serial(name: string, fn: SerialListener): () => void {
    return this.add(this.serials, name, fn)
  }

  private add<F>(map: Map<string, Registration<F>[]>, name: string, fn: F): () => void {
    if (typeof fn !== 'function') throw new TypeError(`hook ${name}: listener must be a function`)
    const reg: Registration<F> = { fn, plugin: pluginName(this.ctx) }
    const dispose = this.ctx.effect(() => {
      let list = map.get(name)
      if (!list) map.set(name, (list = []))
      list.push(reg)
      return () => {
        const l = map.get(name)
        const i = l ? l.indexOf(reg) : -1
        if (i >= 0) l!.splice(i, 1)
      }
    })
    return typeof dispose === 'function' ? dispose : () => (dispose as { dispose(): void }).dispose()
  }

  count(name: string): number {
    return (this.waterfalls.get(name)?.length ?? 0) + (this.serials.get(name)?.length ?? 0)
  }

  /**
   * Runs the chain: first registered outermost; next() runs the rest down to `innermost`, whose
   * result it returns; a listener that returns without calling next() short-circuits.
   */
  async runWaterfall<T>(name: string, payload: unknown, innermost: (payload: any) => T | Promise<T>, opts: { bind?: Bind; rest?: unknown[] } = {}): Promise<T> {
    const chain = [...(this.waterfalls.get(name) ?? [])]
    const rest = opts.rest ?? []
    const run = async (i: number, p: unknown): Promise<T> => {
      if (i >= chain.length) return innermost(p)
      const reg = chain[i]
      let called = false
      const next: Next<T> = (np?: unknown) => {
        if (called) return Promise.reject(new Error(`hook ${name}: next() called twice by plugin ${reg.plugin}`))
        called = true
        return run(i + 1, np === undefined ? p : np)
      }
      const arg = opts.bind ? opts.bind(p, reg.plugin) : p
      return (await reg.fn(arg, next as Next<unknown>, ...rest)) as T
    }
    return run(0, payload)
  }

  /** Awaits every serial listener in registration order; a throw propagates. */
  async runSerial(name: string, payload: unknown, opts: { bind?: Bind } = {}): Promise<void> {
    for (const reg of [...(this.serials.get(name) ?? [])]) await reg.fn(opts.bind ? opts.bind(payload, reg.plugin) : payload)
  }
}

/** The plugin name a context belongs to ('' for the root); a context's plugin never changes. */
const names = new WeakMap<Context, string>()
export function pluginName(ctx: Context): string {
  let n = names.get(ctx)
  if (n === undefined) names.set(ctx, (n = (ctx.scope?.runtime as { name?: string } | undefined)?.name ?? ctx.name ?? ''))
  return n
}

/**
 * A cordis service itself, not the proxy a context hands out. The proxy tracks the calling context so
 * that what a plugin registers goes with it; code that only calls a service (the driver) may skip it.
 */
export function unwrapService<T>(service: T): T {
  return ((service as { [k: symbol]: unknown } | undefined)?.[Symbol.for('cordis.original')] as T | undefined) ?? service
}

/**
 * A contained emit (SPEC §3.7): every cordis listener of `name` gets the arguments; a throwing
 * listener is reported and ignored.
 */
type HookTable = Record<string, Array<{ ctx: Context; callback: (...a: unknown[]) => unknown }>>
const tables = new WeakMap<Context, HookTable>()
/** The root's listener table, looked up once (a context's properties go through its proxy). */
function hookTable(root: Context): HookTable {
  let t = tables.get(root)
  if (!t) tables.set(root, (t = (root.lifecycle as unknown as { _hooks: HookTable })._hooks))
  return t
}

export function emitContained(root: Context, name: string, args: unknown[] | ((plugin: string) => unknown[]), onError?: (err: unknown, plugin: string) => void): void {
  const hooks = hookTable(root)[name]
  if (!hooks?.length) return
  for (const h of [...hooks]) {
    try {
      const r = h.callback.apply(root, typeof args === 'function' ? args(pluginName(h.ctx)) : args)
      if (r && typeof (r as Promise<unknown>).then === 'function') (r as Promise<unknown>).catch((e) => onError?.(e, pluginName(h.ctx)))
    } catch (e) {
      onError?.(e, pluginName(h.ctx))
    }
  }
}

/** Whether anything listens for `name` (lets hot paths skip building payloads). */
export function hasListeners(root: Context, name: string): boolean {
  return (hookTable(root)[name]?.length ?? 0) > 0
}

/** A root context with the hooks service provided as a built-in (plugins need no `inject`). */
export function createRoot(): Context {
  const root = new Context()
  root.provide('hooks', undefined, true)
  root.plugin(Hooks)
  return root
}

export { Context, Service }
