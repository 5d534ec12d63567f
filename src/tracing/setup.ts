// API.md §19: the OpenTelemetry SDK, registered once per process and only when config.tracing is set.
// Without it nothing here runs: the API's global tracer stays the no-op one, no context manager
// is installed (so no async context is tracked), and the facade (index.ts) answers its no-op turn.

import { context, propagation, trace } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { W3CTraceContextPropagator } from '@opentelemetry/core'
import { OTLPTraceExporter as ProtoExporter } from '@opentelemetry/exporter-trace-otlp-proto'
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http'
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources'
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base'
import { ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION } from '@opentelemetry/semantic-conventions'
import type { TracingConfig } from '../config.js'

export interface TracingRuntime {
  readonly captureContent: boolean
  /** exports the spans ended so far */
  flush(): Promise<void>
  /** flushes what is buffered and stops exporting */
  shutdown(): Promise<void>
}

let current: TracingRuntime | undefined

/** The process's tracing, once started: undefined means off. */
export const tracingRuntime = (): TracingRuntime | undefined => current

/**
 * Registers the SDK globally: the provider (its sampler and limits from the standard OTEL_* variables),
 * a batch processor over the OTLP/HTTP exporter of the configured protocol, URL and headers (its
 * timeout from OTEL_EXPORTER_OTLP_TIMEOUT), W3C trace context and an
 * AsyncLocalStorage context manager. A second call answers the first runtime: the globals are the process's.
 */
export function startTracing(config: TracingConfig, version: string): TracingRuntime {
  if (current) return current
  const options = { url: config.url, headers: config.headers }
  const exporter = config.protocol === 'http/json' ? new JsonExporter(options) : new ProtoExporter(options)
  // OTEL_RESOURCE_ATTRIBUTES (envDetector) adds to agentd's; OTEL_SERVICE_NAME (config) names it
  const resource = defaultResource()
    .merge(detectResources({ detectors: [envDetector] }))
    .merge(resourceFromAttributes({ [ATTR_SERVICE_NAME]: config.serviceName, [ATTR_SERVICE_VERSION]: version }))
  const batch = new BatchSpanProcessor(exporter, config.scheduleDelayMs !== undefined ? { scheduledDelayMillis: config.scheduleDelayMs } : {})
  const provider = new BasicTracerProvider({ resource, spanProcessors: [batch] })
  const contextManager = new AsyncLocalStorageContextManager().enable()
  context.setGlobalContextManager(contextManager)
  propagation.setGlobalPropagator(new W3CTraceContextPropagator())
  trace.setGlobalTracerProvider(provider)
  const runtime: TracingRuntime = {
    captureContent: config.captureContent,
    flush: () => provider.forceFlush(),
    async shutdown() {
      if (current !== runtime) return
      current = undefined
      try {
        await provider.shutdown()
      } finally {
        trace.disable()
        propagation.disable()
        context.disable()
      }
    },
  }
  current = runtime
  return runtime
}
