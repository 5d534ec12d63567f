// Preloaded into the memory measurement's child processes (agentd and the floor alike, with
// --expose-gc): SIGUSR2 runs a full garbage collection, so RSS samples are not garbage-dependent.
process.on('SIGUSR2', () => (globalThis as { gc?: () => void }).gc?.())
