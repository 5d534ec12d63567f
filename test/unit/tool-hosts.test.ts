import { describe, expect, it } from 'vitest'
import { checkToolUrl, parseToolHosts, type Resolver } from '../../src/tools/hosts.js'

const none = parseToolHosts(undefined)
/** check() of an IP literal used directly in the URL */
const lit = (policy: ReturnType<typeof parseToolHosts>, addr: string, port = 80) => policy.check(addr, port, addr)

describe('AGENTD_TOOL_HOSTS default rule', () => {
  const refused: Array<[string, RegExp]> = [
    ['127.0.0.1', /loopback/],
    ['127.255.0.9', /loopback/],
    ['::1', /loopback/],
    ['0.0.0.0', /unspecified/],
    ['0.1.2.3', /unspecified/],
    ['::', /unspecified/],
    ['169.254.169.254', /link-local/],
    ['169.254.0.1', /link-local/],
    ['fe80::1', /link-local/],
    ['febf::1', /link-local/],
    ['10.0.0.1', /private/],
    ['10.255.255.255', /private/],
    ['172.16.0.1', /private/],
    ['172.31.255.254', /private/],
    ['192.168.1.1', /private/],
    ['fc00::1', /private/],
    ['fd12:3456::1', /private/],
    ['100.64.0.1', /CGNAT/],
    ['100.127.255.255', /CGNAT/],
    ['224.0.0.1', /multicast/],
    ['239.255.255.250', /multicast/],
    ['ff02::1', /multicast/],
    ['255.255.255.255', /broadcast/],
    ['240.0.0.1', /reserved/],
    ['192.0.2.10', /reserved/],
    ['198.18.0.1', /reserved/],
    ['2001:db8::1', /reserved/],
    ['::ffff:127.0.0.1', /IPv4-mapped form of 127\.0\.0\.1, a loopback/],
    ['::ffff:7f00:1', /IPv4-mapped form of 127\.0\.0\.1, a loopback/],
    ['::ffff:169.254.169.254', /IPv4-mapped .* link-local/],
    ['::ffff:10.0.0.1', /IPv4-mapped .* private/],
    ['::ffff:192.168.0.1', /IPv4-mapped .* private/],
    ['64:ff9b::a9fe:a9fe', /NAT64 form of 169\.254\.169\.254/],
    ['2002:7f00:1::1', /6to4 .* loopback/],
    ['::127.0.0.1', /reserved/],
  ]
  it.each(refused)('refuses %s', (addr, why) => {
    const reason = lit(none, addr)
    expect(reason).toMatch(why)
    expect(reason).toContain('not listed in AGENTD_TOOL_HOSTS')
    expect(reason).not.toContain('\n')
  })

  const allowed = ['8.8.8.8', '1.1.1.1', '172.32.0.1', '100.128.0.1', '169.255.0.1', '2606:4700:4700::1111', '::ffff:8.8.8.8', '64:ff9b::808:808']
  it.each(allowed)('allows the public address %s', (addr) => {
    expect(lit(none, addr)).toBeNull()
  })

  it('names the host that resolved to a refused address', () => {
    expect(none.check('metadata.example', 80, '169.254.169.254')).toBe(
      'metadata.example resolves to 169.254.169.254, a link-local address (not listed in AGENTD_TOOL_HOSTS)',
    )
  })

  it('treats the empty and unset specs alike', () => {
    expect(lit(parseToolHosts(''), '10.0.0.1')).not.toBeNull()
    expect(lit(parseToolHosts(' , '), '10.0.0.1')).not.toBeNull()
  })

  it('refuses something that is not an address', () => {
    expect(none.check('x', 80, 'not-an-ip')).toMatch(/not an IP address/)
  })
})

describe('AGENTD_TOOL_HOSTS entries', () => {
  it('allows a listed IPv4 address on any port, and nothing beside it', () => {
    const p = parseToolHosts('127.0.0.1')
    expect(lit(p, '127.0.0.1', 80)).toBeNull()
    expect(lit(p, '127.0.0.1', 8080)).toBeNull()
    expect(lit(p, '127.0.0.2')).not.toBeNull()
    // the mapped spelling of a listed address is the same address
    expect(lit(p, '::ffff:127.0.0.1')).toBeNull()
  })

  it('allows listed IPv6 addresses, bracketed or not, with a port when given', () => {
    expect(lit(parseToolHosts('::1'), '::1')).toBeNull()
    expect(lit(parseToolHosts('[::1]'), '::1')).toBeNull()
    const p = parseToolHosts('[fd00::5]:8443')
    expect(lit(p, 'fd00::5', 8443)).toBeNull()
    expect(lit(p, 'fd00::5', 443)).toMatch(/private/)
    // a mapped entry also lists the plain IPv4 address
    expect(lit(parseToolHosts('::ffff:10.0.0.9'), '10.0.0.9')).toBeNull()
  })

  it('allows an IPv4 address with a port only on that port', () => {
    const p = parseToolHosts('10.1.2.3:9000')
    expect(lit(p, '10.1.2.3', 9000)).toBeNull()
    expect(lit(p, '10.1.2.3', 9001)).toMatch(/private/)
  })

  it('allows addresses inside a listed IPv4 CIDR', () => {
    const p = parseToolHosts('10.0.0.0/8, 192.168.10.0/24')
    expect(lit(p, '10.200.3.4')).toBeNull()
    expect(lit(p, '192.168.10.77')).toBeNull()
    expect(lit(p, '192.168.11.1')).toMatch(/private/)
    expect(lit(p, '172.16.0.1')).toMatch(/private/)
    expect(lit(p, '::ffff:10.9.9.9')).toBeNull()
    // host bits in the entry are ignored
    expect(lit(parseToolHosts('10.1.2.3/8'), '10.99.0.1')).toBeNull()
  })

  it('allows addresses inside a listed IPv6 CIDR', () => {
    const p = parseToolHosts('fd00:1234::/32,[fe80::]/10')
    expect(lit(p, 'fd00:1234:5::1')).toBeNull()
    expect(lit(p, 'fe80::abcd')).toBeNull()
    expect(lit(p, 'fd00:1235::1')).toMatch(/private/)
    expect(lit(parseToolHosts('::ffff:0:0/96'), '::ffff:127.0.0.1')).toBeNull()
    expect(lit(parseToolHosts('::/0'), '::1')).toBeNull()
  })

  it('allows any address of a listed host name, matched case-insensitively as written', () => {
    const p = parseToolHosts('Tools.Internal')
    expect(p.check('tools.internal', 80, '10.0.0.7')).toBeNull()
    expect(p.check('TOOLS.internal', 9999, '127.0.0.1')).toBeNull()
    expect(p.allowsHost('tools.internal', 1)).toBe(true)
    // a different spelling is a different name
    expect(p.check('tools.internal.', 80, '10.0.0.7')).toMatch(/private/)
    expect(p.check('x.tools.internal', 80, '10.0.0.7')).toMatch(/private/)
    // listing a name does not list the addresses it resolves to for other names
    expect(p.check('other.example', 80, '10.0.0.7')).toMatch(/other\.example resolves to 10\.0\.0\.7/)
  })

  it('allows a listed name:port only on that port', () => {
    const p = parseToolHosts('localhost:8080, tools')
    expect(p.check('localhost', 8080, '127.0.0.1')).toBeNull()
    expect(p.check('localhost', 8081, '127.0.0.1')).toMatch(/localhost resolves to 127\.0\.0\.1, a loopback/)
    expect(p.allowsHost('localhost', 8081)).toBe(false)
    expect(p.check('tools', 1234, '172.18.0.3')).toBeNull()
  })

  it('lists internationalized names in the punycode spelling the URL parser uses', () => {
    const host = new URL('http://Bücher.example/').hostname
    expect(parseToolHosts('bücher.example').check(host, 80, '10.0.0.1')).toBeNull()
  })

  const bad = [
    '*.example.com',
    'exa mple.com',
    'a..b',
    '-bad.example',
    '10.0.0.256',
    '1.2.3',
    '0x7f.1',
    'host:',
    'host:0',
    'host:65536',
    'host:http',
    ':80',
    '10.0.0.0/33',
    'fd00::/129',
    '10.0.0.0/',
    'nothost/8',
    '10.0.0.0/8x',
    '1::2::3',
    'fd00::g1',
    '[10.0.0.1]',
    '[::1',
    '[::1]:',
    '[::1]x',
    'fe80::1%eth0',
    'http://tools.internal',
  ]
  it.each(bad)('throws naming the malformed entry %s', (entry) => {
    expect(() => parseToolHosts(`127.0.0.1, ${entry}, ::1`)).toThrow(`AGENTD_TOOL_HOSTS: malformed entry "${entry}"`)
  })
})

describe('checkToolUrl', () => {
  const resolver =
    (table: Record<string, string[]>): Resolver =>
    async (host) => {
      const found = table[host]
      if (!found) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' })
      return found
    }
  const noDns: Resolver = async () => {
    throw new Error('no lookup expected')
  }

  it('refuses the metadata address and private addresses', async () => {
    expect(await checkToolUrl('http://169.254.169.254/x', none, noDns)).toMatch(/169\.254\.169\.254 is a link-local address/)
    expect(await checkToolUrl('http://10.0.0.1:8080', none, noDns)).toMatch(/10\.0\.0\.1 is a private address/)
    expect(await checkToolUrl('http://[::1]:9000/t', none, noDns)).toMatch(/::1 is a loopback address/)
    expect(await checkToolUrl('http://[::ffff:127.0.0.1]/', none, noDns)).toMatch(/loopback/)
    // the URL parser turns odd IPv4 spellings into the plain form before the check
    expect(await checkToolUrl('http://0x7f.1/', none, noDns)).toMatch(/127\.0\.0\.1 is a loopback/)
    expect(await checkToolUrl('http://2130706433/', none, noDns)).toMatch(/127\.0\.0\.1 is a loopback/)
  })

  it('refuses schemes other than http and https, and bad URLs', async () => {
    expect(await checkToolUrl('ftp://example.com/x', none, noDns)).toMatch(/scheme "ftp" is not allowed/)
    expect(await checkToolUrl('file:///etc/passwd', none, noDns)).toMatch(/scheme "file" is not allowed/)
    expect(await checkToolUrl('not a url', none, noDns)).toBe('not a valid URL')
  })

  it('allows a listed address, honouring the default ports', async () => {
    expect(await checkToolUrl('http://127.0.0.1:3000/tool', parseToolHosts('127.0.0.1'), noDns)).toBeNull()
    expect(await checkToolUrl('http://127.0.0.1/tool', parseToolHosts('127.0.0.1:80'), noDns)).toBeNull()
    expect(await checkToolUrl('https://127.0.0.1/tool', parseToolHosts('127.0.0.1:80'), noDns)).toMatch(/loopback/)
    expect(await checkToolUrl('https://127.0.0.1/tool', parseToolHosts('127.0.0.1:443'), noDns)).toBeNull()
  })

  it('allows a public address and a name resolving only to public addresses', async () => {
    expect(await checkToolUrl('https://93.184.216.34/x', none, noDns)).toBeNull()
    const r = resolver({ 'tools.example': ['93.184.216.34', '2606:2800:220:1::1'] })
    expect(await checkToolUrl('https://tools.example/x', none, r)).toBeNull()
  })

  it('refuses a name when any address it resolves to is refused', async () => {
    const r = resolver({ 'mixed.example': ['93.184.216.34', '10.0.0.5'] })
    expect(await checkToolUrl('http://mixed.example/', none, r)).toBe(
      'mixed.example resolves to 10.0.0.5, a private address (not listed in AGENTD_TOOL_HOSTS)',
    )
    // …unless that address is listed
    expect(await checkToolUrl('http://mixed.example/', parseToolHosts('10.0.0.0/24'), r)).toBeNull()
  })

  it('refuses a name that does not resolve', async () => {
    expect(await checkToolUrl('http://nowhere.example/', none, resolver({}))).toBe('cannot resolve nowhere.example (ENOTFOUND)')
    expect(await checkToolUrl('http://empty.example/', none, resolver({ 'empty.example': [] }))).toMatch(/cannot resolve empty\.example/)
  })

  it('allows a listed name without looking it up', async () => {
    expect(await checkToolUrl('http://Tools.Internal:81/x', parseToolHosts('tools.internal'), noDns)).toBeNull()
    expect(await checkToolUrl('http://tools.internal:81/x', parseToolHosts('tools.internal:80'), resolver({ 'tools.internal': ['10.0.0.2'] }))).toMatch(
      /tools\.internal resolves to 10\.0\.0\.2/,
    )
  })

  it('resolves with the system resolver by default', async () => {
    expect(await checkToolUrl('http://localhost:1234/', none)).toMatch(/localhost resolves to .*loopback/)
    expect(await checkToolUrl('http://localhost:1234/', parseToolHosts('localhost'))).toBeNull()
  })
})
