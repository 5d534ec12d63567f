// The worker's door: the driver host (leases, takeover, idle release).
export { WorkerHost, type HostOptions } from './host.js'
