// API.md §19: which variables turn tracing on, and how a bad one is refused at start (ConfigError
// naming the variable, never repeating an endpoint or a header value, which may hold credentials).

import { describe, expect, it } from 'vitest'
import { ConfigError, loadConfig, tracingConfig } from '../../src/config.js'

describe('tracing configuration', () => {
  it('is off without an endpoint, and with OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none', () => {
    expect(loadConfig({}).tracing).toBeUndefined()
    expect(tracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: '' })).toBeUndefined()
    expect(tracingConfig({ OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'true' })).toBeUndefined()
    expect(tracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'true' })).toBeUndefined()
    expect(tracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_EXPORTER: 'none' })).toBeUndefined()
  })

  it('on with an endpoint: the traces URL, protocol http/protobuf, service agentd, no contents', () => {
    expect(loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' }).tracing).toEqual({ url: 'http://collector:4318/v1/traces', protocol: 'http/protobuf', headers: {}, serviceName: 'agentd', captureContent: false })
    expect(tracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://b/otlp/traces' })!.url).toBe('https://b/otlp/traces')
  })

  it('reads the protocol, headers, service name, batch delay and content capture, the traces-specific variables first', () => {
    const c = tracingConfig({
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318',
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
      OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
      OTEL_EXPORTER_OTLP_HEADERS: 'x=1',
      OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'authorization=Bearer%20abc, x-tenant = t1',
      OTEL_SERVICE_NAME: 'agentd-eu',
      OTEL_BSP_SCHEDULE_DELAY: '250',
      OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'TRUE',
    })
    expect(c).toEqual({ url: 'http://c:4318/v1/traces', protocol: 'http/json', headers: { authorization: 'Bearer abc', 'x-tenant': 't1' }, serviceName: 'agentd-eu', scheduleDelayMs: 250, captureContent: true })
  })

  it('refuses what it cannot use, naming the variable and not the secret', () => {
    const on = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }
    const refused = (env: Record<string, string>, re: RegExp) => {
      expect(() => loadConfig(env)).toThrow(ConfigError)
      expect(() => loadConfig(env)).toThrow(re)
    }
    refused({ ...on, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }, /OTEL_EXPORTER_OTLP_PROTOCOL must be http\/protobuf or http\/json/)
    refused({ ...on, OTEL_TRACES_EXPORTER: 'zipkin' }, /OTEL_TRACES_EXPORTER must be otlp or none/)
    refused({ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' }, /OTEL_EXPORTER_OTLP_ENDPOINT must be an http/)
    refused({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'ftp://user:pw@x' }, /OTEL_EXPORTER_OTLP_TRACES_ENDPOINT must be an http/)
    refused({ ...on, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'yes' }, /OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT must be true or false/)
    refused({ ...on, OTEL_BSP_SCHEDULE_DELAY: 'soon' }, /OTEL_BSP_SCHEDULE_DELAY/)
    refused({ ...on, OTEL_EXPORTER_OTLP_HEADERS: 'hunter2' }, /OTEL_EXPORTER_OTLP_HEADERS must be key=value pairs/)
    expect(() => loadConfig({ ...on, OTEL_EXPORTER_OTLP_HEADERS: 'hunter2' })).not.toThrow(/hunter2/)
    expect(() => loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'nope://user:pw@x' })).not.toThrow(/pw/)
  })
})
