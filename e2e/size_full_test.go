//go:build e2e

package e2e

// The scale of the cluster tests (cluster_test.go) for `make e2e` (-tags
// e2e). size_small_test.go has the sizes of `go test ./...`.

var (
	// TestClusterAffinity: 1,500 nodes on 3 replicas.
	affinityMix = clientMix{GRPC: 100, SotW: 700, Delta: 700}
	// TestClusterFailover: the busiest of 3 replicas holds about 400.
	failoverMix = clientMix{GRPC: 60, SotW: 570, Delta: 570}
	// TestClusterAddReplica: about 250 of 1,000 nodes move to a 4th
	// replica.
	addReplicaMix = clientMix{GRPC: 40, SotW: 480, Delta: 480}
	// TestClusterEtcdLoss.
	etcdLossMix = clientMix{GRPC: 20, SotW: 150, Delta: 150}
	// TestClusterSecure: clients over mTLS.
	secureMix = clientMix{GRPC: 40, SotW: 280, Delta: 280}
)

// addReplicaRate is --rebalance-rate in TestClusterAddReplica: streams
// closed per second per replica, low enough that the pacing shows.
const addReplicaRate = 50
