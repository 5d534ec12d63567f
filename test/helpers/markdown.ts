// Reading the project's markdown in tests: sections by heading, table rows, code blocks.

/**
 * The text from a heading matching `heading` to the next heading of the same or a higher level; a `#`
 * line inside a fenced code block (a shell comment) is no heading.
 */
export function section(md: string, heading: RegExp): string {
  const lines = md.split('\n')
  let fenced = false
  const isHeading = lines.map((l) => {
    if (/^```/.test(l)) fenced = !fenced
    return !fenced && /^(#+)\s/.test(l)
  })
  const at = lines.findIndex((l, k) => isHeading[k] && heading.test(l))
  if (at < 0) throw new Error(`no heading ${heading}`)
  const level = /^(#+)/.exec(lines[at])![1].length
  const end = lines.findIndex((l, k) => k > at && isHeading[k] && /^(#+)/.exec(l)![1].length <= level)
  return lines.slice(at, end < 0 ? undefined : end).join('\n')
}

const isRow = (l: string | undefined) => l !== undefined && /^\s*\|/.test(l)
const isSeparator = (l: string | undefined) => l !== undefined && /^\s*\|[\s:|-]+\|\s*$/.test(l)

/** Body rows of the markdown tables in `text` (header rows left out), as trimmed cells. */
export function tableRows(text: string): string[][] {
  const lines = text.split('\n')
  return lines
    .filter((l, i) => isRow(l) && !isSeparator(l) && !isSeparator(lines[i + 1]))
    .map((l) => l.trim().replace(/^\||\|$/g, '').split(/(?<!\\)\|/).map((c) => c.trim()))
}

/** The contents of the fenced code blocks of language `lang` in `md`. */
export const codeBlocks = (md: string, lang: string): string[] => [...md.matchAll(new RegExp('```' + lang + '\\n([\\s\\S]*?)```', 'g'))].map((m) => m[1])
