// Header values of http tools and MCP servers (API.md §12, §13): a literal, or `secret:NAME` resolved
// from the tenant's secrets when a call is prepared or a connection opens. A resolved value is kept
// out of every text this server writes: error texts pass through scrub() before they leave.

export const SECRET_REF = /^secret:([A-Z0-9_]{1,64})$/
/** RFC 9110 token characters: what a header name may be */
export const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$/

/** Resolves secret names of one tenant: their values, and the names that have none. */
export type SecretResolver = (names: readonly string[]) => Promise<{ values: Map<string, string>; missing: string[] }>

/** The secret names a header set refers to. */
export function secretNames(headers: Readonly<Record<string, string>> | undefined): string[] {
  const out: string[] = []
  for (const v of Object.values(headers ?? {})) {
    const m = SECRET_REF.exec(v)
    if (m) out.push(m[1]!)
  }
  return out
}

/** Headers the transport owns: a tool definition may not set them */
const RESERVED = new Set(['host', 'content-length', 'content-type', 'transfer-encoding', 'connection', 'upgrade', 'te', 'trailer', 'keep-alive', 'mcp-session-id', 'mcp-protocol-version', 'last-event-id'])

/** Why a header set may not be used (a bad name, a value that is neither a literal nor a secret reference), or null. */
export function headerProblem(name: string, value: unknown): string | null {
  if (!HEADER_NAME.test(name)) return `${JSON.stringify(name)} is not a header name`
  if (RESERVED.has(name.toLowerCase())) return `header ${name} is set by the server itself`
  if (typeof value !== 'string') return `header ${name} must be a string`
  if (value.startsWith('secret:') && !SECRET_REF.test(value)) return `header ${name}: a secret reference is secret:NAME with NAME matching ^[A-Z0-9_]{1,64}$`
  if (/[\r\n\0]/.test(value)) return `header ${name} may not contain CR, LF or NUL`
  return null
}

export class MissingSecretError extends Error {
  constructor(readonly names: string[]) {
    super(`${names.length > 1 ? 'secrets' : 'secret'} ${names.join(', ')} ${names.length > 1 ? 'are' : 'is'} not set for this tenant`)
    this.name = 'MissingSecretError'
  }
}

/** The headers to send, secrets filled in, and the values used (for scrub); throws MissingSecretError. */
export async function resolveHeaders(headers: Readonly<Record<string, string>> | undefined, resolve: SecretResolver | undefined): Promise<{ headers: Record<string, string>; secrets: string[] }> {
  const names = secretNames(headers)
  const out: Record<string, string> = {}
  if (!names.length) return { headers: { ...(headers ?? {}) }, secrets: [] }
  const found = resolve ? await resolve(names) : { values: new Map<string, string>(), missing: names }
  if (found.missing.length) throw new MissingSecretError(found.missing)
  for (const [k, v] of Object.entries(headers ?? {})) {
    const m = SECRET_REF.exec(v)
    out[k] = m ? found.values.get(m[1]!)! : v
  }
  return { headers: out, secrets: [...found.values.values()] }
}

/** Text with every occurrence of the given secret values replaced, for errors a remote party may have echoed. */
export function scrub(text: string, secrets: readonly string[]): string {
  let t = text
  for (const s of secrets) if (s) t = t.split(s).join('[secret]')
  return t
}
