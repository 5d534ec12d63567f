// Hook dispatch on cordis (SPEC §7.1) and plugin loading (API.md §11): waterfalls run first
// registered outermost, next() delegates and returns the rest of the chain, returning without next()
// short-circuits; serial hooks run in order; contained emits survive throwing listeners; everything a
// plugin registered leaves with it; a plugin that fails to load names its module.

import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { createRoot, emitContained, unwrapService, type Hooks } from '../../src/hooks/index.js'
import { ToolRegistry } from '../../src/tools/index.js'
import { SystemPromptService } from '../../src/agent/index.js'
import { loadServerPlugins, PluginLoadError } from '../../src/plugins/index.js'

function root() {
  const r = createRoot()
  r.provide('tools', undefined, true)
  r.plugin(ToolRegistry)
  r.provide('systemPrompt', undefined, true)
  r.plugin(SystemPromptService)
  const hooks = (r as unknown as { hooks: Hooks }).hooks
  return { r, hooks }
}

describe('waterfalls and serial hooks', () => {
  it('run the first registered outermost; next() returns the inner result; no next() short-circuits', async () => {
    const { r, hooks } = root()
    const order: string[] = []
    r.plugin({ name: 'a', apply: (ctx: any) => ctx.hooks.waterfall('x', async (p: any, next: any) => { order.push('a>'); const v = await next(); order.push('<a'); return v + 1 }) })
    r.plugin({ name: 'b', apply: (ctx: any) => ctx.hooks.waterfall('x', async (p: any, next: any) => { order.push(`b:${p.n}`); return next({ n: p.n * 10 }) }) })
    const out = await hooks.runWaterfall('x', { n: 2 }, (p: { n: number }) => { order.push(`inner:${p.n}`); return p.n })
    expect(out).toBe(21)
    expect(order).toEqual(['a>', 'b:2', 'inner:20', '<a'])
    r.plugin({ name: 'c', apply: (ctx: any) => ctx.hooks.waterfall('y', () => 'short') })
    let inner = false
    expect(await hooks.runWaterfall('y', {}, () => { inner = true; return 'inner' })).toBe('short')
    expect(inner).toBe(false)
  })
  it('refuse a second next() from one listener', async () => {
    const { r, hooks } = root()
    r.plugin({ name: 'twice', apply: (ctx: any) => ctx.hooks.waterfall('z', async (_p: any, next: any) => { await next(); return next() }) })
    await expect(hooks.runWaterfall('z', {}, () => 1)).rejects.toThrow(/next\(\) called twice/)
  })
  it('bind the payload per listener plugin (each gets its own agent handle)', async () => {
    const { r, hooks } = root()
    const seen: string[] = []
    for (const name of ['p1', 'p2']) r.plugin({ name, apply: (ctx: any) => ctx.hooks.waterfall('w', (p: any, next: any) => { seen.push(p.agent); return next() }) })
    await hooks.runWaterfall('w', { agent: 'raw' }, () => 0, { bind: (p, plugin) => ({ ...(p as object), agent: `handle of ${plugin}` }) })
    expect(seen).toEqual(['handle of p1', 'handle of p2'])
  })
  it('serial listeners are awaited in registration order and a throw propagates', async () => {
    const { r, hooks } = root()
    const order: number[] = []
    r.plugin({ name: 's1', apply: (ctx: any) => ctx.hooks.serial('s', async () => { await new Promise((res) => setTimeout(res, 20)); order.push(1) }) })
    r.plugin({ name: 's2', apply: (ctx: any) => ctx.hooks.serial('s', () => { order.push(2) }) })
    await hooks.runSerial('s', {})
    expect(order).toEqual([1, 2])
    r.plugin({ name: 's3', apply: (ctx: any) => ctx.hooks.serial('s', () => { throw new Error('stop') }) })
    await expect(hooks.runSerial('s', {})).rejects.toThrow('stop')
  })
})

describe('contained emits and disposal', () => {
  it('a throwing listener is reported and the others still run', () => {
    const { r } = root()
    const got: string[] = []
    r.plugin({ name: 'bad', apply: (ctx: any) => ctx.on('agent/status', () => { throw new Error('boom') }) })
    r.plugin({ name: 'good', apply: (ctx: any) => ctx.on('agent/status', (p: any) => got.push(p.status)) })
    const errors: string[] = []
    emitContained(r, 'agent/status', [{ status: 'idle' }], (e, plugin) => errors.push(`${plugin}: ${(e as Error).message}`))
    expect(got).toEqual(['idle'])
    expect(errors).toEqual(['bad: boom'])
  })
  it('disposing a plugin removes its hooks, tools, prompt sections and listeners', async () => {
    const { r, hooks } = root()
    const fork = r.plugin({
      name: 'temp',
      apply(ctx: any) {
        ctx.hooks.waterfall('x', () => 'temp')
        ctx.hooks.serial('s', () => {})
        ctx.tools.register({ name: 'temp_tool', description: 'd', parameters: { type: 'object', properties: {} }, execute: () => ({ content: 'x' }) })
        ctx.systemPrompt.section('temp', 'Temp section.')
        ctx.on('agent/status', () => {})
      },
    })
    const tools = (r as any).tools as ToolRegistry
    const sp = (r as any).systemPrompt as SystemPromptService
    expect(await hooks.runWaterfall('x', {}, () => 'inner')).toBe('temp')
    expect(hooks.count('s')).toBe(1)
    expect(tools.get('temp_tool')).toBeDefined()
    expect(sp.sections.map((s) => s.name)).toEqual(['temp'])
    fork.dispose()
    expect(await hooks.runWaterfall('x', {}, () => 'inner')).toBe('inner')
    expect(hooks.count('s')).toBe(0)
    expect(tools.get('temp_tool')).toBeUndefined()
    expect(sp.sections).toEqual([])
    let called = false
    emitContained(r, 'agent/status', [{}], () => (called = true))
    expect(called).toBe(false)
  })

  it('the services the driver unwraps (no caller-tracking proxy) see what plugins register and lose it on disposal', async () => {
    const { r } = root()
    const raw = { hooks: unwrapService((r as any).hooks as Hooks), tools: unwrapService((r as any).tools as ToolRegistry), sp: unwrapService((r as any).systemPrompt as SystemPromptService) }
    expect(raw.hooks).not.toBe((r as any).hooks)
    expect(raw.hooks).toBeInstanceOf(Object.getPrototypeOf(raw.hooks).constructor)
    const fork = r.plugin({
      name: 'late',
      apply(ctx: any) {
        ctx.hooks.waterfall('x', (p: any, next: any) => next({ by: 'late' }))
        ctx.tools.register({ name: 'late_tool', description: 'd', parameters: { type: 'object', properties: {} }, execute: () => ({ content: 'x' }) })
        ctx.systemPrompt.section('late', 'Late section.')
      },
    })
    let seen: unknown
    await raw.hooks.runWaterfall('x', {}, (p) => (seen = p), { bind: (p, plugin) => ({ ...(p as object), plugin }) })
    expect(seen).toEqual({ by: 'late' })
    expect(raw.tools.get('late_tool')).toBeDefined()
    expect(raw.sp.sections.map((x) => x.name)).toEqual(['late'])
    fork.dispose()
    expect(await raw.hooks.runWaterfall('x', { by: 'none' }, (p) => p)).toEqual({ by: 'none' })
    expect(raw.tools.get('late_tool')).toBeUndefined()
    expect(raw.sp.sections).toEqual([])
  })
})

describe('server plugins from AGENTD_PLUGINS', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agentd-plugins-'))
  const write = (name: string, text: string) => {
    const f = path.join(dir, name)
    fs.writeFileSync(f, text)
    return f
  }
  it('loads object and function plugins in order; a function plugin is named after its file when anonymous', async () => {
    const { r } = root()
    const a = write('alpha.mjs', "export default { name: 'alpha-plugin', apply(ctx) { ctx.systemPrompt.section('a', 'A') } }")
    const b = write('beta.mjs', "export default (ctx) => { ctx.systemPrompt.section('b', 'B') }")
    expect(await loadServerPlugins(r, [a, b])).toEqual(['alpha-plugin', 'beta'])
    const sp = (r as any).systemPrompt as SystemPromptService
    expect(sp.sections.map((s) => [s.name, s.plugin])).toEqual([['a', 'alpha-plugin'], ['b', 'beta']])
  })
  it('a plugin that fails to load stops the start with a message naming the module', async () => {
    const { r } = root()
    const broken = write('broken.mjs', "export default { name: 'broken', apply() { throw new Error('cannot start') } }")
    await expect(loadServerPlugins(r, [broken])).rejects.toThrow(PluginLoadError)
    await expect(loadServerPlugins(r, [broken])).rejects.toThrow(/broken\.mjs.*cannot start/)
    const missing = path.join(dir, 'missing.mjs')
    await expect(loadServerPlugins(r, [missing])).rejects.toThrow(/missing\.mjs/)
    const shapeless = write('shapeless.mjs', 'export default 42')
    await expect(loadServerPlugins(r, [shapeless])).rejects.toThrow(/shapeless\.mjs/)
  })
})
