// The Node.js agentd runs on (docs/runtime.md). This module imports nothing, so the entry point can
// check the runtime before any other module of agentd (or of its dependencies) is loaded.

/** The oldest Node.js agentd runs on: the 24 LTS line from its first LTS release. package.json `engines` says the same. */
export const MIN_NODE = { major: 24, minor: 11 } as const

/** Why `version` (e.g. `v20.20.2`) cannot run agentd, in one line; undefined when it can. */
export function runtimeProblem(version: string): string | undefined {
  const m = /^v?(\d+)\.(\d+)/.exec(version)
  if (!m) return `cannot read the Node.js version "${version}"`
  const [major, minor] = [Number(m[1]), Number(m[2])]
  if (major > MIN_NODE.major || (major === MIN_NODE.major && minor >= MIN_NODE.minor)) return undefined
  return (
    `agentd needs Node.js ${MIN_NODE.major}.${MIN_NODE.minor} or newer, and this is ${version}. ` +
    `Start it with \`npm start\` after \`npm ci\` (which fetches Node.js ${MIN_NODE.major} when the system's is older), or install Node.js ${MIN_NODE.major}.`
  )
}
