package delta_test

import (
	"fmt"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/legation-io/legation/internal/resource"
	"github.com/legation-io/legation/internal/store"
)

func TestDeltaSmoke(t *testing.T) {
	e := newEnv(t)
	r1 := e.apply(t, []store.Put{put(t, resource.Cluster, "default", cluster("a", 1)), put(t, resource.Cluster, "default", cluster("b", 1))})
	s := e.deltaADS(t)
	s.send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Cluster.URL})
	resp := s.expect()
	want := map[string]string{"a": fmt.Sprint(r1), "b": fmt.Sprint(r1)}
	if diff := cmp.Diff(want, versions(resp)); diff != "" || resp.GetSystemVersionInfo() != fmt.Sprint(r1) {
		t.Fatalf("first response (-want +got):\n%s system %s", diff, resp.GetSystemVersionInfo())
	}
	s.ack(resp)
	s.expectNone()
	r2 := e.apply(t, []store.Put{put(t, resource.Cluster, "default", cluster("a", 2))})
	resp = s.expect()
	if diff := cmp.Diff(map[string]string{"a": fmt.Sprint(r2)}, versions(resp)); diff != "" {
		t.Fatalf("one change sends one resource (-want +got):\n%s", diff)
	}
	s.ack(resp)
	r3 := e.apply(t, nil, key(resource.Cluster, "b"))
	resp = s.expect()
	if len(resp.GetResources()) != 0 || !cmp.Equal(resp.GetRemovedResources(), []string{"b"}) || resp.GetSystemVersionInfo() != fmt.Sprint(r3) {
		t.Fatalf("deletion: got %v removed %v at %s", versions(resp), resp.GetRemovedResources(), resp.GetSystemVersionInfo())
	}
	s.ack(resp)

	// Reconnect with what it holds: nothing is resent.
	s2 := e.deltaADS(t)
	s2.send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Cluster.URL,
		InitialResourceVersions: map[string]string{"a": fmt.Sprint(r2), "b": fmt.Sprint(r1)}})
	resp = s2.expect()
	if len(resp.GetResources()) != 0 || !cmp.Equal(resp.GetRemovedResources(), []string{"b"}) {
		t.Fatalf("reconnect: got %v removed %v, want only b removed", versions(resp), resp.GetRemovedResources())
	}
}
