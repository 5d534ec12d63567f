// Every span name and attribute name agentd exports (API.md §19), in one place: the OpenTelemetry GenAI
// semantic conventions are still settling, so a rename happens here and nowhere else. The gen_ai.*
// names are those of the conventions as of semantic-conventions 1.45 (gen_ai.provider.name replaced
// gen_ai.system; gen_ai.input.messages / gen_ai.output.messages replaced the prompt/completion events).

/** gen_ai.operation.name values, also the first word of the span names */
export const OP_INVOKE_AGENT = 'invoke_agent'
export const OP_CHAT = 'chat'
export const OP_EXECUTE_TOOL = 'execute_tool'

export const GEN_AI_OPERATION_NAME = 'gen_ai.operation.name'
export const GEN_AI_AGENT_ID = 'gen_ai.agent.id'
export const GEN_AI_AGENT_NAME = 'gen_ai.agent.name'
export const GEN_AI_CONVERSATION_ID = 'gen_ai.conversation.id'
export const GEN_AI_PROVIDER_NAME = 'gen_ai.provider.name'
export const GEN_AI_REQUEST_MODEL = 'gen_ai.request.model'
export const GEN_AI_REQUEST_MAX_TOKENS = 'gen_ai.request.max_tokens'
export const GEN_AI_RESPONSE_FINISH_REASONS = 'gen_ai.response.finish_reasons'
export const GEN_AI_USAGE_INPUT_TOKENS = 'gen_ai.usage.input_tokens'
export const GEN_AI_USAGE_OUTPUT_TOKENS = 'gen_ai.usage.output_tokens'
export const GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = 'gen_ai.usage.cache_read.input_tokens'
export const GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS = 'gen_ai.usage.cache_creation.input_tokens'
export const GEN_AI_TOOL_NAME = 'gen_ai.tool.name'
export const GEN_AI_TOOL_CALL_ID = 'gen_ai.tool.call.id'
export const GEN_AI_TOOL_TYPE = 'gen_ai.tool.type'
/** opt-in contents (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true) */
export const GEN_AI_INPUT_MESSAGES = 'gen_ai.input.messages'
export const GEN_AI_OUTPUT_MESSAGES = 'gen_ai.output.messages'
export const GEN_AI_TOOL_CALL_ARGUMENTS = 'gen_ai.tool.call.arguments'
export const GEN_AI_TOOL_CALL_RESULT = 'gen_ai.tool.call.result'

/** the stable general attribute: a failure's class (an agentd error code here) */
export const ERROR_TYPE = 'error.type'

/** agentd's own: where in the session log the span belongs, and how it ended */
export const AGENTD_TURN = 'agentd.turn'
/** SPEC §19.3: the crash-interrupted turn a continuation carries on */
export const AGENTD_TURN_CONTINUES = 'agentd.turn.continues'
/** the turn's end reason kind: completed, max-tokens, blocked, aborted, error */
export const AGENTD_TURN_END_REASON = 'agentd.turn.end_reason'
export const AGENTD_STEP = 'agentd.step'
/** 1 for a step's first model attempt, 2 for its first retry, … */
export const AGENTD_ATTEMPT = 'agentd.attempt'
export const AGENTD_TENANT_ID = 'agentd.tenant.id'
export const AGENTD_AGENT_VERSION = 'agentd.agent.version'
export const AGENTD_COMPACTION_ID = 'agentd.compaction.id'
/** the estimated tokens a compaction's summary is to replace */
export const AGENTD_COMPACTION_SHADOWED_TOKENS = 'agentd.compaction.shadowed_tokens'
/** a link's role: the request that queued an input the turn claimed */
export const AGENTD_LINK = 'agentd.link'
export const AGENTD_MESSAGE_ID = 'agentd.message.id'
export const AGENTD_WEBHOOK_EVENT = 'agentd.webhook.event'

/** span and event names that are not an operation of the conventions */
export const SPAN_COMPACTION = 'compaction'
export const SPAN_WEBHOOK = 'webhook'
/** an event on a model attempt's span: the previous attempt failed and agent/request-error retried */
export const EVENT_RETRY = 'gen_ai.request.retry'
