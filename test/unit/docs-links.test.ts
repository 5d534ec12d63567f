// Every relative link in README.md and docs/ leads to a file of the repository (a user's clone has
// nothing beside it), and every #anchor to a heading or an explicit anchor of the page it names.

import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')

function markdownFiles(): string[] {
  const out = ['README.md']
  const walk = (dir: string) => {
    for (const e of fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true })) {
      const rel = path.join(dir, e.name)
      if (e.isDirectory()) walk(rel)
      else if (e.name.endsWith('.md')) out.push(rel)
    }
  }
  walk('docs')
  return out
}

/** Markdown without its code: links in code blocks and code spans are not links. */
const prose = (md: string) => md.replace(/```[\s\S]*?```/g, '').replace(/`[^`\n]*`/g, '')

/** Targets of inline links `[text](target)`, reference definitions `[x]: target` and `href="…"`. */
export function linkTargets(md: string): string[] {
  const text = prose(md)
  const out: string[] = []
  for (const m of text.matchAll(/!?\[[^\]]*\]\(\s*(?:<([^>]+)>|([^)\s]+))(?:\s+"[^"]*")?\s*\)/g)) out.push(m[1] ?? m[2])
  for (const m of text.matchAll(/^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$/gm)) out.push(m[1])
  for (const m of text.matchAll(/\bhref="([^"]+)"/g)) out.push(m[1])
  return out
}

/** The anchors a page offers: GitHub's slugs of its headings, and `<a id="…">` / `<a name="…">`. */
export function anchorsOf(md: string): Set<string> {
  const out = new Set<string>()
  const seen = new Map<string, number>()
  for (const m of md.replace(/```[\s\S]*?```/g, '').matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const slug = m[1]
      .replace(/<[^>]+>/g, '')
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-')
    const n = seen.get(slug) ?? 0
    seen.set(slug, n + 1)
    out.add(n ? `${slug}-${n}` : slug)
  }
  for (const m of md.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) out.add(m[1])
  return out
}

describe('links in README.md and docs/', () => {
  const files = markdownFiles()

  it('finds the pages and their links', () => {
    expect(files).toEqual(expect.arrayContaining(['README.md', 'docs/README.md', 'docs/api.md', 'docs/configuration.md', 'docs/models.md', 'docs/plugins.md', 'docs/operations.md', 'docs/reliability.md']))
    expect(linkTargets('[a](b.md) [c](<d e.md> "t") ![i](img.png) `[x](no.md)`\n```\n[y](no.md)\n```\n[r]: ref.md\n<a href="h.md">h</a>')).toEqual(['b.md', 'd e.md', 'img.png', 'ref.md', 'h.md'])
    expect([...anchorsOf('# Leases: who drives a session\n## `GET /x`\n## Same\n## Same\n<a id="route-x"></a>')]).toEqual(['leases-who-drives-a-session', 'get-x', 'same', 'same-1', 'route-x'])
  })

  for (const file of files) {
    it(`${file}: every relative link resolves inside the repository`, () => {
      const md = fs.readFileSync(path.join(ROOT, file), 'utf8')
      const problems: string[] = []
      for (const target of linkTargets(md)) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue // http:, https:, mailto:
        const [rawPath, anchor] = target.split('#') as [string, string | undefined]
        const resolved = rawPath ? path.resolve(path.dirname(path.join(ROOT, file)), decodeURIComponent(rawPath)) : path.join(ROOT, file)
        const rel = path.relative(ROOT, resolved)
        if (rel.startsWith('..') || path.isAbsolute(rel)) {
          problems.push(`${target}: outside the repository`)
          continue
        }
        if (!fs.existsSync(resolved)) {
          problems.push(`${target}: no such file`)
          continue
        }
        if (anchor !== undefined && resolved.endsWith('.md') && !anchorsOf(fs.readFileSync(resolved, 'utf8')).has(anchor)) problems.push(`${target}: no heading or anchor "${anchor}" in ${rel}`)
      }
      expect(problems).toEqual([])
    })
  }
})
