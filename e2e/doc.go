// Package e2e holds end-to-end tests of Legation: a real xds-node replica
// (internal/replica) on an embedded etcd, resources written with the xdsadmin
// CLI (internal/admin/adminctl, run in-process), and real xDS clients that nobody
// here wrote (grpc-go's proxyless xDS client) routing RPCs to real gRPC
// backends through what the replica serves.
//
// It also runs the xds-node binary itself, as processes that
// internal/tools/localcluster owns (what `go run ./deploy/local up` runs):
// TestDeltaAcrossReplicas starts two replica processes on one embedded
// etcd, with a raw delta client moving from one to the other; and the
// TestCluster* tests start a whole local cluster: three etcd processes,
// xds-node processes and HAProxy in front, with hundreds of grpc-go, raw
// SotW and raw delta clients (affinity, failover, adding a replica, etcd
// losing a member and its quorum, a frozen etcd member), and one with TLS
// everywhere (TestClusterSecure: etcd with client certificates and
// least-privilege roles, mTLS between clients and replicas and between
// replicas, encrypted gossip). TestClusterLRS has grpc-go clients report
// their load over LRS through a 3-replica cluster and reads it back,
// cluster-wide, with xdsadmin load.
//
// It has no build tag: `go test ./...` (make test) runs it at a size that
// fits the time limit (size_small_test.go). `make e2e` sets the `e2e`
// build tag, which runs the cluster tests with thousands of clients
// (size_full_test.go). BenchmarkFailover (make bench) measures a failover
// of a replica holding about 1,000 of 3,000 clients.
//
// Promises cited by number are those of docs/concepts/design.md.
package e2e
