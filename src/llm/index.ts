// The llm module's door (DESIGN.md §2): the pi-ai seam — model resolution, prepareCall, pi-ai events →
// StreamChunks, failure codes, usage.
export * from './types.js'
export { createLlmService, splitModelRef, THINKING_LEVELS, type LlmLog, type LlmServiceOptions } from './service.js'
export { classifyFailure, parseRetryAfter, type FailureInput } from './failures.js'
export { toPiContext, dropToolCallsFromReplayState, readReplayState, type ReplayState, type ReplayBlock } from './convert.js'
export { loadModelsFile, parseModelsFile, type ModelsFile, type ProviderEntry, type ModelEntry } from './models.js'
export { FAUX_ECHO, FAUX_TOOLS, FAUX_USAGE, echoReply, toolsReply } from './faux.js'
export { toUsage } from './adapter.js'
