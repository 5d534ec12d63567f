// The agent's door: the Agent and its handle, attaching (crash repair), intake of deliveries and
// cancels from any process, sessions, publication, and the prompt services plugins use.
export { Agent, agentOf, LOOP_REQUEST, type AgentDeps, type AgentHandle, type AgentSpec, type Phase } from './agent.js'
export { attach, planRepair, OUTCOME_UNKNOWN_TEXT, NOT_STARTED_TEXT, type Attached } from './attach.js'
export { Intake, bodyHash, type Accepted } from './intake.js'
export { Sessions, sessionObject, newSessionId, type SessionObject, type ToolValidation, type ModelValidation } from './sessions.js'
export { Publisher, type SessionRef } from './publish.js'
export { KeyedMutex } from './locks.js'
export { SessionLog, LeaseLostError, type Lease, type UnitBuilder } from './log.js'
export { SystemPromptService, renderPrompt, reconcile, canonicalTools, promptContent, systemNodes, type PromptAssembly } from './prompt.js'
export { toUserMessage, normalizeContent, newMessageId, idempotencyMessageId, InputError, type MessageInput, type DeliveryRoute } from '../session/index.js'
export { AbortedError, TurnLlmError } from './errors.js'
export { errorChain } from '../session/index.js'
