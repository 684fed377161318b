package ads_test

import (
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/legation-io/legation/internal/resource"
	"github.com/legation-io/legation/internal/store"
	"github.com/legation-io/legation/internal/xdstest"
)

func TestSmokeWildcardCDS(t *testing.T) {
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("a", 1)), xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("b", 1))})
	s := e.adsStream(t)
	s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", "c1"), TypeUrl: resource.Cluster.URL})
	resp := s.Expect()
	if got := xdstest.Names(t, resp); len(got) != 2 || resp.GetVersionInfo() != xdstest.Version(r1) {
		t.Fatalf("got %v at %s, want [a b] at %d", got, resp.GetVersionInfo(), r1)
	}
	s.Ack(resp)
	s.ExpectNone()
	r2 := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("a", 2))})
	resp = s.Expect()
	if got := xdstest.Names(t, resp); len(got) != 2 || resp.GetVersionInfo() != xdstest.Version(r2) {
		t.Fatalf("got %v at %s, want [a b] at %d", got, resp.GetVersionInfo(), r2)
	}
}
