package delta_test

import (
	"fmt"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/legation-io/legation/internal/resource"
	"github.com/legation-io/legation/internal/store"
	"github.com/legation-io/legation/internal/xdstest"
)

func vhost(name string, domains ...string) *routev3.VirtualHost {
	return &routev3.VirtualHost{Name: name, Domains: domains, Routes: []*routev3.Route{{
		Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: name}}},
	}}}
}

type vhdsGot struct {
	Name    string
	Version string
	Aliases []string
}

func vhdsResources(resp *discoveryv3.DeltaDiscoveryResponse) []vhdsGot {
	var out []vhdsGot
	for _, r := range resp.GetResources() {
		out = append(out, vhdsGot{r.GetName(), r.GetVersion(), r.GetAliases()})
	}
	return out
}

// TestDeltaVHDSAliases: on-demand virtual hosts are subscribed by
// "<route configuration>/<host>" and answered with the matching virtual
// host, the alias attached; a host nothing matches is removed.
func TestDeltaVHDSAliases(t *testing.T) {
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.VirtualHost, "default", vhost("rc1/exact", "a.example.com")),
		xdstest.Put(t, resource.VirtualHost, "default", vhost("rc1/wild", "*.example.com")),
		xdstest.Put(t, resource.VirtualHost, "default", vhost("rc2/other", "a.example.com")),
	})
	s := e.deltaADS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.VirtualHost.URL,
		ResourceNamesSubscribe: []string{"rc1/a.example.com", "rc1/b.example.com", "rc1/nothing.test"}})
	resp := s.Expect()
	want := []vhdsGot{
		{"rc1/exact", fmt.Sprint(r1), []string{"rc1/a.example.com"}},
		{"rc1/wild", fmt.Sprint(r1), []string{"rc1/b.example.com"}},
	}
	if diff := cmp.Diff(want, vhdsResources(resp)); diff != "" {
		t.Fatalf("first response (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"rc1/nothing.test"}, resp.GetRemovedResources()); diff != "" {
		t.Fatalf("removed (-want +got):\n%s", diff)
	}
	s.Ack(resp)
	s.ExpectNone()

	// The exact virtual host goes: the alias now resolves to the wildcard.
	r2 := e.Apply(t, nil, store.Key{Type: resource.VirtualHost, Scope: "default", Name: "rc1/exact"})
	resp = s.Expect()
	want = []vhdsGot{{"rc1/wild", fmt.Sprint(r1), []string{"rc1/a.example.com"}}}
	if diff := cmp.Diff(want, vhdsResources(resp)); diff != "" || len(resp.GetRemovedResources()) != 0 {
		t.Fatalf("after deleting rc1/exact at %d (-want +got):\n%s removed %v", r2, diff, resp.GetRemovedResources())
	}
	s.Ack(resp)

	// A virtual host of another route configuration changes: nothing.
	e.Apply(t, []store.Put{xdstest.Put(t, resource.VirtualHost, "default", vhost("rc2/other", "c.example.com"))})
	s.ExpectNone()

	// A host that appears is sent.
	r4 := e.Apply(t, []store.Put{xdstest.Put(t, resource.VirtualHost, "default", vhost("rc1/late", "nothing.test"))})
	resp = s.Expect()
	want = []vhdsGot{{"rc1/late", fmt.Sprint(r4), []string{"rc1/nothing.test"}}}
	if diff := cmp.Diff(want, vhdsResources(resp)); diff != "" {
		t.Fatalf("late host (-want +got):\n%s", diff)
	}
}
