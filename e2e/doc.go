// Package e2e holds end-to-end tests of Legation: a real xds-node replica
// (internal/node) on an embedded etcd, resources written with the xdsadmin
// CLI (internal/adminctl, run in-process), and real xDS clients that nobody
// here wrote (grpc-go's proxyless xDS client) routing RPCs to real gRPC
// backends through what the replica serves.
//
// It holds tests only and no build tag: `go test ./...` (make test) runs
// it. Tests that need more (several processes, a real etcd cluster, a load
// balancer) belong behind the `e2e` build tag that `make e2e` sets.
package e2e
