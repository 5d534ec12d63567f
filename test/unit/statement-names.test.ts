// The statements src/ repeats are named by the code (store/db.ts statement) and prepared under that name
// on PostgreSQL; pg refuses a second text under a prepared name, so a name is declared once in all of
// src/. Read from the sources themselves (TypeScript's parser): every statement() name is a literal, or a
// family listed below whose names the code builds from a fixed set of variants; no name is declared
// twice or falls into a family; and no parameterised query sends a text written in place, which would
// go unprepared (the few left so on purpose are listed, with why).

import fs from 'node:fs'
import path from 'node:path'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'

const ROOT = path.resolve(import.meta.dirname, '../..')
const SRC = path.join(ROOT, 'src')

/** Names built from a fixed set of variants: the file, the name's template as written, what it yields. */
const FAMILIES: Array<{ file: string; template: string; names: RegExp }> = [
  // a group's statement: a mask of the side-row kinds in it
  { file: 'src/store/unit-sql.ts', template: 'unit_${mask}', names: /^unit_\d+$/ },
  // a unit's alone: that mask, and a mask of the row-move rules that apply to it
  { file: 'src/store/unit-sql.ts', template: 'unit1_${mask}_${rules}', names: /^unit1_\d+_\d+$/ },
  // the list's conditions present: cursor, owner, ids, agents
  { file: 'src/store/sessions.ts', template: "session_list${m & 1 ? '_after' : ''}${m & 2 ? '_owner' : ''}${m & 4 ? '_ids' : ''}${m & 8 ? '_agents' : ''}", names: /^session_list(_after)?(_owner)?(_ids)?(_agents)?$/ },
  // a mask of the eight columns a PATCH writes
  { file: 'src/store/sessions.ts', template: 'session_patch_${mask}', names: /^session_patch_\d+$/ },
  // a mask of the four limits
  { file: 'src/store/tenants.ts', template: 'tenant_set_limits_${m}', names: /^tenant_set_limits_\d+$/ },
]

/** Parameterised queries whose text stays written in place: one-off statements, not worth a name. */
const UNNAMED: Array<{ file: string; text: RegExp; why: string }> = [
  { file: 'src/store/migrate.ts', text: /pg_advisory_lock|pg_advisory_unlock|INSERT INTO schema_migrations/, why: 'migrations run once per start' },
  { file: 'src/store/tenants.ts', text: /SELECT id FROM tenants WHERE name = \$1/, why: "the embedded database's default tenant, looked up once per start" },
]

function sources(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((d) => (d.isDirectory() ? sources(path.join(dir, d.name)) : d.name.endsWith('.ts') ? [path.join(dir, d.name)] : []))
}

interface Declared {
  file: string
  line: number
  /** a literal name, or the template of a built one */
  name?: string
  template?: string
}

interface Query {
  file: string
  line: number
  text: string
}

const isText = (n: ts.Node): boolean => ts.isStringLiteral(n) || ts.isNoSubstitutionTemplateLiteral(n) || ts.isTemplateExpression(n) || (ts.isBinaryExpression(n) && n.operatorToken.kind === ts.SyntaxKind.PlusToken)

function scan(): { declared: Declared[]; queries: Query[] } {
  const declared: Declared[] = []
  const queries: Query[] = []
  for (const abs of sources(SRC)) {
    const file = path.relative(ROOT, abs).split(path.sep).join('/')
    const sf = ts.createSourceFile(abs, fs.readFileSync(abs, 'utf8'), ts.ScriptTarget.Latest, true)
    const line = (n: ts.Node) => sf.getLineAndCharacterOfPosition(n.getStart(sf)).line + 1
    // constants holding a text written in place (not a statement()): a query through one is unnamed too
    const plain = new Map<string, ts.Node>()
    const collect = (n: ts.Node): void => {
      if (ts.isVariableDeclaration(n) && ts.isIdentifier(n.name) && n.initializer && isText(n.initializer)) plain.set(n.name.text, n.initializer)
      ts.forEachChild(n, collect)
    }
    collect(sf)
    /** The texts written in place that a query's first argument may be (each branch of a conditional). */
    const inPlace = (n: ts.Node): ts.Node[] => {
      if (ts.isParenthesizedExpression(n)) return inPlace(n.expression)
      if (ts.isConditionalExpression(n)) return [...inPlace(n.whenTrue), ...inPlace(n.whenFalse)]
      if (isText(n)) return [n]
      if (ts.isIdentifier(n) && plain.has(n.text)) return [plain.get(n.text)!]
      return []
    }
    const visit = (n: ts.Node): void => {
      if (ts.isCallExpression(n)) {
        const callee = n.expression
        if (ts.isIdentifier(callee) && callee.text === 'statement' && n.arguments.length === 2) {
          const a = n.arguments[0]
          if (ts.isStringLiteral(a) || ts.isNoSubstitutionTemplateLiteral(a)) declared.push({ file, line: line(n), name: a.text })
          // a template as written between its backticks; any other expression as written (no family is)
          else declared.push({ file, line: line(n), template: ts.isTemplateExpression(a) ? a.getText(sf).slice(1, -1) : a.getText(sf) })
        }
        if (ts.isPropertyAccessExpression(callee) && callee.name.text === 'query' && n.arguments.length >= 2) {
          for (const t of inPlace(n.arguments[0])) queries.push({ file, line: line(n), text: t.getText(sf) })
        }
      }
      ts.forEachChild(n, visit)
    }
    visit(sf)
  }
  return { declared, queries }
}

const { declared, queries } = scan()
const literal = declared.filter((d) => d.name !== undefined)
const at = (d: { file: string; line: number }) => `${d.file}:${d.line}`

describe('statement names', () => {
  it('the scan finds the named statements (it reads what it should)', () => {
    expect(literal.length).toBeGreaterThan(50)
    expect(literal.map((d) => d.name)).toEqual(expect.arrayContaining(['lease_renew', 'webhook_claim', 'session_get']))
  })

  it('every name is lowercase letters, digits and _', () => {
    expect(literal.filter((d) => !/^[a-z0-9_]+$/.test(d.name!)).map((d) => `${at(d)} ${d.name}`)).toEqual([])
  })

  it('no name is declared twice in src/', () => {
    const byName = new Map<string, Declared[]>()
    for (const d of literal) byName.set(d.name!, [...(byName.get(d.name!) ?? []), d])
    const twice = [...byName].filter(([, ds]) => ds.length > 1).map(([n, ds]) => `${n}: ${ds.map(at).join(', ')}`)
    expect(twice).toEqual([])
  })

  it('a built name belongs to a listed family, and every listed family is still built', () => {
    const built = declared.filter((d) => d.template !== undefined)
    const unlisted = built.filter((d) => !FAMILIES.some((f) => f.file === d.file && f.template === d.template)).map((d) => `${at(d)} \`${d.template}\``)
    expect(unlisted).toEqual([])
    const stale = FAMILIES.filter((f) => !built.some((d) => d.file === f.file && d.template === f.template)).map((f) => `${f.file} \`${f.template}\``)
    expect(stale).toEqual([])
  })

  it("no literal name is one of a family's, and no family's names can be another's", () => {
    expect(literal.filter((d) => FAMILIES.some((f) => f.names.test(d.name!))).map((d) => `${at(d)} ${d.name}`)).toEqual([])
    const heads = FAMILIES.map((f) => f.template.slice(0, f.template.indexOf('${')))
    const overlapping = heads.flatMap((a, i) => heads.filter((b, j) => i !== j && a.startsWith(b)).map((b) => `${a} / ${b}`))
    expect(overlapping).toEqual([])
  })

  it('no parameterised query sends a text written in place, but the listed one-offs', () => {
    const unnamed = queries.filter((q) => !UNNAMED.some((u) => u.file === q.file && u.text.test(q.text))).map((q) => `${at(q)} ${q.text.slice(0, 80)}`)
    expect(unnamed).toEqual([])
    const stale = UNNAMED.filter((u) => !queries.some((q) => q.file === u.file && u.text.test(q.text))).map((u) => `${u.file} ${u.text}`)
    expect(stale).toEqual([])
  })
})
