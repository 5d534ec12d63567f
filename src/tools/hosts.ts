// The address policy for `http` tools (API §1 `AGENTD_TOOL_HOSTS`, §4 ToolSpec): public addresses are allowed,
// loopback / private / link-local / reserved ones only when the operator lists them by name, address or CIDR.

import dns from 'node:dns'
import net from 'node:net'
import { domainToASCII } from 'node:url'

/** Resolves a host name to every address it has (the default is `dns.lookup` with `all: true`). */
export type Resolver = (hostname: string) => Promise<string[]>

export interface HostPolicy {
  /** null when `address` (which `hostname` resolved to, or the literal itself) may be called on `port`, else a one-line reason. */
  check(hostname: string, port: number, address: string): string | null
  /** True when `hostname` is listed by name (for `port`), so any address it resolves to is allowed. */
  allowsHost(hostname: string, port: number): boolean
}

// ---- IP addresses as integers ----

interface Ip { v: 4 | 6; n: bigint }

const MAPPED_PREFIX = 0xffffn << 32n // ::ffff:0:0/96
const V4_MASK = 0xffffffffn

function parseV4(s: string): bigint {
  let n = 0n
  for (const part of s.split('.')) n = (n << 8n) | BigInt(Number(part))
  return n
}

function parseV6(s: string): bigint {
  // net.isIP has already validated the syntax; a trailing dotted quad stands for the last two groups
  let tail: bigint[] = []
  const lastColon = s.lastIndexOf(':')
  if (s.includes('.', lastColon)) {
    const v4 = parseV4(s.slice(lastColon + 1))
    tail = [v4 >> 16n, v4 & 0xffffn]
    s = s.slice(0, lastColon + 1) + '0' // placeholder group, replaced below
  }
  const groups = (part: string) => (part === '' ? [] : part.split(':').map((g) => BigInt(parseInt(g, 16))))
  const dbl = s.indexOf('::')
  let all: bigint[]
  const want = 8 - (tail.length ? 1 : 0) // the placeholder counts as one group
  if (dbl >= 0) {
    const head = groups(s.slice(0, dbl))
    const rest = groups(s.slice(dbl + 2))
    all = [...head, ...Array<bigint>(want - head.length - rest.length).fill(0n), ...rest]
  } else {
    all = groups(s)
  }
  if (tail.length) all = [...all.slice(0, -1), ...tail]
  return all.reduce((acc, g) => (acc << 16n) | g, 0n)
}

/** Parses an IP literal (no brackets; a zone index is dropped); null when it is not one. */
function parseIp(s: string): Ip | null {
  const zone = s.indexOf('%')
  if (zone >= 0) s = s.slice(0, zone)
  const kind = net.isIP(s)
  if (kind === 4) return { v: 4, n: parseV4(s) }
  if (kind === 6) return { v: 6, n: parseV6(s) }
  return null
}

/** The IPv4 address an IPv4-mapped IPv6 address stands for; other addresses unchanged. */
function unmap(ip: Ip): Ip {
  if (ip.v === 6 && ip.n >> 32n === MAPPED_PREFIX >> 32n) return { v: 4, n: ip.n & V4_MASK }
  return ip
}

function v4String(n: bigint): string {
  return [24n, 16n, 8n, 0n].map((s) => String((n >> s) & 0xffn)).join('.')
}

interface Cidr { v: 4 | 6; net: bigint; len: number }

function bits(v: 4 | 6): number {
  return v === 4 ? 32 : 128
}

function inCidr(ip: Ip, c: Cidr): boolean {
  if (ip.v !== c.v) return false
  const shift = BigInt(bits(c.v) - c.len)
  return ip.n >> shift === c.net >> shift
}

function cidr(s: string): Cidr {
  const [a, l] = s.split('/')
  const ip = parseIp(a!)!
  return { v: ip.v, net: ip.n, len: Number(l) }
}

// ---- the default rule ----

// Ranges refused unless listed, with the phrase used in the reason. Order matters only where ranges nest.
const REFUSED_V4: Array<[Cidr, string]> = ([
  ['0.0.0.0/8', 'an unspecified ("this network") address'],
  ['10.0.0.0/8', 'a private address'],
  ['100.64.0.0/10', 'a shared (CGNAT) address'],
  ['127.0.0.0/8', 'a loopback address'],
  ['169.254.0.0/16', 'a link-local address'],
  ['172.16.0.0/12', 'a private address'],
  ['192.0.0.0/24', 'a reserved (IETF protocol assignment) address'],
  ['192.0.2.0/24', 'a reserved (documentation) address'],
  ['192.88.99.0/24', 'a reserved (6to4 relay) address'],
  ['192.168.0.0/16', 'a private address'],
  ['198.18.0.0/15', 'a reserved (benchmarking) address'],
  ['198.51.100.0/24', 'a reserved (documentation) address'],
  ['203.0.113.0/24', 'a reserved (documentation) address'],
  ['224.0.0.0/4', 'a multicast address'],
  ['255.255.255.255/32', 'the broadcast address'],
  ['240.0.0.0/4', 'a reserved address'],
] as const).map(([c, why]) => [cidr(c), why])

const REFUSED_V6: Array<[Cidr, string]> = ([
  ['::/128', 'an unspecified address'],
  ['::1/128', 'a loopback address'],
  ['64:ff9b:1::/48', 'a reserved (local-use NAT64) address'],
  ['100::/64', 'a reserved (discard-only) address'],
  ['2001:2::/48', 'a reserved (benchmarking) address'],
  ['2001:db8::/32', 'a reserved (documentation) address'],
  ['fc00::/7', 'a private (unique local) address'],
  ['fe80::/10', 'a link-local address'],
  ['fec0::/10', 'a reserved (site-local) address'],
  ['ff00::/8', 'a multicast address'],
] as const).map(([c, why]) => [cidr(c), why])

const GLOBAL_UNICAST_V6 = cidr('2000::/3')
const NAT64_V6 = cidr('64:ff9b::/96')
const SIXTO4_V6 = cidr('2002::/16')

/** null for a public address, else the phrase saying what kind of refused address it is. */
function defaultRefusal(ip: Ip): string | null {
  if (ip.v === 4) {
    for (const [c, why] of REFUSED_V4) if (inCidr(ip, c)) return why
    return null
  }
  const mapped = unmap(ip)
  if (mapped.v === 4) {
    const why = defaultRefusal(mapped)
    return why && `the IPv4-mapped form of ${v4String(mapped.n)}, ${why}`
  }
  // translation prefixes carry an IPv4 address that the gateway will reach, so judge that address
  if (inCidr(ip, NAT64_V6)) {
    const v4 = ip.n & V4_MASK
    const why = defaultRefusal({ v: 4, n: v4 })
    return why && `the NAT64 form of ${v4String(v4)}, ${why}`
  }
  if (inCidr(ip, SIXTO4_V6)) {
    const v4 = (ip.n >> 80n) & V4_MASK
    const why = defaultRefusal({ v: 4, n: v4 })
    return why && `a 6to4 address of ${v4String(v4)}, ${why}`
  }
  for (const [c, why] of REFUSED_V6) if (inCidr(ip, c)) return why
  // everything outside 2000::/3 is unallocated or special-purpose
  if (!inCidr(ip, GLOBAL_UNICAST_V6)) return 'a reserved address'
  return null
}

// ---- AGENTD_TOOL_HOSTS entries ----

type Rule =
  | { kind: 'name'; name: string; port?: number }
  | { kind: 'net'; cidr: Cidr; port?: number }

function malformed(entry: string, why: string): Error {
  return new Error(`AGENTD_TOOL_HOSTS: malformed entry "${entry}": ${why}`)
}

function parsePort(entry: string, s: string): number {
  const p = /^\d{1,5}$/.test(s) ? Number(s) : NaN
  if (!(p >= 1 && p <= 65535)) throw malformed(entry, `port "${s}" is not a number from 1 to 65535`)
  return p
}

/** A CIDR for a single address or a network; IPv4-mapped IPv6 forms are kept as IPv4 so both spellings match. */
function addressRule(ip: Ip, len: number): Cidr {
  if (ip.v === 6 && len >= 96 && unmap(ip).v === 4) return { v: 4, net: ip.n & V4_MASK, len: len - 96 }
  return { v: ip.v, net: ip.n, len }
}

function parseName(entry: string, s: string): string {
  let name = s.toLowerCase()
  // the URL parser turns non-ASCII names into punycode, so match that spelling
  if (/[^\x00-\x7f]/.test(name)) {
    name = domainToASCII(name)
    if (!name) throw malformed(entry, 'not a valid host name')
  }
  const labels = name.endsWith('.') ? name.slice(0, -1).split('.') : name.split('.')
  if (name.length > 253 || labels.some((l) => !/^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$/.test(l))) {
    throw malformed(entry, 'not a valid host name, IP address or CIDR')
  }
  // a URL host ending in a numeric label is read as an IPv4 address, so such a "name" is a mistyped address
  if (/^(?:\d+|0x[0-9a-f]*)$/.test(labels[labels.length - 1]!)) throw malformed(entry, 'not a valid IP address')
  return name
}

function parseEntry(entry: string): Rule {
  if (entry.includes('%')) throw malformed(entry, 'zone indexes are not supported')
  if (entry.includes('/')) {
    const slash = entry.lastIndexOf('/')
    let addr = entry.slice(0, slash)
    const lenText = entry.slice(slash + 1)
    if (addr.startsWith('[') && addr.endsWith(']')) addr = addr.slice(1, -1)
    const ip = parseIp(addr)
    if (!ip) throw malformed(entry, `"${addr}" is not an IP address`)
    const len = /^\d{1,3}$/.test(lenText) ? Number(lenText) : NaN
    if (!(len >= 0 && len <= bits(ip.v))) throw malformed(entry, `prefix length must be 0 to ${bits(ip.v)}`)
    const c = addressRule(ip, len)
    // keep only the network bits, so 10.1.2.3/8 means 10.0.0.0/8
    const shift = BigInt(bits(c.v) - c.len)
    return { kind: 'net', cidr: { ...c, net: (c.net >> shift) << shift } }
  }
  if (entry.startsWith('[')) {
    const m = /^\[([^\]]*)\](?::(.*))?$/.exec(entry)
    if (!m || net.isIP(m[1]!) !== 6) throw malformed(entry, 'brackets must hold an IPv6 address')
    const port = m[2] === undefined ? undefined : parsePort(entry, m[2])
    return { kind: 'net', cidr: addressRule(parseIp(m[1]!)!, 128), port }
  }
  const whole = parseIp(entry)
  if (whole) return { kind: 'net', cidr: addressRule(whole, bits(whole.v)) }
  const colons = entry.split(':').length - 1
  if (colons > 1) throw malformed(entry, 'not a valid IPv6 address (write [addr]:port for a port)')
  let host = entry
  let port: number | undefined
  if (colons === 1) {
    const c = entry.indexOf(':')
    host = entry.slice(0, c)
    port = parsePort(entry, entry.slice(c + 1))
  }
  if (host === '') throw malformed(entry, 'missing host')
  const ip = parseIp(host)
  if (ip) return { kind: 'net', cidr: addressRule(ip, 32), port }
  return { kind: 'name', name: parseName(entry, host), port }
}

function normalizeHostname(hostname: string): string {
  const h = hostname.toLowerCase()
  return h.startsWith('[') && h.endsWith(']') ? h.slice(1, -1) : h
}

/** Parses AGENTD_TOOL_HOSTS (comma-separated); throws an Error naming the first malformed entry. */
export function parseToolHosts(spec: string | undefined): HostPolicy {
  const rules: Rule[] = []
  for (const raw of (spec ?? '').split(',')) {
    const entry = raw.trim()
    if (entry !== '') rules.push(parseEntry(entry)) // empty items (a trailing comma) are harmless
  }
  const portOk = (r: Rule, port: number) => r.port === undefined || r.port === port

  const allowsHost = (hostname: string, port: number): boolean => {
    const h = normalizeHostname(hostname)
    return rules.some((r) => r.kind === 'name' && r.name === h && portOk(r, port))
  }

  const check = (hostname: string, port: number, address: string): string | null => {
    if (allowsHost(hostname, port)) return null
    const ip = parseIp(normalizeHostname(address))
    if (!ip) return `"${address}" is not an IP address`
    // a mapped address matches rules written either way
    const forms = [ip, unmap(ip)]
    if (rules.some((r) => r.kind === 'net' && portOk(r, port) && forms.some((f) => inCidr(f, r.cidr)))) return null
    const why = defaultRefusal(ip)
    if (why === null) return null
    const h = normalizeHostname(hostname)
    const literal = h === normalizeHostname(address) || parseIp(h) !== null
    const subject = literal ? `${address} is` : `${h} resolves to ${address},`
    return `${subject} ${why} (not listed in AGENTD_TOOL_HOSTS)`
  }

  return { check, allowsHost }
}

export const defaultResolver: Resolver = async (hostname) => {
  const found = await dns.promises.lookup(hostname, { all: true })
  return found.map((a) => a.address)
}

/**
 * The session-creation check of an http tool's `url`: null when it may be called, else a one-line reason
 * (bad URL or scheme, a name that does not resolve, or any resolved address the policy refuses).
 */
export async function checkToolUrl(url: string, policy: HostPolicy, resolve: Resolver = defaultResolver): Promise<string | null> {
  let u: URL
  try {
    u = new URL(url)
  } catch {
    return 'not a valid URL'
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') return `scheme "${u.protocol.slice(0, -1)}" is not allowed (use http or https)`
  const host = normalizeHostname(u.hostname)
  if (host === '') return 'the URL has no host'
  const port = u.port ? Number(u.port) : u.protocol === 'https:' ? 443 : 80
  // a name listed as such allows whatever it resolves to, so there is nothing to look up
  if (policy.allowsHost(host, port)) return null
  let addresses: string[]
  if (net.isIP(host)) {
    addresses = [host]
  } else {
    try {
      addresses = await resolve(host)
    } catch (err) {
      const code = (err as { code?: unknown }).code
      return `cannot resolve ${host}${typeof code === 'string' ? ` (${code})` : ''}`
    }
    if (addresses.length === 0) return `cannot resolve ${host} (no addresses)`
  }
  for (const a of addresses) {
    const why = policy.check(host, port, a)
    if (why !== null) return why
  }
  return null
}

/** Marks the error a guarded lookup raises for a refused address, so it is told apart from DNS failures. */
export class RefusedAddress extends Error {}

/**
 * A socket `lookup` that resolves once and checks every address before the socket connects, so a
 * name that re-resolves to a refused address after an earlier check (DNS rebinding) is caught. Node
 * connects to an IP literal without calling `lookup`: callers check a literal themselves.
 */
export function guardedLookup(policy: HostPolicy, hostname: string, port: number, resolve: Resolver = defaultResolver): net.LookupFunction {
  return (name, options, callback) => {
    resolve(name).then(
      (found) => {
        const want = options.family === 4 || options.family === 'IPv4' ? 4 : options.family === 6 || options.family === 'IPv6' ? 6 : 0
        const addrs = found.map((address) => ({ address, family: net.isIP(address) })).filter((a) => a.family !== 0 && (want === 0 || a.family === want))
        if (addrs.length === 0) {
          const err: NodeJS.ErrnoException = new Error(`getaddrinfo ENOTFOUND ${name}`)
          err.code = 'ENOTFOUND'
          return callback(err, options.all ? [] : '')
        }
        for (const a of addrs) {
          const why = policy.check(hostname, port, a.address)
          if (why !== null) return callback(new RefusedAddress(why), options.all ? [] : '')
        }
        if (options.all) callback(null, addrs)
        else callback(null, addrs[0]!.address, addrs[0]!.family)
      },
      (err: NodeJS.ErrnoException) => callback(err, options.all ? [] : ''),
    )
  }
}
