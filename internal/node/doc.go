// Package node is the xds-node replica process: it wires the etcd client
// (or, in dev mode, an embedded single-member etcd), the store's View, the
// gRPC server (the SotW xDS services of package ads and the standard gRPC
// health service), and the HTTP endpoints (REST-JSON xDS, /healthz,
// /readyz, /metrics, /debug/view, /debug/streams), and owns their start-up
// and graceful shutdown.
//
// It holds no per-stream state (package ads does) and does not track
// membership yet: that comes with internal/shard, on the gossip address
// Config already accepts.
package node
