// The LlmService of llm/types.ts: route resolution (models file, extra providers, pi-ai's catalogue,
// faux/echo and faux/tools), prepareCall (SPEC §8.3) and the one-shot prepared stream.
//
// pi-ai 1.x: a route knows the pi-ai implementation its requests go to and how an attempt authenticates.
// Models-file routes call pi-ai's API implementations with the key agentd resolves (env:NAME, a literal, or
// the built-in provider's usual variable); catalogue routes call pi-ai's built-in provider objects with the
// credentials their own provider auth resolves. Requests never go through a pi-ai `Models` collection's
// stream methods, which add a forwarding stream and a (no-op) telemetry span to every call.

import { cleanupSessionResources, createModels, defaultProviderAuthContext, type Api, type Model, type MutableModels, type Provider, type ProviderStreams, type ThinkingLevel } from '@earendil-works/pi-ai'
import { builtinProviders } from '@earendil-works/pi-ai/providers/all'
import type { LlmCallConfig, LlmFailure, StreamChunk } from '../session/index.js'
import { runAdapter, STOP_APIS, type RequestAuth } from './adapter.js'
import { apiStreams } from './apis.js'
import { toPiContext } from './convert.js'
import { FAUX_ECHO, FAUX_ECHO_MODEL, FAUX_STREAMS, FAUX_TOOLS, FAUX_TOOLS_MODEL } from './faux.js'
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
  /** pi-ai providers whose models route besides the file (tests and the bench: scripted models) */
  extraProviders?: readonly Provider[]
  /** API implementations a models file may name besides pi-ai's own, by id (tests: a scripted API behind a models-file provider) */
  extraApis?: Readonly<Record<string, ProviderStreams>>
  /** default env.AGENTD_DEFAULT_MODEL, else the first model of the file, else faux/echo */
  defaultModel?: string
  /** where API keys are read (env:NAME and pi-ai's usual variables), at every call; default process.env */
  env?: NodeJS.ProcessEnv
  log?: LlmLog
}

export const THINKING_LEVELS: readonly ThinkingLevel[] = ['minimal', 'low', 'medium', 'high', 'xhigh']

type Auth = RequestAuth | { failure: LlmFailure }

/** One resolved route: the pi-ai model, the implementation it streams through, its credentials and retry policy. */
interface Route {
  info: ModelInfo
  model: Model<Api>
  streams: ProviderStreams
  retryPolicy: RetryPolicy
  /** the credentials of one attempt, resolved when it is dispatched and never kept */
  auth: (signal: AbortSignal) => Auth | Promise<Auth>
}

/** Splits `provider/modelId` at the first '/'. */
export function splitModelRef(ref: string): { provider: string; model: string } | undefined {
  const at = ref.indexOf('/')
  if (at <= 0 || at === ref.length - 1) return undefined
  return { provider: ref.slice(0, at), model: ref.slice(at + 1) }
}

/**
 * The model as agentd hands it to pi-ai. Two pi-ai 1.x behaviours are switched off, both because the loop
 * owns what they would take over:
 * - Anthropic message threads (on by default for api.anthropic.com): with a session id, pi-ai would continue
 *   the conversation on the server and send only the new messages, keeping a reply id per session in
 *   memory. SPEC §8.10: every request carries the whole history the log reconstructs.
 * - The context-aware output cap of pi-ai's streamSimple, which lowers maxTokens from its own estimate of
 *   the input once the context nears the window (down to 1 token): the session's maxTokens is sent as set
 *   (SPEC §8.3), and a full context must reach the provider and come back as an overflow, which compaction
 *   recovers (SPEC §12.3), instead of a 1-token answer. pi-ai reads the window for nothing else; agentd
 *   keeps it in ModelInfo for the compaction meter.
 */
function forPiAi(model: Model<Api>): Model<Api> {
  const out = { ...model, contextWindow: 0 }
  if (model.api === 'anthropic-messages') (out as { compat?: unknown }).compat = { ...(model.compat as object | undefined), supportsMessageThreads: false }
  return out as Model<Api>
}

export function createLlmService(opts: LlmServiceOptions = {}): LlmService {
  const env = opts.env ?? process.env
  const log = opts.log
  const modelsPath = opts.modelsFile ?? (env.AGENTD_MODELS || undefined)
  let file: ModelsFile | undefined
  try {
    const apis = Object.keys(opts.extraApis ?? {})
    file = opts.models !== undefined ? parseModelsFile(opts.models, apis) : modelsPath ? loadModelsFile(modelsPath, apis) : undefined
  } catch (e) {
    throw new ModelConfigError('AGENTD_MODELS', (e as Error).message)
  }

  // pi-ai's built-in providers: the catalogue, and the auth of each (its usual variables, read from `env`)
  const catalogue = createModels({ authContext: { ...defaultProviderAuthContext(), env: async (name) => env[name] || undefined } })
  for (const p of builtinProviders()) catalogue.setProvider(p)

  const fileRoutes = new Map<string, Route>()
  const streamsOf = (api: string) => apiStreams(api) ?? opts.extraApis![api]!
  for (const p of file?.providers ?? []) for (const m of p.models) fileRoutes.set(`${p.name}/${m.id}`, fileRoute(p, m.id, streamsOf(p.api), env, catalogue))
  // routes of the catalogue and the extra providers, made once each (only routes that exist are kept)
  const piRoutes = new Map<string, Route>()

  const resolve = (provider: string, modelId: string): Route | undefined => {
    const key = `${provider}/${modelId}`
    const found = fileRoutes.get(key) ?? piRoutes.get(key)
    if (found) return found
    const extra = opts.extraProviders?.find((p) => p.id === provider)
    const extraModel = extra?.getModels().find((m) => m.id === modelId)
    let route: Route | undefined
    if (extra && extraModel) route = piRoute(extraModel, extra, () => ({}))
    else {
      const catalogued = catalogue.getModel(provider, modelId)
      const owner = catalogued ? catalogue.getProvider(provider) : undefined
      if (catalogued && owner) route = piRoute(catalogued, owner, (signal) => catalogueAuth(catalogue, catalogued, signal))
      else if (key === FAUX_ECHO) route = piRoute(FAUX_ECHO_MODEL, FAUX_STREAMS, () => ({}))
      else if (key === FAUX_TOOLS) route = piRoute(FAUX_TOOLS_MODEL, FAUX_STREAMS, () => ({}))
    }
    if (route) piRoutes.set(key, route)
    return route
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
    // agentd asks pi-ai for nothing it would keep per session (forPiAi, runAdapter); this frees whatever a
    // later pi-ai might keep anyway, as its README asks of a caller whose sessions end
    endSession: (sessionId) => {
      try {
        cleanupSessionResources(sessionId)
      } catch (e) {
        log?.debug({ sessionId, err: (e as Error).message }, 'pi-ai session cleanup failed')
      }
    },
    async prepareCall(proposed, signal) {
      signal.throwIfAborted()
      const route = typeof proposed?.provider === 'string' && typeof proposed.model === 'string' ? resolve(proposed.provider, proposed.model) : undefined
      if (!route) {
        throw new LlmError({ code: 'NO_ADAPTER', message: `no model route for ${JSON.stringify(`${proposed?.provider}/${proposed?.model}`)}` })
      }
      const { config, adapterDefaults } = completeConfig(proposed, route)
      return prepared(route, config, adapterDefaults, log)
    },
  }
}

/** A catalogue model's credentials, as its pi-ai provider resolves them (stored none, so its variables). */
async function catalogueAuth(catalogue: MutableModels, model: Model<Api>, signal: AbortSignal): Promise<Auth> {
  const r = await catalogue.getAuth(model, { signal })
  if (!r) return { failure: { code: 'AUTH', message: `no API key for provider ${model.provider}: set the variable pi-ai reads for it (docs/configuration.md#provider-keys)` } }
  const out: RequestAuth = {}
  if (r.auth.apiKey !== undefined) out.apiKey = r.auth.apiKey
  if (r.auth.headers !== undefined) out.headers = r.auth.headers
  if (r.auth.baseUrl !== undefined) out.baseUrl = r.auth.baseUrl
  if (r.env !== undefined) out.env = r.env
  return out
}

function fileRoute(p: ProviderEntry, modelId: string, streams: ProviderStreams, env: NodeJS.ProcessEnv, catalogue: MutableModels): Route {
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
    model: forPiAi(model),
    streams,
    retryPolicy: p.retryPolicy,
    // read at every call, never cached, so a rotated key takes effect on the next attempt
    auth: async (signal) => {
      if (spec && 'literal' in spec) return { apiKey: spec.literal }
      if (spec) {
        const key = env[spec.env]
        return key ? { apiKey: key } : { failure: { code: 'AUTH', message: `API key variable ${spec.env} is not set (provider ${p.name})` } }
      }
      // no apiKey in the file: pi-ai's built-in provider of the same name says where its key is (OPENAI_API_KEY, …)
      const builtin = catalogue.getProvider(p.name) ? await catalogue.getAuth(p.name, { signal }) : undefined
      if (builtin?.auth.apiKey) return { apiKey: builtin.auth.apiKey }
      return { failure: { code: 'AUTH', message: `no API key for provider ${p.name}: set apiKey in the models file` } }
    },
  }
}

function piRoute(model: Model<Api>, streams: ProviderStreams, auth: Route['auth']): Route {
  const info: ModelInfo = { provider: model.provider, model: model.id, api: model.api, reasoning: model.reasoning }
  if (model.contextWindow > 0) info.contextWindow = model.contextWindow
  if (model.maxTokens > 0) info.maxTokens = model.maxTokens
  return { info, model: forPiAi(model), streams, retryPolicy: DEFAULT_RETRY_POLICY, auth }
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

function prepared(route: Route, config: Readonly<LlmCallConfig>, adapterDefaults: { maxTokens?: true } | undefined, log: LlmLog | undefined): PreparedCall {
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
      const adapterCall = {
        model: route.model,
        ...(route.info.contextWindow !== undefined ? { contextWindow: route.info.contextWindow } : {}),
        streams: route.streams,
        context: () => toPiContext(request.messages, request.tools, route.model),
        signal: request.signal,
        // credentials are resolved when the attempt is dispatched, never earlier
        auth: () => route.auth(request.signal),
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
