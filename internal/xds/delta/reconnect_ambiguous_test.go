package delta_test

import (
	"fmt"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// A presented version names a mod_revision, not a key. Where another
// resource the client may have held shares it, the server resends.

// TestDeltaReconnectAliasMoved: a client held alias rc1/a.example.com as
// rc1/exact@r1; while it was away rc1/exact was deleted and the alias now
// resolves to rc1/wild, also @r1. Presenting r1, it gets rc1/wild.
func TestDeltaReconnectAliasMoved(t *testing.T) {
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.VirtualHost, "default", vhost("rc1/exact", "a.example.com")),
		xdstest.Put(t, resource.VirtualHost, "default", vhost("rc1/wild", "*.example.com")),
	})
	e.Apply(t, nil, store.Key{Type: resource.VirtualHost, Scope: "default", Name: "rc1/exact"})
	s := e.deltaADS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.VirtualHost.URL,
		ResourceNamesSubscribe:  []string{"rc1/a.example.com"},
		InitialResourceVersions: map[string]string{"rc1/a.example.com": fmt.Sprint(r1)}})
	want := []vhdsGot{{"rc1/wild", fmt.Sprint(r1), []string{"rc1/a.example.com"}}}
	if diff := cmp.Diff(want, vhdsResources(s.Expect())); diff != "" {
		t.Fatalf("reconnect (-want +got):\n%s", diff)
	}
}

// TestDeltaReconnectOverrideGone: a group override and the default it
// overrides were written in one transaction, so share a mod_revision. The
// override is deleted while the client is away; presenting that version,
// the client gets the default.
func TestDeltaReconnectOverrideGone(t *testing.T) {
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("x", 1000)),
		xdstest.Put(t, resource.Cluster, "c1", xdstest.Cluster("x", 2000)),
	})
	e.Apply(t, nil, store.Key{Type: resource.Cluster, Scope: "c1", Name: "x"})
	s := e.deltaADS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n", Cluster: "c1"}, TypeUrl: resource.Cluster.URL,
		InitialResourceVersions: map[string]string{"x": fmt.Sprint(r1)}})
	resp := s.Expect()
	if diff := cmp.Diff(map[string]string{"x": fmt.Sprint(r1)}, xdstest.Versions(resp)); diff != "" {
		t.Fatalf("reconnect (-want +got):\n%s", diff)
	}
	m, err := resource.Unmarshal(resource.Cluster, resp.GetResources()[0].GetResource().GetValue())
	if err != nil {
		t.Fatal(err)
	}
	if got := m.(*clusterv3.Cluster).GetConnectTimeout().AsDuration(); got != time.Second {
		t.Fatalf("connect_timeout %v, want the default's 1s, not the override's 2s", got)
	}
}
