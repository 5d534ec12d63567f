// Errors that reach clients carry a code and status of API.md §10. Anything else is `internal`.

export type ErrorCode = keyof typeof ERROR_STATUS

/** API.md §10: every code a client can see and the status it implies (docs/api.md's error table is checked against it). */
export const ERROR_STATUS = {
  'bad-request': 400,
  unauthorized: 401,
  forbidden: 403,
  'session-not-found': 404,
  'not-found': 404,
  'session-busy': 409,
  'session-conflict': 409,
  'idempotency-conflict': 409,
  'queue-item-not-found': 409,
  'tool-call-not-pending': 409,
  'fork-unavailable': 409,
  'secrets-unavailable': 409,
  'payload-too-large': 413,
  'unsupported-media-type': 415,
  'model-unavailable': 422,
  'rate-limited': 429,
  internal: 500,
  unavailable: 503,
} as const satisfies Record<string, number>

export const ERROR_CODES = Object.keys(ERROR_STATUS) as ErrorCode[]

export interface ErrorDetail {
  path: string
  message: string
}

export class ApiError extends Error {
  readonly status: number
  constructor(readonly code: ErrorCode, message: string, readonly details?: ErrorDetail[], readonly headers?: Record<string, string>) {
    super(message)
    this.name = 'ApiError'
    this.status = ERROR_STATUS[code]
  }

  toJSON() {
    return { error: { code: this.code, message: this.message, ...(this.details ? { details: this.details } : {}) } }
  }
}

/** The one way a detail names a fixed set (API.md §10): `must be one of "day", "model", "session"`. */
export const mustBeOneOf = (values: readonly unknown[]) => `must be one of ${values.map((v) => JSON.stringify(v)).join(', ')}`

export const badRequest = (message: string, details?: ErrorDetail[]) => new ApiError('bad-request', message, details ?? [{ path: '', message }])
export const sessionNotFound = (id: string) => new ApiError('session-not-found', `session ${id} not found`)
