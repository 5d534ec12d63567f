import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { DEFAULT_RETRY_POLICY, loadModelsFile, parseModelsFile } from '../../src/llm/index.js'

const good = () => ({
  providers: {
    local: {
      api: 'openai-completions',
      baseUrl: 'http://127.0.0.1:11434/v1',
      apiKey: 'env:LOCAL_API_KEY',
      models: [{ id: 'qwen3', contextWindow: 32768, maxTokens: 4096, reasoning: false }],
    },
  },
})

describe('models file (API.md §2)', () => {
  it('accepts the documented example', () => {
    const f = parseModelsFile(good())
    expect(f.providers).toHaveLength(1)
    const p = f.providers[0]!
    expect(p).toMatchObject({ name: 'local', api: 'openai-completions', baseUrl: 'http://127.0.0.1:11434/v1', apiKey: { env: 'LOCAL_API_KEY' } })
    expect(p.models).toEqual([{ id: 'qwen3', contextWindow: 32768, maxTokens: 4096, reasoning: false, input: ['text'] }])
    expect(p.retryPolicy).toEqual(DEFAULT_RETRY_POLICY)
  })

  it('accepts a literal key, optional fields, prices and a retry policy', () => {
    const f = parseModelsFile({
      providers: {
        a: {
          api: 'anthropic-messages',
          baseUrl: 'https://api.anthropic.com',
          apiKey: 'sk-literal',
          headers: { 'x-team': 'blue' },
          compat: { supportsEagerToolInputStreaming: false },
          retry: { mode: 'always', maxRetries: 2, codes: ['SERVER'] },
          models: [{ id: 'claude-x', name: 'Claude X', reasoning: true, input: ['text', 'image'], cost: { input: 3, output: 15 } }],
        },
      },
    })
    const p = f.providers[0]!
    expect(p.apiKey).toEqual({ literal: 'sk-literal' })
    expect(p.retryPolicy).toEqual({ ...DEFAULT_RETRY_POLICY, mode: 'always', maxRetries: 2, codes: ['SERVER'] })
    expect(p.models[0]!.cost).toEqual({ input: 3, output: 15, cacheRead: 0, cacheWrite: 0 })
  })

  const unknownFields: Array<[string, (f: any) => void, string]> = [
    ['top level', (f) => (f.provider = {}), 'provider: unknown field'],
    ['provider', (f) => (f.providers.local.baseURL = 'x'), 'providers.local.baseURL: unknown field'],
    ['model', (f) => (f.providers.local.models[0].contxtWindow = 1), 'providers.local.models[0].contxtWindow: unknown field'],
    ['cost', (f) => (f.providers.local.models[0].cost = { input: 1, output: 1, cached: 1 }), 'providers.local.models[0].cost.cached: unknown field'],
    ['retry', (f) => (f.providers.local.retry = { maxRetry: 1 }), 'providers.local.retry.maxRetry: unknown field'],
    ['compat', (f) => (f.providers.local.compat = { supportsStoree: true }), 'providers.local.compat.supportsStoree: unknown field'],
  ]
  it.each(unknownFields)('rejects an unknown field (%s) naming its path', (_where, mutate, message) => {
    const f = good()
    mutate(f)
    expect(() => parseModelsFile(f)).toThrow(message)
  })

  const badValues: Array<[string, (f: any) => void, string]> = [
    ['missing providers', (f) => delete f.providers, 'providers: required'],
    ['unknown api', (f) => (f.providers.local.api = 'carrier-pigeon'), 'providers.local.api: unknown pi-ai API'],
    ['relative baseUrl', (f) => (f.providers.local.baseUrl = '/v1'), 'providers.local.baseUrl: must be an absolute URL'],
    ['empty env name', (f) => (f.providers.local.apiKey = 'env:'), 'providers.local.apiKey: env:NAME needs a variable name'],
    ['no models', (f) => (f.providers.local.models = []), 'providers.local.models: must be a non-empty array'],
    ['model without id', (f) => delete f.providers.local.models[0].id, 'providers.local.models[0].id: must be a non-empty string'],
    ['fractional maxTokens', (f) => (f.providers.local.models[0].maxTokens = 1.5), 'providers.local.models[0].maxTokens: must be a positive integer'],
    ['string reasoning', (f) => (f.providers.local.models[0].reasoning = 'yes'), 'providers.local.models[0].reasoning: must be true or false'],
    ['duplicate id', (f) => f.providers.local.models.push({ id: 'qwen3' }), 'providers.local.models[1].id: duplicate model id'],
    ['slash in provider', (f) => (f.providers['a/b'] = f.providers.local), 'providers.a/b: a provider name must be non-empty and contain no "/"'],
    ['unknown retry code', (f) => (f.providers.local.retry = { codes: ['NOPE'] }), 'providers.local.retry.codes[0]: must be one of'],
  ]
  it.each(badValues)('rejects %s', (_name, mutate, message) => {
    const f = good()
    mutate(f)
    expect(() => parseModelsFile(f)).toThrow(message)
  })

  it('loadModelsFile names the file, and reports bad JSON', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agentd-models-'))
    const file = path.join(dir, 'models.json')
    const f = good() as any
    f.providers.local.models[0].contxtWindow = 1
    fs.writeFileSync(file, JSON.stringify(f))
    expect(() => loadModelsFile(file)).toThrow(`models file ${file}: providers.local.models[0].contxtWindow: unknown field`)
    fs.writeFileSync(file, '{ nope')
    expect(() => loadModelsFile(file)).toThrow(/not valid JSON/)
    fs.writeFileSync(file, JSON.stringify(good()))
    expect(loadModelsFile(file).providers[0]!.name).toBe('local')
    fs.rmSync(dir, { recursive: true, force: true })
  })
})
