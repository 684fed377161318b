// Package replica is the xds-node replica process, its composition root: New
// builds every part from a Config (the etcd client, or in dev mode the
// address of an embedded single-member etcd; the view; the lease
// tracker; the status writer and CSDS; the cluster agent of package
// shard; the relay; the SotW and delta servers; the gRPC server, on
// which package grpcapi registers the services; the HTTP mux), and Run
// starts the embedded etcd in dev mode, runs the parts and owns their
// graceful shutdown.
//
// Its files follow the replica's life:
//   - config.go, validate.go: Config, its defaults and its checks;
//     bounds.go: the stream bounds as the flags give them and as the
//     stream core and the relay take them.
//   - node.go: the Node, New and Close; listen.go and probe.go bind the
//     listeners; then, in New's order, build_state.go (etcd client, view,
//     leases, status, CSDS), access.go (TLS, authorization, the guard),
//     build_cluster.go (cluster agent, relay, rebalance, fair share),
//     build_xds.go (SotW, delta, LRS, the collector between pushes),
//     grpc.go and interceptor.go (limits, the gRPC server and its
//     interceptors), http.go (the HTTP server).
//   - run.go: Run and the parts it runs; readiness.go: readiness,
//     /healthz and /readyz; shed.go: giving back streams above the share
//     cap; shutdown.go: the drain and the servers' stop.
//   - debug.go: /debug/; conns.go, httpconns.go: the listeners'
//     connection tracking and bounds; metrics.go: the replica's own
//     metrics; insecure.go, etcdwarn.go: warnings of what is not secured.
//
// It holds no per-stream state (package xdsstream and the protocol
// packages do), no cluster policy (when to tell the ring this replica is
// not ready, when to rebalance, which addresses to advertise: package
// shard's Agent does) and no relaying (package relay).
package replica
