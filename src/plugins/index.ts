// Plugins: the built-in ones (AGENTD_BUILTIN_PLUGINS) and server plugins from AGENTD_PLUGINS (API.md
// §11), each a cordis plugin whose hooks, tools and prompt sections leave with it.

import path from 'node:path'
import { pathToFileURL } from 'node:url'
import type { Context } from 'cordis'
import llmRetry from './llm-retry.js'
import compaction from './compaction.js'
import toolResultPruner from './tool-result-pruner.js'

export { compactorOf } from './compaction.js'

type PluginObject = { name?: string; apply: (ctx: Context, config?: any) => unknown }
type PluginFunction = ((ctx: Context, config?: unknown) => unknown) & { name?: string }

export const BUILTIN_PLUGINS: Record<string, PluginObject> = {
  'llm-retry': llmRetry,
  compaction,
  'tool-result-pruner': toolResultPruner,
}

export class PluginLoadError extends Error {
  constructor(readonly module: string, cause: unknown) {
    super(`plugin ${module} failed to load: ${(cause as Error)?.message ?? String(cause)}`)
    this.name = 'PluginLoadError'
    this.cause = cause
  }
}

/** Applies a plugin under a name; throws what its apply threw (cordis would only log it). */
export function applyPlugin(root: Context, name: string, plugin: PluginObject | PluginFunction, config?: unknown): void {
  let failure: unknown
  let applied = false
  root.plugin(
    {
      name,
      apply(ctx: Context, cfg: unknown) {
        applied = true
        try {
          const r = typeof plugin === 'function' ? plugin(ctx, cfg) : plugin.apply(ctx, cfg)
          if (r && typeof (r as Promise<unknown>).then === 'function') (r as Promise<unknown>).catch((e) => (failure = e))
        } catch (e) {
          failure = e
        }
      },
    },
    config,
  )
  if (!applied) throw new Error(`plugin ${name} was not applied`)
  if (failure) throw failure
}

/** The built-in plugins, in a fixed order whatever the list order, each with its settings. */
export function loadBuiltinPlugins(root: Context, names: string[], settings: Record<string, unknown> = {}): void {
  for (const n of Object.keys(BUILTIN_PLUGINS)) if (names.includes(n)) applyPlugin(root, BUILTIN_PLUGINS[n].name ?? n, BUILTIN_PLUGINS[n], settings[n])
}

/** Loads AGENTD_PLUGINS modules in order; a failure names the module. */
export async function loadServerPlugins(root: Context, modules: string[]): Promise<string[]> {
  const names: string[] = []
  for (const m of modules) {
    const abs = path.resolve(m)
    try {
      const mod = await import(pathToFileURL(abs).href)
      const p = mod.default as PluginObject | PluginFunction | undefined
      if (!p || (typeof p !== 'function' && typeof (p as PluginObject).apply !== 'function')) throw new Error('its default export must be a function (ctx, config) or an object {name, apply(ctx, config)}')
      const own = typeof p === 'function' ? p.name : (p as PluginObject).name
      // an anonymous default export is named 'default' (or a bundler's __…__ name): use the file name
      const name = own && own !== 'default' && !own.startsWith('__') ? own : path.basename(abs).replace(/\.[^.]+$/, '')
      applyPlugin(root, name, p)
      names.push(name)
    } catch (e) {
      throw new PluginLoadError(m, e)
    }
  }
  return names
}
