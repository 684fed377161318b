package ads_test

import (
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/legation-io/legation/internal/resource"
	"github.com/legation-io/legation/internal/store"
)

func TestSmokeWildcardCDS(t *testing.T) {
	e := newEnv(t)
	r1 := e.apply(t, []store.Put{put(t, resource.Cluster, "default", cluster("a", 1)), put(t, resource.Cluster, "default", cluster("b", 1))})
	s := e.adsStream(t)
	s.send(&discoveryv3.DiscoveryRequest{Node: node("n1", "c1"), TypeUrl: resource.Cluster.URL})
	resp := s.expect()
	if got := names(t, resp); len(got) != 2 || resp.GetVersionInfo() != ver(r1) {
		t.Fatalf("got %v at %s, want [a b] at %d", got, resp.GetVersionInfo(), r1)
	}
	s.ack(resp)
	s.expectNone()
	r2 := e.apply(t, []store.Put{put(t, resource.Cluster, "default", cluster("a", 2))})
	resp = s.expect()
	if got := names(t, resp); len(got) != 2 || resp.GetVersionInfo() != ver(r2) {
		t.Fatalf("got %v at %s, want [a b] at %d", got, resp.GetVersionInfo(), r2)
	}
}
