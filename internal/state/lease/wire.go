package lease

import (
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// The client features of promise 8 (docs/concepts/design.md), from the Node
// message.
const (
	// FeatureTTL: the client reads Resource.ttl and heartbeats.
	FeatureTTL = "xds.config.supports-resource-ttl"
	// FeatureResourceInSotW: the client unwraps discovery.v3.Resource in
	// SotW responses.
	FeatureResourceInSotW = "xds.config.resource-in-sotw"
)

// Features reports what a client advertises: TTLs at all (delta), and TTL
// wrapping in SotW (which needs both features).
func Features(n *corev3.Node) (ttl, sotwWrap bool) {
	var inSotW bool
	for _, f := range n.GetClientFeatures() {
		switch f {
		case FeatureTTL:
			ttl = true
		case FeatureResourceInSotW:
			inSotW = true
		}
	}
	return ttl, ttl && inSotW
}

// Quantum is the step of the TTLs put on the wire: every stream that sends
// a resource within one step sends the same TTL, so they share one
// encoding.
const Quantum = 100 * time.Millisecond

// MinTTL is the least TTL put on the wire: a TTL of zero would mean none.
const MinTTL = time.Millisecond

// WireTTL is the TTL to send at now for a lease that expires at exp: the
// time left from the end of now's quantum, so the client's TTL never
// outlasts the lease, and at least MinTTL.
func WireTTL(exp, now time.Time) time.Duration {
	end := now.Truncate(Quantum).Add(Quantum)
	return max(exp.Sub(end), MinTTL)
}
