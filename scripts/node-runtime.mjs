#!/usr/bin/env node
// agentd runs on Node.js 24 LTS (docs/runtime.md). `npm ci` runs this file as the root package's
// postinstall with whatever Node.js runs npm. With Node.js 24 or newer it does nothing. With an older
// one it fetches the pinned Node.js 24 build from the npm registry (the `node-<platform>-<arch>`
// package, through npm itself, so npm's registry, proxy and cache settings apply), checks it against
// the integrity pinned in package.json, unpacks it into node_modules/.agentd-node and links
// node_modules/.bin/node to it. npm puts node_modules/.bin first on the PATH of every npm script, so
// `npm start`, `npm test` and every tool they run (tsx, vitest) then run on that Node.js.
//
// Plain JavaScript that runs on old Node.js versions: it is what brings the new one.

import { execFileSync } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8'))
const pinned = pkg.agentd.node
/** engines.node is `>=MAJOR.MINOR`: the oldest Node.js the code runs on */
const MIN = /^>=(\d+)\.(\d+)$/.exec(pkg.engines.node).slice(1).map(Number)

const BIN_LINK = path.join(ROOT, 'node_modules', '.bin', process.platform === 'win32' ? 'node.exe' : 'node')
const HOME = path.join(ROOT, 'node_modules', '.agentd-node')

const say = (line) => process.stdout.write(`agentd: ${line}\n`)
const atLeast = (v, [maj, min]) => {
  const [a, b] = /^v?(\d+)\.(\d+)/.exec(v).slice(1).map(Number)
  return a > maj || (a === maj && b >= min)
}
const MIN_TEXT = `${MIN[0]}.${MIN[1]}`

function removeLink() {
  try {
    if (fs.lstatSync(BIN_LINK).isSymbolicLink()) fs.unlinkSync(BIN_LINK)
  } catch {}
}

/** The npm that runs this script, so the fetch uses its configuration (registry, proxy, cache). */
function npm(args, cwd) {
  const cli = process.env.npm_execpath
  if (cli && /\.(c?js|mjs)$/.test(cli)) return execFileSync(process.execPath, [cli, ...args], { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] })
  return execFileSync(process.platform === 'win32' ? 'npm.cmd' : 'npm', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] })
}

/** The Node.js that runs npm: the system's, whichever Node.js runs this script (a pre-script runs on the linked one). */
function systemVersion() {
  const npmNode = process.env.npm_node_execpath
  if (!npmNode || npmNode === process.execPath) return process.version
  return execFileSync(npmNode, ['--version'], { encoding: 'utf8' }).trim()
}

/**
 * Whether npm itself runs on the Node.js this script linked: a shell that puts node_modules/.bin first
 * on its PATH (direnv's PATH_add, a script's export) finds the link before the system's Node.js. The
 * link is in use then, whatever the system's is; dropping it would leave the next npm script on an
 * older Node.js.
 */
function npmRunsOnLink() {
  const npmNode = process.env.npm_node_execpath
  if (!npmNode) return false
  try {
    return fs.realpathSync(npmNode) === fs.realpathSync(path.join(HOME, pinned.version, 'bin', process.platform === 'win32' ? 'node.exe' : 'node'))
  } catch {
    return false
  }
}

function install() {
  if (npmRunsOnLink()) return
  if (atLeast(systemVersion(), MIN)) {
    // the system's Node.js is new enough: use it, and drop a link an earlier install under an older one left
    removeLink()
    return
  }
  const platform = process.platform === 'win32' ? 'win' : process.platform
  const name = `node-${platform}-${process.arch}`
  const integrity = pinned.integrity[`${platform}-${process.arch}`]
  if (!integrity) {
    process.stderr.write(
      `agentd: needs Node.js ${MIN_TEXT} or newer; this is ${process.version}, and no Node.js ${pinned.version} build for ${platform}-${process.arch} is pinned in package.json. Install Node.js ${MIN[0]} (for example with nvm: nvm install ${MIN[0]}) and run npm ci again.\n`,
    )
    process.exit(1)
  }
  const dir = path.join(HOME, pinned.version)
  const binary = path.join(dir, 'bin', process.platform === 'win32' ? 'node.exe' : 'node')
  if (!fs.existsSync(binary)) {
    say(`this is Node.js ${process.version}; fetching Node.js ${pinned.version} (${name}) from the npm registry for npm start and npm test`)
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'agentd-node-'))
    try {
      const out = JSON.parse(npm(['pack', `${name}@${pinned.version}`, '--json', '--pack-destination', tmp], tmp))
      const tarball = path.join(tmp, out[0].filename)
      const [algo, expected] = integrity.split(/-(.*)/s)
      const actual = crypto.createHash(algo).update(fs.readFileSync(tarball)).digest('base64')
      if (actual !== expected) throw new Error(`${name}@${pinned.version} does not match the integrity pinned in package.json`)
      const unpack = path.join(tmp, 'unpacked')
      fs.mkdirSync(unpack)
      execFileSync('tar', ['-xzf', tarball, '-C', unpack], { stdio: 'inherit' })
      fs.mkdirSync(HOME, { recursive: true })
      fs.rmSync(dir, { recursive: true, force: true })
      fs.renameSync(path.join(unpack, 'package'), dir)
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true })
    }
  }
  const version = execFileSync(binary, ['--version'], { encoding: 'utf8' }).trim()
  if (version !== `v${pinned.version}`) throw new Error(`${binary} reports ${version}, expected v${pinned.version}`)
  fs.mkdirSync(path.dirname(BIN_LINK), { recursive: true })
  const target = path.relative(path.dirname(BIN_LINK), binary)
  let linked = false
  try {
    linked = fs.readlinkSync(BIN_LINK) === target
  } catch {}
  if (linked) return
  removeLink()
  fs.symlinkSync(target, BIN_LINK)
  say(`npm scripts run on Node.js ${pinned.version} (node_modules/.bin/node)`)
}

try {
  install()
} catch (e) {
  process.stderr.write(`agentd: could not set up Node.js ${pinned.version}: ${e.message.split('\n')[0]}\n`)
  process.exit(1)
}
