// The operations of openapi/openapi.json as the fault suite and the wire tests walk them: method,
// path template and parameters, the request body's schema, security and what kind of answer it gives.

import { resolve, type Schema } from './schema-arb.js'

export interface Operation {
  method: string
  template: string
  pathParams: string[]
  query: Record<string, Schema>
  /** the request body's schema, $refs resolved at the top */
  body?: Schema
  security: 'apiKey' | 'adminToken' | null
  /** the scope a token needs on it (API.md §18), or null when only the tenant key may call it */
  tokenScope: string | null
  /** the operation addresses one session (tag `sessions`), so another tenant must get 404 */
  session: boolean
  websocket: boolean
  eventStream: boolean
}

export function operations(doc: any): Operation[] {
  const out: Operation[] = []
  for (const [template, ops] of Object.entries<any>(doc.paths)) {
    for (const [method, op] of Object.entries<any>(ops)) {
      const params: any[] = op.parameters ?? []
      const sec = op.security?.[0] ? (Object.keys(op.security[0])[0] as 'apiKey' | 'adminToken') : null
      out.push({
        method: method.toUpperCase(),
        template,
        pathParams: params.filter((p) => p.in === 'path').map((p) => p.name),
        query: Object.fromEntries(params.filter((p) => p.in === 'query').map((p) => [p.name, p.schema])),
        body: op.requestBody ? resolve(doc, op.requestBody.content?.['application/json']?.schema) : undefined,
        security: sec,
        tokenScope: ((op.security ?? []).find((r: Record<string, string[]>) => r.token)?.token?.[0] as string | undefined) ?? null,
        session: (op.tags ?? []).includes('sessions'),
        websocket: !!op.responses?.['101'],
        eventStream: !!op.responses?.['200']?.content?.['text/event-stream'],
      })
    }
  }
  return out
}
