// An OTLP/HTTP trace receiver on 127.0.0.1 for tests: POST /v1/traces in either protocol the exporter
// speaks — `http/json` parsed as JSON, `http/protobuf` decoded here from the wire format of
// opentelemetry-proto's ExportTraceServiceRequest (only the fields the tests read) — into one flat
// list of spans. It also keeps every raw body, for the leak checks.

import http from 'node:http'
import type { AddressInfo } from 'node:net'

export interface OtlpSpan {
  traceId: string
  spanId: string
  parentSpanId?: string
  name: string
  kind: number
  startNs: bigint
  endNs: bigint
  attributes: Record<string, unknown>
  events: Array<{ name: string; attributes: Record<string, unknown> }>
  links: Array<{ traceId: string; spanId: string; attributes: Record<string, unknown> }>
  status: { code: number; message?: string }
  resource: Record<string, unknown>
  scope: string
}

export interface OtlpReceiver {
  readonly url: string
  readonly spans: OtlpSpan[]
  /** every request body as received (protobuf bytes as latin1, JSON as text) */
  readonly raw: string[]
  readonly contentTypes: string[]
  waitFor(pred: (s: OtlpSpan, all: OtlpSpan[]) => boolean, what: string, timeoutMs?: number): Promise<OtlpSpan>
  close(): Promise<void>
}

/** `onRaw` sees every body as it arrives (the fault suite's secrets check keeps them). */
export async function startOtlpReceiver(o: { onRaw?: (text: string) => void } = {}): Promise<OtlpReceiver> {
  const spans: OtlpSpan[] = []
  const raw: string[] = []
  const contentTypes: string[] = []
  const server = http.createServer(async (req, res) => {
    const chunks: Buffer[] = []
    try {
      for await (const c of req) chunks.push(c as Buffer)
    } catch {
      return
    }
    const body = Buffer.concat(chunks)
    const type = String(req.headers['content-type'] ?? '')
    contentTypes.push(type)
    if (req.url !== '/v1/traces' || req.method !== 'POST') {
      res.writeHead(404).end()
      return
    }
    try {
      if (type.startsWith('application/json')) {
        raw.push(body.toString('utf8'))
        o.onRaw?.(raw.at(-1)!)
        spans.push(...fromJson(JSON.parse(body.toString('utf8'))))
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
      } else {
        raw.push(body.toString('latin1'))
        o.onRaw?.(raw.at(-1)!)
        spans.push(...fromProtobuf(body))
        res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end()
      }
    } catch (e) {
      res.writeHead(400).end(String(e))
    }
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  const port = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    raw,
    contentTypes,
    async waitFor(pred, what, timeoutMs = 20000) {
      const deadline = Date.now() + timeoutMs
      for (;;) {
        const s = spans.find((x) => pred(x, spans))
        if (s) return s
        if (Date.now() > deadline) throw new Error(`OTLP receiver: no span ${what} within ${timeoutMs} ms; got ${spans.map((x) => x.name).join(', ')}`)
        await new Promise((r) => setTimeout(r, 50))
      }
    },
    async close() {
      server.closeAllConnections()
      await new Promise((r) => server.close(r))
    },
  }
}

// ---- http/json (OTLP JSON: ids in hex, 64-bit integers as strings or numbers) ----

function anyValue(v: any): unknown {
  if (!v) return undefined
  if ('stringValue' in v) return v.stringValue
  if ('boolValue' in v) return v.boolValue
  if ('intValue' in v) return Number(v.intValue)
  if ('doubleValue' in v) return v.doubleValue
  if ('arrayValue' in v) return (v.arrayValue.values ?? []).map(anyValue)
  return undefined
}

const attrs = (list: any[] | undefined): Record<string, unknown> => Object.fromEntries((list ?? []).map((kv) => [kv.key, anyValue(kv.value)]))

function fromJson(req: any): OtlpSpan[] {
  const out: OtlpSpan[] = []
  for (const rs of req.resourceSpans ?? []) {
    const resource = attrs(rs.resource?.attributes)
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        out.push({
          traceId: s.traceId,
          spanId: s.spanId,
          ...(s.parentSpanId ? { parentSpanId: s.parentSpanId } : {}),
          name: s.name,
          kind: s.kind,
          startNs: BigInt(s.startTimeUnixNano),
          endNs: BigInt(s.endTimeUnixNano),
          attributes: attrs(s.attributes),
          events: (s.events ?? []).map((e: any) => ({ name: e.name, attributes: attrs(e.attributes) })),
          links: (s.links ?? []).map((l: any) => ({ traceId: l.traceId, spanId: l.spanId, attributes: attrs(l.attributes) })),
          status: { code: s.status?.code ?? 0, ...(s.status?.message ? { message: s.status.message } : {}) },
          resource,
          scope: ss.scope?.name ?? '',
        })
      }
    }
  }
  return out
}

// ---- http/protobuf: the protobuf wire format, field numbers of opentelemetry/proto/trace/v1 ----

type Field = { no: number; wire: number; value: bigint | Buffer }

function fields(buf: Buffer): Field[] {
  const out: Field[] = []
  let i = 0
  const varint = (): bigint => {
    let v = 0n
    let shift = 0n
    for (;;) {
      const b = buf[i++]
      v |= BigInt(b & 0x7f) << shift
      if (!(b & 0x80)) return v
      shift += 7n
    }
  }
  while (i < buf.length) {
    const tag = Number(varint())
    const no = tag >> 3
    const wire = tag & 7
    if (wire === 0) out.push({ no, wire, value: varint() })
    else if (wire === 1) {
      out.push({ no, wire, value: buf.readBigUInt64LE(i) })
      i += 8
    } else if (wire === 2) {
      const len = Number(varint())
      out.push({ no, wire, value: buf.subarray(i, i + len) })
      i += len
    } else if (wire === 5) {
      out.push({ no, wire, value: BigInt(buf.readUInt32LE(i)) })
      i += 4
    } else throw new Error(`protobuf: wire type ${wire}`)
  }
  return out
}

const all = (fs: Field[], no: number) => fs.filter((f) => f.no === no).map((f) => f.value)
const one = (fs: Field[], no: number) => fs.find((f) => f.no === no)?.value
const bytes = (fs: Field[], no: number) => one(fs, no) as Buffer | undefined
const str = (fs: Field[], no: number) => bytes(fs, no)?.toString('utf8') ?? ''
const hex = (fs: Field[], no: number) => bytes(fs, no)?.toString('hex') ?? ''

function pbAnyValue(b: Buffer): unknown {
  const f = fields(b)[0]
  if (!f) return undefined
  if (f.no === 1) return (f.value as Buffer).toString('utf8')
  if (f.no === 2) return f.value === 1n
  if (f.no === 3) return Number(BigInt.asIntN(64, f.value as bigint))
  if (f.no === 4) {
    const d = Buffer.alloc(8)
    d.writeBigUInt64LE(f.value as bigint)
    return d.readDoubleLE()
  }
  if (f.no === 5) return all(fields(f.value as Buffer), 1).map((v) => pbAnyValue(v as Buffer))
  return undefined
}

const pbAttrs = (list: Array<bigint | Buffer>): Record<string, unknown> =>
  Object.fromEntries(
    list.map((kv) => {
      const f = fields(kv as Buffer)
      const v = bytes(f, 2)
      return [str(f, 1), v ? pbAnyValue(v) : undefined]
    }),
  )

function fromProtobuf(body: Buffer): OtlpSpan[] {
  const out: OtlpSpan[] = []
  for (const rsb of all(fields(body), 1)) {
    const rs = fields(rsb as Buffer)
    const res = bytes(rs, 1)
    const resource = res ? pbAttrs(all(fields(res), 1)) : {}
    for (const ssb of all(rs, 2)) {
      const ss = fields(ssb as Buffer)
      const scope = bytes(ss, 1)
      for (const sb of all(ss, 2)) {
        const s = fields(sb as Buffer)
        const status = bytes(s, 15) ? fields(bytes(s, 15)!) : []
        const parent = hex(s, 4)
        out.push({
          traceId: hex(s, 1),
          spanId: hex(s, 2),
          ...(parent ? { parentSpanId: parent } : {}),
          name: str(s, 5),
          kind: Number(one(s, 6) ?? 0n),
          startNs: (one(s, 7) as bigint) ?? 0n,
          endNs: (one(s, 8) as bigint) ?? 0n,
          attributes: pbAttrs(all(s, 9)),
          events: all(s, 11).map((eb) => {
            const e = fields(eb as Buffer)
            return { name: str(e, 2), attributes: pbAttrs(all(e, 3)) }
          }),
          links: all(s, 13).map((lb) => {
            const l = fields(lb as Buffer)
            return { traceId: hex(l, 1), spanId: hex(l, 2), attributes: pbAttrs(all(l, 4)) }
          }),
          status: { code: Number(one(status, 3) ?? 0n), ...(str(status, 2) ? { message: str(status, 2) } : {}) },
          resource,
          scope: scope ? str(fields(scope), 1) : '',
        })
      }
    }
  }
  return out
}
