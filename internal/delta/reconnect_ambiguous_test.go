package delta_test

import (
	"fmt"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/legation-io/legation/internal/resource"
	"github.com/legation-io/legation/internal/store"
)

// A presented version names a mod_revision, not a key. Where another
// resource the client may have held shares it, the server resends.

// TestDeltaReconnectAliasMoved: a client held alias rc1/a.example.com as
// rc1/exact@r1; while it was away rc1/exact was deleted and the alias now
// resolves to rc1/wild, also @r1. Presenting r1, it gets rc1/wild.
func TestDeltaReconnectAliasMoved(t *testing.T) {
	e := newEnv(t)
	r1 := e.apply(t, []store.Put{
		put(t, resource.VirtualHost, "default", vhost("rc1/exact", "a.example.com")),
		put(t, resource.VirtualHost, "default", vhost("rc1/wild", "*.example.com")),
	})
	e.apply(t, nil, store.Key{Type: resource.VirtualHost, Scope: "default", Name: "rc1/exact"})
	s := e.deltaADS(t)
	s.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.VirtualHost.URL,
		ResourceNamesSubscribe:  []string{"rc1/a.example.com"},
		InitialResourceVersions: map[string]string{"rc1/a.example.com": fmt.Sprint(r1)}})
	want := []vhdsGot{{"rc1/wild", fmt.Sprint(r1), []string{"rc1/a.example.com"}}}
	if diff := cmp.Diff(want, vhdsResources(s.expect())); diff != "" {
		t.Fatalf("reconnect (-want +got):\n%s", diff)
	}
}

// TestDeltaReconnectOverrideGone: a group override and the default it
// overrides were written in one transaction, so share a mod_revision. The
// override is deleted while the client is away; presenting that version,
// the client gets the default.
func TestDeltaReconnectOverrideGone(t *testing.T) {
	e := newEnv(t)
	r1 := e.apply(t, []store.Put{
		put(t, resource.Cluster, "default", cluster("x", 1000)),
		put(t, resource.Cluster, "c1", cluster("x", 2000)),
	})
	e.apply(t, nil, store.Key{Type: resource.Cluster, Scope: "c1", Name: "x"})
	s := e.deltaADS(t)
	s.send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n", Cluster: "c1"}, TypeUrl: resource.Cluster.URL,
		InitialResourceVersions: map[string]string{"x": fmt.Sprint(r1)}})
	resp := s.expect()
	if diff := cmp.Diff(map[string]string{"x": fmt.Sprint(r1)}, versions(resp)); diff != "" {
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
