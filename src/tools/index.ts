// The tools' door: built-in tool registration, the pipeline and scheduler of SPEC §11, http tools and
// their address guard.
export { ToolRegistry, type BuiltinTool, type RegisteredTool, type ToolContext, type ToolResultValue } from './registry.js'
export { runToolBatch, parseToolArguments, type PrepareDecision, type ToolCallPlan, type ToolHost } from './scheduler.js'
export { runToolCalls, planToolCalls, callKind, type CallKind, toolResultDraft, errorResult, ABORTED_BEFORE_DISPATCH, type ToolEnv, type ToolEffects, type ToolOutcome, type ToolSpec, type FinishedCall } from './pipeline.js'
export { callHttpTool, DEFAULT_HTTP_TOOL_TIMEOUT_MS, type HttpToolOutcome } from './http.js'
export { parseToolHosts, checkToolUrl, guardedLookup, RefusedAddress, type HostPolicy, type Resolver } from './hosts.js'
export { guardedFetch, type GuardedFetch } from './fetch.js'
export { McpClients, mcpToolName, MCP_CALL_TIMEOUT_MS, type McpServerSpec, type McpOptions, type McpOutage } from './mcp.js'
export { SECRET_REF, headerProblem, secretNames, type SecretResolver } from './headers.js'
