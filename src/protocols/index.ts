// The client protocols (API.md §17): views of the sessions, one module per protocol, on a shared core —
// spans (span.ts), the item model their ops speak (items.ts) and the live source (source.ts).
export * from './items.js'
export * from './span.js'
export * from './source.js'
