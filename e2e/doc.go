// Package e2e holds end-to-end tests of Legation: a real xds-node replica
// (internal/node) on an embedded etcd, resources written with the xdsadmin
// CLI (internal/adminctl, run in-process), and real xDS clients that nobody
// here wrote (grpc-go's proxyless xDS client) routing RPCs to real gRPC
// backends through what the replica serves.
//
// It also runs the xds-node binary itself: TestDeltaAcrossReplicas builds
// it once and starts two replica processes on one embedded etcd, with a
// raw delta client moving from one to the other.
//
// It holds tests only and no build tag: `go test ./...` (make test) runs
// it, so what is here stays within seconds. Tests that need more (a real
// etcd cluster, a load balancer, many processes) belong behind the `e2e`
// build tag that `make e2e` sets.
package e2e
