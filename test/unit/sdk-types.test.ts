// The client's wire types (clients/typescript/src/types.gen.ts) are what openapi-typescript generates
// from the committed openapi/openapi.json, as openapi.json is what the server serves: a route or
// schema change that is not regenerated fails here (`npm run client:types`).

import fs from 'node:fs'
import { describe, expect, it } from 'vitest'
import { OPENAPI_FILE, TYPES_FILE, generatedTypes } from '../../clients/typescript/scripts/generate-types.js'

const STALE = 'clients/typescript/src/types.gen.ts is stale or missing: run `npm run client:types` and commit the result'

describe('clients/typescript/src/types.gen.ts', () => {
  it('is exactly what openapi-typescript generates from openapi/openapi.json', async () => {
    expect(fs.existsSync(TYPES_FILE), STALE).toBe(true)
    expect(fs.readFileSync(TYPES_FILE, 'utf8'), STALE).toBe(await generatedTypes())
  })

  it('changes when the document does (so the comparison above can fail)', async () => {
    const doc = JSON.parse(fs.readFileSync(OPENAPI_FILE, 'utf8'))
    doc.paths['/v1/sdk-probe'] = { get: { responses: { 200: { description: 'probe', content: { 'application/json': { schema: { type: 'object', properties: { probeField: { type: 'string' } } } } } } } } }
    const changed = await generatedTypes(doc)
    expect(changed).not.toBe(await generatedTypes())
    expect(changed).toMatch(/"\/v1\/sdk-probe"[\s\S]*probeField\?: string/)
  })
})
