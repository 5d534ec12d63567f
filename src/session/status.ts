// A session's run state as its row carries it (SPEC §18.4), and the public status it shows.

export type RunState = 'idle' | 'wanted' | 'running' | 'maintenance'

/** SPEC §18.4: `running` while a wake is wanted or a driver runs; maintenance shows `idle` (§5.1). */
export function publicStatus(runState: RunState): 'idle' | 'running' {
  return runState === 'wanted' || runState === 'running' ? 'running' : 'idle'
}
