// Package replica is the xds-node replica process, its composition root: New
// builds every part from a Config (the etcd client, or in dev mode the
// address of an embedded single-member etcd; the store's View; the lease
// tracker; the status writer and CSDS; the cluster agent of package
// shard; the relay; the SotW (ads) and delta servers; the gRPC server, on
// which package grpcapi registers the services; the HTTP mux), and Run
// starts the embedded etcd in dev mode, runs the parts and owns their
// graceful shutdown. The HTTP endpoints (/healthz, /readyz, /metrics and
// REST-JSON) are in node.go, the /debug/ ones in debug.go.
//
// It holds no per-stream state (package xdsstream and the protocol
// packages do), no cluster policy (when to tell the ring this replica is
// not ready, when to rebalance, which addresses to advertise: package
// shard's Agent does) and no relaying (package relay).
package replica
