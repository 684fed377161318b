//go:build !e2e

package e2e

import "time"

// The scale of the cluster tests (cluster_test.go) for `go test ./...`
// (make test): small enough that all of them together stay within about
// four minutes on two cores with race-built replicas. `make e2e` (-tags
// e2e) runs them at the sizes of size_full_test.go.

var (
	// TestClusterAffinity: 300 nodes on 3 replicas.
	affinityMix = clientMix{GRPC: 40, SotW: 130, Delta: 130}
	// TestClusterFailover: the busiest of 3 replicas holds about 100.
	failoverMix = clientMix{GRPC: 20, SotW: 90, Delta: 90}
	// TestClusterAddReplica: about 50 of 200 nodes move to a 4th replica.
	addReplicaMix = clientMix{GRPC: 10, SotW: 95, Delta: 95}
	// TestClusterEtcdLoss.
	etcdLossMix = clientMix{GRPC: 4, SotW: 20, Delta: 20}
	// TestClusterSecure: clients over mTLS.
	secureMix = clientMix{GRPC: 10, SotW: 45, Delta: 45}
)

// addReplicaRate is --rebalance-rate in TestClusterAddReplica: streams
// closed per second per replica, low enough that the pacing shows.
const addReplicaRate = 10

// TestClusterRollingRestart: 300 nodes on 3 replicas admitting 20 new
// streams a second each (burst 5). A SIGTERM sends about 200 reconnects
// to the 2 others over the drain: 10s keeps them at about 10 a second
// each, half the rate (rolling_test.go has the relation).
var rollingMix = clientMix{GRPC: 20, SotW: 140, Delta: 140}

const (
	rollingRate  = 20
	rollingBurst = 5
	rollingDrain = 10 * time.Second
)

// TestClusterCanary: 90 nodes, about 18 of them canaries.
var canaryMix = clientMix{GRPC: 10, SotW: 40, Delta: 40}

// TestClusterStarvedReplica: grpc-go clients (and a few raw ones, whose
// stream ends are recorded) while one replica of three is frozen again
// and again.
var starveMix = clientMix{GRPC: 300, SotW: 20, Delta: 20}
