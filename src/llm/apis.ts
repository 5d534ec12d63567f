// pi-ai's chat API implementations by id: what a models-file provider's `api` names (API.md §2). Each is
// pi-ai's lazy wrapper of `@earendil-works/pi-ai/api/<id>`, so an SDK loads with the first request of its API.
// Keyed by pi-ai's `KnownApi`, so a pi-ai update that adds or drops an API fails the type check here.

import type { KnownApi, ProviderStreams } from '@earendil-works/pi-ai'
import { anthropicMessagesApi } from '@earendil-works/pi-ai/api/anthropic-messages.lazy'
import { azureOpenAIResponsesApi } from '@earendil-works/pi-ai/api/azure-openai-responses.lazy'
import { bedrockConverseStreamApi } from '@earendil-works/pi-ai/api/bedrock-converse-stream.lazy'
import { googleGenerativeAIApi } from '@earendil-works/pi-ai/api/google-generative-ai.lazy'
import { googleVertexApi } from '@earendil-works/pi-ai/api/google-vertex.lazy'
import { mistralConversationsApi } from '@earendil-works/pi-ai/api/mistral-conversations.lazy'
import { openAICodexResponsesApi } from '@earendil-works/pi-ai/api/openai-codex-responses.lazy'
import { openAICompletionsApi } from '@earendil-works/pi-ai/api/openai-completions.lazy'
import { openAIResponsesApi } from '@earendil-works/pi-ai/api/openai-responses.lazy'
import { piMessagesApi } from '@earendil-works/pi-ai/api/pi-messages.lazy'

const FACTORIES: Record<KnownApi, () => ProviderStreams> = {
  'anthropic-messages': anthropicMessagesApi,
  'azure-openai-responses': azureOpenAIResponsesApi,
  'bedrock-converse-stream': bedrockConverseStreamApi,
  'google-generative-ai': googleGenerativeAIApi,
  'google-vertex': googleVertexApi,
  'mistral-conversations': mistralConversationsApi,
  'openai-codex-responses': openAICodexResponsesApi,
  'openai-completions': openAICompletionsApi,
  'openai-responses': openAIResponsesApi,
  'pi-messages': piMessagesApi,
}

/** The API ids a models file may name. */
export const CHAT_APIS: readonly string[] = Object.freeze(Object.keys(FACTORIES))

const made = new Map<string, ProviderStreams>()

/** The implementation of a known API, one per process; undefined for an unknown id. */
export function apiStreams(api: string): ProviderStreams | undefined {
  if (!Object.hasOwn(FACTORIES, api)) return undefined
  let s = made.get(api)
  if (!s) made.set(api, (s = FACTORIES[api as KnownApi]()))
  return s
}
