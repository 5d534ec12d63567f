// The LlmService of llm/types.ts: route resolution (models file, extra registered models, pi-ai's
// catalogue, faux/echo), prepareCall (SPEC §8.3) and the one-shot prepared stream.

import { getEnvApiKey, getModel, type Api, type KnownProvider, type Model, type ThinkingLevel } from '@mariozechner/pi-ai'
import type { LlmCallConfig, LlmFailure, StreamChunk } from '../session/index.js'
import { runAdapter, STOP_APIS } from './adapter.js'
import { toPiContext } from './convert.js'
import { ensureFauxRegistered, FAUX_ECHO, FAUX_ECHO_MODEL } from './faux.js'
import { loadModelsFile, parseModelsFile, type ModelsFile, type ProviderEntry } from './models.js'
import { DEFAULT_RETRY_POLICY, LlmError, ModelConfigError, type LlmRequest, type LlmService, type ModelInfo, type PreparedCall, type RetryPolicy } from './types.js'

/** A pino-like logger; only debug is used, and never with credentials. */
export interface LlmLog {
  debug(obj: object, msg?: string): void
}

export interface LlmServiceOptions {
  /** path of the models file (API.md §2); default env.AGENTD_MODELS */
  modelsFile?: string
  /** an already parsed models file (validated like the file); wins over `modelsFile` */
  models?: unknown
  /** pi-ai models to route besides the file (tests: e.g. pi-ai's registerFauxProvider().models) */
  extraModels?: readonly Model<Api>[]
  /** default env.AGENTD_DEFAULT_MODEL, else the first model of the file, else faux/echo */
  defaultModel?: string
  /** where env:NAME keys are read, at every call; default process.env */
  env?: NodeJS.ProcessEnv
  log?: LlmLog
}

export const THINKING_LEVELS: readonly ThinkingLevel[] = ['minimal', 'low', 'medium', 'high', 'xhigh']

/** One resolved route: the pi-ai model plus where its key comes from and its retry policy. */
interface Route {
  info: ModelInfo
  model: Model<Api>
  retryPolicy: RetryPolicy
  apiKey: (env: NodeJS.ProcessEnv) => string | undefined | { failure: LlmFailure }
}

/** Splits `provider/modelId` at the first '/'. */
export function splitModelRef(ref: string): { provider: string; model: string } | undefined {
  const at = ref.indexOf('/')
  if (at <= 0 || at === ref.length - 1) return undefined
  return { provider: ref.slice(0, at), model: ref.slice(at + 1) }
}

export function createLlmService(opts: LlmServiceOptions = {}): LlmService {
  const env = opts.env ?? process.env
  const log = opts.log
  ensureFauxRegistered()
  const modelsPath = opts.modelsFile ?? (env.AGENTD_MODELS || undefined)
  let file: ModelsFile | undefined
  try {
    file = opts.models !== undefined ? parseModelsFile(opts.models) : modelsPath ? loadModelsFile(modelsPath) : undefined
  } catch (e) {
    throw new ModelConfigError('AGENTD_MODELS', (e as Error).message)
  }

  const fileRoutes = new Map<string, Route>()
  for (const p of file?.providers ?? []) for (const m of p.models) fileRoutes.set(`${p.name}/${m.id}`, fileRoute(p, m.id))

  const resolve = (provider: string, modelId: string): Route | undefined => {
    const fromFile = fileRoutes.get(`${provider}/${modelId}`)
    if (fromFile) return fromFile
    const extra = opts.extraModels?.find((m) => m.provider === provider && m.id === modelId)
    if (extra) return piRoute(extra)
    const catalogued = getModel(provider as KnownProvider, modelId as never) as Model<Api> | undefined
    if (catalogued) return piRoute(catalogued)
    if (`${provider}/${modelId}` === FAUX_ECHO) return { ...piRoute(FAUX_ECHO_MODEL), apiKey: () => undefined }
    return undefined
  }
  const resolveRef = (ref: string) => {
    const r = splitModelRef(ref)
    return r ? resolve(r.provider, r.model) : undefined
  }

  const firstFileModel = file?.providers[0] ? `${file.providers[0].name}/${file.providers[0].models[0]!.id}` : undefined
  const defaultModel = opts.defaultModel ?? (env.AGENTD_DEFAULT_MODEL || undefined) ?? firstFileModel ?? FAUX_ECHO
  if (!resolveRef(defaultModel)) throw new ModelConfigError('AGENTD_DEFAULT_MODEL', `default model ${JSON.stringify(defaultModel)} does not resolve (want provider/modelId from the models file, pi-ai's catalogue or faux/echo)`)

  return {
    defaultModel,
    resolveModel: (ref) => {
      const r = resolveRef(ref)
      return r ? { ...r.info } : undefined
    },
    contextWindow: (provider, model) => resolve(provider, model)?.info.contextWindow,
    async prepareCall(proposed, signal) {
      signal.throwIfAborted()
      const route = typeof proposed?.provider === 'string' && typeof proposed.model === 'string' ? resolve(proposed.provider, proposed.model) : undefined
      if (!route) {
        throw new LlmError({ code: 'NO_ADAPTER', message: `no model route for ${JSON.stringify(`${proposed?.provider}/${proposed?.model}`)}` })
      }
      const { config, adapterDefaults } = completeConfig(proposed, route)
      return prepared(route, config, adapterDefaults, env, log)
    },
  }
}

function fileRoute(p: ProviderEntry, modelId: string): Route {
  const m = p.models.find((x) => x.id === modelId)!
  const model = {
    id: m.id,
    name: m.name ?? m.id,
    api: p.api,
    provider: p.name,
    baseUrl: p.baseUrl,
    reasoning: m.reasoning,
    input: m.input,
    cost: m.cost ?? { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
    // pi-ai wants numbers; 0 means "not configured" to its helpers
    contextWindow: m.contextWindow ?? 0,
    maxTokens: m.maxTokens ?? 0,
  } as Model<Api>
  if (p.headers) model.headers = { ...p.headers }
  if (p.compat) (model as { compat?: unknown }).compat = p.compat
  const info: ModelInfo = { provider: p.name, model: m.id, api: p.api, reasoning: m.reasoning }
  if (m.contextWindow !== undefined) info.contextWindow = m.contextWindow
  if (m.maxTokens !== undefined) info.maxTokens = m.maxTokens
  const spec = p.apiKey
  return {
    info,
    model,
    retryPolicy: p.retryPolicy,
    apiKey: (env) => {
      // read at every call, never cached, so a rotated key takes effect on the next attempt
      if (spec && 'literal' in spec) return spec.literal
      const name = spec?.env
      const key = name ? env[name] : getEnvApiKey(p.name)
      if (key) return key
      const message = name ? `API key variable ${name} is not set (provider ${p.name})` : `no API key for provider ${p.name}: set apiKey in the models file`
      return { failure: { code: 'AUTH', message } }
    },
  }
}

function piRoute(model: Model<Api>): Route {
  const info: ModelInfo = { provider: model.provider, model: model.id, api: model.api, reasoning: model.reasoning }
  if (model.contextWindow > 0) info.contextWindow = model.contextWindow
  if (model.maxTokens > 0) info.maxTokens = model.maxTokens
  return {
    info,
    model,
    retryPolicy: DEFAULT_RETRY_POLICY,
    // pi-ai's usual variable (OPENAI_API_KEY, …); without one pi-ai reports the missing key (→ AUTH)
    apiKey: () => getEnvApiKey(model.provider),
  }
}

/** Validates a proposed config and fills adapter defaults (SPEC §8.3); throws a plain Error when invalid. */
function completeConfig(proposed: LlmCallConfig, route: Route): { config: Readonly<LlmCallConfig>; adapterDefaults?: { maxTokens?: true } } {
  const bad = (why: string): never => {
    throw new Error(`invalid model call config for ${proposed.provider}/${proposed.model}: ${why}`)
  }
  const { maxTokens, reasoningEffort, temperature, stop } = proposed
  if (maxTokens !== undefined && (typeof maxTokens !== 'number' || !Number.isSafeInteger(maxTokens) || maxTokens <= 0)) bad('maxTokens must be a positive integer')
  if (reasoningEffort !== undefined && !THINKING_LEVELS.includes(reasoningEffort as ThinkingLevel)) bad(`reasoningEffort must be one of ${THINKING_LEVELS.join(', ')}`)
  if (temperature !== undefined && (typeof temperature !== 'number' || !Number.isFinite(temperature))) bad('temperature must be a finite number')
  if (stop !== undefined) {
    if (!Array.isArray(stop) || stop.some((s) => typeof s !== 'string' || s === '')) bad('stop must be an array of non-empty strings')
    if (stop.length > 0 && !STOP_APIS.has(route.info.api)) bad(`stop sequences are not supported on api ${route.info.api}`)
  }
  const config: LlmCallConfig = { ...proposed }
  if (stop !== undefined) config.stop = Object.freeze([...stop]) as string[]
  let adapterDefaults: { maxTokens?: true } | undefined
  if (maxTokens === undefined && route.info.maxTokens !== undefined) {
    config.maxTokens = route.info.maxTokens
    adapterDefaults = { maxTokens: true }
  }
  return { config: Object.freeze(config), ...(adapterDefaults ? { adapterDefaults: Object.freeze(adapterDefaults) } : {}) }
}

const CONFIG_FIELDS = ['provider', 'model', 'maxTokens', 'reasoningEffort', 'temperature', 'stop'] as const

function prepared(route: Route, config: Readonly<LlmCallConfig>, adapterDefaults: { maxTokens?: true } | undefined, env: NodeJS.ProcessEnv, log: LlmLog | undefined): PreparedCall {
  let used = false
  const context = route.info.contextWindow !== undefined ? { contextWindow: route.info.contextWindow } : {}
  const call: PreparedCall = {
    config,
    ...(adapterDefaults ? { adapterDefaults } : {}),
    retryPolicy: route.retryPolicy,
    context: Object.freeze(context),
    stream(request: LlmRequest): AsyncIterable<StreamChunk> {
      if (used) throw new Error('this prepared call was already streamed; prepare a new one for each attempt')
      used = true
      for (const k of CONFIG_FIELDS) {
        if (JSON.stringify(request[k]) !== JSON.stringify(config[k])) {
          throw new Error(`request ${k} ${JSON.stringify(request[k])} differs from the prepared config's ${JSON.stringify(config[k])}`)
        }
      }
      if (route.info.api === FAUX_ECHO_MODEL.api) ensureFauxRegistered()
      const adapterCall = {
        model: route.model,
        context: () => toPiContext(request.messages, request.tools, route.model),
        signal: request.signal,
        // credentials are resolved when the attempt is dispatched, never earlier
        apiKey: route.apiKey(env),
        sessionId: request.sessionId,
        log: log ?? undefined,
        ...(config.maxTokens !== undefined ? { maxTokens: config.maxTokens } : {}),
        ...(config.temperature !== undefined ? { temperature: config.temperature } : {}),
        ...(config.reasoningEffort !== undefined ? { reasoning: config.reasoningEffort as ThinkingLevel } : {}),
        ...(config.stop !== undefined ? { stop: config.stop } : {}),
      }
      return runAdapter(adapterCall)
    },
  }
  return Object.freeze(call)
}
