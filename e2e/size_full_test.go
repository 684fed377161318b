//go:build e2e

package e2e

import "time"

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

// TestClusterRollingRestart: 3,000 nodes on 3 replicas admitting 100 new
// streams a second each (burst 10). A SIGTERM sends about 2N/3 = 2,000
// reconnects to the 2 others over the drain: 20s keeps them at about 50
// a second each, half the rate (rolling_test.go has the relation).
var rollingMix = clientMix{GRPC: 100, SotW: 1450, Delta: 1450}

const (
	rollingRate  = 100
	rollingBurst = 10
	rollingDrain = 20 * time.Second
)

// TestClusterCanary: 600 nodes, about 120 of them canaries.
var canaryMix = clientMix{GRPC: 60, SotW: 270, Delta: 270}

// TestClusterStarvedReplica: grpc-go clients (and a few raw ones, whose
// stream ends are recorded) while one replica of three is frozen again
// and again.
var starveMix = clientMix{GRPC: 1000, SotW: 500, Delta: 500}
