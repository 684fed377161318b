package delta_test

import (
	"fmt"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

func TestDeltaSmoke(t *testing.T) {
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("a", 1)), xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("b", 1))})
	s := e.deltaADS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Cluster.URL})
	resp := s.Expect()
	want := map[string]string{"a": fmt.Sprint(r1), "b": fmt.Sprint(r1)}
	if diff := cmp.Diff(want, xdstest.Versions(resp)); diff != "" || resp.GetSystemVersionInfo() != fmt.Sprint(r1) {
		t.Fatalf("first response (-want +got):\n%s system %s", diff, resp.GetSystemVersionInfo())
	}
	s.Ack(resp)
	s.ExpectNone()
	r2 := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("a", 2))})
	resp = s.Expect()
	if diff := cmp.Diff(map[string]string{"a": fmt.Sprint(r2)}, xdstest.Versions(resp)); diff != "" {
		t.Fatalf("one change sends one resource (-want +got):\n%s", diff)
	}
	s.Ack(resp)
	r3 := e.Apply(t, nil, xdstest.Key(resource.Cluster, "b"))
	resp = s.Expect()
	if len(resp.GetResources()) != 0 || !cmp.Equal(resp.GetRemovedResources(), []string{"b"}) || resp.GetSystemVersionInfo() != fmt.Sprint(r3) {
		t.Fatalf("deletion: got %v removed %v at %s", xdstest.Versions(resp), resp.GetRemovedResources(), resp.GetSystemVersionInfo())
	}
	s.Ack(resp)

	// Reconnect with what it holds: nothing is resent.
	s2 := e.deltaADS(t)
	s2.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Cluster.URL,
		InitialResourceVersions: map[string]string{"a": fmt.Sprint(r2), "b": fmt.Sprint(r1)}})
	resp = s2.Expect()
	if len(resp.GetResources()) != 0 || !cmp.Equal(resp.GetRemovedResources(), []string{"b"}) {
		t.Fatalf("reconnect: got %v removed %v, want only b removed", xdstest.Versions(resp), resp.GetRemovedResources())
	}
}
