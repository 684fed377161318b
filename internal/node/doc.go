// Package node is the xds-node replica process: it wires the etcd client
// (or, in dev mode, an embedded single-member etcd), the store's View, the
// gRPC listener with the standard gRPC health service, and the HTTP
// endpoints (/healthz, /readyz, /metrics, /debug/view), and owns their
// start-up and graceful shutdown.
//
// It does not serve xDS, hold per-stream state or track membership: later
// work adds the xDS servers (internal/ads, internal/delta) to the gRPC
// server bound here, and membership (internal/shard) on the gossip address
// that Config already accepts.
package node
