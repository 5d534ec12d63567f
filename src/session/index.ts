// The session model's door: pure types, lossless JSON, the surface, the inbox fold, streams and
// the log fold. Nothing in this folder does I/O.
export * from './types.js'
export * from './json.js'
export * from './inbox.js'
export * from './stream.js'
export * from './surface.js'
export * from './state.js'
export * from './derive.js'
export * from './catalogue.js'
export * from './messages.js'
export * from './usage.js'
export * from './status.js'
export * from './errors.js'
