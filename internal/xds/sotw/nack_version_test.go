package sotw_test

import (
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// TestNackVersionIsAcked: a NACK's version_info, the last version the
// client applied, is the version the stream records as ACKed, even when
// the client's ACK of it came with a stale nonce (a newer response was
// on its way) and was ignored; a rejection is then traced from it, not
// from the start.
func TestNackVersionIsAcked(t *testing.T) {
	e := newEnv(t)
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 100))})
	s := e.adsStream(t)
	s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("late-acker", ""), TypeUrl: resource.Cluster.URL})
	first := s.ExpectType(resource.Cluster)
	rev := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("b", 100))})
	second := s.ExpectType(resource.Cluster)
	s.Ack(first) // stale: second was sent meanwhile
	s.Nack(second, first.GetVersionInfo(), "rejected")
	xdstest.WaitFor(t, "the NACK in the stream's status", func() (bool, string) {
		ts := streamStatus(t, e, "late-acker").Types["cluster"]
		if ts == nil {
			return false, "no cluster status"
		}
		return ts.NackVersion == xdstest.Version(rev) && ts.VersionAcked == first.GetVersionInfo(),
			"acked " + ts.VersionAcked + ", nack " + ts.NackVersion
	})
}
